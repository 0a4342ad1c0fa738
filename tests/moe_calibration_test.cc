// Held-out published mixture-of-experts runs (docs/calibration-moe.md "Mixture of experts"; never
// tuned on: the only fitted numbers of the MoE model are DeepEP's published dispatcher
// bandwidths, sim/collectives.h; the all-to-all dispatcher's row runs at NCCL's link rates). Each
// row goes from the publisher's HuggingFace config (examples/hf/) through `profiler analytic` and
// the simulator with the run's layout, and is held to a guard at its present error where it misses
// the 15%.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "base/units.h"
#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
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
// parallelism, the pipeline split accounting for the embedding and the loss).
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
  // The prediction when it was last looked at, held within kPresentHold (a change detector;
  // 0: not held). The overlap row's is the layered rule's (issue 26, 2026-12-03) with the compute
  // beside an all-to-all on the SMs DeepEP's 20 leave (13.19 s before them), and the modules'
  // recomputation below (14.02 s before it).
  double present_step_s = 0;
};
// "norm, act" (rows 1-3): replayed with the modules since issue 24 item 4 (2026-12-03); before,
// as no recomputation: 18.60, 13.19 and 16.26 s, now 18.74, 14.16 (with the SM share) and 16.37 s
// (the norms' outputs and the routed experts' activations, 88 of a block's 500 MB per GPU, freed;
// their 98 us of kernels rerun per block and micro-batch).
constexpr unsigned kNormsAndActivations = kRecomputeLayernorm | kRecomputeMoeAct;
constexpr ModelZooRow kQwen3Rows[] = {
    // Cross-node EP, DeepEP, recompute of norms and activations: 19.7 s, 245 TFLOP/s per GPU.
    {"DeepEP t2 ep32 p8 v4 d16", 2, 32, 8, 4, 16, 1, Recompute::kSelective, 19.7,
     ExpertOverlap::kAuto},
    // The same with the all-to-all overlap ("+1f1b overlap"): 17.6 s, 276 TFLOP/s per GPU.
    {"DeepEP t2 ep32 p8 v4 d16 +1f1b overlap", 2, 32, 8, 4, 16, 1, Recompute::kSelective, 17.6,
     ExpertOverlap::kOn, ExpertDispatcher::kDeepEp, 14.16},
    // Intra-node EP, the all-to-all dispatcher: 24.2 s, 200 TFLOP/s per GPU.
    {"A2A t2 ep8 p32 v3 d4", 2, 8, 32, 3, 4, 1, Recompute::kSelective, 24.2, ExpertOverlap::kAuto,
     ExpertDispatcher::kAllToAll},
    // Intra-node EP, DeepEP, no recomputation: 29.0 s, 167 TFLOP/s per GPU.
    {"DeepEP t4 ep8 p8 v4 d8", 4, 8, 8, 4, 8, 1, Recompute::kOff, 29.0, ExpertOverlap::kAuto},
};
// The target, and the guard each row is held to (its present error with room, so that
// a change to the model is seen; docs/calibration.md states each row's error).
constexpr double kMoeRowTarget = 0.15;
constexpr double kMoeRowGuard = 0.45;
constexpr double kPresentHold = 0.03;

double PredictQwen3(const ModelZooRow& row) {
  Result<HfConfig> config = LoadHfConfig(SourcePath("examples/hf/qwen3-235b-a22b.json"));
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return 0;
  TransformerSpec spec = config->architecture;
  spec.name = "qwen3-235b-a22b";
  spec.sequence_length = 4096;
  spec.microbatch_sizes = {1};
  AnalyticOptions analytic;
  analytic.gpu_preset = "h100-sxm";
  analytic.moe_dispatcher = row.dispatcher;
  Result<std::string> text = EstimateTransformerJson(spec, analytic, {1, row.t});
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return 0;
  Result<Model> model = ParseModel(*text, spec.name);
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  const int m = 2048 / row.d;
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::kInterleaved1F1B, row.p, m, row.v);
  EXPECT_TRUE(model.ok() && cluster.ok() && schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return 0;
  if (row.overlap == ExpertOverlap::kOn) {
    EXPECT_TRUE(CombineForwardBackward(&*schedule).ok());
  }
  SimOptions sim;
  TrainingConfig& c = sim.config;
  c.schedule = ScheduleKind::kInterleaved1F1B;
  c.layout.tensor_parallel = row.t;
  c.layout.sequence_parallel = true;
  c.layout.data_parallel = row.d;
  c.layout.expert_parallel = row.ep;
  c.layout.expert_dispatcher = row.dispatcher;
  c.recompute = row.recompute;
  if (row.recompute == Recompute::kSelective) c.recompute_layers.modules = kNormsAndActivations;
  c.overlap.expert_overlap = row.overlap;
  c.memory.zero = row.zero;
  c.partition.rule = PartitionRule::kEven;
  c.partition.even.account_for_embedding = true;
  c.partition.even.account_for_loss = true;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return 0;
  std::printf("  %s: ep all-to-all %.2f s of the busiest rank\n", row.label,
              static_cast<double>(result->ep_comm_ns) * 1e-9);
  return static_cast<double>(result->iteration_ns) * 1e-9;
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

// Published per-GPU memory of MoE training runs (docs/calibration-moe.md "MoE memory, held out").
// pytorch/torchtitan#1789 (2025-10-02): DeepSeek-V3 "16B" (torchtitan's flavor, the
// DeepSeek-V2-Lite architecture: examples/hf/deepseek-v2-lite.json) on 8 H100 80GB HBM3 with
// train_configs/deepseek_v3_16b.toml at 82a9530f6^ (FSDP over 8, ep 8, etp 1, seq 4096,
// op-level selective AC, AdamW, the loss compiled) and local_batch_size lowered to 4 (the value
// torchtitan#1792 then set in the file): `memory: 73.32GiB` at steps 10-40, torchtitan's
// max_reserved (PyTorch's reserved_bytes.all.peak), against DeviceMemory::ReservedBytes()
// (allocated peak + allocator cache + cuBLAS workspaces). Not tuned on.
struct MemoryRowMoe {
  const char* label;
  const char* hf_config;
  int seq, mbs, d, ep;
  const char* recompute;
  double published_gib;
  // The run's step-1 figure, before AdamW's moments exist (0: not published).
  double published_step1_gib;
  double present_gib;  // the prediction when the row was added (2026-12-03)
};
constexpr MemoryRowMoe kMoeMemoryRows[] = {
    {"torchtitan#1789 DeepSeek-V3 16B, 8 H100, FSDP 8, ep 8, bs 4, s 4096, op AC",
     "examples/hf/deepseek-v2-lite.json", 4096, 4, 8, 8, "op", 73.32, 58.28, 71.37},
};
constexpr double kMemoryTarget = 0.10;  // the issue's
constexpr double kMemoryHold = 0.03;    // around the present prediction

Bytes PredictReserved(const MemoryRowMoe& row, MemoryBreakdown* parts) {
  Result<HfConfig> config = LoadHfConfig(SourcePath(row.hf_config));
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return 0;
  TransformerSpec spec = config->architecture;
  spec.name = "moe-memory-row";
  spec.sequence_length = row.seq;
  spec.microbatch_sizes = {row.mbs};
  AnalyticOptions analytic;
  analytic.gpu_preset = "h100-sxm";
  Result<Model> model = EstimateTransformer(spec, analytic);
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, 1, 1);
  EXPECT_TRUE(model.ok() && cluster.ok() && schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return 0;
  SimOptions sim;
  TrainingConfig& c = sim.config;
  c.microbatch_size = row.mbs;
  c.layout.data_parallel = row.d;
  c.layout.expert_parallel = row.ep;
  c.memory.zero = 3;
  EXPECT_TRUE(ParseRecomputeSpec(row.recompute, &c.recompute, &c.recompute_layers));
  sim.partition = {StageLayers{0, static_cast<int>(model->layers.size()) - 1}};
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return 0;
  *parts = result->per_rank[0].memory;
  const Bytes allocated = result->per_rank[0].peak_memory_bytes;
  const DeviceMemory device = DeviceMemoryFor(*cluster, c, allocated, 0);
  std::printf("  %s: allocated %.2f GiB, reserved %.2f GiB\n", row.label, ToGiB(allocated),
              ToGiB(device.ReservedBytes()));
  return device.ReservedBytes();
}

TEST(MoeCalibration, PublishedMemoryHeldOut) {
  int within = 0;
  for (const MemoryRowMoe& row : kMoeMemoryRows) {
    MemoryBreakdown parts;
    const double predicted = ToGiB(PredictReserved(row, &parts));
    const double error = predicted / row.published_gib - 1;
    std::printf(
        "%s: published %.2f GiB max_reserved, predicted %.2f GiB, error %+.1f%% (parts, GiB: "
        "weights %.2f + gathered %.2f, gradients %.2f, optimizer %.2f, activations %.2f, "
        "workspace %.2f)\n",
        row.label, row.published_gib, predicted, error * 100, ToGiB(parts.weights),
        ToGiB(parts.gathered_weights), ToGiB(parts.gradients), ToGiB(parts.optimizer),
        ToGiB(parts.activations_peak), ToGiB(parts.workspace_peak));
    within += std::abs(error) <= kMemoryTarget ? 1 : 0;
    EXPECT_NEAR(predicted / row.present_gib, 1.0, kMemoryHold) << row.label;
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

}  // namespace
}  // namespace pipecast
