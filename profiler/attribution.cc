#include "profiler/attribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

namespace pipecast {
namespace {

// One closed NVTX range.
struct RangeRec {
  std::string name;
  uint32_t thread_id = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// A layer range with its place in its thread's nesting.
struct LayerRange {
  LayerRangeName name;
  uint32_t thread_id = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  int parent = -1;                // index into the layer ranges; enclosing range on the thread
  int sample = -1;                // index into the samples when this range is one
  std::vector<int> sample_chain;  // samples that include this range's work
};

// Pairs START and END markers by id. END before START in the vector is fine
// (buffers from several threads arrive in any order).
std::vector<RangeRec> PairMarkers(const std::vector<MarkerEvent>& markers,
                                  AttributionStats* stats) {
  std::unordered_map<uint32_t, const MarkerEvent*> starts;
  for (const MarkerEvent& m : markers) {
    if (m.phase == MarkerEvent::Phase::kStart) starts[m.id] = &m;
  }
  std::vector<RangeRec> ranges;
  for (const MarkerEvent& m : markers) {
    if (m.phase != MarkerEvent::Phase::kEnd) continue;
    auto it = starts.find(m.id);
    if (it == starts.end()) {
      ++stats->unmatched_range_ends;
      continue;
    }
    const MarkerEvent& s = *it->second;
    ranges.push_back(
        {s.name, s.thread_id, s.timestamp_ns, std::max(s.timestamp_ns, m.timestamp_ns)});
    starts.erase(it);
  }
  stats->unclosed_ranges += starts.size();
  return ranges;
}

bool Contains(uint64_t start, uint64_t end, uint64_t t) { return start <= t && t <= end; }

// The layer ranges of each thread, sorted by start, with parents; answers
// "innermost layer range open on thread T at time t".
class RangeIndex {
 public:
  explicit RangeIndex(std::vector<LayerRange>* ranges) : ranges_(*ranges) {
    std::vector<int> order(ranges_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      const LayerRange& ra = ranges_[a];
      const LayerRange& rb = ranges_[b];
      if (ra.thread_id != rb.thread_id) return ra.thread_id < rb.thread_id;
      if (ra.start_ns != rb.start_ns) return ra.start_ns < rb.start_ns;
      if (ra.end_ns != rb.end_ns) return ra.end_ns > rb.end_ns;  // outer first
      return a < b;
    });
    for (int i : order) by_thread_[ranges_[i].thread_id].push_back(i);
    for (auto& [thread, list] : by_thread_) {
      std::vector<int> stack;
      for (int i : list) {
        LayerRange& r = ranges_[i];
        while (!stack.empty() && ranges_[stack.back()].end_ns < r.start_ns) stack.pop_back();
        r.parent = stack.empty() ? -1 : stack.back();
        stack.push_back(i);
      }
    }
  }

  // -1 when no layer range of `thread` contains t.
  int Innermost(uint32_t thread, uint64_t t) const {
    auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return -1;
    const std::vector<int>& list = it->second;
    auto pos = std::upper_bound(list.begin(), list.end(), t,
                                [&](uint64_t v, int i) { return v < ranges_[i].start_ns; });
    if (pos == list.begin()) return -1;
    int r = *(pos - 1);
    while (r >= 0 && !Contains(ranges_[r].start_ns, ranges_[r].end_ns, t)) r = ranges_[r].parent;
    return r;
  }

 private:
  std::vector<LayerRange>& ranges_;
  std::map<uint32_t, std::vector<int>> by_thread_;
};

// Busy time: the union of [start, end) intervals per device, summed.
uint64_t BusyNs(std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t busy = 0;
  size_t i = 0;
  while (i < intervals.size()) {
    const uint32_t device = intervals[i].first;
    uint64_t lo = intervals[i].second.first;
    uint64_t hi = intervals[i].second.second;
    for (++i; i < intervals.size() && intervals[i].first == device; ++i) {
      const auto [s, e] = intervals[i].second;
      if (s > hi) {
        busy += hi - lo;
        lo = s;
        hi = e;
      } else {
        hi = std::max(hi, e);
      }
    }
    busy += hi - lo;
  }
  return busy;
}

uint64_t BusyOf(const std::vector<GpuEvent>& gpu, const std::vector<int>& events) {
  std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> intervals;
  intervals.reserve(events.size());
  for (int e : events) intervals.push_back({gpu[e].device_id, {gpu[e].start_ns, gpu[e].end_ns}});
  return BusyNs(std::move(intervals));
}

void SortUnique(std::vector<int>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

// Allocation/release replay per device, in host-time order.
class MemoryReplay {
 public:
  explicit MemoryReplay(const std::vector<MemoryEvent>& memory) : memory_(memory) {
    for (size_t i = 0; i < memory.size(); ++i) {
      by_device_[memory[i].device_id].push_back(static_cast<int>(i));
      if (!memory[i].allocation) {
        frees_[{memory[i].device_id, memory[i].address}].push_back(memory[i].timestamp_ns);
      }
    }
    for (auto& [device, list] : by_device_) {
      std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
        return memory_[a].timestamp_ns < memory_[b].timestamp_ns;
      });
      std::vector<int64_t>& live = live_after_[device];
      int64_t total = 0;
      for (int i : list) {
        const int64_t b = static_cast<int64_t>(memory_[i].bytes);
        total += memory_[i].allocation ? b : -b;
        live.push_back(total);
      }
    }
    for (auto& [key, times] : frees_) std::sort(times.begin(), times.end());
  }

  // True when allocation `i` is still allocated at time t.
  bool AliveAt(int i, uint64_t t) const {
    const MemoryEvent& a = memory_[i];
    auto it = frees_.find({a.device_id, a.address});
    if (it == frees_.end()) return true;
    auto f = std::lower_bound(it->second.begin(), it->second.end(), a.timestamp_ns);
    return f == it->second.end() || *f > t;
  }

  // Highest live total inside [start, end] above the total just before
  // start, summed over devices.
  int64_t PeakAbove(uint64_t start, uint64_t end) const {
    int64_t peak = 0;
    for (const auto& [device, list] : by_device_) {
      const std::vector<int64_t>& live = live_after_.at(device);
      auto first = std::lower_bound(list.begin(), list.end(), start,
                                    [&](int i, uint64_t t) { return memory_[i].timestamp_ns < t; });
      const size_t k0 = static_cast<size_t>(first - list.begin());
      const int64_t before = k0 == 0 ? 0 : live[k0 - 1];
      int64_t best = 0;
      for (size_t k = k0; k < list.size() && memory_[list[k]].timestamp_ns <= end; ++k) {
        best = std::max(best, live[k] - before);
      }
      peak += best;
    }
    return peak;
  }

 private:
  const std::vector<MemoryEvent>& memory_;
  std::map<uint32_t, std::vector<int>> by_device_;
  std::map<uint32_t, std::vector<int64_t>> live_after_;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint64_t>> frees_;
};

Result<int64_t> ParseCount(std::string_view value, std::string_view name) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v < 0) {
    return Status::InvalidArgument(
        fmt::format("NVTX range \"{}\": '{}' is not a count >= 0 (docs/profiler.md, range names)",
                    name, value));
  }
  return v;
}

}  // namespace

const char* PassName(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "forward";
    case Pass::kBackward:
      return "backward";
    case Pass::kWeightGrad:
      return "weight_grad";
  }
  return "forward";
}

Result<std::optional<LayerRangeName>> ParseLayerRangeName(std::string_view name) {
  const std::string_view prefix = kRangePrefix;
  if (name.substr(0, prefix.size()) != prefix || name == kStepRangeName) {
    return std::optional<LayerRangeName>();
  }
  std::vector<std::string_view> parts;
  std::string_view rest = name.substr(prefix.size());
  for (;;) {
    const size_t colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format(
        "NVTX range \"{}\": {}; layer ranges are named pipecast:<layer>:forward|backward|"
        "weight_grad[:params=N][:out=BYTES][:ckpt=BYTES][:wgrad=BYTES] (docs/profiler.md)",
        name, why));
  };
  if (parts.size() < 2) return bad("no pass after the layer name");
  LayerRangeName out;
  out.layer = std::string(parts[0]);
  if (out.layer.empty()) return bad("empty layer name");
  if (parts[1] == "forward") {
    out.pass = Pass::kForward;
  } else if (parts[1] == "backward") {
    out.pass = Pass::kBackward;
  } else if (parts[1] == "weight_grad") {
    out.pass = Pass::kWeightGrad;
  } else {
    return bad(fmt::format("unknown pass '{}'", parts[1]));
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string_view key = parts[i].substr(0, eq);
    std::optional<int64_t>* field = nullptr;
    if (key == "params") field = &out.parameters;
    if (key == "out") field = &out.output_bytes;
    if (key == "ckpt") field = &out.checkpoint_bytes;
    if (key == "wgrad") field = &out.weight_grad_bytes;
    if (eq == std::string_view::npos || field == nullptr) {
      return bad(fmt::format(
          "unknown attribute '{}' (known: params=N, out=BYTES, ckpt=BYTES, wgrad=BYTES)",
          parts[i]));
    }
    PIPECAST_ASSIGN_OR_RETURN(int64_t v, ParseCount(parts[i].substr(eq + 1), name));
    *field = v;
  }
  return std::optional<LayerRangeName>(std::move(out));
}

namespace {

// The pipecast:step ranges, sorted.
using Steps = std::vector<std::pair<uint64_t, uint64_t>>;

// The step whose range holds time `t`, or -1.
int StepAt(const Steps& steps, uint64_t t) {
  auto it = std::upper_bound(steps.begin(), steps.end(), std::make_pair(t, UINT64_MAX));
  if (it == steps.begin() || !Contains((it - 1)->first, (it - 1)->second, t)) return -1;
  return static_cast<int>(it - 1 - steps.begin());
}

// Closed ranges split into steps and layer ranges; other names are ignored.
Status CollectRanges(const ActivityTrace& trace, AttributionStats* stats,
                     std::vector<LayerRange>* ranges, Steps* steps) {
  for (RangeRec& r : PairMarkers(trace.markers, stats)) {
    if (r.name == kStepRangeName) {
      steps->push_back({r.start_ns, r.end_ns});
      continue;
    }
    PIPECAST_ASSIGN_OR_RETURN(std::optional<LayerRangeName> name, ParseLayerRangeName(r.name));
    if (!name.has_value()) continue;
    LayerRange lr;
    lr.name = std::move(*name);
    lr.thread_id = r.thread_id;
    lr.start_ns = r.start_ns;
    lr.end_ns = r.end_ns;
    ranges->push_back(std::move(lr));
  }
  std::sort(steps->begin(), steps->end());
  stats->steps = static_cast<int>(steps->size());
  return Status::Ok();
}

// Instantaneous markers (nvtx.mark) with a layer name carry sizes known only after the range
// opened, such as the output size in a forward hook: the last nonzero value of each, per layer.
Result<std::map<std::string, LayerRangeName>> MarkedSizes(const ActivityTrace& trace) {
  std::map<std::string, LayerRangeName> marked;
  for (const MarkerEvent& m : trace.markers) {
    if (m.phase != MarkerEvent::Phase::kInstant) continue;
    PIPECAST_ASSIGN_OR_RETURN(std::optional<LayerRangeName> name, ParseLayerRangeName(m.name));
    if (!name.has_value()) continue;
    LayerRangeName& into = marked[name->layer];
    if (name->parameters) into.parameters = name->parameters;
    if (name->output_bytes) into.output_bytes = name->output_bytes;
    if (name->checkpoint_bytes) into.checkpoint_bytes = name->checkpoint_bytes;
    if (name->weight_grad_bytes) into.weight_grad_bytes = name->weight_grad_bytes;
  }
  return marked;
}

// The ranges that are samples, in start order (for stable occurrences): a range is one unless an
// enclosing range is another layer's or the same pass of its own. Sets each range's `sample` and
// `sample_chain` (the samples that include its work).
std::vector<LayerSample> PickSamples(const std::map<std::string, LayerRangeName>& marked,
                                     std::vector<LayerRange>* ranges_in) {
  std::vector<LayerRange>& ranges = *ranges_in;
  std::vector<LayerSample> samples;
  std::vector<int> by_start(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) by_start[i] = static_cast<int>(i);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](int a, int b) { return ranges[a].start_ns < ranges[b].start_ns; });
  std::map<std::pair<std::string, Pass>, int> occurrences;
  for (int i : by_start) {
    LayerRange& r = ranges[i];
    bool sample = true;
    for (int p = r.parent; p >= 0; p = ranges[p].parent) {
      const LayerRange& a = ranges[p];
      if (a.name.layer != r.name.layer || a.name.pass == r.name.pass) {
        sample = false;
        break;
      }
    }
    if (!sample) continue;
    LayerSample s;
    s.layer = r.name.layer;
    s.pass = r.name.pass;
    s.occurrence = occurrences[{s.layer, s.pass}]++;
    s.start_ns = r.start_ns;
    s.end_ns = r.end_ns;
    s.parameters = r.name.parameters;
    s.output_bytes = r.name.output_bytes;
    s.checkpoint_bytes = r.name.checkpoint_bytes;
    s.weight_grad_bytes = r.name.weight_grad_bytes;
    if (auto it = marked.find(s.layer); it != marked.end()) {
      if (!s.parameters) s.parameters = it->second.parameters;
      if (!s.output_bytes) s.output_bytes = it->second.output_bytes;
      if (!s.checkpoint_bytes) s.checkpoint_bytes = it->second.checkpoint_bytes;
      if (!s.weight_grad_bytes) s.weight_grad_bytes = it->second.weight_grad_bytes;
    }
    r.sample = static_cast<int>(samples.size());
    samples.push_back(std::move(s));
  }
  for (LayerRange& r : ranges) {
    for (int p = static_cast<int>(&r - ranges.data()); p >= 0; p = ranges[p].parent) {
      if (ranges[p].sample >= 0) r.sample_chain.push_back(ranges[p].sample);
    }
  }
  return samples;
}

// Joins a record to the range open on its launching thread when the launch was made, through the
// API record with the same correlation id.
class ApiJoin {
 public:
  ApiJoin(const ActivityTrace& trace, const RangeIndex& index) : index_(index) {
    api_by_corr_.reserve(trace.api.size());
    for (const ApiEvent& a : trace.api) api_by_corr_.emplace(a.correlation_id, &a);
  }
  // The innermost range (or -1 with none open), -2 without an API record (*api null).
  int Owner(uint32_t correlation_id, const ApiEvent** api) const {
    auto it = api_by_corr_.find(correlation_id);
    *api = it == api_by_corr_.end() ? nullptr : it->second;
    if (*api == nullptr) return -2;
    return index_.Innermost((*api)->thread_id, (*api)->start_ns);
  }

 private:
  const RangeIndex& index_;
  std::unordered_map<uint32_t, const ApiEvent*> api_by_corr_;
};

// The GPU records of each sample and each step; counts the rest in `stats`.
struct GpuJoin {
  std::vector<std::vector<int>> by_sample;
  std::vector<std::vector<int>> by_step;
};

GpuJoin JoinGpuRecords(const ActivityTrace& trace, const ApiJoin& join,
                       const std::vector<LayerRange>& ranges, const Steps& steps, size_t samples,
                       AttributionStats* stats) {
  GpuJoin out;
  out.by_sample.resize(samples);
  out.by_step.resize(steps.size());
  std::vector<int> unattributed;
  stats->gpu_records = trace.gpu.size();
  for (size_t i = 0; i < trace.gpu.size(); ++i) {
    const ApiEvent* api = nullptr;
    const int r = join.Owner(trace.gpu[i].correlation_id, &api);
    if (api != nullptr && !steps.empty()) {
      if (int k = StepAt(steps, api->start_ns); k >= 0)
        out.by_step[k].push_back(static_cast<int>(i));
    }
    if (r == -2) {
      ++stats->unmatched;
      unattributed.push_back(static_cast<int>(i));
    } else if (r < 0 || ranges[r].sample_chain.empty()) {
      ++stats->outside_layers;
      unattributed.push_back(static_cast<int>(i));
    } else {
      ++stats->attributed;
      for (int s : ranges[r].sample_chain) out.by_sample[s].push_back(static_cast<int>(i));
    }
  }
  stats->unattributed_busy_ns = BusyOf(trace.gpu, unattributed);
  return out;
}

// The allocations made inside each sample.
std::vector<std::vector<int>> JoinAllocations(const ActivityTrace& trace, const ApiJoin& join,
                                              const std::vector<LayerRange>& ranges, size_t samples,
                                              AttributionStats* stats) {
  std::vector<std::vector<int>> by_sample(samples);
  stats->memory_records = trace.memory.size();
  for (size_t i = 0; i < trace.memory.size(); ++i) {
    const ApiEvent* api = nullptr;
    const int r = join.Owner(trace.memory[i].correlation_id, &api);
    if (r < 0 || ranges[r].sample_chain.empty()) continue;
    ++stats->memory_attributed;
    if (!trace.memory[i].allocation) continue;
    for (int s : ranges[r].sample_chain) by_sample[s].push_back(static_cast<int>(i));
  }
  return by_sample;
}

// Backward includes the weight gradient of the same occurrence.
void AddWeightGradToBackward(const std::vector<LayerSample>& samples,
                             std::vector<std::vector<int>>* gpu_by_sample) {
  std::map<std::pair<std::string, int>, int> weight_grad_of;
  for (size_t s = 0; s < samples.size(); ++s) {
    const LayerSample& ls = samples[s];
    if (ls.pass == Pass::kWeightGrad)
      weight_grad_of[{ls.layer, ls.occurrence}] = static_cast<int>(s);
  }
  for (size_t s = 0; s < samples.size(); ++s) {
    const LayerSample& ls = samples[s];
    if (ls.pass != Pass::kBackward) continue;
    auto it = weight_grad_of.find({ls.layer, ls.occurrence});
    if (it == weight_grad_of.end()) continue;
    const std::vector<int>& w = (*gpu_by_sample)[it->second];
    (*gpu_by_sample)[s].insert((*gpu_by_sample)[s].end(), w.begin(), w.end());
  }
}

// Each sample's time (sum and busy union of its GPU records), memory (kept at its end, peak
// inside it) and step; each step's span and busy time.
void Summarize(const ActivityTrace& trace, const Steps& steps, GpuJoin* gpu,
               const std::vector<std::vector<int>>& allocations, Attribution* result) {
  MemoryReplay replay(trace.memory);
  for (size_t s = 0; s < result->samples.size(); ++s) {
    LayerSample& ls = result->samples[s];
    std::vector<int>& records = gpu->by_sample[s];
    SortUnique(&records);
    ls.gpu_records = static_cast<int>(records.size());
    for (int e : records) ls.sum_ns += trace.gpu[e].end_ns - trace.gpu[e].start_ns;
    ls.busy_ns = BusyOf(trace.gpu, records);
    for (int a : allocations[s]) {
      if (replay.AliveAt(a, ls.end_ns))
        ls.kept_bytes += static_cast<int64_t>(trace.memory[a].bytes);
    }
    ls.peak_bytes = replay.PeakAbove(ls.start_ns, ls.end_ns);
    if (steps.empty()) {
      ls.step = ls.occurrence;
    } else if (int k = StepAt(steps, ls.start_ns); k >= 0) {
      ls.step = k;
    } else {
      ++result->stats.samples_outside_steps;
    }
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    result->steps.push_back({static_cast<int>(k), steps[k].second - steps[k].first,
                             BusyOf(trace.gpu, gpu->by_step[k])});
  }
}

}  // namespace

Result<Attribution> Attribute(const ActivityTrace& trace) {
  Attribution result;
  std::vector<LayerRange> ranges;
  Steps steps;
  PIPECAST_RETURN_IF_ERROR(CollectRanges(trace, &result.stats, &ranges, &steps));
  PIPECAST_ASSIGN_OR_RETURN(auto marked, MarkedSizes(trace));
  RangeIndex index(&ranges);  // sets each range's parent
  result.samples = PickSamples(marked, &ranges);
  const ApiJoin join(trace, index);
  GpuJoin gpu = JoinGpuRecords(trace, join, ranges, steps, result.samples.size(), &result.stats);
  const std::vector<std::vector<int>> allocations =
      JoinAllocations(trace, join, ranges, result.samples.size(), &result.stats);
  AddWeightGradToBackward(result.samples, &gpu.by_sample);
  Summarize(trace, steps, &gpu, allocations, &result);
  return result;
}

Status CheckRecordLoss(const ActivityTrace& trace, uint64_t unmatched, double max_fraction) {
  const uint64_t gpu_total = trace.gpu.size() + trace.zero_timestamp_records;
  const uint64_t kept =
      trace.gpu.size() + trace.api.size() + trace.markers.size() + trace.memory.size();
  struct Loss {
    uint64_t lost;
    uint64_t total;
    const char* what;
    const char* fix;
  };
  const Loss losses[] = {
      {trace.dropped_records + trace.invalid_records,
       kept + trace.dropped_records + trace.invalid_records,
       "records were dropped by CUPTI (its host activity buffers ran out) or incomplete",
       "profile fewer iterations or steps"},
      {trace.zero_timestamp_records, gpu_total,
       "GPU records have no timestamps (CUPTI's device timestamp buffers ran out)",
       "raise --device-buffer-mib or profile fewer iterations"},
      {unmatched, trace.gpu.size(),
       "GPU records have no launching API record, so their layer is unknown",
       "profile fewer iterations, and make sure nothing else (nsys, torch.profiler) uses CUPTI"},
  };
  for (const Loss& l : losses) {
    if (l.total == 0 || l.lost == 0) continue;
    const double share = static_cast<double>(l.lost) / static_cast<double>(l.total);
    if (share > max_fraction) {
      return Status::FailedPrecondition(fmt::format(
          "refusing the profile: {} of {} {} ({:.2f}%, over the {:.2f}% limit); the per-layer "
          "numbers would be silently wrong. To fix: {}",
          l.lost, l.total, l.what, 100 * share, 100 * max_fraction, l.fix));
    }
  }
  return Status::Ok();
}

}  // namespace pipecast
