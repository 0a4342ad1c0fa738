// Tiny worlds for validate/ tests: a model of identical layers, a plan of a
// built-in schedule over it, the simulator's prediction and the ExecPlan, in
// one call. Test-only.
#ifndef PIPECAST_TESTING_VALIDATE_TEST_UTIL_H_
#define PIPECAST_TESTING_VALIDATE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "formats/plan.h"
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

// `expert_parallel` > 1: that many data-parallel replicas, the expert group
// (the model needs MoE layers and a sequence_length); its ExecPlan's
// all-to-alls are on TestCluster's link.
inline World MakeWorld(const Model& model, const Schedule& schedule,
                       Recompute recompute = Recompute::kOff, int tensor_parallel = 1,
                       int expert_parallel = 1,
                       ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp) {
  World w;
  w.model = model;
  SimOptions o;
  o.config.layout.expert_dispatcher = dispatcher;
  o.config.recompute = recompute;
  o.config.layout.tensor_parallel = tensor_parallel;
  o.config.layout.expert_parallel = expert_parallel;
  o.config.layout.data_parallel = expert_parallel;
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

inline World MakeWorld(ScheduleKind kind, int ranks, int microbatches, int chunks = 1,
                       int layers_per_stage = 2) {
  Result<Schedule> s = MakeSchedule(kind, ranks, microbatches, chunks);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return MakeWorld(UniformModel(ranks * chunks * layers_per_stage), *s);
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
