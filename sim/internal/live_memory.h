// A rank's live memory as the engine's memory sweep replays its changes
// (sim/internal/engine_memory.cc), and the test that lets the sweep skip
// ordering an instant's tied changes (InstantFits()). Internal: only sim/
// includes it.
#ifndef PIPECAST_SIM_INTERNAL_LIVE_MEMORY_H_
#define PIPECAST_SIM_INTERNAL_LIVE_MEMORY_H_

#include <algorithm>
#include <cstdint>

#include "base/units.h"
#include "sim/memory_timeline.h"

namespace pipecast::internal {

// A rank's live memory as the sweep replays its changes.
template <bool kRecord>
struct LiveMemory {
  Bytes act = 0, comm = 0, ws = 0;
  // Gradients made during the step (--sharded-state fsdp2: the rank's sharded
  // gradients, from its first backward's end on; else 0, as they are static).
  // In peak_total, in no category and not in the timeline.
  Bytes grads = 0;
  Bytes peak_act = 0, peak_comm = 0, peak_ws = 0, peak_total = 0;
  // When recording: the next change to write, in the rank's slice of the
  // block sized to every rank's exact count of changes (SizeMemoryTimelines()).
  MemoryTimeline::Change* next = nullptr;

  // `delta`: the change's index in the rank's table of deltas (recorded
  // only), which holds (d_act, d_comm, d_ws).
  [[gnu::always_inline]] void Change(TimeNs now, Bytes d_act, Bytes d_comm, Bytes d_ws,
                                     int32_t delta) {
    act += d_act;
    comm += d_comm;
    ws += d_ws;
    // Peaks are taken after every change that adds memory. A category's own
    // peak can only move when that category grew (its level is otherwise at
    // most its peak already), so only those are compared.
    if (d_act > 0) peak_act = std::max(peak_act, act);
    if (d_comm > 0) peak_comm = std::max(peak_comm, comm);
    if (d_ws > 0) peak_ws = std::max(peak_ws, ws);
    if (d_act > 0 || d_comm > 0 || d_ws > 0) {
      peak_total = std::max(peak_total, act + comm + ws + grads);
    }
    // Every change is kept, several per instant included, so a high that
    // lasts zero time (an op's output allocated before its workspace is
    // freed) still shows in the timeline as it does in the peak. 16 bytes
    // each: the levels are the running sums of the deltas (sim/memory_timeline.h).
    if constexpr (kRecord) *next++ = MemoryTimeline::Change{now, delta};
  }
  // The gradients are made: `bytes` join the total (not a timeline change).
  void AddGradients(Bytes bytes) {
    grads += bytes;
    peak_total = std::max(peak_total, act + comm + ws + grads);
  }
};

// What the changes of one instant can add, whatever their order: per
// category the sum of the changes' growth, and for the total the sum of
// each change's net growth. From any point of the instant on, a level is at
// most its value there plus these.
struct InstantRise {
  Bytes act = 0, comm = 0, ws = 0, total = 0;
  // The instant must be taken in processing order whatever the levels: an op
  // of no duration starts and ends in it, so its end can start the next op
  // there, whose trigger (an arrival at the instant) must not be taken first.
  bool ordered = false;
  void Add(Bytes d_act, Bytes d_comm, Bytes d_ws) {
    act += std::max<Bytes>(d_act, 0);
    comm += std::max<Bytes>(d_comm, 0);
    ws += std::max<Bytes>(d_ws, 0);
    total += std::max<Bytes>(d_act + d_comm + d_ws, 0);
  }
};

// How far each level of `mem` is under its running peak (total: the sum's).
template <bool kRecord>
InstantRise Headroom(const LiveMemory<kRecord>& mem) {
  InstantRise room;
  room.act = mem.peak_act - mem.act;
  room.comm = mem.peak_comm - mem.comm;
  room.ws = mem.peak_ws - mem.ws;
  room.total = mem.peak_total - (mem.act + mem.comm + mem.ws + mem.grads);
  return room;
}

// Whether the changes left in an instant, whose growth is `rise`, applied in
// any order to levels with `room` under their peaks (Headroom()), keep every
// level at or under its peak. Then no order of them moves a peak, and the
// levels after the instant are their sums whatever the order: without a
// timeline (only the peaks are kept) the sweep need not decide the
// instant's ties. A level reaching its peak exactly does not move it.
inline bool InstantFits(const InstantRise& room, const InstantRise& rise) {
  return !rise.ordered && rise.act <= room.act && rise.comm <= room.comm && rise.ws <= room.ws &&
         rise.total <= room.total;
}

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_LIVE_MEMORY_H_
