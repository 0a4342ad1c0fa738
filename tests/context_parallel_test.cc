// Context parallelism (docs/simulator.md, "Context parallelism"): the ring's
// and the all-gather's K/V bytes and overlap worked by hand at cp = 2, 4 and
// 8, grouped-query attention's smaller K/V, activations at 128k tokens with
// and without cp, attention's s^2 cost and FlashAttention's linear memory at
// long sequences, the d x cp gradient group, and the errors for bad cp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "formats/plan.h"
#include "formats/result_json.h"
#include "planner/passes.h"
#include "planner/planner.h"
#include "profiler/analytic.h"
#include "report/report.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {
namespace {

constexpr TimeNs kMs = 1'000'000;

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

// A link of 100 GB/s without latency: a 100 MB (1e8 bytes) K/V block takes
// exactly 1 ms per hop. The rank's attention takes 2 ms forward and 5 ms
// backward, so a ring step computes for 2 / cp and 5 / cp ms.
Link HundredGbps() { return Link{.bandwidth_gbps = 100, .latency_us = 0}; }
constexpr Bytes kBlock = 100'000'000;

TEST(ContextParallelTest, RingBytesAndOverlapWorkedByHand) {
  struct Case {
    int cp;
    TimeNs forward_comm, forward_exposed, backward_comm, backward_exposed;
  };
  // forward: cp-1 hops of 1 ms, each beside a step of 2/cp ms;
  // backward: hops of 1, 2 (x cp-2), 1 ms beside steps of 5/cp ms.
  const Case cases[] = {
      // cp 2: 1 hop under 1 ms of compute: hidden. Backward 1 + 1 ms under 2.5 ms steps.
      {2, 1 * kMs, 0, 2 * kMs, 0},
      // cp 4: 3 hops, 0.5 ms each exposed; backward 1 + 2 + 2 + 1 = 6 ms beside 1.25 ms
      // steps: the two 2 ms steps show 0.75 ms each.
      {4, 3 * kMs, 3 * kMs / 2, 6 * kMs, 3 * kMs / 2},
      // cp 8: 7 hops, 0.75 ms each exposed (5.25 ms); backward 1 + 6 x 2 + 1 = 14 ms beside
      // 0.625 ms steps: 2 x 0.375 + 6 x 1.375 = 9 ms exposed.
      {8, 7 * kMs, 21 * kMs / 4, 14 * kMs, 9 * kMs},
  };
  for (const Case& c : cases) {
    const CpAttentionComm comm =
        ContextParallelAttention(kBlock, 2 * kMs, 5 * kMs, c.cp, CpAlgorithm::kRing, HundredGbps());
    EXPECT_EQ(comm.kv_block_bytes, kBlock) << c.cp;
    EXPECT_EQ(comm.forward_comm_ns, c.forward_comm) << c.cp;
    EXPECT_EQ(comm.forward_exposed_ns, c.forward_exposed) << c.cp;
    EXPECT_EQ(comm.backward_comm_ns, c.backward_comm) << c.cp;
    EXPECT_EQ(comm.backward_exposed_ns, c.backward_exposed) << c.cp;
    // The backward's two send/receive buffers of K/V and dK/dV.
    EXPECT_EQ(comm.buffer_bytes, 4 * kBlock) << c.cp;
  }
  // Bytes through each GPU's link per attention layer and micro-batch: (cp-1) blocks forward,
  // 2(cp-1) backward (K/V and dK/dV), i.e. 3(cp-1) x 100 MB at 1 ms per 100 MB.
  for (int cp : {2, 4, 8}) {
    const CpAttentionComm comm =
        ContextParallelAttention(kBlock, 0, 0, cp, CpAlgorithm::kRing, HundredGbps());
    EXPECT_EQ(comm.forward_comm_ns + comm.backward_comm_ns, 3 * (cp - 1) * kMs) << cp;
    // Nothing to hide behind: everything is exposed.
    EXPECT_EQ(comm.forward_exposed_ns, comm.forward_comm_ns) << cp;
    EXPECT_EQ(comm.backward_exposed_ns, comm.backward_comm_ns) << cp;
  }
  EXPECT_EQ(ContextParallelAttention(kBlock, kMs, kMs, 1, CpAlgorithm::kRing, HundredGbps())
                .forward_comm_ns,
            0);
}

TEST(ContextParallelTest, RingHopPaysTheLinkLatency) {
  // 10 us latency per hop: cp 4 forward with no compute to hide behind, 3 x (1 ms + 10 us).
  const Link link{.bandwidth_gbps = 100, .latency_us = 10};
  const CpAttentionComm comm = ContextParallelAttention(kBlock, 0, 0, 4, CpAlgorithm::kRing, link);
  EXPECT_EQ(comm.forward_exposed_ns, 3 * (kMs + 10'000));
}

TEST(ContextParallelTest, AllGatherWorkedByHand) {
  // A ring all-gather of cp blocks (4e8 bytes at cp 4) moves (cp-1)/cp of them through each
  // GPU: 3e8 bytes at 100 GB/s = 3 ms; the backward gathers again and reduce-scatters dK/dV:
  // 6 ms. Nothing overlaps.
  for (int cp : {2, 4, 8}) {
    const CpAttentionComm comm = ContextParallelAttention(kBlock, 2 * kMs, 5 * kMs, cp,
                                                          CpAlgorithm::kAllGather, HundredGbps());
    EXPECT_EQ(comm.forward_exposed_ns, (cp - 1) * kMs) << cp;
    EXPECT_EQ(comm.backward_exposed_ns, 2 * (cp - 1) * kMs) << cp;
    EXPECT_EQ(comm.buffer_bytes, 2 * cp * kBlock) << cp;
  }
}

TEST(ContextParallelTest, GroupedQueryAttentionShrinksTheKvBlocks) {
  // examples/llama-70b.json: s 2048, 8 key-value heads of 128 channels (of 64 query heads),
  // bf16: K and V of one sample are 2 x 2048 x 8 x 128 x 2 = 8 MiB, 1/8 of multi-head's.
  Result<Model> model = LoadModel(SourcePath("examples/llama-70b.json"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const Layer& block = model->layers[1];
  ASSERT_EQ(block.name, "block.0");
  ASSERT_TRUE(block.cp_attention.has_value());
  EXPECT_EQ(block.cp_attention->kv_bytes_per_sample, 2 * 2048 * 8 * 128 * 2);
  EXPECT_EQ(block.cp_attention->kv_heads, 8);
  EXPECT_FALSE(model->layers[0].cp_attention.has_value());  // the embedding has no attention

  // t 8 keeps one key-value head per GPU; cp 4, micro-batch 2: each GPU's block is
  // 2 x (2048 / 4) x 1 x 128 x 2 x 2 samples = 524,288 bytes.
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  TrainingConfig config;
  config.microbatch_size = 2;
  config.layout.tensor_parallel = 8;
  config.layout.context_parallel = 4;
  const StageCostTable table(*model, StageCostOptionsFor(config, *cluster));
  ASSERT_TRUE(table.ContextParallelComm().has_value());
  EXPECT_EQ(table.ContextParallelComm()->kv_block_bytes, 524'288);
}

TEST(ContextParallelTest, MergeBytesWorkedByHand) {
  // 1000 output and query elements, 500 of K and V together; the cp - 1 further kernel calls'
  // fixed passes are 4 x 1000 + 10 x 1000 = 14,000 bytes each.
  // PyTorch's (all-gather): cp 2 forward 1000 x (12 + 38) + 500 x 4 = 52,000 bytes, backward
  // 1000 x 30 + 500 x 53 + 14,000 = 70,500; cp 4 forward 1000 x 126 + 500 x 12 = 132,000,
  // backward 1000 x 50 + 500 x 103 + 3 x 14,000 = 143,500.
  const CpAlgorithm gather = CpAlgorithm::kAllGather, ring = CpAlgorithm::kRing;
  CpMergeBytes m = ContextParallelMergeBytes(1000, 1000, 500, 2, gather);
  EXPECT_DOUBLE_EQ(m.forward, 52'000);
  EXPECT_DOUBLE_EQ(m.backward, 70'500);
  m = ContextParallelMergeBytes(1000, 1000, 500, 4, gather);
  EXPECT_DOUBLE_EQ(m.forward, 132'000);
  EXPECT_DOUBLE_EQ(m.backward, 143'500);
  // Transformer Engine's ring: cp 2 forward 1000 x (12 + 10) = 22,000, backward 1500 x 10 +
  // 14,000 = 29,000; cp 4 forward 1000 x 42 = 42,000, backward 1500 x 22 + 42,000 = 75,000.
  m = ContextParallelMergeBytes(1000, 1000, 500, 2, ring);
  EXPECT_DOUBLE_EQ(m.forward, 22'000);
  EXPECT_DOUBLE_EQ(m.backward, 29'000);
  m = ContextParallelMergeBytes(1000, 1000, 500, 4, ring);
  EXPECT_DOUBLE_EQ(m.forward, 42'000);
  EXPECT_DOUBLE_EQ(m.backward, 75'000);
  for (CpAlgorithm algorithm : {gather, ring}) {  // nothing at cp 1
    m = ContextParallelMergeBytes(1000, 1000, 500, 1, algorithm);
    EXPECT_EQ(m.forward, 0);
    EXPECT_EQ(m.backward, 0);
  }
}

TEST(ContextParallelTest, MergesRunOverHbmAtTheModelsMemoryEfficiency) {
  // examples/llama-70b.json (s 2048, 64 query heads, 8 key-value heads of 128 channels,
  // memory_efficiency 0.7) at t 8, cp 2 all-gather (PyTorch's merges), micro-batch 1 on
  // h100-sxm (3350 GB/s): each GPU holds
  // 1024 tokens of 8 query heads and 1 key-value head, so out = query = 1024 x 8 x 128 =
  // 1,048,576 elements and K/V 2 x 1024 x 128 = 262,144. Forward 1,048,576 x 50 + 262,144 x 4
  // = 53,477,376 bytes: 22.8 us at 0.7 x 3350 GB/s; backward 1,048,576 x 44 + 262,144 x 53 =
  // 60,030,976 bytes: 25.6 us.
  Result<Model> model = LoadModel(SourcePath("examples/llama-70b.json"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(model->layers[1].cp_attention.has_value());
  EXPECT_DOUBLE_EQ(model->layers[1].cp_attention->memory_efficiency, 0.7);
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  ASSERT_DOUBLE_EQ(cluster->gpu.memory_bandwidth_gbps, 3350);
  TrainingConfig config;
  config.layout.tensor_parallel = 8;
  config.layout.context_parallel = 2;
  config.layout.cp_algorithm = CpAlgorithm::kAllGather;
  const StageCostTable table(*model, StageCostOptionsFor(config, *cluster));
  const double bytes_per_ns = 0.7 * 3350;
  EXPECT_EQ(table.ContextParallelMergeNs().first, std::llround(53'477'376 / bytes_per_ns));
  EXPECT_EQ(table.ContextParallelMergeNs().second, std::llround(60'030'976 / bytes_per_ns));
  // Unknown bandwidth: nothing charged, and the note says so.
  Cluster unknown = *cluster;
  unknown.gpu.memory_bandwidth_gbps = 0;
  const StageCostTable blind(*model, StageCostOptionsFor(config, unknown));
  EXPECT_EQ(blind.ContextParallelMergeNs().first, 0);
  bool said = false;
  for (const std::string& note : blind.Notes()) {
    said = said || note.find("HBM bandwidth is unknown") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

// Llama 3.1 8B (examples/hf/llama-3.1-8b.json) at `seq` tokens, micro-batch 1, on `gpu`
// (a preset or a cluster file), bf16 or with FP8 products.
Result<Model> Llama31At(int seq, const std::string& gpu = "h100-sxm",
                        Fp8Recipe fp8 = Fp8Recipe::kNone) {
  TransformerSpec spec{.name = "llama-3.1-8b",
                       .layers = 32,
                       .hidden = 4096,
                       .heads = 32,
                       .ffn_hidden = 14336,
                       .sequence_length = seq,
                       .vocab = 128256,
                       .learned_positions = false,
                       .gated_mlp = true,
                       .kv_heads = 8,
                       .max_positions = std::max(seq, 131072),
                       .norm = NormKind::kRmsNorm,
                       .qkv_bias = false,
                       .output_bias = false,
                       .mlp_bias = false,
                       .microbatch_sizes = {1}};
  AnalyticOptions options;
  options.gpu_preset = gpu;
  options.fp8 = fp8;
  PIPECAST_ASSIGN_OR_RETURN(Model model, EstimateTransformer(spec, options));
  // Through the file, as the tools read it: the reader derives the attention's shape.
  return ParseModel(ModelToJson(model), "llama-3.1-8b");
}

TEST(ContextParallelTest, ActivationsAt128kWithAndWithoutContextParallelism) {
  Result<Model> model = Llama31At(131072);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // A block keeps per token (bf16, FlashAttention, profiler/analytic.cc): two norm inputs and
  // the QKV and fc1 inputs 2 x 2h + 2 x 2h, two dropout masks 2h, Q, K, V, the projection
  // input, fc1's two outputs and fc2's input 2 x (4096 + 1024 + 1024 + 4096 + 28672) +
  // 2 x 14336, the fp32 logsumexp 4 x 32 heads: 40,960 + 106,496 + 128 = 147,584 bytes,
  // plus FlashAttention's 16-byte RNG state per call.
  constexpr Bytes kPerToken = 147'584;
  TrainingConfig config;
  const Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  const StageCostTable whole(*model, StageCostOptionsFor(config, *cluster));
  const StageLayers block{1, 1};
  EXPECT_EQ(whole.Stage(block).activation_bytes, kPerToken * 131072 + 16);  // 18.0 GiB
  for (int cp : {2, 4, 8}) {
    config.layout.context_parallel = cp;
    const StageCostTable split(*model, StageCostOptionsFor(config, *cluster));
    // s / cp tokens per GPU (the 16 RNG bytes are scaled with the rest: under 16 bytes off).
    EXPECT_NEAR(static_cast<double>(split.Stage(block).activation_bytes),
                static_cast<double>(kPerToken * (131072 / cp)), 16)
        << cp;
    // Times: 1/cp of the compute plus the exposed K/V exchange, never less than 1/cp.
    EXPECT_GE(split.Stage(block).forward_ns, whole.Stage(block).forward_ns / cp - 1) << cp;
  }
}

TEST(ContextParallelTest, AttentionCostIsQuadraticAndFlashMemoryLinearAtLongSequences) {
  Result<Model> at64k = Llama31At(65536);
  Result<Model> at128k = Llama31At(131072);
  ASSERT_TRUE(at64k.ok() && at128k.ok());
  const Layer& a = at64k->layers[1];
  const Layer& b = at128k->layers[1];
  // FLOPs: 2s x (weights) + 4 s^2 h per block (Narayanan et al.): doubling s adds
  // 4h(s1^2 - 2 s0^2) = 4 x 4096 x 2^33 = 2^47 beyond twice the 64k figure.
  ASSERT_TRUE(a.forward_flops && b.forward_flops);
  EXPECT_NEAR(*b.forward_flops - 2 * *a.forward_flops, 140737488355328.0, 1e3);
  // The kernel's speed is flat past 16k tokens, so its time is 4x for 2x the tokens.
  ASSERT_TRUE(a.cp_attention && b.cp_attention);
  EXPECT_NEAR(b.cp_attention->forward_ns_per_sample / a.cp_attention->forward_ns_per_sample, 4.0,
              1e-9);
  // FlashAttention keeps no s x s tensor: the activations double (the 16 RNG bytes aside).
  EXPECT_EQ(b.profiles[0].activation_bytes, 2 * a.profiles[0].activation_bytes - 16);
}

TEST(ContextParallelTest, GradientsReduceOverDataTimesContextParallelGpus) {
  // d 1, cp 2: the two GPUs hold the same weights and all-reduce their gradients, as two
  // replicas of d 2 (cp 1) do; the activations halve.
  Result<Model> model = Llama31At(8192);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, 1, 1);
  ASSERT_TRUE(schedule.ok());
  SimOptions cp2;
  cp2.config.layout.context_parallel = 2;
  cp2.config.memory.zero = 1;
  cp2.config.overlap.overlap_grad_reduce = false;
  SimOptions d2 = cp2;
  d2.config.layout.context_parallel = 1;
  d2.config.layout.data_parallel = 2;
  Result<SimResult> a = Simulate(*model, *cluster, *schedule, cp2);
  Result<SimResult> b = Simulate(*model, *cluster, *schedule, d2);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_GT(a->allreduce_ns, 0);
  EXPECT_EQ(a->allreduce_ns, b->allreduce_ns);  // one reduce-scatter over 2 GPUs of a node
  EXPECT_EQ(a->per_rank[0].memory.optimizer, b->per_rank[0].memory.optimizer);  // sharded / 2
  EXPECT_EQ(a->context_parallel, 2);
  EXPECT_EQ(a->global_batch, 1);  // cp splits samples, it adds none
  EXPECT_EQ(b->global_batch, 2);
  EXPECT_LT(a->per_rank[0].memory.activations_peak, b->per_rank[0].memory.activations_peak);
}

TEST(ContextParallelTest, OutputsShowTheDegreeAndRoundTripThroughThePlan) {
  Result<Model> model = Llama31At(8192);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(schedule.ok());
  SimOptions options;
  options.config.layout.tensor_parallel = 2;
  options.config.layout.context_parallel = 4;
  options.config.layout.cp_algorithm = CpAlgorithm::kAllGather;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  // Rank order t, cp, p, d: rank 1's t x cp = 8 GPUs are 8-15.
  const std::string text = ResultToText(*result, *cluster);
  EXPECT_NE(text.find("context parallelism cp = 4 GPUs"), std::string::npos) << text;
  EXPECT_NE(text.find("t=2 cp=4: GPUs 8-15"), std::string::npos) << text;
  const std::string json = ResultToJson(*result);
  EXPECT_NE(json.find("\"context_parallel\": 4"), std::string::npos);
  EXPECT_NE(json.find("\"cp_algorithm\": \"allgather\""), std::string::npos);
  // plan.json keeps cp and its algorithm; the plan replays with them; GPUs = t x cp x p x d.
  const PlanFile plan = MakePlanFile("m", "fnv1a64:0", *cluster, *schedule, options, *result);
  EXPECT_EQ(plan.gpus, 16);
  EXPECT_EQ(plan.placement, (std::vector<int>{0, 8}));
  Result<PlanFile> back = ParsePlan(PlanToJson(plan), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->config.layout.context_parallel, 4);
  EXPECT_EQ(back->config.layout.cp_algorithm, CpAlgorithm::kAllGather);
  // A cp = 1 result writes neither key.
  options.config.layout.context_parallel = 1;
  Result<SimResult> plain = Simulate(*model, *cluster, *schedule, options);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(ResultToJson(*plain).find("context_parallel"), std::string::npos);
}

TEST(ContextParallelTest, BadDegreesAreRefusedByName) {
  TrainingConfig config;
  config.layout.pipeline_stages = 1;
  config.layout.context_parallel = 0;
  Status s = config.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--context-parallel is 0"), std::string::npos) << s.message();

  Result<Model> model = LoadModel(SourcePath("examples/llama-70b.json"));  // s 2048
  ASSERT_TRUE(model.ok());
  s = CheckContextParallelCosts(*model, 3);  // 2048 tokens do not split into 6 chunks
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("2 x cp = 6"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckContextParallelCosts(*model, 4).ok());

  Model plain = *model;  // a measured model: no attention shape to time the exchange
  for (Layer& layer : plain.layers) layer.cp_attention.reset();
  s = CheckContextParallelCosts(plain, 2);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no attention shape"), std::string::npos) << s.message();
}

TEST(ContextParallelPlanner, SearchesTCpPdAndPinsCp) {
  Result<Model> model = Llama31At(131072);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  ASSERT_TRUE(cluster.ok());
  PlannerOptions options;
  options.gpus = 64;
  options.schedules = {ScheduleKind::k1F1B};
  options.microbatch_sizes = {1};
  options.recompute = RecomputeMode::kFull;
  std::vector<Rejection> rejected;
  // From 8k tokens the planner tries every power of two cp up to N whose 2cp divides s.
  EXPECT_EQ(passes::ContextParallelDegrees(*model, options),
            (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
  const std::vector<Candidate> all = passes::Enumerate(*model, *cluster, options, 64, &rejected);
  std::set<int> cps;
  for (const Candidate& c : all) {
    const ParallelLayout& l = c.config.layout;
    EXPECT_EQ(l.Gpus(), 64) << c.Label();
    const int span = l.tensor_parallel * l.context_parallel;
    EXPECT_TRUE(span <= 8 ? 8 % span == 0 : span % 8 == 0) << c.Label();
    cps.insert(l.context_parallel);
  }
  EXPECT_EQ(cps, (std::set<int>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(passes::CountConfigurations(*model, *cluster, options),
            static_cast<int64_t>(all.size() + rejected.size()));
  // Pinned: only the listed degrees; below 8k tokens: cp 1 alone.
  options.context_parallel = {2, 4};
  cps.clear();
  rejected.clear();
  for (const Candidate& c : passes::Enumerate(*model, *cluster, options, 64, &rejected)) {
    cps.insert(c.config.layout.context_parallel);
  }
  EXPECT_EQ(cps, (std::set<int>{2, 4}));
  options.context_parallel.clear();
  Result<Model> short_model = Llama31At(4096);
  ASSERT_TRUE(short_model.ok());
  EXPECT_EQ(passes::ContextParallelDegrees(*short_model, options), std::vector<int>{1});
  EXPECT_FALSE(CheckContextParallelChoices({3}, 64).ok());
  EXPECT_TRUE(CheckContextParallelChoices({2, 4}, 64).ok());
}

// Held-out published context-parallel runs (docs/calibration-context.md "Context parallelism";
// never tuned on): torchtitan's Llama 3.1 8B on 8 H100s of Grand Teton (96 GB HBM2e, 500 W), FSDP
// 8/cp x CP cp, local batch 1, full activation checkpointing, torch.compile and Float8 (torchao,
// tensorwise dynamic scaling; FSDP Float8 all-gather), PyTorch's context parallel SDPA
// (FlashAttention-2, round-robin load balancing, K/V all-gathered: torchtitan's default rotate
// method). pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2 (torchtitan
// 9dec370, 2024/12/26).
struct TorchtitanCpRow {
  int cp;
  int seq;
  double published_tps;  // tokens / s / GPU
};
constexpr TorchtitanCpRow kTorchtitanCpRows[] = {
    {1, 32768, 3890}, {2, 65536, 2540}, {4, 131072, 1071}, {8, 262144, 548}};
// The target for each published context-parallel run, and the guard each row is held
// to: the present errors (+1% to +43%, docs/calibration.md) with room, so that a change to the
// model is seen. Nothing was tuned on these rows; the rows within the target are held to it.
constexpr double kCpRowTarget = 0.15;
constexpr double kCpRowGuard = 0.45;

double PredictTorchtitanCp(const TorchtitanCpRow& row) {
  const std::string cluster_path = SourcePath("tests/calibration/grand-teton-h100-500w.json");
  Result<Model> model = Llama31At(row.seq, cluster_path, Fp8Recipe::kCurrent);
  EXPECT_TRUE(model.ok()) << model.status().message();
  Result<Cluster> cluster = LoadCluster(cluster_path);
  EXPECT_TRUE(cluster.ok()) << cluster.status().message();
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, 1, 1);
  EXPECT_TRUE(schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return 0;
  SimOptions sim;
  sim.config.microbatch_size = 1;
  sim.config.layout.data_parallel = 8 / row.cp;
  sim.config.layout.context_parallel = row.cp;
  sim.config.layout.cp_algorithm = CpAlgorithm::kAllGather;
  sim.config.recompute = Recompute::kFull;
  Result<MemoryConfig> memory = MemoryConfigFor("fp8", "adam", "fp32", "current", true);
  EXPECT_TRUE(memory.ok()) << memory.status().message();
  if (!memory.ok()) return 0;
  sim.config.memory = *memory;
  sim.config.memory.zero = 3;
  sim.partition = {StageLayers{0, static_cast<int>(model->layers.size()) - 1}};
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return 0;
  // Each GPU works on s / cp tokens of its replica's one sample per iteration.
  return static_cast<double>(row.seq) / row.cp / (static_cast<double>(result->iteration_ns) * 1e-9);
}

TEST(ContextParallelCalibration, TorchtitanLlama31LongContextRunsHeldOut) {
  int within = 0;
  for (const TorchtitanCpRow& row : kTorchtitanCpRows) {
    const double predicted = PredictTorchtitanCp(row);
    const double error = predicted / row.published_tps - 1;
    std::printf(
        "torchtitan llama-3.1-8b fsdp %d cp %d s %d: published %.0f predicted %.0f "
        "tokens/s/GPU, error %+.1f%%\n",
        8 / row.cp, row.cp, row.seq, row.published_tps, predicted, error * 100);
    within += std::abs(error) <= kCpRowTarget ? 1 : 0;
    EXPECT_GT(error, 0) << "cp " << row.cp;  // every row is predicted fast today
    EXPECT_LT(std::abs(error), kCpRowGuard) << "cp " << row.cp;
    // cp 1 (+13%) and cp 2 (+1%) are within the 15%; cp 4 and 8 (+32%, +36%) are not.
    if (row.cp <= 2) {
      EXPECT_LT(std::abs(error), kCpRowTarget) << "cp " << row.cp;
    }
  }
  std::printf("torchtitan context-parallel rows within the issue's 15%%: %d of %zu\n", within,
              std::size(kTorchtitanCpRows));
}

// The same benchmark page, **Table 6**: 4D parallelism (FSDP + TP + PP + CP) + torch.compile +
// Float8 + AsyncTP + 1F1B, Llama 3.1 405B on 512 GPUs (TP 8, PP 8), local batch 8, full
// activation checkpointing.
constexpr TorchtitanCpRow kTorchtitan405bRows[] = {
    {1, 32768, 76}, {2, 65536, 47}, {4, 131072, 31}, {8, 262144, 16}};

double PredictTorchtitan405b(const TorchtitanCpRow& row) {
  const std::string cluster_path = SourcePath("tests/calibration/grand-teton-h100-500w.json");
  TransformerSpec spec{.name = "llama-3.1-405b",
                       .layers = 126,
                       .hidden = 16384,
                       .heads = 128,
                       .ffn_hidden = 53248,
                       .sequence_length = row.seq,
                       .vocab = 128256,
                       .learned_positions = false,
                       .gated_mlp = true,
                       .kv_heads = 8,
                       .max_positions = std::max(row.seq, 131072),
                       .norm = NormKind::kRmsNorm,
                       .qkv_bias = false,
                       .output_bias = false,
                       .mlp_bias = false,
                       .microbatch_sizes = {1}};
  AnalyticOptions analytic;
  analytic.gpu_preset = cluster_path;
  analytic.fp8 = Fp8Recipe::kCurrent;
  Result<std::string> text = EstimateTransformerJson(spec, analytic, {1, 8});
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return 0;
  Result<Model> model = ParseModel(*text, "llama-3.1-405b");
  Result<Cluster> cluster = LoadCluster(cluster_path);
  // 1F1B over p 8 with the local batch's 8 micro-batches of one sample.
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 8, 8);
  EXPECT_TRUE(model.ok() && cluster.ok() && schedule.ok());
  if (!model.ok() || !cluster.ok() || !schedule.ok()) return 0;
  SimOptions sim;
  sim.config.layout.tensor_parallel = 8;
  sim.config.layout.sequence_parallel = true;  // torchtitan's TP shards the norms
  sim.config.overlap.tp_comm_overlap = true;   // AsyncTP
  sim.config.layout.data_parallel = 8 / row.cp;
  sim.config.layout.context_parallel = row.cp;
  sim.config.layout.cp_algorithm = CpAlgorithm::kAllGather;
  sim.config.recompute = Recompute::kFull;
  Result<MemoryConfig> memory = MemoryConfigFor("fp8", "adam", "fp32", "current", true);
  if (!memory.ok()) return 0;
  sim.config.memory = *memory;
  sim.config.memory.zero = 3;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return 0;
  // A replica's 8 samples of s tokens over its t x cp x p GPUs.
  return 8.0 * row.seq / (8.0 * row.cp * 8) / (static_cast<double>(result->iteration_ns) * 1e-9);
}

TEST(ContextParallelCalibration, Torchtitan405bFourDRunsHeldOut) {
  int within = 0;
  for (const TorchtitanCpRow& row : kTorchtitan405bRows) {
    const double predicted = PredictTorchtitan405b(row);
    const double error = predicted / row.published_tps - 1;
    std::printf(
        "torchtitan llama-3.1-405b t 8 p 8 fsdp %d cp %d s %d: published %.0f predicted %.1f "
        "tokens/s/GPU, error %+.1f%%\n",
        8 / row.cp, row.cp, row.seq, row.published_tps, predicted, error * 100);
    within += std::abs(error) <= kCpRowTarget ? 1 : 0;
    EXPECT_LT(std::abs(error), kCpRowGuard) << "cp " << row.cp;
  }
  std::printf("torchtitan 405B context-parallel rows within the issue's 15%%: %d of %zu\n", within,
              std::size(kTorchtitan405bRows));
}

}  // namespace
}  // namespace pipecast
