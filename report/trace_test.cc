#include "report/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using nlohmann::json;

OpRecord Op(int rank, int stage, OpKind kind, int mb, TimeNs start, TimeNs end) {
  return {rank, {stage, kind, mb}, start, end};
}

// Two ranks, one micro-batch: 0F0, activation to rank 1, 1F0 1B0, gradient
// back, 0B0. Rank 1's forward waits 250 ns after the activation arrives.
SimResult TinyResult() {
  SimResult r;
  r.schedule_name = "gpipe";
  r.ranks = 2;
  r.stages = 2;
  r.microbatches = 1;
  r.microbatch_size = 1;
  r.global_batch = 1;
  r.iteration_ns = 7000;
  r.pipeline_ns = 7000;
  r.ops = {Op(0, 0, OpKind::kForward, 0, 0, 1000), Op(1, 1, OpKind::kForward, 0, 1750, 2750),
           Op(1, 1, OpKind::kBackward, 0, 2750, 4750), Op(0, 0, OpKind::kBackward, 0, 5250, 7250)};
  TransferRecord act;
  act.src_rank = 0;
  act.dst_rank = 1;
  act.src_stage = 0;
  act.dst_stage = 1;
  act.bytes = 4096;
  act.ready_ns = 1000;
  act.start_ns = 1000;
  act.end_ns = 1500;
  TransferRecord grad = act;
  grad.src_rank = 1;
  grad.dst_rank = 0;
  grad.src_stage = 1;
  grad.dst_stage = 0;
  grad.gradient = true;
  grad.ready_ns = 4750;
  grad.start_ns = 4800;
  grad.end_ns = 5250;
  r.transfers = {act, grad};
  r.per_rank.resize(2);
  r.per_rank[0].rank = 0;
  r.per_rank[1].rank = 1;
  for (const MemorySample& level : {MemorySample{0, 100, 0, 10}, MemorySample{1000, 100, 4096, 0},
                                    MemorySample{7250, 0, 0, 0}}) {
    r.per_rank[0].memory_timeline.Append(level);
  }
  return r;
}

json Parse(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << text;
  return j;
}

// Events of one phase ("X", "M", ...), optionally on one thread.
std::vector<json> Events(const json& trace, const std::string& ph, int tid = -1) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph && (tid < 0 || e["tid"] == tid)) out.push_back(e);
  }
  return out;
}

TEST(TraceTest, HasTheTraceEventFileShape) {
  json t = Parse(TraceJson(TinyResult()));
  ASSERT_TRUE(t.is_object());
  EXPECT_TRUE(t["traceEvents"].is_array());
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  EXPECT_EQ(t["otherData"]["schedule"], "gpipe");
  EXPECT_EQ(t["otherData"]["label"], "predicted");
  EXPECT_DOUBLE_EQ(t["otherData"]["iteration_time_us"].get<double>(), 7.0);
}

TEST(TraceTest, NamesAProcessPerRankFromPidOneWithComputeAndALinkThreadPerDestination) {
  json t = Parse(TraceJson(TinyResult()));
  // "pid/name/tid" -> args
  std::map<std::string, json> meta;
  for (const json& e : Events(t, "M")) {
    meta[e["pid"].dump() + "/" + e["name"].get<std::string>() + "/" + e["tid"].dump()] = e["args"];
  }
  // 2 ranks x (process name and sort index, 2 threads' names and sort indices);
  // no pid 0, which trace viewers take for the idle process.
  EXPECT_EQ(meta.size(), 12u);
  EXPECT_EQ(meta["1/process_name/1"]["name"], "predicted rank 0 (GPU 0)");
  EXPECT_EQ(meta["2/process_name/1"]["name"], "predicted rank 1 (GPU 1)");
  EXPECT_EQ(meta["2/process_sort_index/1"]["sort_index"], 2);
  EXPECT_EQ(meta["1/thread_name/1"]["name"], "compute");
  EXPECT_EQ(meta["1/thread_name/10"]["name"], "send \u2192 rank 1");
  EXPECT_EQ(meta["2/thread_name/10"]["name"], "send \u2192 rank 0");
  for (const json& e : t["traceEvents"]) EXPECT_NE(e["pid"], 0) << e.dump();
}

TEST(TraceTest, OneCompleteEventPerOpInMicroseconds) {
  json t = Parse(TraceJson(TinyResult()));
  std::vector<json> ops = Events(t, "X", 1);
  ASSERT_EQ(ops.size(), 4u);
  // Sorted by time: 0F0, 1F0, 1B0, 0B0.
  EXPECT_EQ(ops[0]["name"], "0F0");
  EXPECT_EQ(ops[1]["name"], "1F0");
  EXPECT_EQ(ops[2]["name"], "1B0");
  EXPECT_EQ(ops[3]["name"], "0B0");
  const json& b = ops[2];
  EXPECT_EQ(b["cat"], "B");
  EXPECT_EQ(b["pid"], 2);
  EXPECT_DOUBLE_EQ(b["ts"].get<double>(), 2.75);
  EXPECT_DOUBLE_EQ(b["dur"].get<double>(), 2.0);
  EXPECT_EQ(b["args"]["stage"], 1);
  EXPECT_EQ(b["args"]["microbatch"], 0);
}

TEST(TraceTest, TransfersAreSlicesOnTheSendersLinkThread) {
  json t = Parse(TraceJson(TinyResult()));
  std::vector<json> sends = Events(t, "X", 10);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[0]["name"], "send act 0\u21921 mb0");
  EXPECT_EQ(sends[0]["pid"], 1);
  EXPECT_DOUBLE_EQ(sends[0]["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(sends[0]["dur"].get<double>(), 0.5);
  EXPECT_EQ(sends[0]["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(sends[0]["args"]["ready_us"].get<double>(), 1.0);
  EXPECT_EQ(sends[1]["name"], "send grad 1\u21920 mb0");
  EXPECT_EQ(sends[1]["pid"], 2);
  EXPECT_DOUBLE_EQ(sends[1]["ts"].get<double>(), 4.8);
  EXPECT_DOUBLE_EQ(sends[1]["args"]["ready_us"].get<double>(), 4.75);
}

TEST(TraceTest, FlowArrowsPairSendStartWithTheConsumingOp) {
  json t = Parse(TraceJson(TinyResult()));
  std::vector<json> starts = Events(t, "s");
  std::vector<json> ends = Events(t, "f");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(ends.size(), 2u);
  std::map<int64_t, json> end_by_id;
  for (const json& f : ends) end_by_id[f["id"].get<int64_t>()] = f;
  ASSERT_EQ(end_by_id.size(), 2u) << "flow ids must be unique";

  for (const json& s : starts) {
    ASSERT_EQ(end_by_id.count(s["id"].get<int64_t>()), 1u);
    const json& f = end_by_id[s["id"].get<int64_t>()];
    EXPECT_EQ(s["tid"], 10);
    EXPECT_EQ(f["tid"], 1);
    EXPECT_EQ(f["bp"], "e");
    EXPECT_EQ(s["name"], f["name"]);
    EXPECT_NE(s["pid"], f["pid"]);
  }
  // The activation's send on rank 0's comm thread runs 1 -> 1.5 us: the arrow
  // starts in its middle, 1.25 us, and ends in the middle of 1F0, which runs
  // 1.75 -> 2.75 us (it arrived at 1.5 us): 2.25 us.
  const json& act = starts[0]["pid"] == 1 ? starts[0] : starts[1];
  const json& act_end = end_by_id[act["id"].get<int64_t>()];
  EXPECT_DOUBLE_EQ(act["ts"].get<double>(), 1.25);
  EXPECT_EQ(act_end["pid"], 2);
  EXPECT_DOUBLE_EQ(act_end["ts"].get<double>(), 2.25);
  // The gradient's send runs 4.8 -> 5.25 us; it ends in 0B0 (5.25 -> 7.25 us).
  const json& grad = starts[0]["pid"] == 2 ? starts[0] : starts[1];
  EXPECT_DOUBLE_EQ(grad["ts"].get<double>(), 5.025);
  EXPECT_DOUBLE_EQ(end_by_id[grad["id"].get<int64_t>()]["ts"].get<double>(), 6.25);
}

// The slices on (pid, tid) whose closed span [ts, ts + dur] holds `ts`: the
// candidates a viewer's enclosing-slice binding chooses from.
std::vector<json> Enclosing(const json& trace, const json& pid, const json& tid, double ts) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != pid || e["tid"] != tid) continue;
    const double a = e["ts"].get<double>(), b = a + e["dur"].get<double>();
    if (a <= ts && ts <= b) out.push_back(e);
  }
  return out;
}

// Issue 28: at 1F1B, 12 of 48 arrows ended exactly where one op ends and the
// next starts, where a viewer binding the arrow to its enclosing slice may
// choose either op. Every flow event now lies inside exactly one slice of
// its thread: the start in its send, the end in the op that consumes it.
TEST(TraceTest, FlowArrowsEndInsideOneSliceWhereOneOpEndsAndTheNextStarts) {
  // 1F1B, 4 stages, 8 micro-batches, links of 0.601 ms a hop: the steady
  // state runs ops back to back.
  Model model = test_util::UniformModel(4, 1'000'000, 2'000'000, 0, 4096);
  auto sched = MakeSchedule(ScheduleKind::k1F1B, 4, 8);
  ASSERT_TRUE(sched.ok());
  auto r = Simulate(model, test_util::zb_paper::HopCluster(), *sched, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  json t = Parse(TraceJson(*r));
  int back_to_back = 0;  // consumers that start where the rank's previous op ends
  for (const OpRecord& op : r->ops) {
    for (const OpRecord& prev : r->ops) {
      if (prev.rank == op.rank && prev.end_ns == op.start_ns) ++back_to_back;
    }
  }
  ASSERT_GT(back_to_back, 0) << "the case must have ops back to back";

  std::map<int64_t, json> send_of;  // flow id -> its send slice
  const std::vector<json> starts = Events(t, "s");
  const std::vector<json> ends = Events(t, "f");
  ASSERT_EQ(starts.size(), 2u * 3u * 8u);  // 3 boundaries, both directions, 8 micro-batches
  for (const json& s : starts) {
    std::vector<json> in = Enclosing(t, s["pid"], s["tid"], s["ts"].get<double>());
    ASSERT_EQ(in.size(), 1u) << s;
    EXPECT_EQ(in[0]["name"], s["name"]);
    send_of[s["id"].get<int64_t>()] = in[0];
  }
  for (const json& f : ends) {
    std::vector<json> in = Enclosing(t, f["pid"], f["tid"], f["ts"].get<double>());
    ASSERT_EQ(in.size(), 1u) << f;
    const json& send = send_of.at(f["id"].get<int64_t>());
    EXPECT_EQ(in[0]["args"]["stage"], send["args"]["dst_stage"]);
    EXPECT_EQ(in[0]["args"]["microbatch"], send["args"]["microbatch"]);
    EXPECT_EQ(in[0]["cat"], send["args"]["src_stage"] < send["args"]["dst_stage"] ? "F" : "B");
  }
}

// Issue 28: two memory changes at one instant (an op's end frees, the next
// op's start allocates) wrote two counter values at one timestamp. A counter
// now writes the level after the instant's last change.
TEST(TraceTest, MemoryCounterWritesOneValuePerTimestamp) {
  SimResult r = TinyResult();
  r.per_rank[0].memory_timeline = MemoryTimeline();
  for (const MemorySample& level :
       {MemorySample{0, 100, 0, 10}, MemorySample{1000, 0, 0, 10}, MemorySample{1000, 300, 0, 10},
        MemorySample{1000, 300, 4096, 0}, MemorySample{7250, 0, 0, 0}}) {
    r.per_rank[0].memory_timeline.Append(level);
  }
  json t = Parse(TraceJson(r));
  std::vector<json> counters = Events(t, "C");

  ASSERT_EQ(counters.size(), 3u);
  EXPECT_DOUBLE_EQ(counters[1]["ts"].get<double>(), 1.0);
  EXPECT_EQ(counters[1]["args"],
            (json{{"static", 0}, {"activations", 300}, {"comm_buffers", 4096}, {"workspace", 0}}));
  EXPECT_DOUBLE_EQ(counters[2]["ts"].get<double>(), 7.25);
}

TEST(TraceTest, FlowEndsAtArrivalWhenTheConsumerIsNotRecorded) {
  SimResult r = TinyResult();
  r.ops.erase(r.ops.begin() + 1);  // drop 1F0
  json t = Parse(TraceJson(r));
  for (const json& f : Events(t, "f")) {
    if (f["pid"] == 2) {
      EXPECT_DOUBLE_EQ(f["ts"].get<double>(), 1.5);
    }
  }
}

TEST(TraceTest, MemoryCountersPerRankStackTheLiveSetOnStaticMemory) {
  json t = Parse(TraceJson(TinyResult()));
  std::vector<json> counters = Events(t, "C");
  ASSERT_EQ(counters.size(), 3u);  // no capacity: the result has none (unlimited)
  for (const json& c : counters) {
    EXPECT_EQ(c["name"], "memory");
    EXPECT_EQ(c["pid"], 1);
  }
  EXPECT_DOUBLE_EQ(counters[1]["ts"].get<double>(), 1.0);
  EXPECT_EQ(counters[1]["args"],
            (json{{"static", 0}, {"activations", 100}, {"comm_buffers", 4096}, {"workspace", 0}}));
}

TEST(TraceTest, StaticMemoryAndTheCapacityLineAreCounted) {
  // Given rank 0 with 1000 B weights, 1000 B gradients, 6000 B optimizer state
  // and an 80000 B capacity: the memory counter carries static = 8000, and a
  // capacity counter holds 80000 from the first sample to the iteration's end.
  SimResult r = TinyResult();
  r.memory_capacity_bytes = 80000;
  r.per_rank[0].memory.weights = 1000;
  r.per_rank[0].memory.gradients = 1000;
  r.per_rank[0].memory.optimizer = 6000;
  json t = Parse(TraceJson(r));
  std::vector<json> memory, capacity;
  for (const json& c : Events(t, "C")) (c["name"] == "memory" ? memory : capacity).push_back(c);
  ASSERT_EQ(memory.size(), 3u);
  EXPECT_EQ(memory[0]["args"]["static"], 8000);
  ASSERT_EQ(capacity.size(), 2u);
  EXPECT_EQ(capacity[0]["args"]["capacity"], 80000);
  EXPECT_DOUBLE_EQ(capacity[0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(capacity[1]["ts"].get<double>(), 7.0);
}

TEST(TraceTest, ZeroThreesGatheredCopiesAndFsdp2sGradientsAreCounted) {
  // Given rank 0 with 1000 B weights, 500 B of ZeRO-3 gathered copies, 6000 B optimizer state
  // and 1000 B gradients made at 1000 ns (--sharded-state fsdp2): static = 7500 at every sample,
  // and a gradients series, 0 at 0 ns, 1000 from 1000 ns on.
  SimResult r = TinyResult();
  StageResult& s = r.per_rank[0];
  s.memory.weights = 1000;
  s.memory.gathered_weights = 500;
  s.memory.optimizer = 6000;
  s.memory.gradients = 1000;
  s.gradients_from_ns = 1000;
  std::vector<json> memory = Events(Parse(TraceJson(r)), "C");
  ASSERT_EQ(memory.size(), 3u);
  for (const json& c : memory) EXPECT_EQ(c["args"]["static"], 7500);
  EXPECT_EQ(memory[0]["args"]["gradients"], 0);
  EXPECT_EQ(memory[1]["args"]["gradients"], 1000);
  EXPECT_EQ(memory[2]["args"]["gradients"], 1000);
  // Held the whole step (gradients_from_ns 0): in static, no series of their own.
  s.gradients_from_ns = 0;
  memory = Events(Parse(TraceJson(r)), "C");
  EXPECT_EQ(memory[0]["args"]["static"], 8500);
  EXPECT_FALSE(memory[0]["args"].contains("gradients"));
}

TEST(TraceTest, TheAllReduceAndTheOptimizerStepHaveTheirThread) {
  // Given rank r's all-reduce of 500 ns from its last op's end and a 300 ns
  // optimizer step ending the iteration at 8 us: slices on tid 2.
  SimResult r = TinyResult();
  r.data_parallel = 2;
  r.per_rank[0].last_end_ns = 7250;
  r.per_rank[0].allreduce_ns = 500;
  r.per_rank[1].last_end_ns = 4750;
  r.per_rank[1].allreduce_ns = 500;
  r.allreduce_ns = 500;
  r.optimizer_ns = 300;
  r.iteration_ns = 8050;
  json t = Parse(TraceJson(r));
  std::vector<json> steps = Events(t, "X", 2);
  ASSERT_EQ(steps.size(), 4u);
  // Sorted by time: rank 1's all-reduce at 4.75 us, rank 0's at 7.25 us, then
  // both optimizer steps at 7.75 us.
  EXPECT_EQ(steps[0]["name"], "gradient all-reduce");
  EXPECT_EQ(steps[0]["pid"], 2);
  EXPECT_DOUBLE_EQ(steps[0]["ts"].get<double>(), 4.75);
  EXPECT_DOUBLE_EQ(steps[0]["dur"].get<double>(), 0.5);
  EXPECT_EQ(steps[1]["pid"], 1);
  EXPECT_DOUBLE_EQ(steps[1]["ts"].get<double>(), 7.25);
  EXPECT_EQ(steps[2]["name"], "optimizer step");
  EXPECT_DOUBLE_EQ(steps[2]["ts"].get<double>(), 7.75);
  EXPECT_DOUBLE_EQ(steps[2]["dur"].get<double>(), 0.3);
}

TEST(TraceTest, ShardedOptimizerStepsFollowTheSimulatorsOrder) {
  // ZeRO 1: a 500 ns gradient reduce-scatter from rank 0's last op (7.25 us),
  // then the 300 ns optimizer step and a 200 ns parameter all-gather, which
  // ends the iteration: 7.25 + 0.5 + 0.3 + 0.2 = 8.25 us.
  SimResult r = TinyResult();
  r.data_parallel = 2;
  r.zero = 1;
  r.per_rank[0].last_end_ns = 7250;
  r.per_rank[0].allreduce_ns = 500;
  r.per_rank[0].allgather_ns = 200;
  r.allreduce_ns = 500;
  r.allgather_ns = 200;
  r.optimizer_ns = 300;
  r.iteration_ns = 8250;
  std::vector<json> steps;
  for (const json& e : Events(Parse(TraceJson(r)), "X", 2)) {
    if (e["pid"] == 1) steps.push_back(e);
  }
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0]["name"], "gradient reduce-scatter");
  EXPECT_DOUBLE_EQ(steps[0]["ts"].get<double>(), 7.25);
  EXPECT_EQ(steps[1]["name"], "optimizer step");
  EXPECT_DOUBLE_EQ(steps[1]["ts"].get<double>(), 7.75);
  EXPECT_EQ(steps[2]["name"], "parameter all-gather");
  EXPECT_DOUBLE_EQ(steps[2]["ts"].get<double>(), 8.05);
  EXPECT_DOUBLE_EQ(steps[2]["dur"].get<double>(), 0.2);
}

TEST(TraceTest, OverlappingSendsToOneRankGetASecondLane) {
  // A measured timeline can overlap two sends on one link: the second goes
  // on a thread of its own, so no thread has overlapping slices.
  SimResult r = TinyResult();
  TransferRecord second = r.transfers[0];
  second.microbatch = 1;
  second.start_ns = 1200;  // while the first (1000-1500) is in flight
  second.end_ns = 1700;
  r.transfers.push_back(second);
  json t = Parse(TraceJson(r));
  EXPECT_EQ(Events(t, "X", 10).size(), 2u);  // rank 0's first lane and rank 1's link
  std::vector<json> lane2 = Events(t, "X", 11);
  ASSERT_EQ(lane2.size(), 1u);
  EXPECT_EQ(lane2[0]["name"], "send act 0\u21921 mb1");
  bool named = false;
  for (const json& e : Events(t, "M")) {
    named |= e["pid"] == 1 && e["tid"] == 11 && e["name"] == "thread_name" &&
             e["args"]["name"] == "send \u2192 rank 1 (lane 2)";
  }
  EXPECT_TRUE(named);
}

TEST(TraceTest, PidOffsetAndLabelLetTwoTimelinesShareAFile) {
  TraceOptions measured;
  measured.label = "measured";
  measured.pid_offset = 100;
  json a = Parse(TraceJson(TinyResult()));
  json b = Parse(TraceJson(TinyResult(), measured));
  for (const json& e : b["traceEvents"]) {
    EXPECT_TRUE(e["pid"] == 101 || e["pid"] == 102) << e.dump();
  }
  for (const json& e : Events(b, "M")) {
    if (e["name"] == "process_name" && e["pid"] == 102) {
      EXPECT_EQ(e["args"]["name"], "measured rank 1 (GPU 1)");
    }
  }
  for (const json& fa : Events(a, "s")) {
    for (const json& fb : Events(b, "s")) EXPECT_NE(fa["id"], fb["id"]);
  }
}

TEST(TraceTest, EventsAreSortedAndOutputIsDeterministic) {
  SimResult r = TinyResult();
  const std::string once = TraceJson(r);
  EXPECT_EQ(TraceJson(r), once);
  std::reverse(r.ops.begin(), r.ops.end());
  std::reverse(r.transfers.begin(), r.transfers.end());
  std::string reordered = TraceJson(r);
  // Only the flow ids follow the transfer order.
  json a = Parse(once), b = Parse(reordered);
  for (json* t : {&a, &b}) {
    for (json& e : (*t)["traceEvents"]) e.erase("id");
  }
  EXPECT_EQ(a, b);

  double last = -1;
  for (const json& e : a["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_GE(e["ts"].get<double>(), last);
    last = e["ts"].get<double>();
  }
  // The file ends with a newline and puts one event on each line.
  EXPECT_EQ(once.back(), '\n');
  EXPECT_EQ(std::count(once.begin(), once.end(), '\n'),
            static_cast<long>(a["traceEvents"].size()) + 4);
}

TEST(TraceTest, StreamedPiecesAreTheFileAndItsValueLineByLine) {
  // GPipe p=2 m=2 on the ideal cluster: ops, transfers, flows and memory.
  Model model = test_util::UniformModel(2, 1000, 2000);
  auto sched = MakeSchedule(ScheduleKind::kGPipe, 2, 2);
  auto r = Simulate(model, test_util::IdealCluster(), *sched, SimOptions{});
  ASSERT_TRUE(r.ok());
  std::vector<std::string> pieces;

  WriteTraceJson(*r, TraceOptions{}, [&](std::string_view piece) { pieces.emplace_back(piece); });

  std::string joined;
  for (const std::string& piece : pieces) joined += piece;
  EXPECT_EQ(joined, TraceJson(*r));
  EXPECT_EQ(json::parse(joined), TraceJsonValue(*r));
  // The opening, one piece per event, and the closing with otherData.
  const json value = TraceJsonValue(*r);
  ASSERT_EQ(pieces.size(), value["traceEvents"].size() + 2);
  for (size_t i = 1; i + 1 < pieces.size(); ++i) {
    EXPECT_EQ(std::count(pieces[i].begin(), pieces[i].end(), '\n'), i == 1 ? 0 : 1) << pieces[i];
  }
}

TEST(TraceTest, MarksTheCriticalPath) {
  // GPipe p=2 m=1: every op is on the path (F, F, B, B): 4 critical slices.
  Model model = test_util::UniformModel(2, 1000, 2000);
  auto sched = MakeSchedule(ScheduleKind::kGPipe, 2, 1);
  SimOptions options;
  options.critical_path = true;
  auto r = Simulate(model, test_util::IdealCluster(), *sched, options);
  ASSERT_TRUE(r.ok());
  json trace = json::parse(TraceJson(*r));
  int critical_slices = 0, flagged_ops = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["tid"] == 3) ++critical_slices;  // the critical-path thread
    if (e["ph"] == "X" && e["tid"] == 1 && e["args"].value("critical", false)) ++flagged_ops;
  }
  EXPECT_EQ(critical_slices, 4);
  EXPECT_EQ(flagged_ops, 4);
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

// Issue 28: DualPipeV's overlapped pairs were drawn as two bars one after
// the other. The halves run together, so each is drawn over the whole pair:
// the forward half on the compute thread, the backward half on a thread of
// its own right under it, and the arrow into the backward half ends there.
TEST(TraceTest, OverlappedPairHalvesAreDrawnOverlapping) {
  SimResult r = TinyResult();  // rank 1: 1F0 1.75-2.75 us, then 1B0 2.75-4.75 us
  r.ops[1].action.overlapped = true;
  r.ops[2].action.overlapped = true;
  json t = Parse(TraceJson(r));
  std::map<std::string, json> slice;  // op name -> its slice
  for (const json& e : Events(t, "X")) {
    if (e["cat"] == "F" || e["cat"] == "B") slice[e["name"].get<std::string>()] = e;
  }

  for (const char* half : {"1F0", "1B0"}) {
    EXPECT_DOUBLE_EQ(slice[half]["ts"].get<double>(), 1.75) << half;
    EXPECT_DOUBLE_EQ(slice[half]["dur"].get<double>(), 3.0) << half;
  }
  EXPECT_EQ(slice["1F0"]["tid"], 1);
  EXPECT_EQ(slice["1B0"]["tid"], 4);
  EXPECT_DOUBLE_EQ(slice["1F0"]["args"]["half_share_us"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(slice["1B0"]["args"]["half_share_us"].get<double>(), 2.0);
  EXPECT_EQ(slice["0F0"]["tid"], 1);  // ops outside pairs stay as they were
  EXPECT_DOUBLE_EQ(slice["0F0"]["dur"].get<double>(), 1.0);
  bool named = false;
  for (const json& m : Events(t, "M")) {
    if (m["pid"] == 2 && m["tid"] == 4 && m["name"] == "thread_name") named = true;
  }
  EXPECT_TRUE(named);
}

TEST(TraceTest, OverlappedPairHalvesAreMarked) {
  // TinyResult with rank 1's 1F0 and 1B0 as the two halves of an overlapped pair (the shape
  // is only for drawing: the trace marks what the ops say).
  SimResult r = TinyResult();
  r.ops[1].action.overlapped = true;
  r.ops[2].action.overlapped = true;
  json t = Parse(TraceJson(r));
  std::map<std::string, bool> mark;  // op name -> marked
  for (int tid : {1, 4}) {           // the compute thread, and the backward halves'
    for (const json& e : Events(t, "X", tid)) {
      mark[e["name"].get<std::string>()] = e["args"].value("overlapped_fb", false);
    }
  }
  EXPECT_EQ(mark, (std::map<std::string, bool>{
                      {"0F0", false}, {"1F0", true}, {"1B0", true}, {"0B0", false}}));
}

}  // namespace
}  // namespace pipecast
