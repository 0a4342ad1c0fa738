#include "measured/measured_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <unordered_map>

#include "measured/internal/intervals.h"
#include "measured/internal/pipecast_ranks.h"

namespace pipecast::measured {
namespace {

using internal::Interval;
using internal::Length;
using internal::OverlapLength;
using internal::Union;

// One CPU range of one thread, with its parent (the innermost range of the
// same list that holds it) so that the innermost range around a time is found
// by walking up from the last range that starts before it.
struct Range {
  TimeNs start = 0, end = 0;
  int parent = -1;
  int top = -1;  // outermost ancestor of the same phase: one op of the timeline
  RangeName what;
  int id = 0;  // unique over the trace, for grouping work into ops
};

// Ranges of one thread sorted by start, each knowing its parent.
class RangeList {
 public:
  void Add(Range r) { ranges_.push_back(std::move(r)); }

  void Finish() {
    std::stable_sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<int> open;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      Range& r = ranges_[i];
      while (!open.empty() && ranges_[open.back()].end <= r.start) open.pop_back();
      r.parent = open.empty() ? -1 : open.back();
      const bool same_phase = r.parent >= 0 && ranges_[r.parent].what.phase == r.what.phase &&
                              ranges_[r.parent].what.kind == r.what.kind;
      r.top = same_phase ? ranges_[r.parent].top : static_cast<int>(i);
      open.push_back(static_cast<int>(i));
    }
  }

  // The innermost range holding time `t` (start <= t < end), or nullptr.
  const Range* Innermost(TimeNs t) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), t,
                               [](TimeNs v, const Range& r) { return v < r.start; });
    if (it == ranges_.begin()) return nullptr;
    int i = static_cast<int>(it - ranges_.begin()) - 1;
    while (i >= 0 && ranges_[i].end <= t) i = ranges_[i].parent;
    return i >= 0 ? &ranges_[i] : nullptr;
  }

  const Range& Top(const Range& r) const { return ranges_[r.top]; }
  const std::vector<Range>& ranges() const { return ranges_; }

 private:
  std::vector<Range> ranges_;
};

// One GPU activity (kernel, memcpy, memset) with what it was for.
struct Activity {
  TimeNs start = 0, end = 0;
  int stream = 0;
  bool comm = false;
  CommKind comm_kind = CommKind::kOther;
  Phase phase = Phase::kOther;
  bool kernel = true;
  int group = -1;                // the op it belongs to: a range id, or an inferred run
  const Range* range = nullptr;  // the phase range (top) it was launched in
};

struct StepRange {
  int number = 0;
  TimeNs start = 0, end = 0;
};

// What a Kineto trace holds, organised for the attribution.
class KinetoRank {
 public:
  KinetoRank(const TraceFile& trace) : trace_(trace) {}

  Status Build(MeasuredRank* out) {
    Index();
    if (steps_.empty()) {
      return Status::InvalidArgument(fmt::format(
          "{}: no ProfilerStep#N range: pipecast finds iterations by them; profile with "
          "torch.profiler.profile(schedule=...) and call prof.step() once per iteration",
          trace_.origin));
    }
    Attribute(out);
    for (size_t s = 0; s < steps_.size(); ++s) {
      RankStep step;
      step.step = steps_[s].number;
      step.cpu_start_ns = steps_[s].start;
      step.cpu_end_ns = steps_[s].end;
      if (by_step_[s].empty()) continue;  // a step with no GPU work (a CPU-only warm-up)
      Measure(s, &step);
      out->steps.push_back(std::move(step));
    }
    if (out->steps.empty()) {
      return Status::InvalidArgument(
          fmt::format("{}: its {} ProfilerStep ranges launched no GPU work: profile with "
                      "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
                      trace_.origin, steps_.size()));
    }
    std::sort(out->steps.begin(), out->steps.end(),
              [](const RankStep& a, const RankStep& b) { return a.step < b.step; });
    for (size_t i = 1; i < out->steps.size(); ++i) {
      if (out->steps[i].step == out->steps[i - 1].step) {
        return Status::InvalidArgument(
            fmt::format("{}: ProfilerStep#{} appears twice", trace_.origin, out->steps[i].step));
      }
    }
    return Status::Ok();
  }

 private:
  void Index() {
    std::map<int64_t, int> step_threads;
    int next_id = 0;
    for (const TraceEvent& e : trace_.events) {
      switch (e.kind) {
        case TraceEvent::Kind::kLaunch:
          launches_[e.correlation] = &e;
          break;
        case TraceEvent::Kind::kMemory:
          memory_.push_back(&e);
          break;
        case TraceEvent::Kind::kRange: {
          Range r;
          r.start = e.start_ns;
          r.end = e.end_ns();
          r.what = ClassifyRange(trace_.Name(e));
          r.id = next_id++;
          switch (r.what.kind) {
            case RangeName::Kind::kStep:
              steps_.push_back({r.what.step, r.start, r.end});
              ++step_threads[e.tid];
              break;
            case RangeName::Kind::kAction:
            case RangeName::Kind::kPhase:
              phase_[e.tid].Add(r);
              break;
            case RangeName::Kind::kComm:
              comm_[e.tid].Add(r);
              break;
            case RangeName::Kind::kAutograd:
              autograd_[e.tid].Add(r);
              break;
            case RangeName::Kind::kLayer:
            case RangeName::Kind::kNone:
              break;
          }
          break;
        }
        default:
          break;
      }
    }
    for (auto* lists : {&phase_, &comm_, &autograd_}) {
      for (auto& [tid, list] : *lists) list.Finish();
    }
    std::sort(steps_.begin(), steps_.end(),
              [](const StepRange& a, const StepRange& b) { return a.start < b.start; });
    main_thread_ =
        step_threads.empty()
            ? 0
            : std::max_element(step_threads.begin(), step_threads.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; })
                  ->first;
    by_step_.assign(steps_.size(), {});
  }

  // The step whose CPU range holds `t`; -1 outside all.
  int StepAt(TimeNs t) const {
    auto it = std::upper_bound(steps_.begin(), steps_.end(), t,
                               [](TimeNs v, const StepRange& s) { return v < s.start; });
    if (it == steps_.begin()) return -1;
    --it;
    return t < it->end ? static_cast<int>(it - steps_.begin()) : -1;
  }

  // The innermost phase range around a launch: on its thread, else on any
  // other thread of the process (the latest-starting of those found).
  const Range* PhaseAt(int64_t tid, TimeNs t, const RangeList** owner) const {
    if (auto it = phase_.find(tid); it != phase_.end()) {
      if (const Range* r = it->second.Innermost(t)) {
        *owner = &it->second;
        return r;
      }
    }
    const Range* best = nullptr;
    for (const auto& [other, list] : phase_) {
      if (other == tid) continue;
      const Range* r = list.Innermost(t);
      if (r != nullptr && (best == nullptr || r->start > best->start)) {
        best = r;
        *owner = &list;
      }
    }
    return best;
  }

  void Attribute(MeasuredRank* out) {
    for (const TraceEvent& e : trace_.events) {
      if (e.kind != TraceEvent::Kind::kKernel && e.kind != TraceEvent::Kind::kGpuMemory) {
        continue;
      }
      Activity a;
      a.start = e.start_ns;
      a.end = e.end_ns();
      a.stream = e.stream;
      a.kernel = e.kind == TraceEvent::Kind::kKernel;
      TimeNs t = e.start_ns;
      int64_t tid = 0;
      bool launched = false;
      if (auto it = launches_.find(e.correlation); e.correlation >= 0 && it != launches_.end()) {
        t = it->second->start_ns;
        tid = it->second->tid;
        launched = true;
      } else {
        ++out->unmatched_launches;
      }
      const int step = StepAt(t);
      if (step < 0) {
        ++out->outside_steps;
        continue;
      }
      if (a.kernel) {
        if (std::optional<CommKind> kind = ClassifyKernel(trace_.Name(e))) {
          a.comm = true;
          a.comm_kind = *kind;
          if (launched && (*kind == CommKind::kSendRecv || *kind == CommKind::kOther)) {
            // NCCL runs all-to-all as grouped send/recv: the record_function around the
            // launch ("nccl:all_to_all") says which.
            if (auto it = comm_.find(tid); it != comm_.end()) {
              if (const Range* r = it->second.Innermost(t); r && r->what.comm != CommKind::kOther) {
                a.comm_kind = r->what.comm;
              }
            }
          }
        }
      }
      if (launched) {
        const RangeList* owner = nullptr;
        if (const Range* r = PhaseAt(tid, t, &owner)) {
          const Range& top = owner->Top(*r);
          a.phase = r->what.phase;
          a.range = &top;
          a.group = top.id;
        } else if (auto it = autograd_.find(tid);
                   it != autograd_.end() && it->second.Innermost(t) != nullptr) {
          a.phase = Phase::kBackward;
          a.group = kAutogradGroup;
        } else if (tid == main_thread_) {
          a.group = kMainThreadGroup;  // forward, if the step marks no phase (Measure)
        }
      }
      by_step_[step].push_back(a);
    }
  }

  void Measure(size_t s, RankStep* step) {
    std::vector<Activity>& acts = by_step_[s];
    std::sort(acts.begin(), acts.end(), [](const Activity& a, const Activity& b) {
      return a.start != b.start ? a.start < b.start : a.end < b.end;
    });
    bool any_phase = false;
    for (const Activity& a : acts) any_phase = any_phase || a.range != nullptr;
    if (!any_phase) {
      // Nothing marked: the main thread's launches outside autograd and the optimizer are the
      // forward (an inference, said in the report).
      for (Activity& a : acts) {
        if (a.group == kMainThreadGroup) a.phase = Phase::kForward;
      }
      step->phases_inferred = true;
    }
    bool weight_ranges = false;
    for (const Activity& a : acts) weight_ranges = weight_ranges || a.phase == Phase::kWeightGrad;
    std::vector<Interval> compute, comm, forward_all, backward_all;
    std::array<std::vector<Interval>, kCommKinds> by_kind;
    std::array<std::vector<Interval>, kPhases> compute_phase, comm_phase;
    std::map<int, std::vector<Interval>> streams;
    step->start_ns = acts.front().start;
    step->end_ns = acts.front().end;
    for (const Activity& a : acts) {
      step->start_ns = std::min(step->start_ns, a.start);
      step->end_ns = std::max(step->end_ns, a.end);
      const Interval iv{a.start, a.end};
      streams[a.stream].push_back(iv);
      const int ph = static_cast<int>(a.phase);
      if (a.kernel) step->kernel_sum_by_phase_stream[{ph, a.stream}] += a.end - a.start;
      if (a.comm) {
        comm.push_back(iv);
        by_kind[static_cast<int>(a.comm_kind)].push_back(iv);
        comm_phase[ph].push_back(iv);
        ++step->comm_kernels;
      } else {
        compute.push_back(iv);
        compute_phase[ph].push_back(iv);
      }
      if (a.phase == Phase::kForward) forward_all.push_back(iv);
      if (a.phase == Phase::kBackward || a.phase == Phase::kWeightGrad) {
        backward_all.push_back(iv);
      }
    }
    step->gpu_activities = static_cast<int>(acts.size());
    const std::vector<Interval> compute_set = Union(compute);
    const std::vector<Interval> comm_set = Union(comm);
    step->compute_ns = Length(compute_set);
    step->comm_ns = Length(comm_set);
    step->exposed_comm_ns = step->comm_ns - OverlapLength(comm_set, compute_set);
    for (int k = 0; k < kCommKinds; ++k) {
      const std::vector<Interval> set = Union(by_kind[k]);
      step->comm_by_kind[k] = Length(set);
      step->exposed_by_kind[k] = Length(set) - OverlapLength(set, compute_set);
    }
    for (int p = 0; p < kPhases; ++p) {
      step->compute_by_phase[p] = Length(Union(compute_phase[p]));
      step->comm_by_phase[p] = Length(Union(comm_phase[p]));
    }
    for (auto& [stream, ivs] : streams) step->stream_busy[stream] = Length(Union(ivs));
    {
      const std::vector<Interval> f = Union(forward_all), b = Union(backward_all);
      const TimeNs shorter = std::min(Length(f), Length(b));
      step->forward_backward_interleave =
          shorter > 0 && static_cast<double>(OverlapLength(f, b)) >
                             kPairOverlapShare * static_cast<double>(shorter);
    }
    for (const TraceEvent* m : memory_) {
      if (m->start_ns >= step->cpu_start_ns && m->start_ns < step->cpu_end_ns) {
        step->peak_allocated_bytes = std::max(step->peak_allocated_bytes, m->bytes);
      }
    }
    BuildOps(acts, weight_ranges, step);
  }

  // One op per action range (an overlapped pair: two halves splitting its span evenly), per
  // outermost phase range, or per run of same-phase inferred work; numbered in order.
  void BuildOps(const std::vector<Activity>& acts, bool weight_ranges, RankStep* step) {
    struct Group {
      const Range* range = nullptr;
      Phase phase = Phase::kOther;
      TimeNs start = 0, end = 0;
      std::vector<Interval> compute, comm;
    };
    std::vector<Group> groups;
    std::unordered_map<int, size_t> by_id;
    int run = 0;
    Phase last_inferred = Phase::kOther;
    for (const Activity& a : acts) {
      if (a.phase != Phase::kForward && a.phase != Phase::kBackward &&
          a.phase != Phase::kWeightGrad) {
        continue;
      }
      int id = a.group;
      if (a.range == nullptr) {
        // Inferred work: consecutive activities of one phase make one op.
        if (a.phase != last_inferred) ++run;
        last_inferred = a.phase;
        id = -1000 - run;
      }
      auto [it, fresh] = by_id.try_emplace(id, groups.size());
      if (fresh) groups.push_back(Group{a.range, a.phase, a.start, a.end, {}, {}});
      Group& g = groups[it->second];
      g.start = std::min(g.start, a.start);
      g.end = std::max(g.end, a.end);
      (a.comm ? g.comm : g.compute).push_back({a.start, a.end});
    }
    std::array<int, 4> count{};
    for (const Group& g : groups) {
      MeasuredOp op;
      op.start_ns = g.start;
      op.end_ns = g.end;
      op.compute_ns = Length(Union(g.compute));
      op.comm_ns = Length(Union(g.comm));
      if (g.range != nullptr && g.range->what.kind == RangeName::Kind::kAction) {
        op.action = g.range->what.action;
        if (g.range->what.pair_backward) {
          // The trace times the pair as one range; its halves share the span evenly.
          MeasuredOp second = op;
          const TimeNs mid = op.start_ns + (op.end_ns - op.start_ns) / 2;
          op.end_ns = mid;
          second.start_ns = mid;
          second.action = *g.range->what.pair_backward;
          op.compute_ns /= 2;
          op.comm_ns /= 2;
          second.compute_ns -= op.compute_ns;
          second.comm_ns -= op.comm_ns;
          step->ops.push_back(op);
          step->ops.push_back(second);
          continue;
        }
      } else {
        op.inferred = true;
        op.action.kind = g.phase == Phase::kForward      ? OpKind::kForward
                         : g.phase == Phase::kWeightGrad ? OpKind::kBackwardWeight
                         : weight_ranges                 ? OpKind::kBackwardInput
                                                         : OpKind::kBackward;
        op.action.microbatch = count[static_cast<int>(op.action.kind)]++;
      }
      step->ops.push_back(op);
    }
    std::stable_sort(
        step->ops.begin(), step->ops.end(),
        [](const MeasuredOp& a, const MeasuredOp& b) { return a.start_ns < b.start_ns; });
  }

  // Groups of work without a phase range of their own.
  static constexpr int kAutogradGroup = -2;
  static constexpr int kMainThreadGroup = -3;
  // An overlapped F&B pair runs each half's communication under the other half's compute, so
  // the two halves' GPU work overlaps for most of the shorter one; in 1F1B only pipeline sends
  // overlap the next op. Above this share the summary applies the pair model.
  static constexpr double kPairOverlapShare = 0.5;

  const TraceFile& trace_;
  std::unordered_map<int64_t, const TraceEvent*> launches_;
  std::map<int64_t, RangeList> phase_, comm_, autograd_;
  std::vector<StepRange> steps_;
  std::vector<const TraceEvent*> memory_;
  std::vector<std::vector<Activity>> by_step_;
  int64_t main_thread_ = 0;
};

// Micro-batches whose activations a rank holds at once: from a (stage, micro-batch)'s first
// forward start to the end of its last backward op (B, or W where the backward is split).
int PeakInflight(const std::vector<MeasuredOp>& ops) {
  std::map<std::pair<int, int>, std::pair<TimeNs, TimeNs>> held;  // (stage, mb) -> [F, last B/W]
  for (const MeasuredOp& op : ops) {
    if (op.inferred) return 0;  // not micro-batches
    auto [it, fresh] = held.try_emplace({op.action.stage, op.action.microbatch},
                                        std::pair<TimeNs, TimeNs>{INT64_MAX, INT64_MIN});
    if (op.action.kind == OpKind::kForward) {
      it->second.first = std::min(it->second.first, op.start_ns);
    } else {
      it->second.second = std::max(it->second.second, op.end_ns);
    }
  }
  std::vector<std::pair<TimeNs, int>> changes;
  for (const auto& [key, span] : held) {
    if (span.first == INT64_MAX || span.second == INT64_MIN) continue;
    changes.push_back({span.first, +1});
    changes.push_back({span.second, -1});
  }
  std::sort(changes.begin(), changes.end());  // a release before a take at the same time
  int now = 0, peak = 0;
  for (const auto& [t, d] : changes) peak = std::max(peak, now += d);
  return peak;
}

std::string StepsText(const MeasuredRank& r) {
  if (r.steps.empty()) return "none";
  if (r.steps.size() == 1) return fmt::format("{}", r.steps[0].step);
  return fmt::format("{} to {}", r.steps.front().step, r.steps.back().step);
}

}  // namespace

Status MeasureOptions::Validate() const {
  if (skip_steps < 0) {
    return Status::InvalidArgument(
        fmt::format("--skip-steps is {}: give 0 or more steps to skip", skip_steps));
  }
  return Status::Ok();
}

const RankStep& MeasuredRun::Step(int r, int i) const {
  const std::vector<RankStep>& steps = ranks[r].steps;
  return *std::lower_bound(steps.begin(), steps.end(), this->steps[i],
                           [](const RankStep& s, int number) { return s.step < number; });
}

namespace {

// What a Kineto rank's ops came from, for the report.
const char* OpsFrom(const MeasuredRank& r) {
  bool actions = false, phases = false, inferred = false;
  for (const RankStep& s : r.steps) {
    for (const MeasuredOp& op : s.ops) actions = actions || !op.inferred;
    phases = phases || !s.ops.empty();
    inferred = inferred || s.phases_inferred;
  }
  return actions    ? "pipeline actions (PP:<action> ranges)"
         : inferred ? "no phase ranges: backward from autograd, forward inferred"
         : phases   ? "phase ranges (not pipeline actions: ops numbered in order)"
                    : "none";
}

// One rank per PyTorch profiler trace, in the order given; the traces must be distinct ranks of
// one run.
Status KinetoRanks(const std::vector<TraceFile>& traces, const MeasureOptions& options,
                   std::vector<MeasuredRank>* ranks) {
  std::map<int, std::string> global_ranks;
  for (size_t i = 0; i < traces.size(); ++i) {
    const TraceFile& t = traces[i];
    MeasuredRank r;
    r.file = t.origin;
    r.rank = static_cast<int>(i);
    r.global_rank = t.rank;
    r.world_size = t.world_size;
    r.device = t.device;
    PIPECAST_RETURN_IF_ERROR(KinetoRank(t).Build(&r));
    if (t.rank) {
      auto [it, fresh] = global_ranks.try_emplace(*t.rank, t.origin);
      if (!fresh) {
        return Status::InvalidArgument(fmt::format(
            "{} and {} are both rank {} (distributedInfo.rank): give one trace per rank",
            it->second, t.origin, *t.rank));
      }
    }
    if (t.world_size && ranks->size() > 0 && (*ranks)[0].world_size &&
        *(*ranks)[0].world_size != *t.world_size) {
      return Status::InvalidArgument(fmt::format(
          "{} says world size {} but {} says {} (distributedInfo.world_size): the traces "
          "come from different runs",
          (*ranks)[0].file, *(*ranks)[0].world_size, t.origin, *t.world_size));
    }
    r.ops_from = OpsFrom(r);
    if (options.skip_steps > 0) {
      const size_t drop = std::min(r.steps.size(), static_cast<size_t>(options.skip_steps));
      r.steps.erase(r.steps.begin(), r.steps.begin() + static_cast<std::ptrdiff_t>(drop));
      if (r.steps.empty()) {
        return Status::FailedPrecondition(
            fmt::format("{}: --skip-steps {} leaves none of its steps: skip fewer", t.origin,
                        options.skip_steps));
      }
    }
    ranks->push_back(std::move(r));
  }
  return Status::Ok();
}

// The step numbers every rank has, ascending.
Result<std::vector<int>> CommonSteps(const std::vector<MeasuredRank>& ranks) {
  std::vector<int> common;
  for (const RankStep& s : ranks[0].steps) common.push_back(s.step);
  for (const MeasuredRank& r : ranks) {
    std::vector<int> mine, both;
    for (const RankStep& s : r.steps) mine.push_back(s.step);
    std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                          std::back_inserter(both));
    common = both;
  }
  if (common.empty()) {
    std::string list;
    for (const MeasuredRank& r : ranks) {
      list += fmt::format("{}{}: steps {}", list.empty() ? "" : "; ", r.file, StepsText(r));
    }
    return Status::InvalidArgument(fmt::format(
        "the traces share no ProfilerStep number ({}): profile the same iterations on every "
        "rank",
        list));
  }
  return common;
}

// Each common step's iteration time (the latest end less the earliest start over the ranks)
// and the median step.
void IterationTimes(MeasuredRun* run) {
  for (size_t i = 0; i < run->steps.size(); ++i) {
    TimeNs first = INT64_MAX, last = INT64_MIN;
    for (size_t r = 0; r < run->ranks.size(); ++r) {
      const RankStep& s = run->Step(static_cast<int>(r), static_cast<int>(i));
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
    }
    run->iteration_ns.push_back(last - first);
  }
  std::vector<std::pair<TimeNs, int>> order;
  for (size_t i = 0; i < run->iteration_ns.size(); ++i) {
    order.push_back({run->iteration_ns[i], static_cast<int>(i)});
  }
  std::sort(order.begin(), order.end());
  run->median = order[(order.size() - 1) / 2].second;
}

// What the report says about how the run was read: clocks, unmatched launches, inferred phases.
void AddRunNotes(MeasuredRun* run) {
  if (!run->pipecast_trace && run->ranks.size() > 1) {
    run->notes.push_back(
        "iteration time across ranks: the latest window end less the earliest start, with the "
        "ranks' trace clocks taken as one (Kineto stamps with the host clock)");
  }
  for (const MeasuredRank& r : run->ranks) {
    if (r.unmatched_launches > 0) {
      run->notes.push_back(fmt::format(
          "rank {}: {} GPU activities have no launch record in the trace: placed in a step by "
          "their GPU start, with no phase",
          r.rank, r.unmatched_launches));
    }
    for (const RankStep& s : r.steps) {
      if (s.phases_inferred) {
        run->notes.push_back(fmt::format(
            "rank {}: no phase ranges (record_function) in its steps: backward is the work "
            "launched inside autograd, forward the main thread's other launches (inferred)",
            r.rank));
        break;
      }
    }
  }
}

}  // namespace

// Read the ranks (one pipecast trace of every rank, or one PyTorch profiler trace a rank), keep
// the steps all share, time each, and note how the run was read.
Result<MeasuredRun> BuildMeasuredRun(const std::vector<TraceFile>& traces,
                                     const MeasureOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  if (traces.empty()) return Status::InvalidArgument("no trace given");
  MeasuredRun run;
  int pipecast_files = 0;
  for (const TraceFile& t : traces) pipecast_files += t.pipecast_label.has_value();
  if (pipecast_files != 0 && pipecast_files != static_cast<int>(traces.size())) {
    return Status::InvalidArgument(
        "the traces mix pipecast's own traces with PyTorch profiler traces: give one kind");
  }
  run.pipecast_trace = pipecast_files > 0;
  if (run.pipecast_trace) {
    if (traces.size() != 1) {
      return Status::InvalidArgument(
          "a pipecast trace holds every rank: give one file (simulator or validator --trace)");
    }
    PIPECAST_RETURN_IF_ERROR(internal::PipecastRanks(traces[0], options.label, &run.ranks));
  } else {
    PIPECAST_RETURN_IF_ERROR(KinetoRanks(traces, options, &run.ranks));
  }
  PIPECAST_ASSIGN_OR_RETURN(run.steps, CommonSteps(run.ranks));
  IterationTimes(&run);
  AddRunNotes(&run);
  return run;
}

Result<MeasuredRun> MeasureFiles(const std::vector<std::string>& paths,
                                 const MeasureOptions& options) {
  std::vector<TraceFile> traces;
  for (const std::string& p : paths) {
    PIPECAST_ASSIGN_OR_RETURN(TraceFile t, ReadTraceFile(p));
    traces.push_back(std::move(t));
  }
  return BuildMeasuredRun(traces, options);
}

SimResult MeasuredTimeline(const MeasuredRun& run, int i) {
  SimResult m;
  m.schedule_name = "measured";
  m.ranks = static_cast<int>(run.ranks.size());
  TimeNs origin = INT64_MAX;
  for (int r = 0; r < m.ranks; ++r) origin = std::min(origin, run.Step(r, i).start_ns);
  const TimeNs span = run.iteration_ns[i];
  int stages = m.ranks, microbatches = 0;
  double bubble_sum = 0;
  for (int r = 0; r < m.ranks; ++r) {
    const RankStep& s = run.Step(r, i);
    StageResult sr;
    sr.rank = r;
    sr.busy_ns = s.compute_ns;
    sr.first_start_ns = s.start_ns - origin;
    sr.last_end_ns = s.end_ns - origin;
    sr.bubble_ratio = span > 0 ? 1.0 - static_cast<double>(s.compute_ns) / span : 0;
    sr.peak_memory_bytes = std::max<Bytes>(s.peak_allocated_bytes, 0);
    std::set<int> own;
    for (const MeasuredOp& op : s.ops) {
      Action a = op.action;
      if (op.inferred) a.stage = r;
      m.ops.push_back(OpRecord{r, a, op.start_ns - origin, op.end_ns - origin});
      own.insert(a.stage);
      stages = std::max(stages, a.stage + 1);
      microbatches = std::max(microbatches, a.microbatch + 1);
    }
    sr.stages.assign(own.begin(), own.end());
    sr.bubble_fraction_of_ideal =
        s.compute_ns > 0 ? static_cast<double>(span - s.compute_ns) / s.compute_ns : 0;
    sr.peak_inflight_microbatches = PeakInflight(s.ops);
    bubble_sum += sr.bubble_ratio;
    m.per_rank.push_back(std::move(sr));
  }
  m.stages = stages;
  m.microbatches = microbatches;
  m.pipeline_ns = span;
  m.iteration_ns = span;
  m.bubble_ratio = m.ranks > 0 ? bubble_sum / m.ranks : 0;
  TimeNs busy = 0, idle = 0;
  for (const StageResult& s : m.per_rank) {
    busy += s.busy_ns;
    idle += span - s.busy_ns;
  }
  m.bubble_fraction_of_ideal = busy > 0 ? static_cast<double>(idle) / busy : 0;
  std::stable_sort(m.ops.begin(), m.ops.end(), [](const OpRecord& a, const OpRecord& b) {
    return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
  });
  return m;
}

}  // namespace pipecast::measured
