// Schedule text: one line per rank, actions separated by spaces or commas,
// in PyTorch pipelining's notation (`0F0 0F1 1F0 ... 0B0`). Blank lines and
// text after `#` are ignored. Line i is rank i. The number of stages is the
// largest stage index + 1; a stage's owner is the rank whose line holds its
// forwards. See docs/formats.md.
#ifndef PIPECAST_FORMATS_SCHEDULE_TEXT_H_
#define PIPECAST_FORMATS_SCHEDULE_TEXT_H_

#include <string>

#include "base/status.h"
#include "sim/schedule.h"

namespace pipecast {

// Parses schedule text. `origin` names the file in errors, which also give the
// line and the offending token ("schedule.txt:2: token '1X0': unknown kind 'X',
// expected F, B, I or W"). The result is checked with ValidateSchedule().
Result<Schedule> ParseScheduleText(const std::string& text, const std::string& origin);
Result<Schedule> LoadScheduleText(const std::string& path);

// One line per rank, actions separated by single spaces, trailing newline.
std::string ScheduleToText(const Schedule& schedule);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_SCHEDULE_TEXT_H_
