// Reading Chrome trace files: what is kept, exact times, and errors that name the file and the
// JSON path (measured/trace_file.h).
#include "measured/trace_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/cli_test_util.h"

namespace pipecast::measured {
namespace {

using ::testing::HasSubstr;

TEST(MicrosToNs, DecimalTextIsExactToTheNanosecond) {
  EXPECT_EQ(MicrosToNs("12", 12), 12'000);
  EXPECT_EQ(MicrosToNs("1234.5678", 1234.5678), 1'234'568);  // the fourth decimal rounds
  EXPECT_EQ(MicrosToNs("1234.5674", 1234.5674), 1'234'567);
  EXPECT_EQ(MicrosToNs("0.0005", 0.0005), 1);
  EXPECT_EQ(MicrosToNs("-1.5", -1.5), -1'500);
  // 1.7e15 us as text keeps every digit; through a double it would not.
  EXPECT_EQ(MicrosToNs("1712195495505543.2", 1712195495505543.2), 1'712'195'495'505'543'200);
  EXPECT_EQ(MicrosToNs("1e3", 1e3), 1'000'000);  // an exponent goes through the value
  EXPECT_EQ(MicrosToNs("99999999999999999999", 1e20), std::nullopt);
}

constexpr char kSmall[] = R"json({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
  "traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
    {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 7, "tid": 7,
     "ts": 100, "dur": 900.5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 110, "dur": 5},
    {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 7, "tid": 7,
     "ts": 109, "dur": 6},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
     "ts": 111.25, "dur": 3, "args": {"correlation": 42, "External id": 9}},
    {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 120.001,
     "dur": 50, "args": {"correlation": 42, "stream": 7, "device": 0}},
    {"ph": "s", "cat": "ac2g", "id": 42, "pid": 7, "tid": 7, "ts": 111.25},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 7, "ts": 112,
     "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 4096, "Bytes": 4096}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
     "tid": "PyTorch Profiler", "ts": 90, "dur": 2000}
  ]
})json";

TEST(ReadTraceFile, KeepsWhatPipecastMeasuresFrom) {
  Result<TraceFile> t = ParseTraceText(kSmall, "rank3.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->rank, 3);
  EXPECT_EQ(t->world_size, 8);
  EXPECT_EQ(t->device, "NVIDIA H100");
  EXPECT_EQ(t->process_labels.at(0), "GPU 0");
  EXPECT_EQ(t->events_seen, 10);
  // Kept: the step, the launch, the kernel, the memory event; not aten::mm, the Python frame,
  // the flow or the Trace span.
  ASSERT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->events[0].kind, TraceEvent::Kind::kRange);
  EXPECT_EQ(t->Name(t->events[0]), "ProfilerStep#4");
  EXPECT_EQ(t->events[0].start_ns, 100'000);
  EXPECT_EQ(t->events[0].dur_ns, 900'500);
  EXPECT_EQ(t->events[1].kind, TraceEvent::Kind::kLaunch);
  EXPECT_EQ(t->events[1].correlation, 42);
  EXPECT_EQ(t->events[1].start_ns, 111'250);
  EXPECT_EQ(t->events[2].kind, TraceEvent::Kind::kKernel);
  EXPECT_EQ(t->events[2].start_ns, 120'001);
  EXPECT_EQ(t->events[2].stream, 7);
  EXPECT_EQ(t->events[3].kind, TraceEvent::Kind::kMemory);
  EXPECT_EQ(t->events[3].bytes, 4096);
}

TEST(ReadTraceFile, BaseTimeShiftsEveryEventAndATopLevelArrayIsATrace) {
  Result<TraceFile> t = ParseTraceText(
      R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
          "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}], "baseTimeNanoseconds": 1000000000})",
      "a.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->events[0].start_ns, 1'000'001'500);
  t = ParseTraceText(
      R"([{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 2, "dur": 1}])",
      "b.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->events.size(), 1u);
}

TEST(ReadTraceFile, MalformedJsonNamesFileLineAndColumn) {
  Result<TraceFile> t = ParseTraceText("{\"traceEvents\": [\n {\"ph\": \"X\",, }\n]}", "bad.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("bad.json: not valid JSON"));
  EXPECT_THAT(t.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(t.status().message(), HasSubstr("traceEvents[0]"));
  t = ParseTraceText("{\"traceEvents\": [", "cut.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("cut.json: not valid JSON"));
  t = ParseTraceText("", "empty.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("empty.json"));
}

TEST(ReadTraceFile, AFieldOfTheWrongTypeIsNamedByItsPath) {
  Result<TraceFile> t = ParseTraceText(
      R"({"traceEvents": [{"ph": "M"}, {"ph": "X", "cat": "kernel", "ts": "soon"}]})", "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "t.json: traceEvents[1].ts: expected microseconds as a number, got a string");
  t = ParseTraceText(
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "args": {"stream": "7"}}]})",
      "s.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "s.json: traceEvents[0].args.stream: expected an integer, got a string");
  t = ParseTraceText(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "dur": 4}]})", "n.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("n.json: traceEvents[0]: a complete event"));
  t = ParseTraceText(R"({"distributedInfo": {"rank": -1}, "traceEvents": []})", "r.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("r.json: distributedInfo.rank"));
}

TEST(ReadTraceFile, NotATraceGzipAndMissingFilesSayWhatToDo) {
  Result<TraceFile> t = ParseTraceText(R"({"format": "pipecast-model/1"})", "model.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("model.json: not a Chrome trace"));
  t = ParseTraceText(std::string("\x1f\x8b\x08\x00", 4), "rank0.json.gz");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("gunzip"));
  t = ReadTraceFile("/nonexistent/rank0.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("/nonexistent/rank0.json"));
}

// Nesting far deeper than any trace is read without recursion (the SAX parser keeps its own
// stack) and ends in a clear error, not a crash.
TEST(ReadTraceFile, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "{\"traceEvents\": [" + std::string(100000, '[') + "]}";
  Result<TraceFile> t = ParseTraceText(deep, "deep.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("deep.json: not valid JSON"));
}

}  // namespace
}  // namespace pipecast::measured
