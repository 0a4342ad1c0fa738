#include "sim/memory_timeline.h"

namespace pipecast {

void MemoryTimeline::Append(const MemorySample& level) {
  for (; last_at_ < changes_.size(); ++last_at_)
    AddDelta(deltas_[changes_[last_at_].delta], &last_);
  deltas_.push_back(MemoryDelta{level.activations - last_.activations,
                                level.comm_buffers - last_.comm_buffers,
                                level.workspace - last_.workspace});
  changes_.push_back(Change{level.time_ns, static_cast<int32_t>(deltas_.size() - 1)});
  last_ = level;
  last_at_ = changes_.size();
}

std::vector<MemorySample> MemoryTimeline::Levels() const {
  std::vector<MemorySample> out;
  out.reserve(changes_.size());
  for (const MemorySample& level : *this) out.push_back(level);
  return out;
}

MemorySample MemoryTimeline::Last() const {
  MemorySample level;
  for (const MemorySample& l : *this) level = l;
  return level;
}

}  // namespace pipecast
