// The planner's search over t x p x d (issue 15 part 5): the shipped
// llama-70b on 64 and 1024 H100s chooses tensor parallelism inside the node
// within memory, pinned axes hold, and models without tensor-parallel costs
// search t = 1 alone, saying why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "formats/formats.h"
#include "planner/passes.h"
#include "planner/planner.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

Model Llama70b() {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(root != nullptr ? root : ".") / "examples" / "llama-70b.json";
  Result<Model> m = LoadModel(path.string());
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : Model{};
}

PlannerOptions OnGpus(int gpus) {
  PlannerOptions o;
  o.gpus = gpus;
  o.threads = 2;
  return o;
}

class LlamaOnH100 : public ::testing::TestWithParam<int> {};

TEST_P(LlamaOnH100, ChoosesTensorParallelismInsideTheNodeWithinMemory) {
  const Model model = Llama70b();
  ASSERT_FALSE(model.layers.empty());
  const Cluster h100 = *ClusterPreset("h100-sxm");
  auto r = RunPlanner(model, h100, OnGpus(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_GT(best.config.layout.tensor_parallel, 1) << best.Label();
  EXPECT_EQ(h100.gpus_per_node % best.config.layout.tensor_parallel, 0);
  EXPECT_EQ(best.config.layout.tensor_parallel * best.config.layout.pipeline_stages *
                best.config.layout.data_parallel,
            GetParam());
  EXPECT_LE(best.PeakMemory(), MemoryLimitBytes(h100.gpu));
  EXPECT_TRUE(best.result->FitsMemory());
  ASSERT_TRUE(best.result->mfu.has_value());
  // The shipped model carries the analytic profiler's per-GPU estimates at t = 2, 4 and 8
  // (scripts/make-examples.sh): estimated, not measured, and not scaled from t = 1.
  EXPECT_FALSE(best.result->costs_measured);
  bool scaled_note = false;
  for (const std::string& n : r->notes) scaled_note |= n.find("not profiled") != std::string::npos;
  EXPECT_FALSE(scaled_note);
}

INSTANTIATE_TEST_SUITE_P(Gpus, LlamaOnH100, ::testing::Values(64, 1024));

TEST(TensorParallelPlanner, PinnedAxesHold) {
  const Model model = Llama70b();
  PlannerOptions o = OnGpus(64);
  o.tensor_parallel = {4};
  o.pipeline_stages = 8;
  o.sequence_parallel = PlannerOptions::SequenceParallel::kOn;
  auto r = RunPlanner(model, *ClusterPreset("h100-sxm"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  for (const Candidate& c : r->ranked) {
    EXPECT_EQ(c.config.layout.tensor_parallel, 4);
    EXPECT_EQ(c.config.layout.pipeline_stages, 8);
    EXPECT_EQ(c.config.layout.data_parallel, 2);
    EXPECT_TRUE(c.config.layout.sequence_parallel);
  }
  EXPECT_EQ(r->ranked[0].Label().rfind("t=4 sp p=8 d=2 ", 0), 0u) << r->ranked[0].Label();
}

TEST(TensorParallelPlanner, ModelsWithoutTensorParallelCostsSearchOneAloneAndSaySo) {
  const Model model = test_util::UniformModel(8, 1'000'000, 2'000'000);
  PlannerOptions o = OnGpus(8);
  o.global_batch = 16;
  auto r = RunPlanner(model, *ClusterPreset("h100-sxm"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  for (const Candidate& c : r->ranked) EXPECT_EQ(c.config.layout.tensor_parallel, 1);
  bool said = false;
  for (const std::string& n : r->notes) {
    said |= n.find("tensor parallelism was not searched") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

TEST(TensorParallelPlanner, DegreesDivideTheNodeTheGpusAndTheHeads) {
  const Model model = Llama70b();  // 64 heads, 8 key-value heads
  Cluster node6 = *ClusterPreset("h100-sxm");
  node6.gpus_per_node = 6;  // 1, 2, 3, 6 divide the node; 3 and 6 not the heads
  EXPECT_EQ(passes::TensorParallelDegrees(model, node6, OnGpus(12), nullptr),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(passes::TensorParallelDegrees(model, *ClusterPreset("h100-sxm"), OnGpus(64), nullptr),
            (std::vector<int>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace pipecast
