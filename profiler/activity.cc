#include "profiler/activity.h"

#include <iterator>
#include <utility>

namespace pipecast {

namespace {
template <typename T>
void MoveAppend(std::vector<T>& to, std::vector<T>& from) {
  if (to.empty()) {
    to = std::move(from);
    return;
  }
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}
}  // namespace

void ActivityTrace::Append(ActivityTrace other) {
  if (process_id == 0) process_id = other.process_id;
  if (cupti_version == 0) cupti_version = other.cupti_version;
  MoveAppend(gpu, other.gpu);
  MoveAppend(api, other.api);
  MoveAppend(markers, other.markers);
  MoveAppend(memory, other.memory);
  MoveAppend(devices, other.devices);
  MoveAppend(errors, other.errors);
  dropped_records += other.dropped_records;
  zero_timestamp_records += other.zero_timestamp_records;
  invalid_records += other.invalid_records;
  overhead_records += other.overhead_records;
  overhead_ns += other.overhead_ns;
  other_records += other.other_records;
}

}  // namespace pipecast
