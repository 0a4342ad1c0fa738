#include "profiler/cupti_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/text_table.h"
#include "sim/cluster.h"

namespace pipecast {
namespace {

using json = nlohmann::ordered_json;

std::string DeviceLabel(const std::vector<DeviceInfo>& devices) {
  if (devices.empty()) return "NVIDIA GPU (name not reported)";
  std::string label = devices.front().name.empty() ? "NVIDIA GPU" : devices.front().name;
  if (devices.size() > 1) label += fmt::format(" (+{} more devices)", devices.size() - 1);
  return label;
}

}  // namespace

Result<CuptiMeasurement> MeasureTraces(const std::vector<ActivityTrace>& traces,
                                       int microbatch_size, const AggregateOptions& options,
                                       double max_lost_fraction) {
  if (microbatch_size < 1) {
    return Status::InvalidArgument(
        fmt::format("--microbatch-size {} must be >= 1", microbatch_size));
  }
  CuptiMeasurement m;
  m.microbatch_size = microbatch_size;
  std::vector<Attribution> attributions;
  for (const ActivityTrace& t : traces) {
    for (const DeviceInfo& d : t.devices) {
      const bool known = std::any_of(m.devices.begin(), m.devices.end(),
                                     [&](const DeviceInfo& x) { return x.id == d.id; });
      if (!known) m.devices.push_back(d);
    }
    for (const std::string& e : t.errors) {
      m.warnings.push_back(fmt::format("process {}: {}", t.process_id, e));
    }
    if (t.gpu.empty() && t.zero_timestamp_records == 0) continue;
    Result<Attribution> a = Attribute(t);
    if (!a.ok()) return a.status().WithPrefix(fmt::format("process {}", t.process_id));
    PIPECAST_RETURN_IF_ERROR(CheckRecordLoss(t, a->stats.unmatched, max_lost_fraction)
                                 .WithPrefix(fmt::format("process {}", t.process_id)));
    if (!a->samples.empty() && a->stats.attributed == 0) {
      // Layer ranges and GPU work exist but never meet: a broken join would
      // otherwise write a model of zeros.
      return Status::FailedPrecondition(fmt::format(
          "process {}: {} layer ranges and {} GPU records, but no GPU record was launched inside "
          "a layer range on the same thread: are the ranges pushed on the threads that launch "
          "the work (NVTX ranges are per thread), and did NVTX reach CUPTI before the first "
          "launch?",
          t.process_id, a->samples.size(), a->stats.gpu_records));
    }
    AttributionStats& s = m.stats;
    s.gpu_records += a->stats.gpu_records;
    s.attributed += a->stats.attributed;
    s.outside_layers += a->stats.outside_layers;
    s.unmatched += a->stats.unmatched;
    s.unattributed_busy_ns += a->stats.unattributed_busy_ns;
    s.memory_records += a->stats.memory_records;
    s.memory_attributed += a->stats.memory_attributed;
    s.unclosed_ranges += a->stats.unclosed_ranges;
    s.unmatched_range_ends += a->stats.unmatched_range_ends;
    s.samples_outside_steps += a->stats.samples_outside_steps;
    s.steps = std::max(s.steps, a->stats.steps);
    m.dropped_records += t.dropped_records;
    m.zero_timestamp_records += t.zero_timestamp_records;
    m.invalid_records += t.invalid_records;
    m.overhead_ns += t.overhead_ns;
    if (m.cupti_version == 0) m.cupti_version = t.cupti_version;
    ++m.processes;
    attributions.push_back(std::move(*a));
  }
  if (attributions.empty()) {
    std::string why = "the profiled command ran no GPU work that CUPTI recorded";
    if (!m.warnings.empty()) why += " (" + m.warnings.front() + ")";
    return Status::FailedPrecondition(why + ": does it use CUDA, and did it exit normally?");
  }
  PIPECAST_ASSIGN_OR_RETURN(Aggregation agg, Aggregate(attributions, options));
  m.aggregation = std::move(agg);
  return m;
}

namespace {

json DevicesJson(const std::vector<DeviceInfo>& devices) {
  json out = json::array();
  for (const DeviceInfo& d : devices) {
    out.push_back({{"id", d.id},
                   {"name", d.name},
                   {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
                   {"sm_clock_mhz", d.core_clock_khz / 1000},
                   {"memory_bytes", d.memory_bytes},
                   {"multiprocessors", d.multiprocessors},
                   {"usable_memory_bytes", d.usable_memory_bytes},
                   {"context_memory_bytes", d.context_memory_bytes}});
  }
  return out;
}

// What CUPTI recorded for one micro-batch size, and what of it was attributed.
json RecordsJson(const CuptiMeasurement& m) {
  return {{"gpu_records", m.stats.gpu_records},
          {"attributed", m.stats.attributed},
          {"outside_layer_ranges", m.stats.outside_layers},
          {"without_api_record", m.stats.unmatched},
          {"unattributed_busy_us", m.stats.unattributed_busy_ns / 1000.0},
          {"memory_records", m.stats.memory_records},
          {"memory_attributed", m.stats.memory_attributed},
          {"dropped", m.dropped_records},
          {"zero_timestamps", m.zero_timestamp_records},
          {"invalid", m.invalid_records},
          {"unclosed_ranges", m.stats.unclosed_ranges},
          {"range_ends_without_start", m.stats.unmatched_range_ends},
          {"cupti_overhead_us", m.overhead_ns / 1000.0},
          {"processes", m.processes}};
}

// The first device's preset and the memory a plan must leave free on it: the largest CUDA
// context seen over the runs (one per micro-batch size).
void AddDeviceDetails(const std::vector<CuptiMeasurement>& measurements,
                      std::map<std::string, std::string>* d) {
  if (measurements.front().devices.empty()) return;
  const DeviceInfo& first = measurements.front().devices.front();
  if (const std::string preset = PresetForGpuName(first.name); !preset.empty()) {
    (*d)[kGpuPresetKey] = json(preset).dump();
  }
  uint64_t context = 0, usable = 0;
  for (const CuptiMeasurement& m : measurements) {
    for (const DeviceInfo& dev : m.devices) {
      if (dev.id != first.id || dev.context_memory_bytes == 0) continue;
      context = std::max(context, dev.context_memory_bytes);
      usable = usable == 0 ? dev.usable_memory_bytes : std::min(usable, dev.usable_memory_bytes);
    }
  }
  if (context > 0) {
    (*d)[kMeasuredMemoryKey] =
        json{{"device", first.name},
             {"usable_bytes", usable},
             {"cuda_context_bytes", context},
             {"method",
              "cuMemGetInfo right after the CUDA context was created (CUPTI "
              "resource callback): usable = total, context = total - free; the largest "
              "context over the runs. cuBLAS workspaces and NCCL buffers are the program's "
              "own allocations and are not in this figure"}}
            .dump();
  }
}

// How the times and bytes were measured, for whoever reads the model.
void AddMetricDetails(const AggregateOptions& options, std::map<std::string, std::string>* d) {
  (*d)["warmup"] = json(options.warmup).dump();
  (*d)["iterations"] = json(options.iterations).dump();
  (*d)["time_metric"] =
      json(
          "per layer and pass: union of the intervals of its kernels, copies and sets on each "
          "GPU (overlapping streams counted once), summed over GPUs; median over iterations. "
          "backward_us includes the weight_grad ranges of the same occurrence")
          .dump();
  (*d)["memory_metric"] =
      json(
          "activation_bytes: device allocations made inside the layer's forward range and "
          "still allocated when it ends (CUPTI MEMORY2 records), median over iterations. A "
          "caching allocator (PyTorch's default) hides these: see docs/profiler.md")
          .dump();
  (*d)["max_lost_record_fraction"] = json(kMaxLostRecordFraction).dump();
}

}  // namespace

// The model: each micro-batch size's profiles, then the source's details (devices, clocks,
// records, spread, warnings, memory, metrics).
Result<Model> BuildCuptiModel(const std::string& name,
                              const std::vector<CuptiMeasurement>& measurements,
                              const AggregateOptions& options,
                              const std::map<std::string, std::string>& extra_source) {
  if (measurements.empty()) return Status::Internal("BuildCuptiModel: no measurement");
  Model model;
  model.name = name;
  model.source.method = "cupti";
  model.source.device = DeviceLabel(measurements.front().devices);
  json spread = json::object();
  json records = json::object();
  json warnings = json::array();
  for (const CuptiMeasurement& m : measurements) {
    PIPECAST_RETURN_IF_ERROR(AddProfiles(m.aggregation, m.microbatch_size, &model));
    const std::string key = fmt::format("microbatch_size={}", m.microbatch_size);
    spread[key] = SpreadJson(m.aggregation);
    records[key] = RecordsJson(m);
    for (const std::string& w : m.warnings) warnings.push_back(key + ": " + w);
    for (const std::string& w : m.aggregation.warnings) warnings.push_back(key + ": " + w);
  }
  auto& d = model.source.details;
  d["devices"] = DevicesJson(measurements.front().devices).dump();
  d["clocks"] = json(
                    "GPU clocks as the driver reported them at start-up (sm_clock_mhz per "
                    "device); pipecast does not lock clocks: lock them (nvidia-smi "
                    "--lock-gpu-clocks) for repeatable numbers")
                    .dump();
  d["cupti_version"] = json(measurements.front().cupti_version).dump();
  AddDeviceDetails(measurements, &d);
  AddMetricDetails(options, &d);
  d["records"] = records.dump();
  d["spread"] = spread.dump();
  if (!warnings.empty()) d["warnings"] = warnings.dump();
  for (const auto& [key, value] : extra_source) d[key] = value;
  return model;
}

std::string DescribeMeasurement(const CuptiMeasurement& m) {
  const AttributionStats& s = m.stats;
  std::string out = fmt::format(
      "micro-batch size {}: {} GPU records from {} process(es), {} attributed to layers, {} "
      "outside layer ranges ({:.1f} us busy), {} without API record; {} dropped, {} without "
      "timestamps; {} layers\n",
      m.microbatch_size, s.gpu_records, m.processes, s.attributed, s.outside_layers,
      s.unattributed_busy_ns / 1000.0, s.unmatched, m.dropped_records, m.zero_timestamp_records,
      m.aggregation.layers.size());
  for (const std::string& w : m.warnings) out += "warning: " + w + "\n";
  for (const std::string& w : m.aggregation.warnings) out += "warning: " + w + "\n";
  return out;
}

Status AddTensorParallelProfiles(Model* base, const Model& at, int t,
                                 const ShardCollectives& collectives) {
  if (t < 2) {
    return Status::InvalidArgument(
        fmt::format("tensor-parallel profiles need t >= 2, got {}: t = 1 is the model itself", t));
  }
  if (at.layers.size() != base->layers.size()) {
    return Status::InvalidArgument(fmt::format(
        "the run at tensor_parallel {} measured {}, the run at 1 measured {}", t,
        Count(static_cast<int64_t>(at.layers.size()), "layer", "layers"), base->layers.size()));
  }
  for (size_t i = 0; i < at.layers.size(); ++i) {
    const Layer& a = at.layers[i];
    const Layer& b = base->layers[i];
    if (a.name != b.name || a.parameters != b.parameters) {
      return Status::InvalidArgument(fmt::format(
          "layer {} differs between the runs at tensor_parallel 1 and {}: '{}' ({} parameters) "
          "against '{}' ({}); both runs must name the whole layer and its t = 1 parameter count",
          i, t, b.name, b.parameters, a.name, a.parameters));
    }
  }
  for (size_t i = 0; i < at.layers.size(); ++i) {
    for (LayerProfile p : at.layers[i].profiles) {
      p.tensor_parallel = t;
      p.sequence_parallel = false;
      p.tp_comm_bytes = collectives.comm_bytes_per_sample * p.microbatch_size;
      p.tp_forward_collectives = collectives.forward_collectives;
      p.tp_backward_collectives = collectives.backward_collectives;
      base->layers[i].profiles.push_back(p);
    }
  }
  return Status::Ok();
}

}  // namespace pipecast
