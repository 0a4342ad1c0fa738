// A rank's live memory over time (static weights, gradients and optimizer
// state excluded), as the simulator records it with a timeline
// (SimOptions::record_timeline) and the validator measures it.
//
// Stored as its changes in order, 16 bytes each: the change's time and the
// index of its delta in a small table (the distinct amounts an op's start,
// an op's end, a send or an arrival adds to each category). The levels
// after each change (MemorySample) are the running sums of the deltas:
// iterate the timeline, or take Levels(), to read them. Every change is
// kept, several at one instant included, so a high that lasts zero time
// still shows. Integer sums: the levels are exact.
//
// The changes are the timeline's own, or a slice of one block that several
// timelines share (a simulation's ranks': one allocation, which the engine
// marks for huge pages, instead of one per rank). A shared block is never
// written once built; Append() on such a timeline first copies its slice.
//
// A value type; not thread-safe for writes, safe to read from several
// threads.
#ifndef PIPECAST_SIM_MEMORY_TIMELINE_H_
#define PIPECAST_SIM_MEMORY_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/units.h"

namespace pipecast {

// The live set after one change of a rank's memory, in bytes.
struct MemorySample {
  TimeNs time_ns = 0;
  Bytes activations = 0;
  Bytes comm_buffers = 0;
  Bytes workspace = 0;
};

// What one change adds to each category (negative: frees).
struct MemoryDelta {
  Bytes activations = 0;
  Bytes comm_buffers = 0;
  Bytes workspace = 0;
};

// Adds `delta` to the levels of `level` (its time unchanged).
inline void AddDelta(const MemoryDelta& delta, MemorySample* level) {
  level->activations += delta.activations;
  level->comm_buffers += delta.comm_buffers;
  level->workspace += delta.workspace;
}

class MemoryTimeline {
 public:
  // A trivial type (no default member initializers; Change{} is zeros), so
  // that copying a timeline's changes is one memmove: an element loop of
  // 16-byte stores into the fresh block was a third of the memory sweep.
  struct Change {
    TimeNs time_ns;
    int32_t delta;  // index into deltas()
  };

  // Forward iterator over the levels, in order (a MemorySample per change).
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = MemorySample;
    using difference_type = std::ptrdiff_t;
    using pointer = const MemorySample*;
    using reference = const MemorySample&;

    Iterator() = default;
    const MemorySample& operator*() const { return level_; }
    const MemorySample* operator->() const { return &level_; }
    Iterator& operator++() {
      ++i_;
      Load();
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++*this;
      return old;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }
    // The change's place in the timeline (0 for the first).
    size_t index() const { return i_; }

   private:
    friend class MemoryTimeline;
    Iterator(const MemoryTimeline* timeline, size_t i)
        : tl_(timeline), changes_(timeline->changes()), i_(i) {
      Load();
    }
    void Load() {
      if (i_ >= changes_.size()) return;
      const Change& c = changes_[i_];
      AddDelta(tl_->deltas_[c.delta], &level_);
      level_.time_ns = c.time_ns;
    }
    const MemoryTimeline* tl_ = nullptr;
    std::span<const Change> changes_;
    size_t i_ = 0;
    MemorySample level_;
  };

  MemoryTimeline() = default;
  // REQUIRES: every change's delta indexes `deltas`.
  MemoryTimeline(std::vector<MemoryDelta> deltas, std::vector<Change> changes)
      : deltas_(std::move(deltas)), own_(std::move(changes)) {}
  // The changes block[first, first + count), a block other timelines may
  // share; nothing writes it afterwards.
  // REQUIRES: every change's delta indexes `deltas`.
  MemoryTimeline(std::vector<MemoryDelta> deltas, std::shared_ptr<const Change[]> block,
                 size_t first, size_t count)
      : deltas_(std::move(deltas)), block_(std::move(block)), first_(first), count_(count) {}

  // Appends the change that brings the live set to `level` (its time and
  // levels, after the last change's): one delta per call, as a measured
  // timeline gives levels rather than their causes.
  void Append(const MemorySample& level);

  size_t size() const { return block_ ? count_ : own_.size(); }
  bool empty() const { return size() == 0; }
  void clear() { *this = MemoryTimeline(); }
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, size()); }
  // Every level, materialized (32 bytes a change): for random access.
  std::vector<MemorySample> Levels() const;
  // The last level (zeros when empty).
  MemorySample Last() const;

  const std::vector<MemoryDelta>& deltas() const { return deltas_; }
  std::span<const Change> changes() const {
    return block_ ? std::span<const Change>(block_.get() + first_, count_)
                  : std::span<const Change>(own_);
  }
  // Heap bytes held (both tables' capacity; of a shared block, this
  // timeline's slice).
  size_t HeapBytes() const {
    return deltas_.capacity() * sizeof(MemoryDelta) +
           (block_ ? count_ : own_.capacity()) * sizeof(Change);
  }

 private:
  std::vector<MemoryDelta> deltas_;
  std::vector<Change> own_;                // the changes, when not in a shared block
  std::shared_ptr<const Change[]> block_;  // else: block_[first_, first_ + count_)
  size_t first_ = 0;
  size_t count_ = 0;
  // Append()'s running level: the sum of the first last_at_ changes.
  MemorySample last_;
  size_t last_at_ = 0;
};

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_TIMELINE_H_
