// Schedule: the ordered list of compute actions each pipeline rank (GPU)
// executes in one training iteration.
//
// Actions follow PyTorch pipelining's notation `<stage><kind><microbatch>`:
// `stage` is the *virtual* stage (model chunk) index, 0..num_stages-1, kinds
// are F (forward), B (whole backward), I (input-gradient backward) and W
// (weight-gradient backward). With one chunk per rank, stage == rank. With v
// chunks per rank, num_stages = v * num_ranks and `stage_rank` says which rank
// owns each virtual stage.
//
// The built-in generators implement the schedules of shared/SCHEDULES.md;
// each cites its source next to its code.
#ifndef PIPECAST_SIM_SCHEDULE_H_
#define PIPECAST_SIM_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sim/status.h"

namespace pipecast {

enum class OpKind : uint8_t { kForward, kBackward, kBackwardInput, kBackwardWeight };
char OpKindLetter(OpKind kind);  // F, B, I, W

struct Action {
  int stage = 0;       // virtual stage
  OpKind kind = OpKind::kForward;
  int microbatch = 0;
  bool operator==(const Action&) const = default;
};
std::string ActionName(const Action& action);  // e.g. "2B5"

enum class ScheduleKind { kNaive, kGPipe, k1F1B, kCustom };
const char* ScheduleKindName(ScheduleKind kind);  // "naive", "gpipe", "1f1b", "custom"
// Parses a --schedule value; InvalidArgument listing the known names.
Result<ScheduleKind> ParseScheduleKind(const std::string& name);

struct Schedule {
  std::string name;
  int num_ranks = 0;
  int num_stages = 0;      // virtual stages; == num_ranks without chunks
  int num_microbatches = 0;
  std::vector<int> stage_rank;                // rank owning each stage
  std::vector<std::vector<Action>> actions;   // per rank, in execution order
  // True when the schedule splits the backward into I and W.
  bool split_backward = false;

  int ChunksPerRank() const { return num_ranks ? num_stages / num_ranks : 0; }
  int64_t NumActions() const;
};

// Builds a built-in schedule with one stage per rank.
// InvalidArgument when ranks < 1 or microbatches < 1, or for kCustom.
Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches);

// Checks that the schedule is a complete training iteration: every (stage,
// micro-batch) has exactly one F and either one B or one I and one W, each on
// the rank that owns the stage, micro-batches in range. Does not check that
// the order can finish: the simulator reports deadlocks with the stuck ops.
Status ValidateSchedule(const Schedule& schedule);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SCHEDULE_H_
