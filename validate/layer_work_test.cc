#include "validate/layer_work.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "testing/validate_test_util.h"
#include "validate/runtime.h"

namespace pipecast::validate {
namespace {

constexpr cpu::BlockShape kShape{.hidden = 16, .ffn = 32, .tokens_per_sample = 4};
// Times the all-reduces of the LayerWorks below.
const SteadyClock clock_;

// A model as `profiler cpu` would write it for `layers` blocks of kShape
// (times are placeholders: these tests check data and memory, not time).
Model WorkloadModel(int layers) {
  cpu::WorkloadSpec spec;
  spec.shape = kShape;
  spec.layers = layers;
  Model m = testing::UniformModel(layers);
  m.name = "cpu-workload";
  m.source.method = "cpu";
  m.source.details[cpu::kWorkloadSourceKey] = cpu::WorkloadToSourceJson(spec);
  cpu::Block block(kShape, 1);
  for (Layer& l : m.layers) {
    l.parameters = block.Parameters();
    l.profiles[0].activation_bytes = block.ActivationBytes(1);
    l.profiles[0].output_bytes = block.OutputBytes(1);
    l.profiles[0].workspace_bytes = block.TransientBytes(1);
  }
  return m;
}

// The same model with profiles of a t-way split too, as `profiler cpu
// --tensor-parallel 1,t` writes them: worker 0's shard's sizes, the whole
// output all-reduced once in the forward and once in the backward.
Model TensorParallelWorkloadModel(int layers, int t) {
  Model m = WorkloadModel(layers);
  cpu::Block shard = *cpu::Block(kShape, 1).Shard(t, 0);
  for (Layer& l : m.layers) {
    LayerProfile p = l.profiles[0];
    p.tensor_parallel = t;
    p.forward_ns /= t;
    p.backward_ns /= t;
    p.backward_weight_ns = *p.backward_weight_ns / t;
    p.activation_bytes = shard.ActivationBytes(1);
    p.workspace_bytes = shard.TransientBytes(1);
    p.tp_comm_bytes = shard.OutputBytes(1);
    p.tp_forward_collectives = 1;
    p.tp_backward_collectives = 1;
    l.profiles.push_back(p);
  }
  return m;
}

// Two ranks in threads of this process, with unlimited pools; runs `w`'s
// plan for `iterations` measured iterations and no warm-up.
struct TwoStages {
  SteadyClock clock;
  MemoryPool p0{"stage 0", 0, &clock};
  MemoryPool p1{"stage 1", 0, &clock};
  InProcessTransport transport{{&p0, &p1}};

  Result<std::vector<StageRun>> Run(const testing::World& w, OpWork* work, int iterations) {
    RuntimeOptions o;
    o.warmup_iterations = 0;
    o.iterations = iterations;
    return RunStages(w.exec, {0, 1}, o,
                     RuntimeEnv{&transport, work, &clock, {&p0, &p1}, true, {}, nullptr, {}});
  }
};

TEST(LayerWork, APipelinedRunGivesTheGradientsOfASequentialOne) {
  // Given 4 layers on 2 ranks under 1F1B with 3 micro-batches.
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 3);
  testing::World w = testing::MakeWorld(WorkloadModel(4), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStages stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get(), 1);
  ASSERT_TRUE(runs.ok()) << runs.status().message();

  // Then the same blocks run one micro-batch at a time, all layers in a row,
  // accumulate bit-identical weight gradients (same inputs, same order).
  std::vector<cpu::Block> ref;
  for (int l = 0; l < 4; ++l) ref.emplace_back(kShape, 1 + l);
  const size_t n = 4 * 16;
  std::vector<float> input(n), grad(n, 1.0f / n);
  for (size_t i = 0; i < n; ++i) input[i] = std::sin(0.01f * static_cast<float>(i));
  for (int mb = 0; mb < 3; ++mb) {
    std::vector<cpu::Saved> saved;
    std::vector<float> x = input, y(n);
    for (cpu::Block& b : ref) {
      saved.push_back(b.Forward(x, y, 1));
      x.swap(y);
    }
    std::vector<float> dy = grad, dx(n);
    for (int l = 3; l >= 0; --l) {
      ref[l].Backward(saved[l], dy, dx);
      dy.swap(dx);
    }
  }
  for (int l = 0; l < 4; ++l) {
    const auto got = (*work)->blocks()[l].GradientW1();
    const auto want = ref[l].GradientW1();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "layer " << l;
    EXPECT_NE(want[0], 0.0f);
  }
  // And stage 0 (1F1B, 2 ranks) held 2 micro-batches of 2 layers' real
  // activations at most, which is what the model predicts.
  EXPECT_EQ((*runs)[0].peak_activation_bytes, 2 * 2 * cpu::Block(kShape, 1).ActivationBytes(1));
  EXPECT_EQ((*runs)[0].peak_activation_bytes, w.predicted.per_rank[0].memory.activations_peak);
}

// The weight gradients (W1) of `layers` blocks run one micro-batch at a time, all layers in a
// row, for `microbatches` micro-batches: what a pipelined run must reproduce.
std::vector<std::vector<float>> SequentialGradients(int layers, int microbatches) {
  std::vector<cpu::Block> ref;
  for (int l = 0; l < layers; ++l) ref.emplace_back(kShape, 1 + l);
  const size_t n = 4 * 16;
  std::vector<float> input(n), grad(n, 1.0f / n);
  for (size_t i = 0; i < n; ++i) input[i] = std::sin(0.01f * static_cast<float>(i));
  for (int mb = 0; mb < microbatches; ++mb) {
    std::vector<cpu::Saved> saved;
    std::vector<float> x = input, y(n);
    for (cpu::Block& b : ref) {
      saved.push_back(b.Forward(x, y, 1));
      x.swap(y);
    }
    std::vector<float> dy = grad, dx(n);
    for (int l = layers - 1; l >= 0; --l) {
      ref[l].Backward(saved[l], dy, dx);
      dy.swap(dx);
    }
  }
  std::vector<std::vector<float>> out;
  for (const cpu::Block& b : ref) out.emplace_back(b.GradientW1().begin(), b.GradientW1().end());
  return out;
}

// Two ranks with the copy reduce's transport too (bidirectional plans).
struct TwoStagesWithCopies {
  SteadyClock clock;
  MemoryPool p0{"stage 0", 0, &clock}, p1{"stage 1", 0, &clock};
  MemoryPool c0{"copy 0", 0, &clock}, c1{"copy 1", 0, &clock};
  InProcessTransport transport{{&p0, &p1}}, copies{{&c0, &c1}};
  Result<std::vector<StageRun>> Run(const testing::World& w, OpWork* work) {
    RuntimeOptions o;
    o.warmup_iterations = 0;
    o.iterations = 1;
    return RunStages(
        w.exec, {0, 1}, o,
        RuntimeEnv{&transport, work, &clock, {&p0, &p1}, true, {}, &copies, {&c0, &c1}});
  }
};

TEST(LayerWork, DualPipeVPairsGiveTheGradientsOfASequentialRun) {
  // Given 4 layers in dualpipev's V on 2 ranks (1 layer a virtual stage), 4 micro-batches,
  // overlapped pairs and hand-overs between the stages a rank holds.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipeV, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(WorkloadModel(4), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStagesWithCopies stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get());

  // Then every layer's weight gradient is the sequential run's (up to the order the
  // micro-batches' contributions were added in).
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  const std::vector<std::vector<float>> want = SequentialGradients(4, 4);
  for (int l = 0; l < 4; ++l) {
    const auto got = (*work)->blocks()[l].GradientW1();
    ASSERT_EQ(got.size(), want[l].size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[l][i], 1e-5f * (1 + std::abs(want[l][i]))) << "layer " << l;
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*runs)[r].peak_activation_bytes, w.predicted.per_rank[r].memory.activations_peak);
  }
}

TEST(LayerWork, DualPipesTwoCopiesSumToTheGradientsOfASequentialRun) {
  // Given dualpipe on 2 ranks over 4 layers (2 model stages of 2), 4 micro-batches: 0 and 1
  // enter at rank 0 and run the first copies, 2 and 3 enter at rank 1 and run the second.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(WorkloadModel(4), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStagesWithCopies stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get());

  // Then each copy holds its direction's share, and the two copies' sum (what the copy reduce
  // gives both ranks) is the sequential run's over all 4 micro-batches.
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  const std::vector<std::vector<float>> want = SequentialGradients(4, 4);
  const std::vector<std::vector<float>> half = SequentialGradients(4, 2);
  for (int l = 0; l < 4; ++l) {
    const auto a = (*work)->blocks()[l].GradientW1();
    const auto b = (*work)->second_copy()[l].GradientW1();
    ASSERT_EQ(a.size(), want[l].size());
    ASSERT_EQ(b.size(), want[l].size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), half[l].begin())) << "layer " << l;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i] + b[i], want[l][i], 1e-5f * (1 + std::abs(want[l][i]))) << "layer " << l;
    }
    EXPECT_NE(b[0], 0.0f);
  }
}

TEST(LayerWork, AModelNotMeasuredOnTheWorkloadIsRefused) {
  Model m = WorkloadModel(2);
  m.layers[1].profiles[0].output_bytes += 4;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 1);
  testing::World w = testing::MakeWorld(m, *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(m, w.plan, &clock_);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(), ::testing::HasSubstr("layers[1].output_bytes"));
}

TEST(LayerWork, ZeroBubbleSplitRunsAndFreesEverythingAtW) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kZBH1, 2, 4);
  testing::World w = testing::MakeWorld(WorkloadModel(2), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStages stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get(), 2);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(stages.p0.held(), 0);
  EXPECT_EQ(stages.p1.held(), 0);
}

TEST(LayerWork, AVPlacementHandsOverBetweenStagesOfOneRank) {
  // Given ZB-V on 2 ranks (4 stages in a V: rank 0 holds stages 0 and 3,
  // rank 1 stages 1 and 2, so 1 -> 2 and its gradient stay on rank 1) over
  // 4 layers and 4 micro-batches: the run finishes, and its weight gradients
  // are a sequential run's bit for bit.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kZBV, 2, 4, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  testing::World w = testing::MakeWorld(WorkloadModel(4), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStages stages;
  Result<std::vector<StageRun>> runs = stages.Run(w, work->get(), 1);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  std::vector<cpu::Block> ref;
  for (int l = 0; l < 4; ++l) ref.emplace_back(kShape, 1 + l);
  const size_t n = 4 * 16;
  std::vector<float> input(n), grad(n, 1.0f / n);
  for (size_t i = 0; i < n; ++i) input[i] = std::sin(0.01f * static_cast<float>(i));
  for (int mb = 0; mb < 4; ++mb) {
    std::vector<cpu::Saved> saved;
    std::vector<float> x = input, y(n);
    for (cpu::Block& b : ref) {
      saved.push_back(b.Forward(x, y, 1));
      x.swap(y);
    }
    std::vector<float> dy = grad, dx(n);
    for (int l = 3; l >= 0; --l) {
      ref[l].Backward(saved[l], dy, dx);
      dy.swap(dx);
    }
  }
  for (int l = 0; l < 4; ++l) {
    const auto got = (*work)->blocks()[l].GradientW2();
    const auto want = ref[l].GradientW2();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "layer " << l;
  }
}

TEST(LayerWork, TensorParallelWorkersAllReduceToTheSequentialGradients) {
  // Given 4 layers on 2 ranks x 2 tensor-parallel workers under 1F1B with 3
  // micro-batches: 4 worker threads, 2 in-process all-reduce groups.
  const int t = 2;
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 3);
  testing::World w = testing::MakeWorld(TensorParallelWorkloadModel(4, t), *s, Recompute::kOff, t);
  ASSERT_EQ(w.exec.tensor_parallel, t);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  SteadyClock clock;
  std::vector<std::unique_ptr<MemoryPool>> pools;
  std::vector<MemoryPool*> raw;
  for (int i = 0; i < 4; ++i) {
    pools.push_back(std::make_unique<MemoryPool>("worker " + std::to_string(i), 0, &clock));
    raw.push_back(pools.back().get());
  }
  InProcessTransport transport(raw);
  InProcessTensorGroup g0(t), g1(t);
  RuntimeOptions o;
  o.warmup_iterations = 0;
  o.iterations = 1;
  Result<std::vector<StageRun>> runs =
      RunStages(w.exec, {0, 1, 2, 3}, o,
                RuntimeEnv{&transport, work->get(), &clock, raw, true, {&g0, &g1}, nullptr, {}});
  ASSERT_TRUE(runs.ok()) << runs.status().message();

  // Then each worker's weight gradients are the slices of the unsplit blocks'
  // gradients run one micro-batch at a time. Not bit for bit: a split
  // block's output sums its F products in two halves, which moves each
  // activation by float rounding (workload_test.cc bounds it by 1e-4 of
  // values of order 1), and that carries into the later layers' gradients:
  // 1e-4 relative to the largest gradient.
  std::vector<cpu::Block> ref;
  for (int l = 0; l < 4; ++l) ref.emplace_back(kShape, 1 + l);
  const size_t n = 4 * 16;
  std::vector<float> input(n), grad(n, 1.0f / n);
  for (size_t i = 0; i < n; ++i) input[i] = std::sin(0.01f * static_cast<float>(i));
  for (int mb = 0; mb < 3; ++mb) {
    std::vector<cpu::Saved> saved;
    std::vector<float> x = input, y(n);
    for (cpu::Block& b : ref) {
      saved.push_back(b.Forward(x, y, 1));
      x.swap(y);
    }
    std::vector<float> dy = grad, dx(n);
    for (int l = 3; l >= 0; --l) {
      ref[l].Backward(saved[l], dy, dx);
      dy.swap(dx);
    }
  }
  const int f = kShape.ffn / t;
  for (int l = 0; l < 4; ++l) {
    const auto want = ref[l].GradientW1();  // [H x F]
    float largest = 0;
    for (float g : want) largest = std::max(largest, std::abs(g));
    ASSERT_GT(largest, 0.0f);
    for (int j = 0; j < t; ++j) {
      const auto got = (*work)->blocks(j)[l].GradientW1();  // [H x F/t]
      ASSERT_EQ(got.size(), want.size() / t);
      for (int r = 0; r < kShape.hidden; ++r) {
        for (int c = 0; c < f; ++c) {
          ASSERT_NEAR(got[r * f + c], want[r * kShape.ffn + j * f + c], 1e-4 * largest)
              << "layer " << l << " tensor rank " << j;
        }
      }
    }
  }
  // And every worker held its shard's activations, the simulator's per-GPU
  // figure (1F1B stage 0: 2 micro-batches x 2 layers), and spent time in
  // all-reduces.
  ASSERT_EQ(runs->size(), 4u);
  for (const StageRun& run : *runs) {
    const int rank = run.rank;
    EXPECT_EQ(run.peak_activation_bytes, w.predicted.per_rank[rank].memory.activations_peak)
        << "rank " << rank << " tensor rank " << run.tensor_rank;
    TimeNs collective = 0;
    for (const OpTiming& op : run.ops) collective += op.collective_ns;
    EXPECT_GT(collective, 0);
  }
  EXPECT_EQ((*runs)[0].peak_activation_bytes,
            2 * 2 * (*cpu::Block(kShape, 1).Shard(t, 0)).ActivationBytes(1));
}

TEST(LayerWork, TensorParallelNeedsProfilesMeasuredAtThePlansDegree) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 2);
  testing::World w = testing::MakeWorld(TensorParallelWorkloadModel(2, 2), *s, Recompute::kOff, 2);
  w.plan.config.layout.tensor_parallel =
      4;  // ffn 32 splits 4 ways, but no profile says what that costs
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(), ::testing::HasSubstr("--tensor-parallel 1,4"));
}

using testing::kMoeShape;
using testing::MoeWorkloadModel;

// Given 4 MoE layers on 2 ranks x ep 2 (2 data-parallel replicas, each
// holding 2 of a layer's 4 experts) under 1F1B with 3 micro-batches: 4
// worker threads, 2 in-process expert groups exchanging tokens as
// `dispatcher` does. `collectives` checks each F, B and I's list.
void ExpectExpertParallelGivesTheSequentialGradients(
    ExpertDispatcher dispatcher, const std::function<void(const ExecOp&)>& collectives,
    int etp = 1) {
  const int ep = 2;
  const int members = ep * etp;  // the group's workers, member m = j·etp + r
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 3);
  testing::World w;
  w.model = MoeWorkloadModel(4);
  SimOptions o;
  o.config.layout.data_parallel = members;
  o.config.layout.expert_parallel = ep;
  o.config.layout.expert_tensor_parallel = etp;
  o.config.layout.expert_dispatcher = dispatcher;
  Result<SimResult> sim = Simulate(w.model, testing::TestCluster(), *s, o);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  w.plan = MakePlanFile(w.model.name, "", testing::TestCluster(), *s, o, *sim);
  o.partition = w.plan.partition;
  w.predicted = *Simulate(w.model, testing::TestCluster(), *s, o);
  Result<ExecPlan> exec = BuildExecPlan(w.model, w.plan, *s, w.predicted, testing::TestCluster());
  ASSERT_TRUE(exec.ok()) << exec.status().message();
  ASSERT_EQ(exec->expert_parallel, members);
  ASSERT_EQ(exec->expert_tensor_parallel, etp);
  ASSERT_EQ(exec->workers(), 2 * members);
  EXPECT_EQ(exec->ep_dispatcher, dispatcher);
  for (const ExecOp& op : exec->per_rank[0].ops) {
    if (op.action.kind == OpKind::kBackwardWeight) {
      EXPECT_TRUE(op.ep_collectives.empty());
      continue;
    }
    collectives(op);
    EXPECT_GT(op.ep_comm_ns, 0);
  }
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_TRUE(work.ok()) << work.status().message();
  SteadyClock clock;
  std::vector<std::unique_ptr<MemoryPool>> pools;
  std::vector<MemoryPool*> raw;
  std::vector<int> workers;
  for (int i = 0; i < 2 * members; ++i) {
    pools.push_back(std::make_unique<MemoryPool>("worker " + std::to_string(i), 0, &clock));
    raw.push_back(pools.back().get());
    workers.push_back(i);
  }
  InProcessTransport transport(raw);
  InProcessTensorGroup g0(members), g1(members);
  RuntimeOptions ro;
  ro.warmup_iterations = 0;
  ro.iterations = 1;
  Result<std::vector<StageRun>> runs =
      RunStages(*exec, workers, ro,
                RuntimeEnv{&transport, work->get(), &clock, raw, true, {&g0, &g1}, nullptr, {}});
  ASSERT_TRUE(runs.ok()) << runs.status().message();

  // Then the whole blocks, run on one thread over every replica's
  // micro-batches in turn, accumulate the gradients whose slices the members
  // hold: member (j, r) holds rows r·F/etp.. of expert rank j's experts' W2.
  const std::vector<cpu::Block> ref = testing::SequentialMoeBlocks(4, 3, members);
  for (int l = 0; l < 4; ++l) {
    for (int m = 0; m < members; ++m) {
      ASSERT_NO_FATAL_FAILURE(
          testing::ExpectExpertShardGradient(ref[l], (*work)->blocks(m)[l], m, ep, etp, l));
    }
  }
  // And every worker held exactly the simulator's per-GPU activations (the
  // same T·k expert rows at ep = 2 as at 1) and spent time in all-to-alls.
  ASSERT_EQ(runs->size(), static_cast<size_t>(2 * members));
  for (const StageRun& run : *runs) {
    EXPECT_EQ(run.peak_activation_bytes, w.predicted.per_rank[run.rank].memory.activations_peak)
        << "rank " << run.rank << " expert rank " << run.expert_rank;
    TimeNs collective = 0;
    for (const OpTiming& op : run.ops) collective += op.collective_ns;
    EXPECT_GT(collective, 0);
  }
  // Its static memory holds half the experts: 4 layers' 2048 expert parameters over ep 2.
  EXPECT_GT(exec->per_rank[0].static_bytes, 0);
}

TEST(LayerWork, ExpertParallelWorkersGiveTheSequentialGradients) {
  // Each F, B and I of a 2-layer stage runs 2 dispatches and 2 combines of
  // R x T x H x 4 bytes, R = 2 (1 - C(2, 2) / C(4, 2)) = 5/3 members a token
  // reaches: 5/3 x 6 tokens x 16 x 4 = 640 bytes; W none.
  ExpectExpertParallelGivesTheSequentialGradients(ExpertDispatcher::kDeepEp, [](const ExecOp& op) {
    const ExpertCollective one{ExpertCollective::Kind::kAllToAll, 640};
    EXPECT_EQ(op.ep_collectives, (std::vector<ExpertCollective>(4, one))) << ActionName(op.action);
  });
}

// Megatron-LM's all-gather dispatcher on the same plan: the same gradients,
// from all-gathers and reduce-scatters. Per MoE layer (6 tokens a GPU, 4
// experts, hidden 16, 4-byte floats) F all-gathers the routing map (6 x 4 x
// 1 = 24 B), the probs (6 x 4 x 4 = 96 B) and the tokens (6 x 16 x 4 = 384
// B) and reduce-scatters the ep x 384 = 768 B output; B and I all-gather the
// output's gradient (384 B) and reduce-scatter the input's (768 B) and the
// probs' (2 x 96 = 192 B).
TEST(LayerWork, AllGatherDispatcherWorkersGiveTheSequentialGradients) {
  using Kind = ExpertCollective::Kind;
  const std::vector<ExpertCollective> forward = {{Kind::kAllGather, 24},
                                                 {Kind::kAllGather, 96},
                                                 {Kind::kAllGather, 384},
                                                 {Kind::kReduceScatter, 768}};
  const std::vector<ExpertCollective> backward = {
      {Kind::kAllGather, 384}, {Kind::kReduceScatter, 768}, {Kind::kReduceScatter, 192}};
  ExpectExpertParallelGivesTheSequentialGradients(
      ExpertDispatcher::kAllGather, [&](const ExecOp& op) {
        std::vector<ExpertCollective> want;
        for (int layer = 0; layer < 2; ++layer) {
          const auto& one = op.action.kind == OpKind::kForward ? forward : backward;
          want.insert(want.end(), one.begin(), one.end());
        }
        EXPECT_EQ(op.ep_collectives, want) << ActionName(op.action);
      });
}

// Expert tensor parallelism (etp 2, ep 2: 4 workers a stage, p = 2) with the
// all-to-all dispatcher: the all-to-alls among one etp rank's workers, the
// etp all-gathers and reduce-scatters among one expert rank's; each member's
// W2 rows are the sequential run's, and each worker's activation peak is the
// simulator's, which counts etp x the expert rows of x
// (ExpertAllToAll::etp_kept_bytes). The collectives the cuda backend would
// replay are the all-to-alls' (it refuses etp > 1).
TEST(LayerWork, ExpertTensorParallelWorkersGiveTheSequentialGradients) {
  ExpectExpertParallelGivesTheSequentialGradients(
      ExpertDispatcher::kAllToAll,
      [](const ExecOp& op) {
        EXPECT_EQ(op.ep_collectives.size(), 4u) << ActionName(op.action);  // 2 layers x 2
      },
      2);
}

// The all-gather dispatcher at etp 2, ep 2: its collectives span the 4 workers.
TEST(LayerWork, AllGatherDispatcherEtpWorkersGiveTheSequentialGradients) {
  ExpectExpertParallelGivesTheSequentialGradients(
      ExpertDispatcher::kAllGather,
      [](const ExecOp& op) {
        EXPECT_EQ(op.ep_collectives.size(), op.action.kind == OpKind::kForward ? 8u : 6u)
            << ActionName(op.action);
      },
      2);
}

TEST(LayerWork, ExpertParallelismNeedsWholeBlocks) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 2);
  testing::World w = testing::MakeWorld(MoeWorkloadModel(2), *s);
  w.plan.config.layout.expert_parallel = 2;
  w.plan.config.layout.tensor_parallel = 2;
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(), ::testing::HasSubstr("--tensor-parallel 1"));
  w.plan.config.layout.tensor_parallel = 1;
  w.plan.config.layout.expert_parallel = 3;
  work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(), ::testing::HasSubstr("does not divide the 4 experts"));
  // etp > 1 with DeepEP's wider all-to-all is refused (not emulated).
  w.plan.config.layout.expert_parallel = 1;
  w.plan.config.layout.expert_tensor_parallel = 2;
  w.plan.config.layout.expert_dispatcher = ExpertDispatcher::kDeepEp;
  work = LayerWork::Make(w.model, w.plan, &clock_);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(),
              ::testing::HasSubstr("--ep-dispatcher alltoall or allgather"));
}

}  // namespace
}  // namespace pipecast::validate
