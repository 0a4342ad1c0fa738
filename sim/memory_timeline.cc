#include "sim/memory_timeline.h"

namespace pipecast {

void MemoryTimeline::Append(const MemorySample& level) {
  if (block_) {  // a shared block is never written: the slice becomes this timeline's own
    const std::span<const Change> shared = changes();
    own_.assign(shared.begin(), shared.end());
    block_.reset();
    first_ = count_ = 0;
  }
  for (; last_at_ < own_.size(); ++last_at_) AddDelta(deltas_[own_[last_at_].delta], &last_);
  deltas_.push_back(MemoryDelta{level.activations - last_.activations,
                                level.comm_buffers - last_.comm_buffers,
                                level.workspace - last_.workspace});
  own_.push_back(Change{level.time_ns, static_cast<int32_t>(deltas_.size() - 1)});
  last_ = level;
  last_at_ = own_.size();
}

std::vector<MemorySample> MemoryTimeline::Levels() const {
  std::vector<MemorySample> out;
  out.reserve(size());
  for (const MemorySample& level : *this) out.push_back(level);
  return out;
}

MemorySample MemoryTimeline::Last() const {
  MemorySample level;
  for (const MemorySample& l : *this) level = l;
  return level;
}

}  // namespace pipecast
