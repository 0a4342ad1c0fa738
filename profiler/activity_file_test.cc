// The records file: what the injection library writes, profiler cupti reads.
#include "profiler/activity_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

TEST(ActivityFileTest, RoundTripsEveryEventKind) {
  ActivityTrace t;
  t.process_id = 42;
  t.cupti_version = 130001;
  t.dropped_records = 3;
  t.zero_timestamp_records = 2;
  t.errors = {"cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN"};
  t.devices = {{0, "NVIDIA H200", 9, 0, 1980000, 150000000000, 132, 150110011392, 536870912}};
  t.gpu = {{GpuEvent::Kind::kKernel, 10, 20, 0, 7, 5, 0, "_Z6kernelv \"q\""},
           {GpuEvent::Kind::kMemcpy, 30, 40, 1, 8, 6, 4096, ""}};
  t.api = {{true, 307, 1, 2, 1234, 5}};
  t.markers = {{MarkerEvent::Phase::kStart, 5, 9, 1234, "pipecast:L:forward", "dom"},
               {MarkerEvent::Phase::kEnd, 50, 9, 1234, "", ""}};
  t.memory = {{false, 60, 0, 6, 0xdeadbeef, 1 << 20, true}};
  Result<ActivityTrace> back = ParseActivityTrace(ActivityTraceToText(t), "r.jsonl");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->process_id, 42u);
  EXPECT_EQ(back->dropped_records, 3u);
  EXPECT_EQ(back->zero_timestamp_records, 2u);
  EXPECT_EQ(back->errors, t.errors);
  ASSERT_EQ(back->devices.size(), 1u);
  EXPECT_EQ(back->devices[0].core_clock_khz, 1980000u);
  EXPECT_EQ(back->devices[0].usable_memory_bytes, 150110011392u);
  EXPECT_EQ(back->devices[0].context_memory_bytes, 536870912u);
  ASSERT_EQ(back->gpu.size(), 2u);
  EXPECT_EQ(back->gpu[0].name, t.gpu[0].name);
  EXPECT_EQ(back->gpu[1].kind, GpuEvent::Kind::kMemcpy);
  EXPECT_EQ(back->gpu[1].bytes, 4096u);
  ASSERT_EQ(back->api.size(), 1u);
  EXPECT_TRUE(back->api[0].driver);
  EXPECT_EQ(back->api[0].thread_id, 1234u);
  ASSERT_EQ(back->markers.size(), 2u);
  EXPECT_EQ(back->markers[0].domain, "dom");
  EXPECT_EQ(back->markers[1].phase, MarkerEvent::Phase::kEnd);
  ASSERT_EQ(back->memory.size(), 1u);
  EXPECT_FALSE(back->memory[0].allocation);
  EXPECT_TRUE(back->memory[0].is_async);
  EXPECT_EQ(back->memory[0].address, 0xdeadbeefu);
}

TEST(ActivityFileTest, RecordsWithoutTheContextMemoryStillRead) {
  // A records file from before the context was measured: no
  // usable_memory_bytes / context_memory_bytes keys; both read as 0.
  ActivityTrace t;
  t.devices = {{0, "NVIDIA H200", 9, 0, 1980000, 150000000000, 132}};
  std::string text = ActivityTraceToText(t);
  for (const char* key : {",\"usable_memory_bytes\":0", ",\"context_memory_bytes\":0"}) {
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    text.erase(at, std::string(key).size());
  }
  Result<ActivityTrace> back = ParseActivityTrace(text, "old.jsonl");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->devices.size(), 1u);
  EXPECT_EQ(back->devices[0].memory_bytes, 150000000000u);
  EXPECT_EQ(back->devices[0].context_memory_bytes, 0u);
}

TEST(ActivityFileTest, ErrorsNameTheLineAndKey) {
  const std::string header = ActivityTraceToText(ActivityTrace());
  Result<ActivityTrace> r = ParseActivityTrace(header + "{\"k\":\"kernel\",\"s\":-1}\n", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("x: line 2: key 's' must be an unsigned integer"));
  r = ParseActivityTrace(header + "{\"k\":\"kernel\",\"s\":9,\"e\":1,\"d\":0,\"st\":0,\"c\":1}\n",
                         "x");
  EXPECT_THAT(r.status().message(), HasSubstr("end 'e' before start 's'"));
  r = ParseActivityTrace(header + "{\"k\":\"nope\"}\n", "x");
  EXPECT_THAT(r.status().message(), HasSubstr("unknown event kind"));
  r = ParseActivityTrace(header + "{\"k\":\"kernel\",\"s\":1", "x");
  EXPECT_THAT(r.status().message(), HasSubstr("cut short"));
  r = ParseActivityTrace("{\"format\":\"other\"}\n", "x");
  EXPECT_THAT(r.status().message(), HasSubstr("not a records file"));
  r = ParseActivityTrace("", "x");
  EXPECT_THAT(r.status().message(), HasSubstr("empty records file"));
}

}  // namespace
}  // namespace pipecast
