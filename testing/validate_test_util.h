// Tiny worlds for validate/ tests: a model of identical layers, a plan of a
// built-in schedule over it, the simulator's prediction and the ExecPlan, in
// one call; a model of the CPU workload's MoE blocks and the sequential run an
// expert-parallel one is held to. Test-only.
#ifndef PIPECAST_TESTING_VALIDATE_TEST_UTIL_H_
#define PIPECAST_TESTING_VALIDATE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "formats/plan.h"
#include "profiler/cpu/workload.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"
#include "validate/exec_plan.h"
#include "validate/work.h"

namespace pipecast::validate::testing {

struct LayerSpec {
  TimeNs forward_ns = 1'000'000;   // 1 ms
  TimeNs backward_ns = 2'000'000;  // 2 ms
  TimeNs backward_weight_ns = 1'000'000;
  Bytes activation_bytes = 1 * kMiB;
  Bytes output_bytes = 64 * kKiB;
  Bytes workspace_bytes = 256 * kKiB;
  int64_t parameters = 1000;
};

// sim's UniformModel, plus the weight-gradient time and workspace.
inline Model UniformModel(int layers, const LayerSpec& spec = {}) {
  Model m = test_util::UniformModel(layers, spec.forward_ns, spec.backward_ns,
                                    spec.activation_bytes, spec.output_bytes, spec.parameters);
  for (Layer& l : m.layers) {
    l.profiles[0].backward_weight_ns = spec.backward_weight_ns;
    l.profiles[0].workspace_bytes = spec.workspace_bytes;
  }
  return m;
}

// A cluster with a fixed link, as the probe would measure one.
inline Cluster TestCluster() {
  Cluster c = *ClusterPreset("local");
  c.intra_node = c.inter_node = Link{5, 10};
  c.gpu.memory_bytes = 0;
  return c;
}

struct World {
  Model model;
  PlanFile plan;
  SimResult predicted;
  ExecPlan exec;
};

// `expert_parallel` > 1: expert_parallel x expert_tensor_parallel
// data-parallel replicas, the expert group (the model needs MoE layers and a
// sequence_length); its ExecPlan's all-to-alls are on TestCluster's link.
// The world of `model` under `schedule` with the options `o` (their partition is set here).
inline World MakeWorldWith(const Model& model, const Schedule& schedule, SimOptions o) {
  World w;
  w.model = model;
  const int expert_parallel = o.config.layout.expert_parallel;
  Result<SimResult> sim = Simulate(model, TestCluster(), schedule, o);
  EXPECT_TRUE(sim.ok()) << sim.status().message();
  w.plan = MakePlanFile(model.name, "", TestCluster(), schedule, o, *sim);
  o.partition = w.plan.partition;
  w.predicted = *Simulate(model, TestCluster(), schedule, o);
  Result<ExecPlan> exec = expert_parallel > 1
                              ? BuildExecPlan(model, w.plan, schedule, w.predicted, TestCluster())
                              : BuildExecPlan(model, w.plan, schedule, w.predicted);
  EXPECT_TRUE(exec.ok()) << exec.status().message();
  if (exec.ok()) w.exec = *exec;
  return w;
}

inline World MakeWorld(const Model& model, const Schedule& schedule,
                       Recompute recompute = Recompute::kOff, int tensor_parallel = 1,
                       int expert_parallel = 1,
                       ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp,
                       int expert_tensor_parallel = 1) {
  SimOptions o;
  o.config.layout.expert_dispatcher = dispatcher;
  o.config.recompute = recompute;
  o.config.layout.tensor_parallel = tensor_parallel;
  o.config.layout.expert_parallel = expert_parallel;
  o.config.layout.expert_tensor_parallel = expert_tensor_parallel;
  o.config.layout.data_parallel = expert_parallel * expert_tensor_parallel;
  return MakeWorldWith(model, schedule, o);
}

inline World MakeWorld(ScheduleKind kind, int ranks, int microbatches, int chunks = 1,
                       int layers_per_stage = 2) {
  Result<Schedule> s = MakeSchedule(kind, ranks, microbatches, chunks);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return MakeWorld(UniformModel(ranks * chunks * layers_per_stage), *s);
}

// A model of MoE blocks as `profiler cpu --experts 4 --top-k 2` writes it:
// 4 experts of ffn 8, top-2 by the hash router, 6 tokens a sample (C(4, 2)).
inline constexpr cpu::BlockShape kMoeShape{
    .hidden = 16, .ffn = 8, .tokens_per_sample = 6, .experts = 4, .top_k = 2};

inline Model MoeWorkloadModel(int layers) {
  cpu::WorkloadSpec spec;
  spec.shape = kMoeShape;
  spec.layers = layers;
  Model m = UniformModel(layers);
  m.name = "cpu-moe";
  m.sequence_length = kMoeShape.tokens_per_sample;
  m.source.method = "cpu";
  m.source.details[cpu::kWorkloadSourceKey] = cpu::WorkloadToSourceJson(spec);
  const cpu::Block block(kMoeShape, 1);
  for (Layer& l : m.layers) {
    l.parameters = block.Parameters();
    l.profiles[0].activation_bytes = block.ActivationBytes(1);
    l.profiles[0].output_bytes = block.OutputBytes(1);
    l.profiles[0].workspace_bytes = block.OutputBytes(1);
    l.moe = MoeRouting{.experts = 4,
                       .top_k = 2,
                       .hidden = kMoeShape.hidden,
                       .expert_parameters = block.Parameters(),
                       .bytes_per_element = 4};
  }
  return m;
}

// The sequential run an expert-parallel run of MoeWorkloadModel(`layers`) over
// `replicas` data-parallel replicas (micro-batch size 1) is held to: the whole
// blocks, run on one thread over every replica's `microbatches` micro-batches
// in turn (replica j's input is the pattern LayerWork gives replica j, the
// loss gradient 1/n on every output), accumulate the gradients whose slices
// the replicas hold.
inline std::vector<cpu::Block> SequentialMoeBlocks(int layers, int microbatches, int replicas) {
  std::vector<cpu::Block> ref;
  for (int l = 0; l < layers; ++l) ref.emplace_back(kMoeShape, 1 + l);
  const size_t n = static_cast<size_t>(kMoeShape.tokens_per_sample) * kMoeShape.hidden;
  const std::vector<float> grad(n, 1.0f / static_cast<float>(n));
  for (int mb = 0; mb < microbatches; ++mb) {
    for (int j = 0; j < replicas; ++j) {
      std::vector<float> x(n), y(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = std::sin(0.01f * static_cast<float>(i) + 0.37f * static_cast<float>(j));
      }
      std::vector<cpu::Saved> saved;
      for (cpu::Block& b : ref) {
        saved.push_back(b.Forward(x, y, 1));
        x.swap(y);
      }
      std::vector<float> dy = grad, dx(n);
      for (int l = layers - 1; l >= 0; --l) {
        ref[static_cast<size_t>(l)].Backward(saved[static_cast<size_t>(l)], dy, dx);
        dy.swap(dx);
      }
    }
  }
  return ref;
}

// Expects member m = j·etp + r of an ep x etp expert group (expert rank j,
// expert tensor rank r) to hold, in `got`, its slice of the whole block
// `want`'s W2 gradient: rows r·F/etp.. of each of expert rank j's experts,
// within 1e-4 of the largest. Not bit for bit: a token's expert outputs are
// summed on their members before the combine adds them, another order of one
// float sum, which carries into the later layers' gradients.
inline void ExpectExpertShardGradient(const cpu::Block& want_block, const cpu::Block& got_block,
                                      int member, int ep, int etp, int layer) {
  const auto want = want_block.GradientW2();  // [E·F x H], expert-major
  float largest = 0;
  for (float g : want) largest = std::max(largest, std::abs(g));
  ASSERT_GT(largest, 0.0f);
  const size_t h = kMoeShape.hidden, f = kMoeShape.ffn / etp, local = kMoeShape.experts / ep;
  const size_t j = static_cast<size_t>(member / etp), r = static_cast<size_t>(member % etp);
  const auto got = got_block.GradientW2();
  ASSERT_EQ(got.size(), want.size() / static_cast<size_t>(ep * etp));
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t e = i / (f * h), row = i / h % f, c = i % h;
    ASSERT_NEAR(got[i], want[((j * local + e) * kMoeShape.ffn + r * f + row) * h + c],
                1e-4 * largest)
        << "layer " << layer << " member " << member << " at " << i;
  }
}

// Work that takes no time and records the order ops ran in, per rank.
class RecordingWork final : public OpWork {
 public:
  explicit RecordingWork(int ranks) : order_(ranks) {}
  Status Run(const OpCall& call) override {
    std::lock_guard<std::mutex> lock(mu_);
    order_[call.rank].push_back(call.action);
    return Status::Ok();
  }
  std::string Description() const override { return "recording"; }
  std::vector<std::vector<Action>> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<Action>> order_;
};

}  // namespace pipecast::validate::testing

#endif  // PIPECAST_TESTING_VALIDATE_TEST_UTIL_H_
