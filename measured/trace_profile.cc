#include "measured/trace_profile.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "profiler/attribution.h"
#include "profiler/cupti_model.h"

namespace pipecast::measured {
namespace {

// Correlation ids in a Kineto trace are 64-bit; the records take 32. Each
// distinct id gets the next number.
class Ids {
 public:
  uint32_t Of(int64_t id) {
    auto [it, fresh] = ids_.try_emplace(id, next_);
    if (fresh) ++next_;
    return it->second;
  }
  uint32_t Fresh() { return next_++; }

 private:
  std::unordered_map<int64_t, uint32_t> ids_;
  uint32_t next_ = 1;
};

}  // namespace

Status TraceProfileOptions::Validate() const {
  if (name.empty()) return Status::InvalidArgument("--name is required: the model's name");
  if (traces.empty()) return Status::InvalidArgument("give at least one trace");
  if (microbatch_sizes.size() != 1 && microbatch_sizes.size() != traces.size()) {
    return Status::InvalidArgument(fmt::format(
        "--microbatch-sizes has {} values for {} traces: give one for all or one per trace",
        microbatch_sizes.size(), traces.size()));
  }
  for (int b : microbatch_sizes) {
    if (b < 1 || b > 1'000'000) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes: {} is not a micro-batch size (1 to 1000000)", b));
    }
  }
  return aggregate.Validate();
}

Result<ActivityTrace> ActivityFromTrace(const TraceFile& t) {
  ActivityTrace a;
  Ids ids;
  uint32_t marker = 1;
  auto bad_time = [&](const TraceEvent& e) {
    return Status::InvalidArgument(
        fmt::format("{}: an event at {} ns, before the clock's zero: not a trace of a real run",
                    t.origin, e.start_ns));
  };
  for (const TraceEvent& e : t.events) {
    if (e.start_ns < 0) return bad_time(e);
    const uint64_t start = static_cast<uint64_t>(e.start_ns);
    const uint64_t end = static_cast<uint64_t>(e.end_ns());
    const uint32_t thread = static_cast<uint32_t>(e.tid);
    switch (e.kind) {
      case TraceEvent::Kind::kKernel:
      case TraceEvent::Kind::kGpuMemory: {
        GpuEvent g;
        g.kind =
            e.kind == TraceEvent::Kind::kKernel ? GpuEvent::Kind::kKernel : GpuEvent::Kind::kMemcpy;
        g.start_ns = start;
        g.end_ns = end;
        g.device_id = static_cast<uint32_t>(std::max(e.device, 0));
        g.stream_id = static_cast<uint32_t>(std::max(e.stream, 0));
        g.correlation_id = e.correlation >= 0 ? ids.Of(e.correlation) : ids.Fresh();
        g.name = t.Name(e);
        a.gpu.push_back(std::move(g));
        break;
      }
      case TraceEvent::Kind::kLaunch:
        a.api.push_back(ApiEvent{false, 0, start, end, thread, ids.Of(e.correlation)});
        break;
      case TraceEvent::Kind::kRange: {
        const RangeName what = ClassifyRange(t.Name(e));
        std::string name;
        if (what.kind == RangeName::Kind::kLayer) {
          name = t.Name(e);
        } else if (what.kind == RangeName::Kind::kStep) {
          name = kStepRangeName;
        } else {
          break;
        }
        const uint32_t id = marker++;
        a.markers.push_back({MarkerEvent::Phase::kStart, start, id, thread, name, ""});
        a.markers.push_back({MarkerEvent::Phase::kEnd, end, id, thread, "", ""});
        break;
      }
      case TraceEvent::Kind::kMemory: {
        if (e.delta_bytes == 0) break;
        // Joined to a range as a launch is: by its thread and time.
        const uint32_t corr = ids.Fresh();
        a.api.push_back(ApiEvent{false, 0, start, start, thread, corr});
        MemoryEvent m;
        m.allocation = e.delta_bytes > 0;
        m.timestamp_ns = start;
        m.device_id = static_cast<uint32_t>(std::max(e.device, 0));
        m.correlation_id = corr;
        m.address = static_cast<uint64_t>(e.address);
        m.bytes = static_cast<uint64_t>(e.delta_bytes > 0 ? e.delta_bytes : -e.delta_bytes);
        a.memory.push_back(m);
        break;
      }
      case TraceEvent::Kind::kPipecastOp:
        break;
    }
  }
  if (!t.device.empty()) {
    DeviceInfo d;
    d.name = t.device;
    a.devices.push_back(d);
  }
  return a;
}

Result<Model> TraceProfileModel(const TraceProfileOptions& o) {
  PIPECAST_RETURN_IF_ERROR(o.Validate());
  std::map<int, std::vector<ActivityTrace>> by_size;
  std::map<int, std::vector<std::string>> files;
  for (size_t i = 0; i < o.traces.size(); ++i) {
    PIPECAST_ASSIGN_OR_RETURN(TraceFile t, ReadTraceFile(o.traces[i]));
    if (t.pipecast_label) {
      return Status::InvalidArgument(fmt::format(
          "{}: a trace pipecast wrote has ops, not layers: give a PyTorch profiler trace",
          o.traces[i]));
    }
    PIPECAST_ASSIGN_OR_RETURN(ActivityTrace a, ActivityFromTrace(t));
    bool layers = false;
    for (const MarkerEvent& m : a.markers) {
      layers = layers || (m.phase == MarkerEvent::Phase::kStart && m.name != kStepRangeName);
    }
    if (!layers) {
      return Status::InvalidArgument(fmt::format(
          "{}: no layer range: mark each layer's passes with record_function ranges named "
          "pipecast:<layer>:forward, pipecast:<layer>:backward (and :weight_grad) as "
          "docs/measured-runs.md shows",
          o.traces[i]));
    }
    const int size = o.microbatch_sizes.size() == 1 ? o.microbatch_sizes[0] : o.microbatch_sizes[i];
    by_size[size].push_back(std::move(a));
    files[size].push_back(o.traces[i]);
  }
  std::vector<CuptiMeasurement> measurements;
  for (auto& [size, traces] : by_size) {
    Result<CuptiMeasurement> m = MeasureTraces(traces, size, o.aggregate);
    if (!m.ok()) {
      std::string list;
      for (const std::string& f : files[size]) list += (list.empty() ? "" : ", ") + f;
      return m.status().WithPrefix(fmt::format("micro-batch size {} ({})", size, list));
    }
    measurements.push_back(std::move(*m));
  }
  PIPECAST_ASSIGN_OR_RETURN(Model model, BuildCuptiModel(o.name, measurements, o.aggregate, {}));
  model.source.method = "trace";
  auto& d = model.source.details;
  d.erase("cupti_version");
  d.erase("clocks");
  nlohmann::json traces = nlohmann::json::object();
  for (const auto& [size, list] : files) traces[fmt::format("microbatch_size={}", size)] = list;
  d["traces"] = traces.dump();
  d["memory_metric"] = nlohmann::json(
                           "activation_bytes: PyTorch caching-allocator allocations "
                           "([memory] events, profile_memory=True) made inside the layer's "
                           "forward range and still held when it ends, median over iterations; "
                           "0 when the trace has no memory events")
                           .dump();
  return model;
}

}  // namespace pipecast::measured
