#include "report/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "report/report.h"

namespace pipecast {
namespace {

using Json = nlohmann::ordered_json;

// Process ids start here: Perfetto and chrome://tracing treat pid 0 as the
// idle ("swapper") process.
constexpr int kFirstPid = 1;
// Thread ids inside each rank's process.
constexpr int kComputeTid = 1;
constexpr int kDataParallelTid = 2;  // the gradient all-reduce and the optimizer step
constexpr int kCriticalTid = 3;      // the critical path's steps
// The backward halves of overlapped F&B pairs: drawn over the same span as
// their forward half on the compute thread, so the two halves overlap as
// they run (docs/simulator.md, "Overlapped F&B").
constexpr int kOverlapTid = 4;
// Sends get one thread per destination rank (a link), and more where sends to
// one destination overlap, from here on: Perfetto cannot draw overlapping
// slices on one thread.
constexpr int kFirstLinkTid = 10;

// Flow ids of one timeline are `pid_offset * kFlowIdsPerTimeline + n`, so two
// timelines written with different pid offsets can share a file without
// their arrows crossing.
constexpr int64_t kFlowIdsPerTimeline = int64_t{1} << 32;

// Among events at the same time on the same thread, slices come first so
// that the flow events at that time bind to them. (Flow events are placed
// strictly inside the slice they belong to, so no viewer's binding rule has
// a choice to make; see AddTransfer.)
enum class Order { kSlice, kCounter, kFlowStart, kFlowEnd };

// What a timed event is; with its index and part (`sub`), it names the
// record the event is drawn from, and the three in this order are the order
// the events were made in, which breaks the last ties.
enum class Kind : uint8_t { kCritical, kOp, kTransfer, kMemory, kDataParallel };
// A transfer's three events.
constexpr int32_t kTransferSlice = 0;
constexpr int32_t kTransferFlowStart = 1;
constexpr int32_t kTransferFlowEnd = 2;
// A rank's data-parallel steps.
constexpr int32_t kAllReduce = 0;
constexpr int32_t kOptimizer = 1;
constexpr int32_t kAllGather = 2;

// A timed event as its sort key and where to find what it shows, 32 bytes:
// its JSON is made only when it is written (a JSON value per event held
// the whole trace, some 10 KB per op).
struct Event {
  TimeNs ts_ns = 0;
  int pid = 0;
  int tid = 0;
  Order order = Order::kSlice;
  Kind kind = Kind::kOp;
  int32_t index = 0;  // the op, transfer, critical step, or position in per_rank
  int32_t sub = 0;    // the part: a transfer's event, a memory sample, a step
};

// Compact JSON; invalid UTF-8 in a label or name becomes U+FFFD instead of
// throwing.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

class TraceBuilder {
 public:
  TraceBuilder(const SimResult& result, const TraceOptions& options)
      : result_(result), options_(options) {}

  // Every event in file order, each made once and handed to `emit`: the
  // metadata, then the rest by time.
  void Events(const std::function<void(const Json&)>& emit) {
    AssignLinkThreads();
    FindPairs();
    {
      std::vector<Json> metadata;
      for (int rank = 0; rank < NumRanks(); ++rank) AddMetadata(rank, &metadata);
      for (const Json& e : metadata) emit(e);
    }
    events_.reserve(NumTimedEvents());
    critical_ops_.assign(result_.ops.size(), false);
    critical_transfers_.assign(result_.transfers.size(), false);
    if (result_.critical_path) {
      const std::vector<CriticalStep>& steps = result_.critical_path->steps;
      for (size_t i = 0; i < steps.size(); ++i) {
        const CriticalStep& step = steps[i];
        if (step.op >= 0) critical_ops_[step.op] = true;
        if (step.transfer >= 0) critical_transfers_[step.transfer] = true;
        Add(step.start_ns, std::max(step.rank, 0), kCriticalTid, Order::kSlice, Kind::kCritical, i,
            0);
      }
    }
    for (size_t i = 0; i < result_.ops.size(); ++i) AddOp(i);
    FindConsumers();
    for (size_t i = 0; i < result_.transfers.size(); ++i) AddTransfer(i, result_.transfers[i]);
    for (size_t i = 0; i < result_.per_rank.size(); ++i) AddMemory(i);
    for (size_t i = 0; i < result_.per_rank.size(); ++i) AddDataParallelSteps(i);
    std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
      return std::tie(a.ts_ns, a.pid, a.tid, a.order, a.kind, a.index, a.sub) <
             std::tie(b.ts_ns, b.pid, b.tid, b.order, b.kind, b.index, b.sub);
    });
    for (const Event& event : events_) emit(Render(event));
  }

  // One event per line, so traces diff and grep well.
  void Write(const std::function<void(std::string_view)>& sink) {
    sink("{\"traceEvents\":[\n");
    bool first = true;
    std::string line;
    Events([&](const Json& event) {
      line.clear();
      if (!first) line += ",\n";
      first = false;
      line += Dump(event);
      sink(line);
    });
    sink("\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + Dump(OtherData()) + "}\n");
  }

  // The same trace as one JSON value.
  Json BuildValue() {
    Json j;
    Json events = Json::array();
    Events([&](const Json& event) { events.push_back(event); });
    j["traceEvents"] = std::move(events);
    j["displayTimeUnit"] = "ms";
    j["otherData"] = OtherData();
    return j;
  }

 private:
  int Pid(int rank) const { return kFirstPid + rank + options_.pid_offset; }

  // The thread of each transfer: on its sender, one per destination rank,
  // and a further one ("lane") whenever a send would overlap the previous
  // one to that destination (a measured timeline can have that). Fills
  // transfer_tid_ and link_threads_.
  void AssignLinkThreads() {
    const auto& ts = result_.transfers;
    std::vector<size_t> order(ts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::tie(ts[a].src_rank, ts[a].dst_rank, ts[a].start_ns) <
             std::tie(ts[b].src_rank, ts[b].dst_rank, ts[b].start_ns);
    });
    std::map<std::pair<int, int>, std::vector<TimeNs>> lane_ends;      // (src, dst) -> per lane
    std::map<std::tuple<int, int, int>, std::vector<size_t>> by_lane;  // (src, dst, lane)
    for (size_t i : order) {
      std::vector<TimeNs>& ends = lane_ends[{ts[i].src_rank, ts[i].dst_rank}];
      size_t lane = 0;
      while (lane < ends.size() && ends[lane] > ts[i].start_ns) ++lane;
      if (lane == ends.size()) ends.push_back(0);
      ends[lane] = std::max(ts[i].end_ns, ts[i].start_ns);
      by_lane[{ts[i].src_rank, ts[i].dst_rank, static_cast<int>(lane)}].push_back(i);
    }
    transfer_tid_.assign(ts.size(), kFirstLinkTid);
    std::map<int, int> next_tid;  // per sender
    for (const auto& [key, transfers] : by_lane) {
      const auto [src, dst, lane] = key;
      auto [it, fresh] = next_tid.try_emplace(src, kFirstLinkTid);
      const int tid = it->second++;
      for (size_t i : transfers) transfer_tid_[i] = tid;
      link_threads_[src].push_back(
          {tid, lane == 0 ? fmt::format("send \u2192 rank {}", dst)
                          : fmt::format("send \u2192 rank {} (lane {})", dst, lane + 1)});
    }
  }

  // Ranks named in the result: its count, and any rank a record refers to.
  int NumRanks() const {
    int n = std::max(result_.ranks, static_cast<int>(result_.per_rank.size()));
    for (const OpRecord& op : result_.ops) n = std::max(n, op.rank + 1);
    for (const TransferRecord& t : result_.transfers) {
      n = std::max({n, t.src_rank + 1, t.dst_rank + 1});
    }
    for (const StageResult& s : result_.per_rank) n = std::max(n, s.rank + 1);
    return n;
  }

  void AddMetadata(int rank, std::vector<Json>* events) const {
    auto meta = [&](const char* name, int tid, Json args) {
      Json e;
      e["name"] = name;
      e["ph"] = "M";
      e["pid"] = Pid(rank);
      e["tid"] = tid;
      e["args"] = std::move(args);
      events->push_back(std::move(e));
    };
    // Replica 0's rank r runs on GPU r.
    meta("process_name", kComputeTid,
         {{"name",
           fmt::format("{} rank {} ({})", options_.label, rank,
                       RankGpusText(rank, result_.tensor_parallel, result_.context_parallel))}});
    meta("process_sort_index", kComputeTid, {{"sort_index", Pid(rank)}});
    meta("thread_name", kComputeTid, {{"name", "compute"}});
    meta("thread_sort_index", kComputeTid, {{"sort_index", kComputeTid}});
    if (HasDataParallelSteps()) {
      meta("thread_name", kDataParallelTid, {{"name", "data parallel"}});
      meta("thread_sort_index", kDataParallelTid, {{"sort_index", kDataParallelTid}});
    }
    if (auto it = link_threads_.find(rank); it != link_threads_.end()) {
      for (const auto& [tid, name] : it->second) {
        meta("thread_name", tid, {{"name", name}});
        meta("thread_sort_index", tid, {{"sort_index", tid}});
      }
    }
    if (result_.critical_path) {
      meta("thread_name", kCriticalTid, {{"name", "critical path"}});
      meta("thread_sort_index", kCriticalTid, {{"sort_index", kCriticalTid}});
    }
    if (std::find(pair_ranks_.begin(), pair_ranks_.end(), rank) != pair_ranks_.end()) {
      meta("thread_name", kOverlapTid, {{"name", "compute (overlapped backward halves)"}});
      // Right under the compute thread, where the pair's forward half is.
      meta("thread_sort_index", kOverlapTid, {{"sort_index", kComputeTid}});
    }
  }

  // What Events() adds, so that events_ is allocated once.
  size_t NumTimedEvents() const {
    size_t n = result_.ops.size() + 3 * result_.transfers.size();
    if (result_.critical_path) n += result_.critical_path->steps.size();
    for (const StageResult& stage : result_.per_rank) n += stage.memory_timeline.size() + 2 + 3;
    return n;
  }

  void Add(TimeNs ts_ns, int rank, int tid, Order order, Kind kind, size_t index, int32_t sub) {
    events_.push_back(Event{ts_ns, Pid(rank), tid, order, kind, static_cast<int32_t>(index), sub});
  }

  // A timed event's first keys in the usual order: name, cat, ph, pid, tid, ts.
  static Json Timed(const Event& e, const char* ph, std::string name, std::string cat) {
    Json j;
    j["name"] = std::move(name);
    j["cat"] = std::move(cat);
    j["ph"] = ph;
    j["pid"] = e.pid;
    j["tid"] = e.tid;
    j["ts"] = NsToUs(e.ts_ns);
    return j;
  }

  Json Render(const Event& e) {
    switch (e.kind) {
      case Kind::kCritical:
        return RenderCriticalStep(e);
      case Kind::kOp:
        return RenderOp(e);
      case Kind::kTransfer:
        return RenderTransfer(e);
      case Kind::kMemory:
        return RenderMemory(e);
      case Kind::kDataParallel:
        return RenderDataParallelStep(e);
    }
    return Json();
  }

  // The critical path as its own "critical path" thread on each rank: one
  // slice per step, so Perfetto shows the chain that sets the length.
  Json RenderCriticalStep(const Event& ev) const {
    const CriticalStep& step = result_.critical_path->steps[ev.index];
    const char* kind = step.kind == CriticalStep::Kind::kCompute         ? "compute"
                       : step.kind == CriticalStep::Kind::kCommunication ? "communication"
                                                                         : "waiting";
    std::string name = step.op >= 0 ? ActionName(result_.ops[step.op].action) : kind;
    Json e = Timed(ev, "X", std::move(name), "critical");
    e["dur"] = NsToUs(step.end_ns - step.start_ns);
    e["args"] = {{"kind", kind}};
    return e;
  }

  // An overlapped F&B pair is two records, its forward half then its
  // backward half, back to back on one rank (the simulator and the validator
  // time each half's share of the pair); both halves run for the whole pair.
  // Fills drawn_ (per op: the span it is drawn over) and pair_ranks_.
  void FindPairs() {
    const std::vector<OpRecord>& ops = result_.ops;
    drawn_.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) drawn_[i] = {ops[i].start_ns, ops[i].end_ns};
    for (size_t i = 0; i + 1 < ops.size(); ++i) {
      const OpRecord& f = ops[i];
      const OpRecord& b = ops[i + 1];
      if (f.action.overlapped && b.action.overlapped && f.rank == b.rank &&
          f.action.kind == OpKind::kForward && b.action.kind != OpKind::kForward) {
        drawn_[i] = drawn_[i + 1] = {f.start_ns, std::max(f.end_ns, b.end_ns)};
        overlap_half_.push_back(i + 1);
        pair_ranks_.push_back(b.rank);
        ++i;
      }
    }
    std::sort(pair_ranks_.begin(), pair_ranks_.end());
    pair_ranks_.erase(std::unique(pair_ranks_.begin(), pair_ranks_.end()), pair_ranks_.end());
  }
  bool IsBackwardHalf(size_t op) const {
    return std::binary_search(overlap_half_.begin(), overlap_half_.end(), op);
  }
  int OpTid(size_t op) const { return IsBackwardHalf(op) ? kOverlapTid : kComputeTid; }

  void AddOp(size_t index) {
    Add(drawn_[index].first, result_.ops[index].rank, OpTid(index), Order::kSlice, Kind::kOp, index,
        0);
  }

  Json RenderOp(const Event& ev) const {
    const OpRecord& op = result_.ops[ev.index];
    Json e = Timed(ev, "X", ActionName(op.action), std::string(1, OpKindLetter(op.action.kind)));
    e["dur"] = NsToUs(drawn_[ev.index].second - drawn_[ev.index].first);
    e["args"] = {{"stage", op.action.stage}, {"microbatch", op.action.microbatch}};
    if (critical_ops_[ev.index]) e["args"]["critical"] = true;
    // A half of an overlapped F&B pair (docs/simulator.md, "Overlapped F&B"):
    // drawn over the whole pair, with the share of it the half's record has.
    if (op.action.overlapped) {
      e["args"]["overlapped_fb"] = true;
      e["args"]["half_share_us"] = NsToUs(op.end_ns - op.start_ns);
    }
    return e;
  }

  // Ops that receive a transfer: F takes an activation, B or I a gradient.
  static std::tuple<int, int, bool, int> ConsumerKey(int rank, const Action& a) {
    return {rank, a.stage, a.kind != OpKind::kForward, a.microbatch};
  }

  // Each consumer, the first op in the record with its key: a sorted table
  // of op indices (16 bytes an op; a map took four times that).
  void FindConsumers() {
    consumers_.clear();
    consumers_.reserve(result_.ops.size());
    for (size_t i = 0; i < result_.ops.size(); ++i) {
      const OpRecord& op = result_.ops[i];
      if (op.action.kind != OpKind::kBackwardWeight) {
        consumers_.push_back({ConsumerKey(op.rank, op.action), static_cast<int32_t>(i)});
      }
    }
    std::stable_sort(consumers_.begin(), consumers_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  const int32_t* FindConsumer(const std::tuple<int, int, bool, int>& key) const {
    auto it = std::lower_bound(consumers_.begin(), consumers_.end(), key,
                               [](const auto& a, const auto& k) { return a.first < k; });
    return it != consumers_.end() && it->first == key ? &it->second : nullptr;
  }

  // The send as a slice on the sender's comm thread, and an arrow from it to
  // the op that consumes it on the receiver's compute thread. By the trace
  // event format's binding rules a flow start binds to the slice enclosing
  // its time on its thread, and a flow end with "bp":"e" likewise; at a
  // time where one slice ends and the next begins (one op's end is the
  // next one's start, a send queued right behind another) a viewer may pick
  // either. So each flow event sits at the middle of its slice, strictly
  // inside it: the start in the send, the end in the consuming op (at the
  // arrival time the receiver may be idle or running an unrelated op).
  // Without a consuming op in the record, the arrow ends at the arrival time.
  void AddTransfer(size_t index, const TransferRecord& t) {
    const int tid = transfer_tid_[index];
    Add(t.start_ns, t.src_rank, tid, Order::kSlice, Kind::kTransfer, index, kTransferSlice);
    Add(Middle(t.start_ns, t.end_ns), t.src_rank, tid, Order::kFlowStart, Kind::kTransfer, index,
        kTransferFlowStart);
    const Action consumer{t.dst_stage, t.gradient ? OpKind::kBackward : OpKind::kForward,
                          t.microbatch};
    const int32_t* op = FindConsumer(ConsumerKey(t.dst_rank, consumer));
    if (op == nullptr) {
      Add(t.end_ns, t.dst_rank, kComputeTid, Order::kFlowEnd, Kind::kTransfer, index,
          kTransferFlowEnd);
      return;
    }
    Add(Middle(drawn_[*op].first, drawn_[*op].second), t.dst_rank, OpTid(*op), Order::kFlowEnd,
        Kind::kTransfer, index, kTransferFlowEnd);
  }
  static TimeNs Middle(TimeNs a, TimeNs b) { return a + (b - a) / 2; }

  Json RenderTransfer(const Event& ev) const {
    const TransferRecord& t = result_.transfers[ev.index];
    std::string name = fmt::format("send {} {}\u2192{} mb{}", t.gradient ? "grad" : "act",
                                   t.src_stage, t.dst_stage, t.microbatch);
    const int64_t id =
        int64_t{options_.pid_offset} * kFlowIdsPerTimeline + static_cast<int64_t>(ev.index) + 1;
    if (ev.sub == kTransferSlice) {
      Json slice = Timed(ev, "X", std::move(name), t.gradient ? "grad" : "act");
      slice["dur"] = NsToUs(t.end_ns - t.start_ns);
      slice["args"] = {{"bytes", t.bytes},          {"ready_us", NsToUs(t.ready_ns)},
                       {"src_rank", t.src_rank},    {"dst_rank", t.dst_rank},
                       {"src_stage", t.src_stage},  {"dst_stage", t.dst_stage},
                       {"microbatch", t.microbatch}};
      if (critical_transfers_[ev.index]) slice["args"]["critical"] = true;
      return slice;
    }
    if (ev.sub == kTransferFlowStart) {
      Json start = Timed(ev, "s", std::move(name), "transfer");
      start["id"] = id;
      return start;
    }
    Json finish = Timed(ev, "f", std::move(name), "transfer");
    finish["id"] = id;
    finish["bp"] = "e";
    return finish;
  }

  // The live set over time on top of the static memory (weights, gradients,
  // optimizer state, stashed weight versions, ZeRO-3's gathered copies; under
  // --sharded-state fsdp2 the gradients a series of their own, from the
  // rank's first backward's end), so the counter's top is the rank's whole
  // memory; and the capacity as a counter of its own (the samples' count and
  // one past it).
  // A counter holds one value per time: of several changes at one instant
  // (an op's end frees what the next op's start allocates) only the level
  // after the last is written, which is the level from then on.
  void AddMemory(size_t position) {
    const StageResult& stage = result_.per_rank[position];
    const std::span<const MemoryTimeline::Change> changes = stage.memory_timeline.changes();
    for (size_t i = 0; i < changes.size(); ++i) {
      if (i + 1 < changes.size() && changes[i + 1].time_ns == changes[i].time_ns) continue;
      Add(changes[i].time_ns, stage.rank, kComputeTid, Order::kCounter, Kind::kMemory, position,
          static_cast<int32_t>(i));
    }
    if (result_.memory_capacity_bytes > 0 && !changes.empty()) {
      const int32_t n = static_cast<int32_t>(changes.size());
      Add(changes.front().time_ns, stage.rank, kComputeTid, Order::kCounter, Kind::kMemory,
          position, n);
      Add(result_.iteration_ns, stage.rank, kComputeTid, Order::kCounter, Kind::kMemory, position,
          n + 1);
    }
  }

  // The level of sample `sub` of rank `position`: a rank's samples are
  // written in order (by time, then by index), so a cursor per rank walks
  // the running sums once; from the start again if ever asked for an
  // earlier one.
  const MemorySample& MemoryLevel(size_t position, int32_t sub) {
    if (memory_cursor_.empty()) {
      for (const StageResult& s : result_.per_rank) {
        memory_cursor_.push_back(s.memory_timeline.begin());
      }
    }
    MemoryTimeline::Iterator& it = memory_cursor_[position];
    if (it.index() > static_cast<size_t>(sub))
      it = result_.per_rank[position].memory_timeline.begin();
    while (it.index() < static_cast<size_t>(sub)) ++it;
    return *it;
  }

  Json RenderMemory(const Event& ev) {
    const StageResult& stage = result_.per_rank[ev.index];
    if (ev.sub >= static_cast<int32_t>(stage.memory_timeline.size())) {
      Json e = Timed(ev, "C", "capacity", "memory");
      e["args"] = {{"capacity", result_.memory_capacity_bytes}};
      return e;
    }
    const MemorySample& sample = MemoryLevel(ev.index, ev.sub);
    Json e = Timed(ev, "C", "memory", "memory");
    e["args"] = {{"static", stage.HeldAllStepBytes()},
                 {"activations", sample.activations},
                 {"comm_buffers", sample.comm_buffers},
                 {"workspace", sample.workspace}};
    // --sharded-state fsdp2: the gradients made in the step, a series of their own.
    if (stage.gradients_from_ns > 0) {
      e["args"]["gradients"] = stage.LateGradientsAt(sample.time_ns);
    }
    return e;
  }

  // The steps after the pipeline, where the result has them for one
  // iteration (sim/simulator.h: iteration = tail end + optimizer + all-gather):
  // the rank's gradient all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1) from
  // its last op's end, the optimizer step, then the parameter all-gather of
  // ZeRO 1 and 2. A steady state of several iterations (PipeDream) has no such
  // place, and leaves them out.
  bool HasDataParallelSteps() const {
    return result_.iterations_simulated == 1 &&
           (result_.allreduce_ns > 0 || result_.optimizer_ns > 0 || result_.allgather_ns > 0);
  }
  TimeNs OptimizerStart() const {
    return result_.iteration_ns - result_.allgather_ns - result_.optimizer_ns;
  }
  void AddDataParallelSteps(size_t position) {
    if (!HasDataParallelSteps()) return;
    const StageResult& stage = result_.per_rank[position];
    auto add = [&](TimeNs start, int32_t step) {
      Add(start, stage.rank, kDataParallelTid, Order::kSlice, Kind::kDataParallel, position, step);
    };
    if (stage.allreduce_ns > 0) add(stage.last_end_ns, kAllReduce);
    if (result_.optimizer_ns > 0) add(OptimizerStart(), kOptimizer);
    if (stage.allgather_ns > 0) add(OptimizerStart() + result_.optimizer_ns, kAllGather);
  }

  Json RenderDataParallelStep(const Event& ev) const {
    const StageResult& stage = result_.per_rank[ev.index];
    auto slice = [&](TimeNs dur, const char* name, const char* cat) {
      Json e = Timed(ev, "X", name, cat);
      e["dur"] = NsToUs(dur);
      return e;
    };
    if (ev.sub == kAllReduce) {
      const bool sharded = result_.zero >= 1;
      Json e = slice(stage.allreduce_ns,
                     sharded ? "gradient reduce-scatter" : "gradient all-reduce", "allreduce");
      e["args"] = {{"data_parallel", result_.data_parallel},
                   {"gradients_bytes", stage.memory.gradients}};
      return e;
    }
    if (ev.sub == kOptimizer) return slice(result_.optimizer_ns, "optimizer step", "optimizer");
    Json e = slice(stage.allgather_ns, "parameter all-gather", "allgather");
    e["args"] = {{"data_parallel", result_.data_parallel}};
    return e;
  }

  Json OtherData() const {
    Json d;
    d["label"] = options_.label;
    d["schedule"] = result_.schedule_name;
    d["ranks"] = result_.ranks;
    d["stages"] = result_.stages;
    d["microbatches"] = result_.microbatches;
    d["microbatch_size"] = result_.microbatch_size;
    d["data_parallel"] = result_.data_parallel;
    d["iteration_time_us"] = NsToUs(result_.iteration_ns);
    d["pipeline_time_us"] = NsToUs(result_.pipeline_ns);
    d["bubble_ratio"] = result_.bubble_ratio;
    d["bubble_fraction_of_ideal"] = result_.bubble_fraction_of_ideal;
    return d;
  }

  const SimResult& result_;
  const TraceOptions& options_;
  std::vector<Event> events_;
  // (rank, stage, backward?, micro-batch) -> the op, first seen.
  std::vector<std::pair<std::tuple<int, int, bool, int>, int32_t>> consumers_;
  std::vector<std::pair<TimeNs, TimeNs>> drawn_;  // per op: the span it is drawn over
  std::vector<size_t> overlap_half_;              // backward halves of pairs, ascending
  std::vector<int> pair_ranks_;                   // ranks with pairs, ascending
  std::vector<bool> critical_ops_, critical_transfers_;
  std::vector<MemoryTimeline::Iterator> memory_cursor_;  // per rank, for MemoryLevel()
  std::vector<int> transfer_tid_;                        // per transfer
  std::map<int, std::vector<std::pair<int, std::string>>> link_threads_;  // per sender: tid, name
};

}  // namespace

std::string TraceJson(const SimResult& result, const TraceOptions& options) {
  std::string out;
  WriteTraceJson(result, options, [&](std::string_view piece) { out += piece; });
  return out;
}

void WriteTraceJson(const SimResult& result, const TraceOptions& options,
                    const std::function<void(std::string_view)>& sink) {
  TraceBuilder(result, options).Write(sink);
}

nlohmann::ordered_json TraceJsonValue(const SimResult& result, const TraceOptions& options) {
  return TraceBuilder(result, options).BuildValue();
}

}  // namespace pipecast
