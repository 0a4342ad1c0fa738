// Names in a PyTorch profiler (Kineto) trace and what they tell pipecast: which
// CPU ranges mark an iteration, a pipeline action, a phase of the training step
// (forward, backward, weight gradient, optimizer) or a collective, and which GPU
// kernels are communication and of what kind. docs/measured-runs.md lists every
// rule with the source it was read from.
//
// Pure functions over names; thread-safe.
#ifndef PIPECAST_MEASURED_NAMES_H_
#define PIPECAST_MEASURED_NAMES_H_

#include <optional>
#include <string_view>

#include "sim/schedule.h"

namespace pipecast::measured {

// What a step's GPU work was for. kBackward is the input gradient where the
// trace also marks weight-gradient work (DeepSeek's "(B)" beside "(W)"), else
// the whole backward.
enum class Phase : int { kForward, kBackward, kWeightGrad, kOptimizer, kOther };
inline constexpr int kPhases = 5;
const char* PhaseName(Phase phase);  // "forward", "backward", ...

// Communication kernels by collective. kSendRecv: point-to-point (pipeline
// sends and receives); kAllToAll also holds DeepEP's expert dispatch and
// combine.
enum class CommKind : int {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kBroadcast,
  kReduce,
  kOther,
};
inline constexpr int kCommKinds = 8;
const char* CommKindName(CommKind kind);  // "all-reduce", "send/recv", ...

// What a CPU range (record_function, user annotation, or one of PyTorch's own
// ops) marks.
struct RangeName {
  enum class Kind {
    kNone,      // nothing pipecast reads
    kStep,      // "ProfilerStep#N": iteration N
    kAction,    // PyTorch pipelining's "PP:<stage><F|B|I|W><mb>" (and pairs)
    kPhase,     // "attn(F)", "## backward ##", "Optimizer.step#Adam.step", ...
    kComm,      // "nccl:all_reduce", ... (ProcessGroupNCCL's record_function)
    kAutograd,  // "autograd::engine::evaluate_function: ...": backward work
    kLayer,     // "pipecast:<layer>:<pass>...": a layer range (profiler/attribution.h)
  };
  Kind kind = Kind::kNone;
  int step = -1;                        // kStep
  Action action;                        // kAction: the action, or a pair's forward half
  std::optional<Action> pair_backward;  // kAction of "(0F7;7B3)OVERLAP_F_B": its backward half
  Phase phase = Phase::kOther;          // kPhase (and kAction: its kind's phase)
  CommKind comm = CommKind::kOther;     // kComm
};

// Classifies a CPU range's name (see the header comment of this file).
RangeName ClassifyRange(std::string_view name);

// The collective a GPU kernel runs, or nullopt for compute: NCCL/RCCL kernels
// by the collective in their name (ncclKernel_AllReduce_..., ncclDevKernel_
// SendRecv(...)), DeepEP's dispatch/combine/notify kernels (namespaces
// deep_ep:: and dpsk::ep::) as all-to-all.
std::optional<CommKind> ClassifyKernel(std::string_view name);

// The phase of an action kind: F forward, B and I backward, W weight gradient.
Phase PhaseOf(OpKind kind);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_NAMES_H_
