// The one file of the activity code that parses JSON: nlohmann::json
// exceptions are caught here and become a Status naming the line and key.
#include "profiler/activity_file.h"

#include <fmt/format.h>

#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "base/json_depth.h"

namespace pipecast {
namespace {

using json = nlohmann::ordered_json;  // "format" first in the header

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* GpuKindName(GpuEvent::Kind kind) {
  switch (kind) {
    case GpuEvent::Kind::kKernel:
      return "kernel";
    case GpuEvent::Kind::kMemcpy:
      return "memcpy";
    case GpuEvent::Kind::kMemset:
      return "memset";
  }
  return "kernel";
}

const char* PhaseName(MarkerEvent::Phase phase) {
  switch (phase) {
    case MarkerEvent::Phase::kStart:
      return "s";
    case MarkerEvent::Phase::kEnd:
      return "e";
    case MarkerEvent::Phase::kInstant:
      return "i";
  }
  return "i";
}

// Reads typed keys of one line's object; the first problem is kept.
class LineReader {
 public:
  LineReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  template <typename T>
  T Unsigned(const char* key) {
    auto it = obj_.find(key);
    if (it == obj_.end() || !it->is_number_unsigned()) {
      Fail(fmt::format("key '{}' must be an unsigned integer", key));
      return 0;
    }
    return it->get<T>();
  }
  std::string String(const char* key) {
    auto it = obj_.find(key);
    if (it == obj_.end()) return "";
    if (!it->is_string()) {
      Fail(fmt::format("key '{}' must be a string", key));
      return "";
    }
    return it->get<std::string>();
  }
  bool Bool(const char* key) {
    auto it = obj_.find(key);
    if (it == obj_.end()) return false;
    if (!it->is_boolean()) {
      Fail(fmt::format("key '{}' must be true or false", key));
      return false;
    }
    return it->get<bool>();
  }
  void Fail(const std::string& what) {
    if (status_.ok()) status_ = Status::InvalidArgument(where_ + ": " + what);
  }
  const Status& status() const { return status_; }

 private:
  const json& obj_;
  std::string where_;
  Status status_;
};

std::string HeaderLine(const ActivityTrace& t) {
  json h;
  h["format"] = kActivityFormat;
  h["pid"] = t.process_id;
  h["cupti_version"] = t.cupti_version;
  h["dropped_records"] = t.dropped_records;
  h["zero_timestamp_records"] = t.zero_timestamp_records;
  h["invalid_records"] = t.invalid_records;
  h["overhead_records"] = t.overhead_records;
  h["overhead_ns"] = t.overhead_ns;
  h["other_records"] = t.other_records;
  h["errors"] = t.errors;
  json devices = json::array();
  for (const DeviceInfo& d : t.devices) {
    devices.push_back({{"id", d.id},
                       {"name", d.name},
                       {"cc_major", d.compute_major},
                       {"cc_minor", d.compute_minor},
                       {"clock_khz", d.core_clock_khz},
                       {"memory_bytes", d.memory_bytes},
                       {"sms", d.multiprocessors},
                       {"usable_memory_bytes", d.usable_memory_bytes},
                       {"context_memory_bytes", d.context_memory_bytes}});
  }
  h["devices"] = std::move(devices);
  return Dump(h);
}

Status ParseHeader(const json& h, const std::string& where, ActivityTrace* t) {
  LineReader r(h, where);
  if (!h.contains("format") || !h["format"].is_string() || h["format"] != kActivityFormat) {
    return Status::InvalidArgument(where +
                                   ": not a records file: the first line must have \"format\": \"" +
                                   kActivityFormat + "\"");
  }
  t->process_id = r.Unsigned<uint32_t>("pid");
  t->cupti_version = r.Unsigned<uint32_t>("cupti_version");
  t->dropped_records = r.Unsigned<uint64_t>("dropped_records");
  t->zero_timestamp_records = r.Unsigned<uint64_t>("zero_timestamp_records");
  t->invalid_records = r.Unsigned<uint64_t>("invalid_records");
  t->overhead_records = r.Unsigned<uint64_t>("overhead_records");
  t->overhead_ns = r.Unsigned<uint64_t>("overhead_ns");
  t->other_records = r.Unsigned<uint64_t>("other_records");
  if (auto it = h.find("errors"); it != h.end() && it->is_array()) {
    for (const json& e : *it) {
      if (e.is_string()) t->errors.push_back(e.get<std::string>());
    }
  }
  if (auto it = h.find("devices"); it != h.end() && it->is_array()) {
    for (const json& d : *it) {
      if (!d.is_object()) return Status::InvalidArgument(where + ": each device must be an object");
      LineReader dr(d, where + ": devices");
      DeviceInfo info;
      info.id = dr.Unsigned<uint32_t>("id");
      info.name = dr.String("name");
      info.compute_major = dr.Unsigned<uint32_t>("cc_major");
      info.compute_minor = dr.Unsigned<uint32_t>("cc_minor");
      info.core_clock_khz = dr.Unsigned<uint64_t>("clock_khz");
      info.memory_bytes = dr.Unsigned<uint64_t>("memory_bytes");
      info.multiprocessors = dr.Unsigned<uint32_t>("sms");
      // Absent in records files written before the reserve was measured.
      if (d.contains("usable_memory_bytes")) {
        info.usable_memory_bytes = dr.Unsigned<uint64_t>("usable_memory_bytes");
      }
      if (d.contains("context_memory_bytes")) {
        info.context_memory_bytes = dr.Unsigned<uint64_t>("context_memory_bytes");
      }
      PIPECAST_RETURN_IF_ERROR(dr.status());
      t->devices.push_back(std::move(info));
    }
  }
  return r.status();
}

Status ParseEvent(const json& o, const std::string& where, ActivityTrace* t) {
  LineReader r(o, where);
  const std::string k = r.String("k");
  if (k == "kernel" || k == "memcpy" || k == "memset") {
    GpuEvent e;
    e.kind = k == "kernel" ? GpuEvent::Kind::kKernel
                           : (k == "memcpy" ? GpuEvent::Kind::kMemcpy : GpuEvent::Kind::kMemset);
    e.start_ns = r.Unsigned<uint64_t>("s");
    e.end_ns = r.Unsigned<uint64_t>("e");
    e.device_id = r.Unsigned<uint32_t>("d");
    e.stream_id = r.Unsigned<uint32_t>("st");
    e.correlation_id = r.Unsigned<uint32_t>("c");
    if (e.kind != GpuEvent::Kind::kKernel) e.bytes = r.Unsigned<uint64_t>("b");
    e.name = r.String("n");
    if (e.end_ns < e.start_ns) r.Fail("end 'e' before start 's'");
    t->gpu.push_back(std::move(e));
  } else if (k == "rt" || k == "drv") {
    ApiEvent e;
    e.driver = k == "drv";
    e.cbid = r.Unsigned<uint32_t>("cb");
    e.start_ns = r.Unsigned<uint64_t>("s");
    e.end_ns = r.Unsigned<uint64_t>("e");
    e.thread_id = r.Unsigned<uint32_t>("t");
    e.correlation_id = r.Unsigned<uint32_t>("c");
    t->api.push_back(e);
  } else if (k == "mark") {
    MarkerEvent e;
    const std::string p = r.String("p");
    if (p == "s") {
      e.phase = MarkerEvent::Phase::kStart;
    } else if (p == "e") {
      e.phase = MarkerEvent::Phase::kEnd;
    } else if (p == "i") {
      e.phase = MarkerEvent::Phase::kInstant;
    } else {
      r.Fail("key 'p' must be \"s\", \"e\" or \"i\"");
    }
    e.timestamp_ns = r.Unsigned<uint64_t>("ts");
    e.id = r.Unsigned<uint32_t>("id");
    e.thread_id = r.Unsigned<uint32_t>("t");
    e.name = r.String("n");
    e.domain = r.String("dom");
    t->markers.push_back(std::move(e));
  } else if (k == "alloc" || k == "free") {
    MemoryEvent e;
    e.allocation = k == "alloc";
    e.timestamp_ns = r.Unsigned<uint64_t>("ts");
    e.device_id = r.Unsigned<uint32_t>("d");
    e.correlation_id = r.Unsigned<uint32_t>("c");
    e.address = r.Unsigned<uint64_t>("a");
    e.bytes = r.Unsigned<uint64_t>("b");
    e.is_async = r.Bool("async");
    t->memory.push_back(e);
  } else {
    return Status::InvalidArgument(
        where + ": unknown event kind 'k': \"" + k +
        "\" (known: kernel, memcpy, memset, rt, drv, mark, alloc, free)");
  }
  return r.status();
}

}  // namespace

std::string ActivityTraceToText(const ActivityTrace& t) {
  std::string out = HeaderLine(t);
  out += '\n';
  for (const GpuEvent& e : t.gpu) {
    json o = {{"k", GpuKindName(e.kind)}, {"s", e.start_ns},   {"e", e.end_ns},
              {"d", e.device_id},         {"st", e.stream_id}, {"c", e.correlation_id}};
    if (e.kind != GpuEvent::Kind::kKernel) o["b"] = e.bytes;
    if (!e.name.empty()) o["n"] = e.name;
    out += Dump(o);
    out += '\n';
  }
  for (const ApiEvent& e : t.api) {
    json o = {{"k", e.driver ? "drv" : "rt"},
              {"cb", e.cbid},
              {"s", e.start_ns},
              {"e", e.end_ns},
              {"t", e.thread_id},
              {"c", e.correlation_id}};
    out += Dump(o);
    out += '\n';
  }
  for (const MarkerEvent& e : t.markers) {
    json o = {{"k", "mark"},
              {"p", PhaseName(e.phase)},
              {"ts", e.timestamp_ns},
              {"id", e.id},
              {"t", e.thread_id}};
    if (!e.name.empty()) o["n"] = e.name;
    if (!e.domain.empty()) o["dom"] = e.domain;
    out += Dump(o);
    out += '\n';
  }
  for (const MemoryEvent& e : t.memory) {
    json o = {{"k", e.allocation ? "alloc" : "free"},
              {"ts", e.timestamp_ns},
              {"d", e.device_id},
              {"c", e.correlation_id},
              {"a", e.address},
              {"b", e.bytes}};
    if (e.is_async) o["async"] = true;
    out += Dump(o);
    out += '\n';
  }
  return out;
}

Result<ActivityTrace> ParseActivityTrace(std::string_view text, const std::string& origin) {
  ActivityTrace trace;
  size_t pos = 0;
  int line_no = 0;
  bool have_header = false;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}: line {}", origin, line_no);
    if (auto deep = JsonTooDeep(line)) return Status::InvalidArgument(where + ": " + *deep);
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded() || !obj.is_object()) {
      return Status::InvalidArgument(where + ": not a JSON object (is the file cut short?)");
    }
    Status st = have_header ? ParseEvent(obj, where, &trace) : ParseHeader(obj, where, &trace);
    PIPECAST_RETURN_IF_ERROR(st);
    have_header = true;
  }
  if (!have_header) {
    return Status::InvalidArgument(origin +
                                   ": empty records file (the profiled process wrote "
                                   "nothing: did it exit before CUDA was initialised?)");
  }
  return trace;
}

}  // namespace pipecast
