// Published mixture-of-experts runs (docs/calibration-moe.md "Mixture of experts"), held out but
// for two fits on the Megatron-MoE-ModelZoo Qwen3-235B table, each named where it is held: the
// combined 1F1B's rate beside DeepEP (on the 4096-token overlap pair) and the dropless imbalance
// (on the long-context pairs). DeepEP's dispatcher bandwidths are its published figures
// (sim/collectives.h); the all-to-all dispatcher's row runs at NCCL's link rates. Each row goes
// from the publisher's HuggingFace config (examples/hf/) through `profiler analytic` and
// the simulator with the run's layout, and is held to a guard at its present error where it misses
// the 15%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/units.h"
#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/runtime_memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {
namespace {

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

// yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md (commit e8650517), "Performance
// Results", H100: Qwen3-235B-A22B in bf16 on 256 H100s (NVLink 4, 8 x 50 GB/s InfiniBand per
// node), sequence 4096, micro-batch 1, global batch 2048, etp 1, Megatron-Core with the
// distributed optimizer (model_configs/benchmarking/Qwen3-235B-A22B.yaml: ZeRO-1, sequence
// parallelism, the pipeline split accounting for the embedding and the loss). The runs forced
// balance: the table was published in 8017e11 (examples/qwen3/readme.md, 2025-05-27), beside the
// launcher its rows came from, examples/qwen3/run_235b.sh (31c5686, the same day), whose lines 28,
// 31, 34 and 40 (rows 1, 2, 4 and 3) all pass --moe-router-force-load-balancing ("for stable
// benchmarking", line 26). So the routed experts are sized at kForcedBalance (below), not at
// kQwen3DroplessMoeImbalance. The same lines pass no --tp-comm-overlap (the ModelZoo's launcher
// adds it for bf16 only from b09773a, 2025-12-16), so the tensor-parallel collectives stay exposed.
struct ModelZooRow {
  const char* label;
  int t, ep, p, v, d;
  int zero;
  // The table's "recompute" column: "norm, act" is Megatron-LM's
  // --recompute-granularity selective --recompute-modules layernorm moe_act
  // (kSelective here, with kNormsAndActivations), empty is off.
  Recompute recompute;
  double published_step_s;
  // --ep-overlap: on runs Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm).
  ExpertOverlap overlap = ExpertOverlap::kAuto;
  // The table's "Dispatcher" column: DeepEP, or A2A (Megatron-LM's
  // --moe-token-dispatcher-type alltoall), in the profiler (--moe-dispatcher) and the simulator
  // (--ep-dispatcher).
  ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp;
  // The prediction when it was last looked at, held within kPresentHold (a change detector).
  // At the imbalance of 1.08 used before 2026-12-03: 18.74, 14.16, 16.37 and 16.88 s; at 1.74
  // with flash2's attention and the overlap at DeepEP's SM share alone (session 10): 22.17,
  // 17.36, 19.05 and 20.50 s; read as dropless, at 1.77 and the rate 0.62 (session 12): 21.05,
  // 18.94, 18.47 and 19.72 s.
  double present_step_s = 0;
};
// "norm, act" (rows 1-3): replayed with the modules since issue 24 item 4 (2026-12-03); before,
// as no recomputation: 18.60, 13.19 and 16.26 s at the imbalance of 1.08 (the norms' outputs and
// the routed experts' activations, 88 of a block's 500 MB per GPU, freed; their 98 us of
// kernels rerun per block and micro-batch).
constexpr unsigned kNormsAndActivations = kRecomputeLayernorm | kRecomputeMoeAct;
constexpr ModelZooRow kQwen3Rows[] = {
    // Cross-node EP, DeepEP, recompute of norms and activations: 19.7 s, 245 TFLOP/s per GPU.
    {"DeepEP t2 ep32 p8 v4 d16", 2, 32, 8, 4, 16, 1, Recompute::kSelective, 19.7,
     ExpertOverlap::kAuto, ExpertDispatcher::kDeepEp, 17.24},
    // The same with the all-to-all overlap ("+1f1b overlap"): 17.6 s, 276 TFLOP/s per GPU.
    {"DeepEP t2 ep32 p8 v4 d16 +1f1b overlap", 2, 32, 8, 4, 16, 1, Recompute::kSelective, 17.6,
     ExpertOverlap::kOn, ExpertDispatcher::kDeepEp, 15.15},
    // Intra-node EP, the all-to-all dispatcher: 24.2 s, 200 TFLOP/s per GPU.
    {"A2A t2 ep8 p32 v3 d4", 2, 8, 32, 3, 4, 1, Recompute::kSelective, 24.2, ExpertOverlap::kAuto,
     ExpertDispatcher::kAllToAll, 15.39},
    // Intra-node EP, DeepEP, no recomputation: 29.0 s, 167 TFLOP/s per GPU.
    {"DeepEP t4 ep8 p8 v4 d8", 4, 8, 8, 4, 8, 1, Recompute::kOff, 29.0, ExpertOverlap::kAuto,
     ExpertDispatcher::kDeepEp, 15.60},
};
// Megatron-LM's --moe-router-force-load-balancing replaces the router's logits by standard normal
// draws (router.py lines 861-863 and moe_utils.py's RandomSTE, line 1278, at d98e8a64; added in
// 022bcb5a, 2025-05-24), so each token's top-k is a uniformly random k of the experts and every
// GPU's expected load is the mean: imbalance 1. What chance leaves on the busiest GPU is bounded
// by ForcedBalanceLeavesTheBusiestRankWithinTwoPercent.
constexpr double kForcedBalance = 1.0;
// The target, and the guard each row is held to (its present error with room, so that
// a change to the model is seen; docs/calibration-moe.md states each row's error). At forced
// balance the intra-node rows miss by -36.4% and -46.2%, hence 50%.
constexpr double kMoeRowTarget = 0.15;
constexpr double kMoeRowGuard = 0.50;
constexpr double kPresentHold = 0.03;

// One Qwen3-235B-A22B run on 256 H100s as the ModelZoo's rows are replayed: the HF config through
// the analytic profiler at (seq, t, imbalance, attention) and the simulator with the layout.
struct Qwen3Case {
  int seq = 4096, t = 1, cp = 1, ep = 1, p = 1, v = 1, d = 1, global_batch = 2048;
  Recompute recompute = Recompute::kOff;
  ExpertOverlap overlap = ExpertOverlap::kAuto;
  ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp;
  double imbalance = kQwen3DroplessMoeImbalance;
  Attention attention = Attention::kFlash2;
};
// The iteration, and the parts of its busiest rank (the most busy time), in seconds.
struct Qwen3Prediction {
  double iteration_s = 0, busy_s = 0, tp_s = 0, ep_s = 0, bubble_s = 0, peak_gib = 0;
  // After the pipeline: the data-parallel tail (reduce-scatter, optimizer, all-gather), in s.
  double tail_s = 0;
  // One MoE block, one micro-batch at (t, sequence parallel), in us.
  double moe_forward_us = 0, moe_backward_us = 0;
};

Qwen3Prediction SimulateQwen3(const Qwen3Case& q) {
  Qwen3Prediction out;
  Result<HfConfig> config = LoadHfConfig(SourcePath("examples/hf/qwen3-235b-a22b.json"));
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return out;
  TransformerSpec spec = config->architecture;
  spec.name = "qwen3-235b-a22b";
  spec.sequence_length = q.seq;
  spec.max_positions = std::max(q.seq, spec.MaxPositions());  // RoPE: no position table
  spec.microbatch_sizes = {1};
  AnalyticOptions analytic;
  analytic.gpu_preset = "h100-sxm";
  analytic.moe_dispatcher = q.dispatcher;
  analytic.moe_imbalance = q.imbalance;
  analytic.attention = q.attention;
  Result<std::string> text = EstimateTransformerJson(spec, analytic, {1, q.t});
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return out;
  Result<Model> model = ParseModel(*text, spec.name);
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  const int m = q.global_batch / q.d;
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::kInterleaved1F1B, q.p, m, q.v);
  EXPECT_TRUE(model.ok() && cluster.ok() && schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return out;
  if (q.overlap == ExpertOverlap::kOn) {
    EXPECT_TRUE(CombineForwardBackward(&*schedule).ok());
  }
  for (const Layer& layer : model->layers) {
    if (!layer.moe) continue;
    const LayerCost cost = CostAt(layer, 1, q.t, q.t > 1);
    out.moe_forward_us = static_cast<double>(cost.forward_ns) * 1e-3;
    out.moe_backward_us = static_cast<double>(cost.backward_ns) * 1e-3;
    break;
  }
  SimOptions sim;
  TrainingConfig& c = sim.config;
  c.schedule = ScheduleKind::kInterleaved1F1B;
  c.layout.tensor_parallel = q.t;
  c.layout.sequence_parallel = q.t > 1;
  c.layout.context_parallel = q.cp;
  c.layout.data_parallel = q.d;
  c.layout.expert_parallel = q.ep;
  c.layout.expert_dispatcher = q.dispatcher;
  c.recompute = q.recompute;
  if (q.recompute == Recompute::kSelective) c.recompute_layers.modules = kNormsAndActivations;
  c.overlap.expert_overlap = q.overlap;
  c.memory.zero = 1;
  c.partition.rule = PartitionRule::kEven;
  c.partition.even.account_for_embedding = true;
  c.partition.even.account_for_loss = true;
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return out;
  out.iteration_s = static_cast<double>(result->iteration_ns) * 1e-9;
  out.tail_s = static_cast<double>(result->iteration_ns - result->pipeline_ns) * 1e-9;
  out.ep_s = static_cast<double>(result->ep_comm_ns) * 1e-9;
  const StageResult* busiest = &result->per_rank[0];
  for (const StageResult& r : result->per_rank) {
    if (r.busy_ns > busiest->busy_ns) busiest = &r;
    out.peak_gib = std::max(out.peak_gib, ToGiB(r.peak_memory_bytes));
  }
  out.busy_s = static_cast<double>(busiest->busy_ns) * 1e-9;
  out.tp_s = static_cast<double>(busiest->tp_comm_ns) * 1e-9;
  // Its idle time inside the pipeline's span (bubble_ratio = 1 - busy / span).
  out.bubble_s = out.busy_s * busiest->bubble_ratio / (1 - busiest->bubble_ratio);
  return out;
}

double PredictQwen3(const ModelZooRow& row) {
  Qwen3Case q;
  // Transformer Engine's attention, as for the long-context rows: the runs leave Megatron-LM's
  // --attention-backend at auto ("Default is auto", language_module.py; the config's
  // --use-flash-attn is parsed but read nowhere in NVIDIA/Megatron-LM at d98e8a64), so TE picks
  // cuDNN's fused attention on Hopper, for which FlashAttention-3 stands in. Before 2026-12-03
  // these rows ran the profiler's default flash2.
  q.attention = Attention::kFlash3;
  q.imbalance = kForcedBalance;
  q.t = row.t;
  q.ep = row.ep;
  q.p = row.p;
  q.v = row.v;
  q.d = row.d;
  q.recompute = row.recompute;
  q.overlap = row.overlap;
  q.dispatcher = row.dispatcher;
  const Qwen3Prediction out = SimulateQwen3(q);
  std::printf(
      "  %s: busiest rank busy %.2f s (TP collectives %.2f s inside), ep all-to-all %.2f s, "
      "bubble %.2f s; after the pipeline %.2f s; fullest rank %.1f GiB\n",
      row.label, out.busy_s, out.tp_s, out.ep_s, out.bubble_s, out.tail_s, out.peak_gib);
  return out.iteration_s;
}

TEST(MoeCalibration, Qwen3On256H100sHeldOut) {
  int within = 0;
  for (const ModelZooRow& row : kQwen3Rows) {
    const double predicted = PredictQwen3(row);
    const double error = predicted / row.published_step_s - 1;
    std::printf(
        "Megatron-MoE-ModelZoo qwen3-235b-a22b %s: published %.1f s predicted %.2f s per "
        "step, error %+.1f%%\n",
        row.label, row.published_step_s, predicted, error * 100);
    within += std::abs(error) <= kMoeRowTarget ? 1 : 0;
    EXPECT_LT(std::abs(error), kMoeRowGuard) << row.label;
    if (row.present_step_s > 0) {
      EXPECT_NEAR(predicted, row.present_step_s, kPresentHold * row.present_step_s) << row.label;
    }
  }
  std::printf("Megatron-MoE-ModelZoo rows within the issue's 15%%: %d of %zu\n", within,
              std::size(kQwen3Rows));
}

// Forced balance, as the runs drew it (kForcedBalance): one all-to-all of ep GPUs, each routing
// its n = s / (t cp) tokens (sequence parallelism, etp 1) to a uniformly random k = 8 of E = 128
// experts, E / ep of them on each GPU (contiguous, as Megatron places them). Per token a GPU gets
// a hypergeometric count of copies, mean k / ep, variance k (E_r / E)(1 - E_r / E)(E - k) / (E - 1)
// with E_r = E / ep; over the ep n tokens the load is near normal, and the busiest of the ep GPUs
// sits about c_ep standard deviations above the mean, c_ep the expected largest of ep standard
// normals (1.42 at 8, 2.07 at 32; the loads' fixed sum lowers it slightly). By hand, at t 2 ep 32
// (rows 1-2): n 2048, mean 16,384 copies, sd sqrt(8 x 4/128 x 124/128 x 120/127 x 65,536) = 122.5,
// so +0.75% per sd and +1.55% expected; t 2 ep 8 (row 3) +1.01%; t 4 ep 8 (row 4) +1.43%; the
// long-context rows (t 4, n 4096 at every length) +0.72%. A seeded draw of the routing itself
// checks the closed form; one all-to-all can reach +2.3% (the worst of 8 draws at ep 32), but a
// step pays the mean over its thousands. So replaying the rows at 1.0 leaves out under 2% of the
// routed experts' kernels (about 0.1 s of a step at rows 1-2).
double ExpectedMaxOfStandardNormals(int count) {
  // E[max] = integral of x count phi(x) Phi(x)^(count-1), by the midpoint rule on [-10, 10].
  const double step = 1e-3;
  double sum = 0;
  for (double x = -10 + step / 2; x < 10; x += step) {
    const double phi = std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * count * phi * std::pow(cdf, count - 1) * step;
  }
  return sum;
}

TEST(MoeCalibration, ForcedBalanceLeavesTheBusiestRankWithinTwoPercent) {
  constexpr int kExperts = 128, kTopK = 8;
  struct Layout {
    const char* label;
    int tokens_per_gpu, ep;
  };
  constexpr Layout kLayouts[] = {
      {"rows 1-2, t 2 ep 32", 4096 / 2, 32},
      {"row 3, t 2 ep 8", 4096 / 2, 8},
      {"row 4, t 4 ep 8", 4096 / 4, 8},
      {"long context, t 4 cp 1-8 ep 8", 16384 / 4, 8},
  };
  // Two normals: the larger is 1/sqrt(pi) above the mean, in closed form.
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(2), 1 / std::sqrt(std::numbers::pi), 1e-6);
  std::mt19937_64 rng(20250527);  // fixed: the same draw on every run
  for (const Layout& l : kLayouts) {
    const int local = kExperts / l.ep;
    const double tokens = static_cast<double>(l.tokens_per_gpu) * l.ep;
    const double share = static_cast<double>(local) / kExperts;
    const double variance =
        kTopK * share * (1 - share) * (kExperts - kTopK) / (kExperts - 1.0) * tokens;
    const double mean = tokens * kTopK / l.ep;
    const double expected = std::sqrt(variance) / mean * ExpectedMaxOfStandardNormals(l.ep);
    // The routing drawn: each token's top-k of i.i.d. logits is a uniformly random k-subset
    // (a partial Fisher-Yates shuffle); the busiest GPU over the mean, averaged over draws.
    constexpr int kDraws = 8;
    std::vector<int> experts(kExperts);
    std::iota(experts.begin(), experts.end(), 0);
    double drawn = 0, worst = 0;
    for (int draw = 0; draw < kDraws; ++draw) {
      std::vector<int64_t> load(l.ep, 0);
      for (int64_t token = 0; token < static_cast<int64_t>(tokens); ++token) {
        for (int i = 0; i < kTopK; ++i) {
          const int j = i + static_cast<int>(rng() % static_cast<uint64_t>(kExperts - i));
          std::swap(experts[i], experts[j]);
          ++load[experts[i] / local];
        }
      }
      const double excess = *std::max_element(load.begin(), load.end()) / mean - 1;
      drawn += excess / kDraws;
      worst = std::max(worst, excess);
    }
    std::printf(
        "forced balance, %s: busiest GPU +%.2f%% over the mean expected (closed form), +%.2f%% "
        "drawn (mean of %d, worst +%.2f%%)\n",
        l.label, expected * 100, drawn * 100, kDraws, worst * 100);
    EXPECT_LT(expected, 0.02) << l.label;
    EXPECT_LT(drawn, 0.02) << l.label;
    EXPECT_NEAR(drawn, expected, 0.5 * expected) << l.label;
  }
}

// The overlap, checked by parts (docs/calibration-moe.md): the readme's two cross-node rows are
// one run without and with Megatron-LM's combined 1F1B (--combined-1f1b --combined-1f1b-recipe
// ep_a2a at 8017e11, since renamed --overlap-moe-expert-parallel-comm), both at forced balance,
// so 19.7 - 17.6 = 2.1 s is what the overlap hid. Replaying Megatron's nodes, streams and events
// with DeepEP's SM share alone hides 4.58 s: nearly every all-to-all lies inside a longer compute
// node. kCombined1F1BComputeLossBesideDeepEp (0.60) is FITTED here, on this difference, so the
// overlap row is no longer held out: it misses by the non-overlap row's seconds. What this test
// holds: the hidden time within 0.05 s of the run's (the fit) and both rows the same all-to-all
// and tensor-parallel time.
TEST(MoeCalibration, Qwen3CombinedOneFOneBHidesWhatTheRunHid) {
  const ModelZooRow& plain = kQwen3Rows[0];
  const ModelZooRow& overlapped = kQwen3Rows[1];
  ASSERT_EQ(overlapped.overlap, ExpertOverlap::kOn);
  ASSERT_NE(plain.overlap, ExpertOverlap::kOn);
  Qwen3Case q;
  q.t = plain.t;
  q.ep = plain.ep;
  q.p = plain.p;
  q.v = plain.v;
  q.d = plain.d;
  q.recompute = plain.recompute;
  q.attention = Attention::kFlash3;
  q.imbalance = kForcedBalance;
  const Qwen3Prediction without = SimulateQwen3(q);
  q.overlap = ExpertOverlap::kOn;
  const Qwen3Prediction with = SimulateQwen3(q);
  const double published_hidden = plain.published_step_s - overlapped.published_step_s;
  const double hidden = without.iteration_s - with.iteration_s;
  std::printf(
      "combined 1F1B on Qwen3-235B t2 ep32 p8 v4: hides %.2f s (published %.2f s); without %.2f s "
      "(busy %.2f, all-to-all %.2f, TP %.2f, bubble %.2f), with %.2f s (busy %.2f, all-to-all "
      "%.2f, TP %.2f, bubble %.2f)\n",
      hidden, published_hidden, without.iteration_s, without.busy_s, without.ep_s, without.tp_s,
      without.bubble_s, with.iteration_s, with.busy_s, with.ep_s, with.tp_s, with.bubble_s);
  EXPECT_NEAR(published_hidden, 2.1, 1e-9);
  EXPECT_NEAR(hidden, published_hidden, 0.05);
  EXPECT_NEAR(with.ep_s, without.ep_s, 1e-9);  // the same all-to-alls, hidden or not
  EXPECT_NEAR(with.tp_s, without.tp_s, 0.1);   // the busiest rank's TP collectives, not hidden
  std::printf("  misses: without %+.2f s (%+.1f%%), with %+.2f s (%+.1f%%)\n",
              without.iteration_s - plain.published_step_s,
              (without.iteration_s / plain.published_step_s - 1) * 100,
              with.iteration_s - overlapped.published_step_s,
              (with.iteration_s / overlapped.published_step_s - 1) * 100);
}

// The same readme (yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md @ 020b8136),
// "Long Context": Qwen3-235B-A22B in bf16 on 32 nodes of 8 H100s with DeepEP, t 4, ep 8, p 8,
// v 4 (its command line), global batch 256, micro-batch 1, cp 1/2/4/8 at 16k/32k/64k/128k
// tokens (d = 8/cp), --recompute-granularity selective --recompute-modules layernorm moe:
// TFLOP/s per GPU with --moe-router-force-load-balancing and dropless. Converted to seconds
// with Megatron-LM's num_floating_point_operations for MoE models (training.py, the causal
// attention halved), which turns the 4096-token row's 19.7 s into 246.2 TFLOP/s against the 245
// published (QwenMegatronFlopCountWorkedByHand). Forced balance is replayed at imbalance 1 and
// held out. The dropless rows are where kQwen3DroplessMoeImbalance is fitted. Megatron's `moe`
// module (the whole MoE layer, all-to-alls included, rerun in the backward) is not modelled: the
// rows run with layernorm and moe_act, the nearest modules pipecast has.
struct LongContextRow {
  int seq, cp;
  double forced_tflops, dropless_tflops;
  // Forced balance, the present predictions (s): FlashAttention-3 (the stand-in for cuDNN's
  // fused attention, which Transformer Engine picks on Hopper) and FlashAttention-2 (the default
  // the 4096-token rows run with).
  double present_flash3_s, present_flash2_s;
};
constexpr LongContextRow kLongContextRows[] = {
    {16384, 1, 295, 237, 9.72, 11.93},
    {32768, 2, 335, 277, 24.16, 33.21},
    {65536, 4, 368, 320, 70.38, 106.21},
    {131072, 8, 389, 357, 230.84, 373.47},
};
// How far each row's fitted imbalance may sit from the constant (they span 1.757-1.785; 1.729-1.755
// before the routed experts were re-costed at the runs' etp 1).
constexpr double kImbalanceSpread = 0.03;

// Megatron-LM's num_floating_point_operations (MoE, GQA; megatron/training/training.py) for one
// sample of Qwen3-235B-A22B: L 94, h 4096, a 64 heads of d_kv 128, g 4, top-8 experts of f_e 1536
// (SwiGLU), V 151,936 (make-vocab-size-divisible-by 1187 pads nothing at t 2 or 4).
double QwenMegatronFlopsPerSample(double s) {
  const double L = 94, h = 4096, a = 64, g = 4, dkv = 128, fe = 1536, k = 8, V = 151936;
  return 12 * s * L * h * h *
         ((1 + g / a + s / h / 2) * (a * dkv / h) + 1.5 * fe * k / h + V / (2 * L * h));
}

TEST(MoeCalibration, QwenMegatronFlopCountWorkedByHand) {
  // At 4096: 12 x 4096 x 94 x 4096^2 x (3.125 + 4.5 + 0.197) = 6.0635e14 per sample, so the
  // 4096-token row's 2048 samples in 19.7 s on 256 GPUs are 246.2 TFLOP/s per GPU (245
  // published) and the overlap row's 17.6 s 275.6 (276 published).
  EXPECT_NEAR(QwenMegatronFlopsPerSample(4096), 6.0635e14, 1e10);
  EXPECT_NEAR(QwenMegatronFlopsPerSample(4096) * 2048 / 256 / 19.7 / 1e12, 245, 1.5);
  EXPECT_NEAR(QwenMegatronFlopsPerSample(4096) * 2048 / 256 / 17.6 / 1e12, 276, 1.5);
}

TEST(MoeCalibration, Qwen3LongContextForcedHeldOutDroplessFitted) {
  for (const LongContextRow& row : kLongContextRows) {
    // 256 samples on 256 GPUs: a step is one sample's FLOPs over one GPU's rate.
    const double forced_s = QwenMegatronFlopsPerSample(row.seq) / (row.forced_tflops * 1e12);
    const double dropless_s = QwenMegatronFlopsPerSample(row.seq) / (row.dropless_tflops * 1e12);
    Qwen3Case q;
    q.seq = row.seq;
    q.t = 4;
    q.cp = row.cp;
    q.ep = 8;
    q.p = 8;
    q.v = 4;
    q.d = 8 / row.cp;
    q.global_batch = 256;
    q.recompute = Recompute::kSelective;
    q.imbalance = 1;
    const Qwen3Prediction flash2 = SimulateQwen3(q);
    q.attention = Attention::kFlash3;
    const Qwen3Prediction forced = SimulateQwen3(q);
    q.imbalance = kQwen3DroplessMoeImbalance;
    const Qwen3Prediction dropless = SimulateQwen3(q);
    // The imbalance-scaled work of one MoE block, forward and backward: the `moe` module reran
    // the forward's share once more, (2 df + db) / (df + db) of what pipecast scales.
    const double df = dropless.moe_forward_us - forced.moe_forward_us;
    const double db = dropless.moe_backward_us - forced.moe_backward_us;
    const double rerun = (2 * df + db) / (df + db);
    // Time is linear in the imbalance (1.0-2.0 by 0.2 checked by hand): the row's own figure.
    const double added = dropless.iteration_s - forced.iteration_s;
    const double raw = 1 + (kQwen3DroplessMoeImbalance - 1) * (dropless_s - forced_s) / added;
    const double fitted = 1 + (raw - 1) / rerun;
    std::printf(
        "qwen3-235b-a22b s %6d cp %d forced: published %.2f s (%.0f TFLOP/s) predicted %.2f s "
        "(%+.1f%%; flash2 %.2f s, %+.1f%%), busiest rank busy %.2f s (TP %.2f), ep "
        "all-to-all %.2f s, bubble %.2f s, peak %.1f GiB\n",
        row.seq, row.cp, forced_s, row.forced_tflops, forced.iteration_s,
        (forced.iteration_s / forced_s - 1) * 100, flash2.iteration_s,
        (flash2.iteration_s / forced_s - 1) * 100, forced.busy_s, forced.tp_s, forced.ep_s,
        forced.bubble_s, forced.peak_gib);
    std::printf(
        "  dropless: published %.2f s (%.0f TFLOP/s), +%.2f s over forced; pipecast adds %.2f s "
        "at %.2f (x %.3f with the moe rerun: %.2f s, dropless %+.1f%%); the row's imbalance "
        "%.3f, %.3f without the rerun\n",
        dropless_s, row.dropless_tflops, dropless_s - forced_s, added, kQwen3DroplessMoeImbalance,
        rerun, added * rerun, ((forced.iteration_s + added * rerun) / dropless_s - 1) * 100, raw,
        fitted);
    EXPECT_LT(std::abs(forced.iteration_s / forced_s - 1), kMoeRowTarget) << row.seq;
    EXPECT_NEAR(forced.iteration_s, row.present_flash3_s, kPresentHold * row.present_flash3_s);
    EXPECT_NEAR(flash2.iteration_s, row.present_flash2_s, kPresentHold * row.present_flash2_s);
    EXPECT_NEAR(fitted, kQwen3DroplessMoeImbalance, kImbalanceSpread) << row.seq;
  }
}

// Published per-GPU memory of MoE training runs (docs/calibration-moe.md "MoE memory, held out"),
// each replayed with its own configuration and compared in the metric it published. Not tuned on.
// - pytorch/torchtitan#1789 (2025-10-02): DeepSeek-V3 "16B" (torchtitan's flavor, the
//   DeepSeek-V2-Lite architecture: examples/hf/deepseek-v2-lite.json) on 8 H100 80GB HBM3 with
//   train_configs/deepseek_v3_16b.toml at 82a9530f6^ (FSDP over 8, ep 8, etp 1, seq 4096,
//   op-level selective AC, AdamW, the loss compiled: --loss compiled) and local_batch_size lowered
//   to 4 (the value torchtitan#1792 then set in the file): `memory: 73.32GiB` at steps 10-40,
//   torchtitan's max_reserved (PyTorch's reserved_bytes.all.peak), against
//   DeviceMemory::ReservedBytes() (allocated peak + allocator cache + cuBLAS workspaces).
// - modelscope/ms-swift's Qwen3 best practice (docs "MoE训练（Megatron-SWIFT）", its benchmark
//   table: Megatron-LM "16×60GiB"): Qwen3-30B-A3B full fine-tuning on 2 nodes of 8 A800 80GiB,
//   t 2 with sequence parallelism, ep 8, p 1 (so d 8), micro-batch 1, global batch 16 (2
//   micro-batches), packed to 8192 tokens, full recomputation of every layer (uniform, 1),
//   flash attention, the fused cross-entropy, Megatron's distributed optimizer (ms-swift's
//   default, ZeRO 1). The metric is not stated: read as the whole device (nvidia-smi,
//   DeviceMemory::Total()), reserved printed beside it.
enum class MemoryMetric { kReserved, kDevice };
struct MemoryRowMoe {
  const char* label;
  const char* hf_config;
  const char* cluster;
  int seq, mbs, microbatches, t, d, ep, zero;
  const char* recompute;
  Loss loss;
  MemoryMetric metric;
  double published_gib;
  // The run's step-1 figure, before AdamW's moments exist (0: not published).
  double published_step1_gib;
  double present_gib;  // the prediction when the row was last changed (2026-12-04)
};
constexpr MemoryRowMoe kMoeMemoryRows[] = {
    {"torchtitan#1789 DeepSeek-V3 16B, 8 H100, FSDP 8, ep 8, bs 4, s 4096, op AC",
     "examples/hf/deepseek-v2-lite.json", "h100-sxm", 4096, 4, 1, 1, 8, 8, 3, "op", Loss::kCompiled,
     MemoryMetric::kReserved, 73.32, 58.28, 76.29},
    {"ms-swift Qwen3-30B-A3B, 16 A800, t 2 SP, ep 8, d 8, mbs 1 x 2, s 8192, full AC, ZeRO 1",
     "examples/hf/qwen3-30b-a3b.json", "a100-80gb", 8192, 1, 2, 2, 8, 8, 1, "full", Loss::kFused,
     MemoryMetric::kDevice, 60.0, 0, 58.67},
};
constexpr double kMemoryTarget = 0.10;  // the issue's
constexpr double kMemoryHold = 0.03;    // around the present prediction

struct MemoryPrediction {
  Bytes allocated = 0, reserved = 0, device = 0;
  MemoryBreakdown parts;
};

MemoryPrediction Predict(const MemoryRowMoe& row, ShardedState state = ShardedState::kZero) {
  Result<HfConfig> config = LoadHfConfig(SourcePath(row.hf_config));
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return {};
  TransformerSpec spec = config->architecture;
  spec.name = "moe-memory-row";
  spec.sequence_length = row.seq;
  spec.microbatch_sizes = {row.mbs};
  AnalyticOptions analytic;
  analytic.gpu_preset = row.cluster;
  analytic.loss = row.loss;
  const std::vector<int> degrees = row.t > 1 ? std::vector<int>{1, row.t} : std::vector<int>{1};
  Result<std::string> json = EstimateTransformerJson(spec, analytic, degrees);
  EXPECT_TRUE(json.ok()) << row.label << ": " << json.status().message();
  if (!json.ok()) return {};
  Result<Model> model = ParseModel(*json, spec.name);
  Result<Cluster> cluster = ClusterPreset(row.cluster);
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, row.microbatches, 1);
  EXPECT_TRUE(model.ok() && cluster.ok() && schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return {};
  SimOptions sim;
  TrainingConfig& c = sim.config;
  c.microbatch_size = row.mbs;
  c.layout.tensor_parallel = row.t;
  c.layout.sequence_parallel = row.t > 1;
  c.layout.data_parallel = row.d;
  c.layout.expert_parallel = row.ep;
  c.memory.zero = row.zero;
  c.memory.sharded_state = state;
  EXPECT_TRUE(ParseRecomputeSpec(row.recompute, &c.recompute, &c.recompute_layers));
  sim.partition = {StageLayers{0, static_cast<int>(model->layers.size()) - 1}};
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return {};
  MemoryPrediction p;
  p.parts = result->per_rank[0].memory;
  p.allocated = result->per_rank[0].peak_memory_bytes;
  const DeviceMemory device = DeviceMemoryFor(*cluster, c, p.allocated, 0);
  p.reserved = device.ReservedBytes();
  p.device = device.Total();
  return p;
}

TEST(MoeCalibration, PublishedMemoryHeldOut) {
  int within = 0;
  for (const MemoryRowMoe& row : kMoeMemoryRows) {
    const MemoryPrediction p = Predict(row);
    const MemoryBreakdown& parts = p.parts;
    const double predicted = ToGiB(row.metric == MemoryMetric::kReserved ? p.reserved : p.device);
    const double error = predicted / row.published_gib - 1;
    std::printf(
        "%s: published %.2f GiB (%s), predicted %.2f GiB, error %+.1f%% (allocated %.2f, "
        "reserved %.2f, device %.2f; parts, GiB: weights %.2f + gathered %.2f, gradients %.2f, "
        "optimizer %.2f, activations %.2f, workspace %.2f)\n",
        row.label, row.published_gib,
        row.metric == MemoryMetric::kReserved ? "max_reserved" : "device, metric not stated",
        predicted, error * 100, ToGiB(p.allocated), ToGiB(p.reserved), ToGiB(p.device),
        ToGiB(parts.weights), ToGiB(parts.gathered_weights), ToGiB(parts.gradients),
        ToGiB(parts.optimizer), ToGiB(parts.activations_peak), ToGiB(parts.workspace_peak));
    within += std::abs(error) <= kMemoryTarget ? 1 : 0;
    if (row.present_gib > 0) {
      EXPECT_NEAR(predicted / row.present_gib, 1.0, kMemoryHold) << row.label;
    }
    // The one part the run's own log separates: step 1's max_reserved comes before AdamW's
    // moments exist (created in step 1's optimizer step, in blocks the backward freed), steps
    // 10-40 after; the difference against the moments pipecast counts (8 B per parameter of the
    // rank's shard, whose bf16 copy is `weights`, 2 B).
    if (row.published_step1_gib <= 0) continue;
    const double published_moments = row.published_gib - row.published_step1_gib;
    const double moments = ToGiB(parts.weights) * 4;
    std::printf(
        "  AdamW moments: published step 10 - step 1 = %.2f GiB, predicted %.2f GiB "
        "(%+.1f%%)\n",
        published_moments, moments, (moments / published_moments - 1) * 100);
    EXPECT_NEAR(moments / published_moments, 1.0, 0.05) << row.label;
  }
  std::printf("Published MoE memory rows within the issue's 10%%: %d of %zu\n", within,
              std::size(kMoeMemoryRows));
}

// torchtitan#1789 ran FSDP2 (docs/calibration-moe.md, "MoE memory, held out"): with
// --sharded-state fsdp2 the sharded state at the peak is the code's 12 B per parameter / 8 (fp32
// shard 4 B + AdamW 8 B, gradients None until the backward makes them) where ZeRO 3 counts 18 B.
// Held out, nothing tuned: the reserved figure is held in a guard around its present error, and
// the parts are checked: the sharded state (weights + optimizer) is 12/18 of ZeRO 3's, and
// AdamW's moments (8 B of the 12) against the run's step 10 - step 1 difference.
TEST(MoeCalibration, PublishedMemoryHeldOutFsdp2) {
  const MemoryRowMoe& row = kMoeMemoryRows[0];
  const MemoryPrediction zero = Predict(row);
  const MemoryPrediction fsdp2 = Predict(row, ShardedState::kFsdp2);
  const double reserved = ToGiB(fsdp2.reserved);
  const double error = reserved / row.published_gib - 1;
  std::printf(
      "%s --sharded-state fsdp2: published %.2f GiB (max_reserved), predicted %.2f GiB, "
      "error %+.1f%% (allocated %.2f; with the ZeRO accounting %.2f)\n",
      row.label, row.published_gib, reserved, error * 100, ToGiB(fsdp2.allocated),
      ToGiB(zero.allocated));
  // A listed miss (-11.7% since ZeRO 3 gathers only the local experts, 2026-12-04), held in a
  // guard of 2 points around it.
  EXPECT_GE(error, -0.137) << "the fsdp2 row moved: update docs/calibration-moe.md";
  EXPECT_LE(error, -0.097) << "the fsdp2 row moved: update docs/calibration-moe.md";
  const MemoryBreakdown& z = zero.parts;
  const MemoryBreakdown& f = fsdp2.parts;
  EXPECT_NEAR(static_cast<double>(f.weights + f.optimizer) * 18 /
                  (12 * static_cast<double>(z.weights + z.gradients + z.optimizer)),
              1.0, 1e-6);
  const double moments = ToGiB(f.optimizer);
  const double published_moments = row.published_gib - row.published_step1_gib;
  std::printf("  AdamW moments: published step 10 - step 1 = %.2f GiB, fsdp2's %.2f GiB\n",
              published_moments, moments);
  EXPECT_NEAR(moments / published_moments, 1.0, 0.05);
}

}  // namespace
}  // namespace pipecast
