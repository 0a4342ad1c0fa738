// `profiler trace`: per-layer costs from a PyTorch profiler trace whose layers are marked with
// pipecast:<layer>:<pass> ranges (measured/trace_profile.h), hand-worked.
#include "measured/trace_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/formats.h"
#include "testing/cli_test_util.h"

namespace pipecast::measured {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// Three steps 1000 us apart. Layer block0's forward range launches one kernel of 100, 120 and
// 110 us in steps 1-3 and allocates 4096 bytes it frees in the backward; the backward
// launches 200 us, from the autograd thread (tid 2) inside its own range there.
std::string LayerTrace(bool with_layers = true) {
  Json ev = Json::array();
  int corr = 1;
  const double forward_us[] = {100, 120, 110};
  auto range = [&](const std::string& name, double ts, double dur, int tid) {
    ev.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", name},
                  {"pid", 5},
                  {"tid", tid},
                  {"ts", ts},
                  {"dur", dur}});
  };
  auto kernel = [&](double launch, double ts, double dur, int tid) {
    ev.push_back({{"ph", "X"},
                  {"cat", "cuda_runtime"},
                  {"name", "cudaLaunchKernel"},
                  {"pid", 5},
                  {"tid", tid},
                  {"ts", launch},
                  {"dur", 1},
                  {"args", {{"correlation", corr}}}});
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "gemm"},
                  {"pid", 0},
                  {"tid", 7},
                  {"ts", ts},
                  {"dur", dur},
                  {"args", {{"correlation", corr}, {"stream", 7}}}});
    ++corr;
  };
  auto memory = [&](double ts, int64_t bytes, int64_t total, int tid) {
    ev.push_back({{"ph", "i"},
                  {"cat", "cpu_instant_event"},
                  {"name", "[memory]"},
                  {"pid", 5},
                  {"tid", tid},
                  {"ts", ts},
                  {"args",
                   {{"Device Type", 1},
                    {"Device Id", 0},
                    {"Addr", 4096},
                    {"Bytes", bytes},
                    {"Total Allocated", total}}}});
  };
  for (int s = 0; s < 3; ++s) {
    const double t0 = 1000.0 * s;
    range("ProfilerStep#" + std::to_string(s + 1), t0, 1000, 1);
    if (with_layers) range("pipecast:block0:forward:params=1000:out=2048", t0 + 10, 10, 1);
    kernel(t0 + 11, t0 + 100, forward_us[s], 1);
    memory(t0 + 12, 4096, 4096, 1);
    if (with_layers) range("pipecast:block0:backward", t0 + 30, 10, 2);
    kernel(t0 + 31, t0 + 300, 200, 2);
    memory(t0 + 35, -4096, 0, 2);
  }
  return Json{{"deviceProperties", {{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}}}},
              {"traceEvents", ev}}
      .dump();
}

TEST(TraceProfile, LayerRangesGiveAModelWithMethodTrace) {
  cli_test::TempDir dir;
  cli_test::WriteText(dir.File("rank0.json"), LayerTrace());
  TraceProfileOptions o;
  o.name = "one-block";
  o.traces = {dir.File("rank0.json")};
  o.aggregate.warmup = 1;
  o.aggregate.iterations = 2;
  Result<Model> m = TraceProfileModel(o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->source.method, "trace");
  ASSERT_EQ(m->layers.size(), 1u);
  const Layer& l = m->layers[0];
  EXPECT_EQ(l.name, "block0");
  EXPECT_EQ(l.parameters, 1000);
  ASSERT_EQ(l.profiles.size(), 1u);
  // Steps 2 and 3 after one warm-up: the median of 120 and 110 us.
  EXPECT_EQ(l.profiles[0].forward_ns, 115'000);
  EXPECT_EQ(l.profiles[0].backward_ns, 200'000);
  EXPECT_EQ(l.profiles[0].activation_bytes, 4096);
  EXPECT_EQ(l.profiles[0].output_bytes, 2048);
  // model.json reads back with the new method.
  Result<Model> back = ParseModel(ModelToJson(*m), "model.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->source.method, "trace");
}

TEST(TraceProfile, ATraceWithoutLayerRangesSaysHowToMarkThem) {
  cli_test::TempDir dir;
  cli_test::WriteText(dir.File("plain.json"), LayerTrace(false));
  TraceProfileOptions o;
  o.name = "x";
  o.traces = {dir.File("plain.json")};
  Result<Model> m = TraceProfileModel(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("plain.json: no layer range"));
  EXPECT_THAT(m.status().message(), HasSubstr("pipecast:<layer>:forward"));
  o.microbatch_sizes = {1, 2};
  EXPECT_THAT(o.Validate().message(), HasSubstr("--microbatch-sizes has 2 values for 1 traces"));
}

}  // namespace
}  // namespace pipecast::measured
