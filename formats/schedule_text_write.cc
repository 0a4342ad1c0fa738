// Schedule text and PyTorch's schedule CSV (formats/schedule_text.h): writing a schedule, one
// rank per line, an overlapped pair as one `(0F7;7B3)OVERLAP_F_B` cell, and the
// --schedule-format names. Reading them is in schedule_text.cc.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "formats/schedule_text.h"

namespace pipecast {

namespace {

// One rank's actions as cells, an overlapped pair as one `(0F7;7B3)OVERLAP_F_B` cell.
std::vector<std::string> Cells(const Schedule& schedule, const std::vector<Action>& actions) {
  std::vector<std::string> cells;
  cells.reserve(actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].overlapped && actions[i].kind == OpKind::kForward && i + 1 < actions.size()) {
      cells.push_back(fmt::format("({};{}){}", ActionName(schedule, actions[i]),
                                  ActionName(schedule, actions[i + 1]), kOverlapPairName));
      ++i;
    } else {
      cells.push_back(ActionName(schedule, actions[i]));
    }
  }
  return cells;
}

std::string Join(const Schedule& schedule, std::string_view separator, std::string_view eol) {
  std::string out;
  for (const std::vector<Action>& actions : schedule.actions) {
    const std::vector<std::string> cells = Cells(schedule, actions);
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) out += separator;
      out += cells[i];
    }
    out += eol;
  }
  return out;
}

}  // namespace

std::string ScheduleToText(const Schedule& schedule) { return Join(schedule, " ", "\n"); }

// Python's csv.writer: comma-separated cells, "\r\n" after each row; no cell here holds a
// comma, quote or newline, so none is quoted.
std::string ScheduleToPyTorchCsv(const Schedule& schedule) { return Join(schedule, ",", "\r\n"); }

Result<ScheduleFormat> ParseScheduleFormat(const std::string& name) {
  if (name == "text") return ScheduleFormat::kText;
  if (name == "pytorch-csv") return ScheduleFormat::kPyTorchCsv;
  return Status::InvalidArgument(
      fmt::format("unknown schedule format '{}', expected text or pytorch-csv", name));
}

std::string ScheduleToFormat(const Schedule& schedule, ScheduleFormat format) {
  return format == ScheduleFormat::kPyTorchCsv ? ScheduleToPyTorchCsv(schedule)
                                               : ScheduleToText(schedule);
}

}  // namespace pipecast
