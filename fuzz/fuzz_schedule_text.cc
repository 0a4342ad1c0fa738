// libFuzzer target: schedule text -> ParseScheduleText. Properties: never a
// crash, hang or leak; clean errors; a parsed schedule passes
// ValidateSchedule, and ScheduleToText's output parses back to the same
// action lists, also with its line ends written as "\r\n" or a lone "\r"
// (every line end Python's csv reader takes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/schedule_text.h"
#include "fuzz/fuzz_util.h"
#include "sim/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Schedule> schedule = ParseScheduleText(text, "fuzz.txt");
  if (!schedule.ok()) {
    fuzz::CheckCleanError(schedule.status());
    // Echoed tokens are excerpts (base/terminal_text.h Excerpt): a message
    // stays short whatever the input's longest token (issue 28: a 10 MB
    // token was echoed whole).
    if (schedule.status().message().size() > 4096) {
      fuzz::Die("error message of " + std::to_string(schedule.status().message().size()) +
                " bytes: an echoed token was not shortened");
    }
    return 0;
  }
  if (Status st = ValidateSchedule(*schedule); !st.ok()) {
    fuzz::Die("parsed schedule fails ValidateSchedule: " + st.message());
  }
  const std::string again = ScheduleToText(*schedule);
  Result<Schedule> reparsed = ParseScheduleText(again, "roundtrip.txt");
  if (!reparsed.ok())
    fuzz::Die("ScheduleToText output does not parse: " + reparsed.status().message());
  if (reparsed->actions != schedule->actions || reparsed->stage_rank != schedule->stage_rank ||
      reparsed->num_microbatches != schedule->num_microbatches) {
    fuzz::Die("schedule text round trip changed the schedule");
  }
  for (const char* line_end : {"\r\n", "\r"}) {
    std::string converted;
    for (char c : again) {
      if (c == '\n') {
        converted += line_end;
      } else {
        converted += c;
      }
    }
    Result<Schedule> same = ParseScheduleText(converted, "line-ends.txt");
    if (!same.ok() || same->actions != schedule->actions) {
      fuzz::Die("schedule text with other line ends reads differently");
    }
  }
  return 0;
}
