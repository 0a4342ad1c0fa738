// EventQueue: the simulator's priority queue of timed events, a 4-ary
// min-heap on (time, key). Ties break by `key`, which the engine makes the
// insertion order, so equal times pop first-in first-out. A 4-ary heap is
// shallower than std::priority_queue's binary one and keeps a node's
// children in one cache line (4 x 16 bytes), which is most of the engine's
// cost per op. Not thread-safe.
#ifndef PIPECAST_SIM_INTERNAL_EVENT_QUEUE_H_
#define PIPECAST_SIM_INTERNAL_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipecast::internal {

struct QueuedEvent {
  int64_t time;
  uint64_t key;
  bool Before(const QueuedEvent& o) const { return time != o.time ? time < o.time : key < o.key; }
};

class EventQueue {
 public:
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // REQUIRES: !empty().
  const QueuedEvent& top() const { return heap_.front(); }

  void push(QueuedEvent e) {
    size_t i = heap_.size();
    heap_.push_back(e);
    while (i > 0) {
      size_t parent = (i - 1) / kArity;
      if (!e.Before(heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }

  // REQUIRES: !empty().
  void pop() {
    QueuedEvent last = heap_.back();
    heap_.pop_back();
    if (heap_.empty()) return;
    SiftDown(last);
  }

  // pop() then push(e), in one pass down the heap.
  // REQUIRES: !empty().
  void replace_top(QueuedEvent e) { SiftDown(e); }

 private:
  // Places `last` starting from the root, which is free.
  void SiftDown(QueuedEvent last) {
    const size_t n = heap_.size();
    size_t i = 0;
    while (true) {
      size_t first = kArity * i + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t end = first + kArity < n ? first + kArity : n;
      for (size_t c = first + 1; c < end; ++c) {
        if (heap_[c].Before(heap_[best])) best = c;
      }
      if (!heap_[best].Before(last)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = last;
  }

  static constexpr size_t kArity = 4;
  std::vector<QueuedEvent> heap_;
};

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_EVENT_QUEUE_H_
