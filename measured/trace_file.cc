#include "measured/trace_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

namespace pipecast::measured {
namespace {

using Json = nlohmann::json;

// PyTorch's "[memory]" events say the device by "Device Type": c10's DeviceType, where 1 is
// CUDA (0 is the CPU).
constexpr int64_t kCudaDeviceType = 1;
// Times an event may have (a quarter of int64 ns, 73 years), so that a start, a duration and
// baseTimeNanoseconds (up to half of int64) add without overflow.
constexpr TimeNs kMaxTimeNs = std::numeric_limits<TimeNs>::max() / 4;

// What an event object held, collected key by key; reduced to a TraceEvent (or dropped) when
// the object closes.
struct RawEvent {
  std::string ph, cat, name;
  int64_t pid = 0, tid = 0;
  std::optional<TimeNs> ts, dur;
  // args
  std::optional<int64_t> correlation, stream, device, stage, microbatch, device_type, device_id,
      total_allocated, bytes, address;
  bool overlapped = false;
  std::string arg_name, arg_labels;

  void Clear() {
    ph.clear();
    cat.clear();
    name.clear();
    pid = tid = 0;
    ts = dur = std::nullopt;
    correlation = stream = device = stage = microbatch = device_type = device_id = total_allocated =
        bytes = address = std::nullopt;
    overlapped = false;
    arg_name.clear();
    arg_labels.clear();
  }
};

// A JSON scalar as the SAX interface hands it over.
struct Scalar {
  enum class Type { kNull, kBool, kInt, kUint, kFloat, kString } type = Type::kNull;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  const std::string* text = nullptr;  // kFloat: the number as written; kString: the string
};

const char* TypeName(const Scalar& s) {
  switch (s.type) {
    case Scalar::Type::kNull:
      return "null";
    case Scalar::Type::kBool:
      return "a boolean";
    case Scalar::Type::kString:
      return "a string";
    default:
      return "a number";
  }
}

class TraceSax : public nlohmann::json_sax<Json> {
 public:
  explicit TraceSax(TraceFile* out) : out_(out) {}

  const Status& status() const { return status_; }
  bool saw_events() const { return saw_events_; }
  std::optional<int64_t> base_time_ns() const { return base_time_ns_; }

  bool null() override { return Value(Scalar{}); }
  bool boolean(bool v) override {
    Scalar s;
    s.type = Scalar::Type::kBool;
    s.b = v;
    return Value(s);
  }
  bool number_integer(number_integer_t v) override {
    Scalar s;
    s.type = Scalar::Type::kInt;
    s.i = v;
    return Value(s);
  }
  bool number_unsigned(number_unsigned_t v) override {
    Scalar s;
    s.type = Scalar::Type::kUint;
    s.u = v;
    return Value(s);
  }
  bool number_float(number_float_t v, const string_t& text) override {
    Scalar s;
    s.type = Scalar::Type::kFloat;
    s.f = v;
    s.text = &text;
    return Value(s);
  }
  bool string(string_t& v) override {
    Scalar s;
    s.type = Scalar::Type::kString;
    s.text = &v;
    return Value(s);
  }
  bool binary(binary_t&) override { return Value(Scalar{}); }

  bool start_object(std::size_t) override {
    const bool event = !frames_.empty() && frames_.back().events;
    frames_.push_back(Frame{});
    if (event) {
      in_event_ = true;
      event_depth_ = frames_.size();
      raw_.Clear();
    }
    return true;
  }
  bool key(string_t& k) override {
    frames_.back().key = k;
    return true;
  }
  bool end_object() override {
    const bool closing_event = in_event_ && frames_.size() == event_depth_;
    frames_.pop_back();
    if (closing_event) {
      in_event_ = false;
      if (!FinishEvent()) return false;
    }
    return EndValue();
  }
  bool start_array(std::size_t) override {
    // traceEvents of the top object, or a top-level array (Chrome's "JSON Array Format").
    const bool events = frames_.empty() || (frames_.size() == 1 && !frames_[0].array &&
                                            frames_[0].key == "traceEvents");
    frames_.push_back(Frame{});
    frames_.back().array = true;
    frames_.back().events = events;
    if (events) saw_events_ = true;
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return EndValue();
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 3, column 9: ..." without the tag.
    std::string what = ex.what();
    if (const size_t tag = what.find("] "); tag != std::string::npos) what = what.substr(tag + 2);
    status_ = Status::InvalidArgument(
        fmt::format("{}: not valid JSON: {}{}", out_->origin, what,
                    frames_.empty() ? "" : fmt::format(" (inside {})", Path())));
    return false;
  }

 private:
  // A path deeper than this is shown by its ends (a trace nests 4 levels).
  static constexpr size_t kMaxPathFrames = 12;

  struct Frame {
    bool array = false;
    bool events = false;  // the array of trace events
    std::string key;      // objects: the key being read
    int64_t index = 0;    // arrays: the element being read
  };

  // Where the parser is, as a JSON path: traceEvents[12].args.stream.
  std::string Path() const {
    std::string p;
    for (size_t i = 0; i < frames_.size(); ++i) {
      if (frames_.size() > kMaxPathFrames && i == kMaxPathFrames / 2) {
        p += fmt::format("...({} levels)...", frames_.size() - kMaxPathFrames);
        i = frames_.size() - kMaxPathFrames / 2;
      }
      const Frame& f = frames_[i];
      if (f.array) {
        p += fmt::format("[{}]", f.index);
      } else if (!f.key.empty()) {
        if (!p.empty()) p += '.';
        p += f.key;
      }
    }
    return p;
  }

  bool Fail(std::string what) {
    status_ = Status::InvalidArgument(fmt::format("{}: {}: {}", out_->origin, Path(), what));
    return false;
  }

  // A finished value advances its array's index.
  bool EndValue() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }

  bool Value(const Scalar& s) {
    if (!Dispatch(s)) return false;
    return EndValue();
  }

  bool Dispatch(const Scalar& s) {
    const size_t depth = frames_.size();
    if (in_event_ && depth == event_depth_) return EventField(frames_.back().key, s);
    if (in_event_ && depth == event_depth_ + 1 && frames_[event_depth_ - 1].key == "args" &&
        !frames_.back().array) {
      return EventArg(frames_.back().key, s);
    }
    if (in_event_) return true;
    if (depth == 1 && !frames_[0].array && frames_[0].key == "baseTimeNanoseconds") {
      std::optional<int64_t> v = Integer(s);
      if (!v) return Fail(fmt::format("expected an integer, got {}", TypeName(s)));
      base_time_ns_ = *v;
      return true;
    }
    if (depth == 2 && !frames_[0].array) {
      const std::string& section = frames_[0].key;
      const std::string& key = frames_[1].key;
      if (section == "distributedInfo" && (key == "rank" || key == "world_size")) {
        std::optional<int64_t> v = Integer(s);
        if (!v || *v < 0 || *v > std::numeric_limits<int>::max()) {
          return Fail("expected a rank count, a non-negative integer");
        }
        (key == "rank" ? out_->rank : out_->world_size) = static_cast<int>(*v);
      } else if (section == "otherData" && key == "label" && s.type == Scalar::Type::kString) {
        out_->pipecast_label = *s.text;
      }
      return true;
    }
    if (depth == 3 && !frames_[0].array && frames_[0].key == "deviceProperties" &&
        frames_[1].array && frames_[1].index == 0 && frames_[2].key == "name" &&
        s.type == Scalar::Type::kString) {
      out_->device = *s.text;
    }
    return true;
  }

  static std::optional<int64_t> Integer(const Scalar& s) {
    if (s.type == Scalar::Type::kInt) return s.i;
    if (s.type == Scalar::Type::kUint &&
        s.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(s.u);
    }
    // Some writers print integral ids as 7.0.
    if (s.type == Scalar::Type::kFloat && std::isfinite(s.f) && s.f == std::floor(s.f) &&
        std::abs(s.f) < 9e18) {
      return static_cast<int64_t>(s.f);
    }
    return std::nullopt;
  }

  // A pid or tid: a number, or a string (Kineto's "Spans", "Traces") mapped to a negative id.
  std::optional<int64_t> Id(const Scalar& s) {
    if (s.type == Scalar::Type::kString) {
      auto [it, fresh] =
          string_ids_.try_emplace(*s.text, -1 - static_cast<int64_t>(string_ids_.size()));
      return it->second;
    }
    return Integer(s);
  }

  std::optional<TimeNs> Micros(const Scalar& s) {
    switch (s.type) {
      case Scalar::Type::kInt:
        return MicrosToNs(std::to_string(s.i), static_cast<double>(s.i));
      case Scalar::Type::kUint:
        return MicrosToNs(std::to_string(s.u), static_cast<double>(s.u));
      case Scalar::Type::kFloat:
        return MicrosToNs(*s.text, s.f);
      default:
        return std::nullopt;
    }
  }

  bool EventField(const std::string& key, const Scalar& s) {
    RawEvent& e = raw_;
    if (key == "ph" || key == "cat" || key == "name") {
      if (s.type != Scalar::Type::kString) {
        // Chrome tolerates a missing name; a number where a string belongs is a broken writer.
        return Fail(fmt::format("expected a string, got {}", TypeName(s)));
      }
      (key == "ph" ? e.ph : key == "cat" ? e.cat : e.name) = *s.text;
    } else if (key == "pid" || key == "tid") {
      std::optional<int64_t> id = Id(s);
      if (!id) return Fail(fmt::format("expected a number or a string, got {}", TypeName(s)));
      (key == "pid" ? e.pid : e.tid) = *id;
    } else if (key == "ts" || key == "dur") {
      std::optional<TimeNs> ns = Micros(s);
      if (!ns) {
        return Fail(s.type == Scalar::Type::kFloat || s.type == Scalar::Type::kInt ||
                            s.type == Scalar::Type::kUint
                        ? std::string("a time beyond 292 years in microseconds")
                        : fmt::format("expected microseconds as a number, got {}", TypeName(s)));
      }
      (key == "ts" ? e.ts : e.dur) = *ns;
    }
    return true;
  }

  bool EventArg(const std::string& key, const Scalar& s) {
    RawEvent& e = raw_;
    auto integer = [&](std::optional<int64_t>* field) {
      if (s.type == Scalar::Type::kNull) return true;
      std::optional<int64_t> v = Integer(s);
      if (!v) return Fail(fmt::format("expected an integer, got {}", TypeName(s)));
      *field = v;
      return true;
    };
    if (key == "correlation") return integer(&e.correlation);
    if (key == "stream") return integer(&e.stream);
    if (key == "device") return integer(&e.device);
    if (key == "stage") return integer(&e.stage);
    if (key == "microbatch") return integer(&e.microbatch);
    if (key == "Device Type") return integer(&e.device_type);
    if (key == "Device Id") return integer(&e.device_id);
    if (key == "Total Allocated") return integer(&e.total_allocated);
    if (key == "Bytes") return integer(&e.bytes);
    if (key == "Addr") {
      // An address may be printed beyond int64 (unsigned); its bits are what matters.
      if (s.type == Scalar::Type::kUint) {
        e.address = static_cast<int64_t>(s.u);
        return true;
      }
      return integer(&e.address);
    }
    if (key == "overlapped_fb") {
      e.overlapped = s.type == Scalar::Type::kBool && s.b;
    } else if (key == "name" && s.type == Scalar::Type::kString) {
      e.arg_name = *s.text;
    } else if (key == "labels" && s.type == Scalar::Type::kString) {
      e.arg_labels = *s.text;
    }
    return true;
  }

  int32_t Intern(const std::string& name) {
    auto [it, fresh] = name_ids_.try_emplace(name, static_cast<int32_t>(out_->names.size()));
    if (fresh) out_->names.push_back(name);
    return it->second;
  }

  static int32_t Narrow(std::optional<int64_t> v, int64_t fallback) {
    const int64_t x = v.value_or(fallback);
    return x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max()
               ? static_cast<int32_t>(x)
               : -1;
  }

  // The event just closed: keep it as a TraceEvent, or drop it.
  bool FinishEvent() {
    ++out_->events_seen;
    RawEvent& e = raw_;
    if (e.ph == "M") {
      if (e.name == "process_name") out_->process_names[e.pid] = e.arg_name;
      if (e.name == "process_labels") out_->process_labels[e.pid] = e.arg_labels;
      return true;
    }
    TraceEvent t;
    t.pid = e.pid;
    t.tid = e.tid;
    if ((e.ph == "i" || e.ph == "I") && e.name == "[memory]") {
      if (e.device_type != kCudaDeviceType || !e.total_allocated || !e.ts) return true;
      t.kind = TraceEvent::Kind::kMemory;
      if (std::abs(*e.ts) > kMaxTimeNs) return Fail("\"ts\" beyond 73 years in microseconds");
      t.start_ns = *e.ts;
      t.device = Narrow(e.device_id, -1);
      t.bytes = *e.total_allocated;
      t.delta_bytes = e.bytes.value_or(0);
      t.address = e.address.value_or(0);
      out_->events.push_back(t);
      return true;
    }
    if (e.ph != "X") return true;
    if (e.cat == "kernel" || e.cat == "gpu_memcpy" || e.cat == "gpu_memset") {
      t.kind = e.cat == "kernel" ? TraceEvent::Kind::kKernel : TraceEvent::Kind::kGpuMemory;
      t.stream = Narrow(e.stream, e.tid);
      t.device = Narrow(e.device, e.pid);
      t.correlation = e.correlation.value_or(-1);
    } else if (e.cat == "cuda_runtime" || e.cat == "cuda_driver") {
      if (!e.correlation) return true;
      t.kind = TraceEvent::Kind::kLaunch;
      t.correlation = *e.correlation;
    } else if (e.cat == "user_annotation" || e.cat == "cpu_op") {
      if (ClassifyRange(e.name).kind == RangeName::Kind::kNone) return true;
      t.kind = TraceEvent::Kind::kRange;
    } else if (e.cat.size() == 1 && std::string_view("FBIW").find(e.cat[0]) != std::string::npos &&
               e.stage && e.microbatch) {
      t.kind = TraceEvent::Kind::kPipecastOp;
      t.stage = Narrow(e.stage, -1);
      t.microbatch = Narrow(e.microbatch, -1);
      t.overlapped = e.overlapped;
      if (t.stage < 0 || t.microbatch < 0) {
        return Fail("pipecast op with a negative or huge stage or micro-batch");
      }
    } else {
      return true;
    }
    if (!e.ts) return Fail("a complete event (\"ph\": \"X\") without \"ts\"");
    if (e.dur && *e.dur < 0) return Fail("\"dur\" is negative");
    if (std::abs(*e.ts) > kMaxTimeNs || e.dur.value_or(0) > kMaxTimeNs) {
      return Fail("\"ts\" or \"dur\" beyond 73 years in microseconds");
    }
    t.start_ns = *e.ts;
    t.dur_ns = e.dur.value_or(0);
    t.name = Intern(e.name);
    out_->events.push_back(t);
    return true;
  }

  TraceFile* out_;
  Status status_;
  std::vector<Frame> frames_;
  bool in_event_ = false;
  size_t event_depth_ = 0;
  bool saw_events_ = false;
  RawEvent raw_;
  std::optional<int64_t> base_time_ns_;
  std::unordered_map<std::string, int32_t> name_ids_;
  std::unordered_map<std::string, int64_t> string_ids_;
};

}  // namespace

std::optional<TimeNs> MicrosToNs(std::string_view text, double value) {
  // Plain decimal: [-]digits[.digits], exact; anything else through the double.
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) ++i;
  const size_t int_start = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  const size_t int_end = i;
  size_t frac_start = i, frac_end = i;
  if (i < text.size() && text[i] == '.') {
    frac_start = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    frac_end = i;
  }
  constexpr TimeNs kMaxUs = std::numeric_limits<TimeNs>::max() / 1000 - 1;
  if (i != text.size() || int_end == int_start) {
    if (!std::isfinite(value) || std::abs(value) >= static_cast<double>(kMaxUs)) {
      return std::nullopt;
    }
    return static_cast<TimeNs>(std::llround(value * 1000.0));
  }
  if (int_end - int_start > 16) return std::nullopt;
  TimeNs us = 0;
  for (size_t k = int_start; k < int_end; ++k) us = us * 10 + (text[k] - '0');
  if (us > kMaxUs) return std::nullopt;
  // Three fractional digits are ns; the fourth rounds (half away from zero).
  TimeNs ns = 0;
  for (size_t k = 0; k < 3; ++k) {
    ns = ns * 10 + (frac_start + k < frac_end ? text[frac_start + k] - '0' : 0);
  }
  if (frac_start + 3 < frac_end && text[frac_start + 3] >= '5') ++ns;
  const TimeNs total = us * 1000 + ns;
  return negative ? -total : total;
}

Result<TraceFile> ParseTraceFile(std::istream& in, const std::string& origin) {
  TraceFile out;
  out.origin = origin;
  const int first = in.peek();
  if (first == 0x1f) {
    in.get();
    if (in.peek() == 0x8b) {
      return Status::InvalidArgument(fmt::format(
          "{}: a gzip-compressed file: decompress it first (gunzip -k {})", origin, origin));
    }
    in.unget();
  }
  TraceSax sax(&out);
  bool ok = false;
  try {
    ok = Json::sax_parse(in, &sax);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: could not be read: {}", origin, e.what()));
  }
  if (!ok) {
    if (!sax.status().ok()) return sax.status();
    return Status::InvalidArgument(fmt::format("{}: not valid JSON", origin));
  }
  if (!sax.saw_events()) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a Chrome trace: no \"traceEvents\" array (a PyTorch profiler trace is written "
        "by prof.export_chrome_trace() or tensorboard_trace_handler)",
        origin));
  }
  if (std::optional<int64_t> base = sax.base_time_ns(); base && *base != 0) {
    // Kineto writes ts relative to baseTimeNanoseconds: shift to the absolute clock so that
    // the ranks' files line up.
    if (*base < 0 || *base > std::numeric_limits<TimeNs>::max() / 2) {
      return Status::InvalidArgument(
          fmt::format("{}: baseTimeNanoseconds: {} is out of range", origin, *base));
    }
    for (TraceEvent& e : out.events) e.start_ns += *base;
  }
  return out;
}

Result<TraceFile> ParseTraceText(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  return ParseTraceFile(in, origin);
}

Result<TraceFile> ReadTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(fmt::format("{}: cannot be opened: {}", path, std::strerror(errno)));
  }
  return ParseTraceFile(in, path);
}

}  // namespace pipecast::measured
