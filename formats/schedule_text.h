// Schedule text: one line per rank, actions separated by spaces or commas,
// in PyTorch pipelining's notation (`0F0 0F1 1F0 ... 0B0`). Blank lines and
// text after `#` are ignored. Line i is rank i. The number of stages is the
// largest stage index + 1; a stage's owner is the rank whose line holds its
// forwards. See docs/formats.md.
#ifndef PIPECAST_FORMATS_SCHEDULE_TEXT_H_
#define PIPECAST_FORMATS_SCHEDULE_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sim/schedule.h"

namespace pipecast {

// What a schedule file held besides compute actions (PyTorch's compute_comms CSV and
// overlapped pairs); ScheduleTextNotes() says what pipecast makes of it.
struct ScheduleTextInfo {
  int sends = 0;                // SEND_F and SEND_B
  int receives = 0;             // RECV_F and RECV_B
  int late_sends = 0;           // sends not right after the op producing their data
  std::string first_late_send;  // where the first one is ("f.csv:2: column 7: token '...'")
  int unshards = 0;
  int reshards = 0;
  int reduce_grads = 0;
  int overlapped_pairs = 0;  // (F;B)OVERLAP_F_B
};

// Parses schedule text or PyTorch's schedule CSV, either format (compute_only:
// `0F0,0F1,,0B0`; compute_comms: with `0SEND_F0`, `1RECV_F0`, `0UNSHARD`, `0REDUCE_GRAD`, ...),
// and overlapped pairs `(0F7;7B3)OVERLAP_F_B` (docs/formats.md). `origin` names the file in
// errors, which also give the line, in a comma-separated line the column (cell), and the
// offending token ("schedule.txt:2: token '1X0': unknown kind 'X', expected F, B, I or W").
// Communication actions are checked (on the rank of their stage, after the op that produces a
// send's data, before the op that consumes a receive's, one per transfer) and counted into
// *info (may be null); they are not part of the Schedule. The result is checked with
// ValidateSchedule().
Result<Schedule> ParseScheduleText(const std::string& text, const std::string& origin,
                                   ScheduleTextInfo* info = nullptr);
Result<Schedule> LoadScheduleText(const std::string& path, ScheduleTextInfo* info = nullptr);

// The notes to print about a file's communication, sharding and overlapped actions, for a run
// at ZeRO level `zero_level` (empty when the file had none).
std::vector<std::string> ScheduleTextNotes(const ScheduleTextInfo& info, int zero_level);

// What follows an overlapped pair's parentheses, `(0F7;7B3)OVERLAP_F_B` (PyTorch's
// _ComputationType for an overlapped forward and backward); read and written with it.
inline constexpr std::string_view kOverlapPairName = "OVERLAP_F_B";

// One line per rank, actions separated by single spaces, trailing newline; an overlapped pair
// as one `(0F7;7B3)OVERLAP_F_B` token.
std::string ScheduleToText(const Schedule& schedule);

// PyTorch's compute_only CSV as its _dump_csv writes it (csv.writer: one rank per row, one
// action per cell, "\r\n" line ends), which PipelineScheduleMulti._load_csv reads.
std::string ScheduleToPyTorchCsv(const Schedule& schedule);

// --schedule-format: how --schedule-out writes the schedule.
enum class ScheduleFormat { kText, kPyTorchCsv };
// "text" or "pytorch-csv"; InvalidArgument naming both otherwise.
Result<ScheduleFormat> ParseScheduleFormat(const std::string& name);
std::string ScheduleToFormat(const Schedule& schedule, ScheduleFormat format);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_SCHEDULE_TEXT_H_
