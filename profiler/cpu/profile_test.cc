#include "profiler/cpu/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "formats/formats.h"

namespace pipecast::cpu {
namespace {

using ::testing::HasSubstr;

// A clock that advances by a scripted list of steps, one per NowNs(), cycling.
// ProfileCpu reads it four times per measurement: before the forward, after
// the forward, after the input gradient, after the weight gradient; a round
// measures every layer at every size in order.
class ScriptedClock : public Clock {
 public:
  explicit ScriptedClock(std::vector<TimeNs> steps) : steps_(std::move(steps)) {}
  TimeNs NowNs() const override {
    now_ += steps_[next_++ % steps_.size()];
    return now_;
  }
  std::string Name() const override { return "scripted"; }

 private:
  std::vector<TimeNs> steps_;
  mutable std::size_t next_ = 0;  // NowNs() is const in the interface
  mutable TimeNs now_ = 0;
};

CpuProfileOptions Tiny() {
  CpuProfileOptions o;
  o.workload.shape = {.hidden = 8, .ffn = 16, .tokens_per_sample = 2};
  o.workload.layers = 2;
  o.microbatch_sizes = {1};
  o.warmup = 1;
  o.iterations = 3;
  o.device = "test CPU";
  return o;
}

TEST(MedianTest, OddEvenAndSpread) {
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2);  // (2 + 3) / 2 in integer ns
  EXPECT_EQ(Median({7}), 7);
  // Sorted 10, 20, 30, 40, 50: quartiles 20 and 40, median 30 -> 20/30.
  EXPECT_DOUBLE_EQ(RelativeSpread({50, 10, 40, 20, 30}), 20.0 / 30.0);
  EXPECT_DOUBLE_EQ(RelativeSpread({100, 100, 100}), 0.0);
  EXPECT_DOUBLE_EQ(RelativeSpread({100}), 0.0);
}

TEST(ProfileCpuTest, TensorParallelProfilesAreOneWorkersShardWithItsAllReduces) {
  // Given H = 8, F = 16, T = 2 tokens and --tensor-parallel 1,2: each layer
  // gets a t = 2 profile of worker 0's half (F/2 = 8), which keeps x whole
  // and a, g at F/2: 4 * 2 * (8 + 2 * 8) = 192 bytes (against 4 * 2 * (8 +
  // 32) = 320 whole), and says its all-reduces: the whole output 4 * 2 * 8 =
  // 64 bytes, once in the forward and once in the backward.
  CpuProfileOptions o = Tiny();
  o.tensor_parallel = {1, 2};
  SteadyClock clock;
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  for (const Layer& layer : p->model.layers) {
    ASSERT_EQ(layer.profiles.size(), 2u);
    const LayerProfile& whole = layer.profiles[0];
    const LayerProfile& half = layer.profiles[1];
    EXPECT_EQ(whole.tensor_parallel, 1);
    EXPECT_EQ(whole.activation_bytes, 320);
    EXPECT_FALSE(whole.tp_comm_bytes.has_value());
    EXPECT_EQ(half.tensor_parallel, 2);
    EXPECT_FALSE(half.sequence_parallel);
    EXPECT_EQ(half.activation_bytes, 192);
    EXPECT_EQ(half.weight_grad_bytes, 4 * 2 * (2 * 8 + 2 * 8));
    EXPECT_EQ(half.output_bytes, 64);
    EXPECT_EQ(half.tp_comm_bytes, 64);
    EXPECT_EQ(half.tp_forward_collectives, 1);
    EXPECT_EQ(half.tp_backward_collectives, 1);
  }
  EXPECT_THAT(p->model.source.details.at("tensor_parallel"), HasSubstr("worker 0's shard"));
  // And the model reads back with costs at t = 2 that are measured, not scaled.
  Result<Model> back = ParseModel(ModelToJson(p->model), "model.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(CostAt(back->layers[0], 1, 2).tp_scaled);
  EXPECT_EQ(CostAt(back->layers[0], 1, 2).activation_bytes, 192);
}

TEST(ProfileCpuTest, TensorParallelDegreesMustDivideFfnAndInclude1) {
  CpuProfileOptions o = Tiny();  // ffn 16
  o.tensor_parallel = {1, 3};
  EXPECT_THAT(o.Validate().message(), HasSubstr("layer 0's ffn 16 does not divide into 3"));
  o.tensor_parallel = {2};
  EXPECT_THAT(o.Validate().message(), HasSubstr("must include 1"));
  o.tensor_parallel = {1, 2, 2};
  EXPECT_THAT(o.Validate().message(), HasSubstr("lists 2 twice"));
}

TEST(ProfileCpuTest, MediansOfScriptedTimesSkippingWarmup) {
  // Given 1 warm-up and 3 timed iterations per layer whose passes take
  // forward 10^6 (warm-up), then 100, 300, 200; input 40, 60, 50;
  // weight 7, 9, 8 ns, the profile holds the medians 200, 50 + 8 and 8.
  CpuProfileOptions o = Tiny();
  // Each round runs layer 0 then layer 1: their steps are the same here.
  std::vector<TimeNs> steps;
  for (std::vector<TimeNs> round :
       {std::vector<TimeNs>{5, 1000000, 1, 1},  // warm-up
        std::vector<TimeNs>{5, 100, 40, 7}, std::vector<TimeNs>{5, 300, 60, 9},
        std::vector<TimeNs>{5, 200, 50, 8}}) {
    for (int layer = 0; layer < 2; ++layer) steps.insert(steps.end(), round.begin(), round.end());
  }
  ScriptedClock clock(steps);
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->model.layers.size(), 2u);
  for (const Layer& layer : p->model.layers) {
    ASSERT_EQ(layer.profiles.size(), 1u);
    const LayerProfile& lp = layer.profiles[0];
    EXPECT_EQ(lp.forward_ns, 200);
    EXPECT_EQ(lp.backward_ns, 58);
    EXPECT_EQ(lp.backward_weight_ns, 8);
  }
  // Totals per timed iteration 147, 369, 258: quartiles 202.5 and 313.5.
  EXPECT_NEAR(p->worst_spread, (313.5 - 202.5) / 258.0, 1e-12);
  const ModelSource& source = p->model.source;
  EXPECT_EQ(source.method, "cpu");
  EXPECT_EQ(source.device, "test CPU");
  EXPECT_EQ(source.details.at("clock"), "\"scripted\"");
  EXPECT_EQ(source.details.at("warmup"), "1");
  EXPECT_EQ(source.details.at("iterations"), "3");
  EXPECT_THAT(source.details.at("spread"), HasSubstr("\"worst\":0.4302"));
}

TEST(ProfileCpuTest, SizesAreTheWorkloadsExactBytes) {
  // H = 8, F = 16, 2 tokens a sample, micro-batch 3 (T = 6): activations
  // 4*6*(8 + 32) = 960 bytes, output 4*6*8 = 192, and a backward holds
  // 4*6*(8 + 16) = 576 bytes more while it runs (dy's copy and da).
  CpuProfileOptions o = Tiny();
  o.microbatch_sizes = {3, 1};
  ScriptedClock clock({1});
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const Layer& layer = p->model.layers[1];
  EXPECT_EQ(layer.name, "block1");
  EXPECT_EQ(layer.parameters, 2 * 8 * 16);
  EXPECT_EQ(layer.forward_flops, 4.0 * 2 * 8 * 16);
  ASSERT_EQ(layer.profiles.size(), 2u);
  EXPECT_EQ(layer.profiles[0].microbatch_size, 1);  // sorted
  EXPECT_EQ(layer.profiles[1].activation_bytes, 960);
  EXPECT_EQ(layer.profiles[1].output_bytes, 192);
  EXPECT_EQ(layer.profiles[1].workspace_bytes, 576);
  EXPECT_EQ(p->model.sequence_length, 2);
}

TEST(ProfileCpuTest, ModelRoundTripsAndNamesItsWorkload) {
  CpuProfileOptions o = Tiny();
  o.workload.per_layer = {o.workload.shape, {.hidden = 8, .ffn = 64, .tokens_per_sample = 2}};
  o.note = "unit test";
  ScriptedClock clock({3});
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  Result<Model> back = ParseModel(ModelToJson(p->model), "test");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->layers.size(), 2u);
  EXPECT_EQ(back->source.details.at("note"), "\"unit test\"");
  Result<WorkloadSpec> spec = WorkloadFromSource(back->source);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->LayerShape(1).ffn, 64);
  EXPECT_EQ(back->layers[1].parameters, 2 * 8 * 64);
}

TEST(ProfileCpuTest, BadOptionsNameTheFlag) {
  CpuProfileOptions o = Tiny();
  o.workload.layers = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--layers 0"));
  o = Tiny();
  o.workload.shape.hidden = -1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--hidden -1"));
  o = Tiny();
  o.microbatch_sizes = {1, 2, 1};
  EXPECT_THAT(o.Validate().message(), HasSubstr("--microbatch-sizes lists 1 twice"));
  o.microbatch_sizes = {};
  EXPECT_THAT(o.Validate().message(), HasSubstr("--microbatch-sizes is empty"));
  o = Tiny();
  o.iterations = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--iterations 0"));
  o = Tiny();
  o.warmup = -1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--warmup -1"));
  o = Tiny();
  o.workload.per_layer = {o.workload.shape, {.hidden = 8, .ffn = 0, .tokens_per_sample = 2}};
  EXPECT_THAT(o.Validate().message(), HasSubstr("--layer-ffn 1:0"));
  o = Tiny();
  // 4 * 128 * 2048 * (2 * 1024 + 3 * 4096) bytes = 14 GiB, over the 8 GiB allowed.
  o.workload.shape = {.hidden = 1024, .ffn = 4096, .tokens_per_sample = 2048};
  o.microbatch_sizes = {128};
  EXPECT_THAT(o.Validate().message(), HasSubstr("GiB"));
  ScriptedClock clock({1});
  EXPECT_FALSE(ProfileCpu(o, clock).ok());
}

TEST(CpuModelNameTest, ReadsModelNameLine) {
  const std::string path = ::testing::TempDir() + "/cpuinfo";
  {
    std::ofstream out(path);
    out << "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example CPU @ 2.0GHz  \n"
        << "processor\t: 1\nmodel name\t: Example CPU @ 2.0GHz\n";
  }
  EXPECT_EQ(CpuModelName(path), "Example CPU @ 2.0GHz");
  std::remove(path.c_str());
  EXPECT_EQ(CpuModelName(path), "unknown CPU");
}

// ---- Real measurements on this machine ----
// The CI machine is a shared, noisy 2-core VM, so these use small layers
// (a few ms for all passes) and loose, stated tolerances.

// About 2.5 ms a round (both layers, both sizes) on the 2-vCPU VM; `rounds`
// sets how long a run samples the machine.
CpuProfileOptions Real(int rounds) {
  CpuProfileOptions o;
  o.workload.shape = {.hidden = 64, .ffn = 256, .tokens_per_sample = 16};
  o.workload.layers = 2;
  o.microbatch_sizes = {1, 2};
  o.warmup = 2;
  o.iterations = rounds;
  return o;
}

TimeNs Total(const LayerProfile& p) { return p.forward_ns + p.backward_ns; }

// Under AddressSanitizer every load and store of the matrix loops is checked
// (about 5x slower and far noisier), so comparing times says nothing about
// the profiler: those tests skip in the sanitizer build (PIPECAST_SANITIZE).
#ifdef PIPECAST_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(ProfileCpuRealTest, TimesArePositiveAndBytesExact) {
  CpuProfileOptions o = Real(5);
  SteadyClock clock;
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->model.source.details.at("clock"), "\"steady_clock\"");
  EXPECT_FALSE(p->model.source.device.empty());
  for (const Layer& layer : p->model.layers) {
    for (const LayerProfile& lp : layer.profiles) {
      EXPECT_GT(lp.forward_ns, 0) << layer.name;
      EXPECT_GT(*lp.backward_weight_ns, 0) << layer.name;
      EXPECT_GT(lp.backward_ns, *lp.backward_weight_ns) << layer.name;
      // T = 16 * b tokens: 4*T*(64 + 2*256) bytes kept by the forward.
      EXPECT_EQ(lp.activation_bytes, 4 * 16 * lp.microbatch_size * (64 + 2 * 256));
      EXPECT_EQ(lp.output_bytes, 4 * 16 * lp.microbatch_size * 64);
    }
  }
}

TEST(ProfileCpuRealTest, TwoRunsAgreeOnEachLayersShare) {
  // Two runs back to back: each (layer, size)'s share of its run's total
  // (forward + backward medians) agrees within 25%, and absolute times within
  // 3x. Why shares: what the planner uses is how time splits across layers,
  // and on the shared 2-vCPU development VM the whole machine's speed shifts
  // between runs (another build starting: one run 1.5x slower for every
  // layer alike; a vCPU's speed moving between two levels ~1.4x apart for
  // seconds at a time), which moves every absolute time but not the split.
  // Seen there: shares within 3% while absolute times moved 53-59%.
  if (kSanitized) GTEST_SKIP() << "timings are not comparable under sanitizers";
  CpuProfileOptions o = Real(101);
  SteadyClock clock;
  Result<CpuProfile> first = ProfileCpu(o, clock);
  Result<CpuProfile> second = ProfileCpu(o, clock);
  ASSERT_TRUE(first.ok() && second.ok());
  const auto totals = [](const CpuProfile& p) {
    std::vector<double> t;
    for (const Layer& layer : p.model.layers) {
      for (const LayerProfile& lp : layer.profiles) t.push_back(static_cast<double>(Total(lp)));
    }
    return t;
  };
  const std::vector<double> a = totals(*first);
  const std::vector<double> b = totals(*second);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 4u);
  const double sum_a = std::accumulate(a.begin(), a.end(), 0.0);
  const double sum_b = std::accumulate(b.begin(), b.end(), 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double share_a = a[i] / sum_a;
    const double share_b = b[i] / sum_b;
    EXPECT_LT(std::abs(share_a - share_b) / std::min(share_a, share_b), 0.25)
        << "entry " << i << ": share " << share_a << " vs " << share_b;
    EXPECT_LT(std::max(a[i], b[i]) / std::min(a[i], b[i]), 3.0)
        << "entry " << i << ": " << a[i] << " ns vs " << b[i] << " ns";
  }
}

TEST(ProfileCpuRealTest, FourTimesTheFfnTakesOverTwiceAsLong) {
  // Layer 1 has 4x layer 0's MLP width, so 4x the multiply-adds; on any
  // machine it takes clearly longer: over 2x (forward + backward medians).
  // Round-robin measurement lets both layers see the same load.
  if (kSanitized) GTEST_SKIP() << "timings are not comparable under sanitizers";
  CpuProfileOptions o = Real(31);
  o.workload.per_layer = {o.workload.shape, o.workload.shape};
  o.workload.per_layer[1].ffn = 4 * o.workload.shape.ffn;
  o.microbatch_sizes = {2};
  SteadyClock clock;
  Result<CpuProfile> p = ProfileCpu(o, clock);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const double narrow = static_cast<double>(Total(p->model.layers[0].profiles[0]));
  const double wide = static_cast<double>(Total(p->model.layers[1].profiles[0]));
  EXPECT_GT(wide / narrow, 2.0) << narrow << " ns vs " << wide << " ns";
  // And its activations hold 4x the ffn-wide tensors: 4*32*(64 + 2*1024).
  EXPECT_EQ(p->model.layers[1].profiles[0].activation_bytes, 4 * 32 * (64 + 2 * 1024));
}

}  // namespace
}  // namespace pipecast::cpu
