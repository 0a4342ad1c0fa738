#include "report/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/result_json.h"

namespace pipecast {
namespace {

using nlohmann::ordered_json;

// 1F1B, p = 2, m = 4, F = 1 ms, B = 2 ms: 15 ms, each rank busy 12 ms.
SimResult TwoRankResult() {
  SimResult r;
  r.schedule_name = "1f1b";
  r.ranks = 2;
  r.stages = 2;
  r.microbatches = 4;
  r.microbatch_size = 2;
  r.data_parallel = 1;
  r.global_batch = 8;
  r.iteration_ns = 15'500'000;
  r.pipeline_ns = 15'000'000;
  r.allreduce_ns = 0;
  r.optimizer_ns = 500'000;
  r.bubble_ratio = 0.2;
  r.bubble_fraction_of_ideal = 0.25;
  r.samples_per_s = 8 / 0.0155;
  r.memory_capacity_bytes = 10 * kGiB;
  r.memory_limit_bytes = 10 * kGiB;  // no reserve, no margin
  r.costs_measured = true;
  for (int k = 0; k < 2; ++k) {
    StageResult s;
    s.rank = k;
    s.stages = {k};
    s.layers = {{2 * k, 2 * k + 1}};
    s.busy_ns = 12'000'000;
    s.first_start_ns = k * 1'000'000;
    s.last_end_ns = 15'000'000 - k * 2'000'000;
    s.bubble_ratio = 0.2;
    s.bubble_fraction_of_ideal = 0.25;
    s.peak_inflight_microbatches = 2 - k;
    s.memory.weights = 1 * kGiB;
    s.memory.gradients = 1 * kGiB;
    s.memory.optimizer = 6 * kGiB;
    s.memory.activations_peak = (2 - k) * kGiB;
    s.memory.comm_buffers_peak = kMiB;
    s.memory.workspace_peak = 512 * kMiB;
    s.peak_memory_bytes = (8 + 2 - k) * kGiB + 512 * kMiB;
    r.per_rank.push_back(s);
  }
  return r;
}

Cluster TestCluster() {
  Cluster c;
  c.name = "test-gpu";
  c.gpu.memory_bytes = 10 * kGiB;
  c.gpu.peak_tflops = 100;
  return c;
}

std::vector<std::string> Keys(const ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  return keys;
}

TEST(ReportTest, JsonHasExactlyTheDocumentedKeysInOrder) {
  ordered_json j = ordered_json::parse(ResultToJson(TwoRankResult()));
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"format",
                                               "iteration_time_us",
                                               "pipeline_time_us",
                                               "allreduce_time_us",
                                               "optimizer_time_us",
                                               "throughput_samples_per_s",
                                               "bubble_ratio",
                                               "bubble_fraction_of_ideal",
                                               "zb_bubble_rate",
                                               "schedule",
                                               "ranks",
                                               "stages_count",
                                               "microbatches",
                                               "microbatch_size",
                                               "data_parallel",
                                               "zero",
                                               "allgather_time_us",
                                               "sharding_exposed_time_us",
                                               "optimizer_estimated",
                                               "allreduce_hidden_time_us",
                                               "overlap_grad_reduce",
                                               "global_batch",
                                               "costs_measured",
                                               "notes",
                                               "memory_capacity_bytes",
                                               "memory_reserve_bytes",
                                               "memory_headroom",
                                               "memory_headroom_bytes",
                                               "memory_limit_bytes",
                                               "fits_memory",
                                               "iterations_simulated",
                                               "stages"}));
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(Keys(j["stages"][0]), (std::vector<std::string>{"stage",
                                                            "first_layer",
                                                            "last_layer",
                                                            "chunks",
                                                            "busy_us",
                                                            "first_start_us",
                                                            "last_end_us",
                                                            "bubble_ratio",
                                                            "bubble_fraction_of_ideal",
                                                            "peak_inflight_microbatches",
                                                            "peak_memory_bytes",
                                                            "fits_memory",
                                                            "parameters",
                                                            "allreduce_us",
                                                            "allreduce_hidden_us",
                                                            "grad_buckets",
                                                            "optimizer_us",
                                                            "allgather_us",
                                                            "sharding_exposed_us",
                                                            "weight_versions",
                                                            "memory"}));
  EXPECT_EQ(Keys(j["stages"][0]["memory"]),
            (std::vector<std::string>{"weights_bytes", "gradients_bytes", "optimizer_bytes",
                                      "activations_peak_bytes", "comm_buffers_peak_bytes",
                                      "workspace_peak_bytes", "stashed_weights_bytes",
                                      "gathered_weights_bytes"}));
}

TEST(ReportTest, JsonValuesInMicrosecondsAndBytes) {
  ordered_json j = ordered_json::parse(ResultToJson(TwoRankResult()));
  EXPECT_DOUBLE_EQ(j["iteration_time_us"].get<double>(), 15500.0);
  EXPECT_DOUBLE_EQ(j["pipeline_time_us"].get<double>(), 15000.0);
  EXPECT_DOUBLE_EQ(j["allreduce_time_us"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["optimizer_time_us"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(j["throughput_samples_per_s"].get<double>(), 8 / 0.0155);
  EXPECT_DOUBLE_EQ(j["bubble_ratio"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(j["bubble_fraction_of_ideal"].get<double>(), 0.25);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["stages_count"], 2);
  EXPECT_EQ(j["microbatches"], 4);
  EXPECT_EQ(j["microbatch_size"], 2);
  EXPECT_EQ(j["data_parallel"], 1);
  EXPECT_EQ(j["global_batch"], 8);
  EXPECT_EQ(j["costs_measured"], true);
  EXPECT_EQ(j["notes"], ordered_json::array());
  EXPECT_EQ(j["memory_capacity_bytes"], 10 * kGiB);

  const ordered_json& s = j["stages"][1];
  EXPECT_EQ(s["stage"], 1);
  EXPECT_EQ(s["first_layer"], 2);
  EXPECT_EQ(s["last_layer"], 3);
  EXPECT_EQ(s["chunks"],
            ordered_json::parse(R"([{"stage": 1, "first_layer": 2, "last_layer": 3}])"));
  EXPECT_DOUBLE_EQ(s["busy_us"].get<double>(), 12000.0);
  EXPECT_DOUBLE_EQ(s["first_start_us"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(s["last_end_us"].get<double>(), 13000.0);
  EXPECT_EQ(s["peak_inflight_microbatches"], 1);
  EXPECT_EQ(s["peak_memory_bytes"], 9 * kGiB + 512 * kMiB);
  EXPECT_EQ(s["memory"]["optimizer_bytes"], 6 * kGiB);
  EXPECT_EQ(s["memory"]["comm_buffers_peak_bytes"], kMiB);
}

TEST(ReportTest, JsonTimesKeepFractionsOfAMicrosecond) {
  SimResult r = TwoRankResult();
  r.iteration_ns = 1234567;
  ordered_json j = ordered_json::parse(ResultToJson(r));
  EXPECT_DOUBLE_EQ(j["iteration_time_us"].get<double>(), 1234.567);
}

TEST(ReportTest, JsonOptionalMetricsOnlyWhenPresent) {
  SimResult r = TwoRankResult();
  ordered_json without = ordered_json::parse(ResultToJson(r));
  EXPECT_FALSE(without.contains("tokens_per_s"));
  EXPECT_FALSE(without.contains("tflops_per_gpu"));
  EXPECT_FALSE(without.contains("mfu"));

  r.tokens_per_s = 1024.5;
  r.tflops_per_gpu = 42.0;
  r.mfu = 0.42;
  r.notes = {"backward_us of layer 3 interpolated"};
  r.costs_measured = false;
  ordered_json with = ordered_json::parse(ResultToJson(r));
  EXPECT_DOUBLE_EQ(with["tokens_per_s"].get<double>(), 1024.5);
  EXPECT_DOUBLE_EQ(with["tflops_per_gpu"].get<double>(), 42.0);
  EXPECT_DOUBLE_EQ(with["mfu"].get<double>(), 0.42);
  EXPECT_EQ(with["costs_measured"], false);
  EXPECT_EQ(with["notes"][0], "backward_us of layer 3 interpolated");
  // Optional keys sit after throughput, in the documented order.
  std::vector<std::string> keys = Keys(with);
  EXPECT_EQ(std::vector<std::string>(keys.begin() + 5, keys.begin() + 10),
            (std::vector<std::string>{"throughput_samples_per_s", "tokens_per_s", "tflops_per_gpu",
                                      "mfu", "bubble_ratio"}));
}

TEST(ReportTest, JsonChunksOfAnInterleavedRank) {
  SimResult r = TwoRankResult();
  r.stages = 4;
  r.per_rank[0].stages = {0, 2};
  r.per_rank[0].layers = {{0, 1}, {4, 5}};
  ordered_json j = ordered_json::parse(ResultToJson(r));
  const ordered_json& s = j["stages"][0];
  EXPECT_EQ(s["first_layer"], 0);
  EXPECT_EQ(s["last_layer"], 5);
  EXPECT_EQ(s["chunks"], ordered_json::parse(R"([{"stage": 0, "first_layer": 0, "last_layer": 1},
                                                  {"stage": 2, "first_layer": 4, "last_layer": 5}])"));
  EXPECT_EQ(j["stages_count"], 4);
}

TEST(ReportTest, JsonIsPrettyWithTrailingNewline) {
  std::string text = ResultToJson(TwoRankResult());
  EXPECT_EQ(
      text.rfind("{\n  \"format\": \"pipecast-simulation/1\",\n  \"iteration_time_us\": 15500.0,\n",
                 0),
      0u)
      << text;
  EXPECT_EQ(text.back(), '\n');
}

// ZeRO 3 all-gathers parameters and reduce-scatters gradients inside the
// ops: the iteration line names them and their exposed time, never an
// all-reduce of 0 ms (issue 28); ZeRO 1's reduce-scatter after the last op
// is named as before.
TEST(ReportTest, ZeroThreeNamesItsGathersAndReduceScatters) {
  using ::testing::HasSubstr;
  using ::testing::Not;
  SimResult r = TwoRankResult();
  r.zero = 3;
  r.data_parallel = 4;
  r.sharding_exposed_ns = 1'234'000;
  const std::string text = ResultToText(r, TestCluster());
  EXPECT_THAT(text, HasSubstr("(pipeline 15.000 ms, per-op all-gathers and reduce-scatters "
                              "1.234 ms exposed, optimizer 0.500 ms)"));
  EXPECT_THAT(text, Not(HasSubstr("all-reduce")));
  EXPECT_EQ(DataParallelCommText(r), "per-op all-gathers and reduce-scatters 1.234 ms exposed");
  r.zero = 2;
  r.allreduce_ns = 2'000'000;
  EXPECT_EQ(DataParallelCommText(r),
            "per-op reduce-scatters 1.234 ms exposed, reduce-scatter 2.000 ms");
  r.zero = 1;
  EXPECT_EQ(DataParallelCommText(r), "reduce-scatter 2.000 ms");
  r.zero = 0;
  EXPECT_EQ(DataParallelCommText(r), "all-reduce 2.000 ms");
}

TEST(ReportTest, TextSummaryLines) {
  SimResult r = TwoRankResult();
  r.tokens_per_s = 1024;
  r.tflops_per_gpu = 42.0;
  r.mfu = 0.42;
  r.zb_bubble_rate = 0.125;
  std::string text = ResultToText(r, TestCluster());
  EXPECT_EQ(text.rfind("schedule 1f1b: 2 ranks x 1 data-parallel, 4 micro-batches of size 2 "
                       "(global batch 8)\n"
                       "iteration time      15.500 ms  (pipeline 15.000 ms, all-reduce 0.000 ms, "
                       "optimizer 0.500 ms)\n"
                       "throughput          516.1 samples/s\n"
                       "                    1024 tokens/s\n"
                       "model FLOP/s        42.0 TFLOP/s per GPU\n"
                       "MFU                 42.0% of 100.0 TFLOP/s peak per GPU (test-gpu)\n"
                       "bubble ratio        20.0% of the pipeline span idle (mean over ranks: "
                       "1 - busy/span)\n"
                       "bubble / ideal      25.0% (Megatron-LM's bubble time fraction: idle / "
                       "busy)\n"
                       "zero-bubble rate    12.5% (Qi et al.: 1 - busiest rank's work / longest "
                       "rank span)\n"
                       "memory capacity     10.00 GiB per GPU (test-gpu)\n"
                       "memory limit        10.00 GiB = 10.00 GiB capacity - 0.00 GiB runtime "
                       "reserve (CUDA context, cuBLAS, NCCL) - 0.00 GiB allocator margin (0% of "
                       "capacity)\n",
                       0),
            0u)
      << text;
}

TEST(ReportTest, TextOmitsAbsentMetrics) {
  std::string text = ResultToText(TwoRankResult(), TestCluster());
  EXPECT_EQ(text.find("tokens/s"), std::string::npos) << text;
  EXPECT_EQ(text.find("TFLOP/s"), std::string::npos) << text;
  EXPECT_EQ(text.find("MFU"), std::string::npos) << text;
  EXPECT_EQ(text.find("note:"), std::string::npos) << text;
}

TEST(ReportTest, TextPerRankTableAndOverCapacity) {
  SimResult r = TwoRankResult();
  r.per_rank[0].peak_memory_bytes = 11 * kGiB;  // over the 10 GiB capacity
  std::string text = ResultToText(r, TestCluster());
  EXPECT_NE(text.find("rank  layers  busy ms  first start ms  last end ms  bubble ratio  "
                      "bubble / ideal  peak in-flight  peak memory GiB  of limit\n"
                      "   0  0-1      12.000           0.000       15.000         20.0%  "
                      "         25.0%               2            11.00    110.0%  OVER\n"
                      "   1  2-3      12.000           1.000       13.000         20.0%  "
                      "         25.0%               1             9.50     95.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("OVER: rank 0 needs 11.00 GiB, over the 10.00 GiB limit (capacity - reserve "
                      "- margin) by 1.00 GiB\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("rank 1 needs"), std::string::npos) << text;
}

TEST(ReportTest, TextMemoryBreakdown) {
  std::string text = ResultToText(TwoRankResult(), TestCluster());
  EXPECT_NE(text.find("rank  weights  grads  optimizer  activations peak  comm peak  "
                      "workspace peak  total peak  reserve\n"
                      "   0     1.00   1.00       6.00              2.00       0.00  "
                      "          0.50       10.50     0.00\n"),
            std::string::npos)
      << text;
}

TEST(ReportTest, TextUnlimitedMemoryIsNeverOver) {
  SimResult r = TwoRankResult();
  r.memory_capacity_bytes = 0;
  r.memory_limit_bytes = 0;
  r.per_rank[0].peak_memory_bytes = 1000 * kGiB;
  Cluster ideal;
  ideal.name = "ideal";
  std::string text = ResultToText(r, ideal);
  EXPECT_NE(text.find("memory capacity     unlimited (ideal)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  unlimited\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("OVER"), std::string::npos) << text;
}

TEST(ReportTest, TextInterleavedRankListsEachChunk) {
  SimResult r = TwoRankResult();
  r.stages = 4;
  r.per_rank[0].stages = {0, 2};
  r.per_rank[0].layers = {{0, 0}, {2, 2}};
  r.per_rank[1].stages = {1, 3};
  r.per_rank[1].layers = {{1, 1}, {3, 3}};
  std::string text = ResultToText(r, TestCluster());
  EXPECT_NE(text.find("2 ranks x 1 data-parallel, 4 stages (2 chunks per rank), 4 micro-batches"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("   0  0,2 "), std::string::npos) << text;
  EXPECT_NE(text.find("   1  1,3 "), std::string::npos) << text;
}

TEST(ReportTest, TextEndsWithNotes) {
  SimResult r = TwoRankResult();
  r.costs_measured = false;
  r.notes = {"micro-batch size 2 interpolated between 1 and 4", "second note"};
  std::string text = ResultToText(r, TestCluster());
  const std::string tail =
      "\nnote: micro-batch size 2 interpolated between 1 and 4\nnote: second note\n";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail) << text;
  EXPECT_NE(text.find("not all measured"), std::string::npos) << text;
}

TEST(ReportTest, TextNeverSaysBubbleWithoutWhichOne) {
  SimResult r = TwoRankResult();
  r.tokens_per_s = 1;
  r.tflops_per_gpu = 1;
  r.mfu = 0.01;
  r.notes = {"a note"};
  std::string text = ResultToText(r, TestCluster());
  EXPECT_NE(text.find("bubble ratio"), std::string::npos);
  EXPECT_NE(text.find("bubble / ideal"), std::string::npos);
  EXPECT_NE(text.find("zero-bubble rate"), std::string::npos);
  const std::vector<std::string> named = {"bubble ratio", "bubble / ideal", "bubble time fraction"};
  for (size_t at = text.find("bubble"); at != std::string::npos; at = text.find("bubble", at + 1)) {
    bool ok = at >= 5 && text.compare(at - 5, 16, "zero-bubble rate") == 0;
    for (const std::string& form : named) ok |= text.compare(at, form.size(), form) == 0;
    EXPECT_TRUE(ok) << "bare 'bubble' at " << at << " in:\n" << text;
  }
}

}  // namespace
}  // namespace pipecast
