// Reading a Chrome trace-event file (one rank's PyTorch profiler / Kineto
// trace, or a trace pipecast wrote) into the few kinds of events pipecast
// measures from, without holding the file or a JSON value of it: the file is
// parsed as a stream (nlohmann's SAX interface) and each event is reduced to a
// TraceEvent of about 80 bytes as soon as its object closes, or dropped when
// pipecast does not use it (flows, Python frames, most CPU ops). A 100 MB
// trace is read in memory proportional to the kept events, not to the file
// (docs/measured-runs.md has the figures).
//
// Kept: GPU activity (kernels, memcpy, memset) with stream and correlation;
// the runtime/driver calls that launched them; CPU ranges whose names
// measured/names.h classifies (steps, pipeline actions, phases, collectives,
// autograd); PyTorch's "[memory]" events; pipecast's own op events (cat F, B,
// I or W, with args stage and microbatch); process names and labels; the
// file's distributedInfo (rank, world size) and deviceProperties (GPU name).
//
// Times: `ts` and `dur` are microseconds in the file (integers or decimals);
// they become integer ns exactly from their decimal text (1234.5678 us ->
// 1234568 ns, rounded at the fourth decimal), plus the file's
// baseTimeNanoseconds when it has one.
//
// Errors name the file and where: a syntax error by line and column as the
// JSON parser reports it, a field of the wrong type by its JSON path
// (`traceEvents[12].ts`). Thread-safe (no shared state).
#ifndef PIPECAST_MEASURED_TRACE_FILE_H_
#define PIPECAST_MEASURED_TRACE_FILE_H_

#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "measured/names.h"

namespace pipecast::measured {

struct TraceEvent {
  enum class Kind : uint8_t {
    kKernel,      // GPU kernel (cat "kernel"); tid is the stream
    kGpuMemory,   // GPU memcpy or memset (cat "gpu_memcpy", "gpu_memset")
    kLaunch,      // cuda_runtime / cuda_driver call with a correlation id
    kRange,       // a CPU range ClassifyRange() marks (user_annotation, cpu_op)
    kPipecastOp,  // pipecast's own trace: one op (cat F, B, I or W)
    kMemory,      // PyTorch's "[memory]" instant event (profile_memory=True)
  };
  Kind kind = Kind::kKernel;
  bool overlapped = false;  // kPipecastOp: args.overlapped_fb
  int32_t name = -1;        // index into TraceFile::names
  int64_t pid = 0;          // string pids map to negative numbers
  int64_t tid = 0;
  TimeNs start_ns = 0;
  TimeNs dur_ns = 0;
  int64_t correlation = -1;  // kKernel, kGpuMemory, kLaunch
  int32_t stream = -1;       // kKernel, kGpuMemory (args.stream, else tid)
  int32_t device = -1;       // args.device (kMemory: "Device Id" of a CUDA device)
  int32_t stage = -1;        // kPipecastOp
  int32_t microbatch = -1;   // kPipecastOp
  int64_t bytes = 0;         // kMemory: "Total Allocated" after the event
  int64_t delta_bytes = 0;   // kMemory: "Bytes", > 0 allocated, < 0 freed
  int64_t address = 0;       // kMemory: "Addr"

  TimeNs end_ns() const { return start_ns + dur_ns; }
};

struct TraceFile {
  std::string origin;  // the path, for messages
  // distributedInfo.rank / world_size, when the file has them.
  std::optional<int> rank;
  std::optional<int> world_size;
  std::string device;  // deviceProperties[0].name, e.g. "NVIDIA H800"
  // otherData.label of a trace pipecast wrote ("predicted", "measured"):
  // its presence marks the file as pipecast's own.
  std::optional<std::string> pipecast_label;
  std::map<int64_t, std::string> process_names;   // pid -> process_name
  std::map<int64_t, std::string> process_labels;  // pid -> process_labels ("GPU 0")
  std::vector<std::string> names;                 // event names, each once
  std::vector<TraceEvent> events;                 // kept events, in file order
  int64_t events_seen = 0;                        // every event object in traceEvents

  const std::string& Name(const TraceEvent& e) const { return names[e.name]; }
};

// Parses a trace from `in`; `origin` names it in errors. InvalidArgument for
// malformed JSON (line and column), a file that is not a trace (no
// traceEvents), a field of the wrong type or a time out of range (JSON path),
// or gzip-compressed input (say to gunzip first).
Result<TraceFile> ParseTraceFile(std::istream& in, const std::string& origin);
Result<TraceFile> ParseTraceText(const std::string& text, const std::string& origin);
// Opens and parses `path`; NotFound when it cannot be opened.
Result<TraceFile> ReadTraceFile(const std::string& path);

// "1234.5678" microseconds as ns, rounded half away from zero at the ns;
// `value` is used when the text is not plain decimal (an exponent). nullopt
// when out of range (over about 292 years).
std::optional<TimeNs> MicrosToNs(std::string_view text, double value);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_TRACE_FILE_H_
