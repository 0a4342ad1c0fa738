// Runtime: executes an ExecPlan with one worker per rank, the same code for
// every backend. Each worker runs its rank's action list in order, every
// iteration: it waits for the op's input message, allocates the op's
// activations and workspace for real (MemoryPool), runs the op (OpWork),
// frees what the op frees, and sends its output (Transport). Every op's start
// and end, every send and receive, and every memory change are read from one
// Clock. Iterations are separated by a barrier of all ranks; warm-up
// iterations are run and dropped.
//
// An overlapped F&B pair (two ExecOps whose actions are `overlapped`, the
// forward first) runs as the simulator replays one (docs/simulator.md,
// "Overlapped F&B"): it starts once both halves' inputs are in (the forward's
// activation, then the backward's gradient), runs the two halves back to back
// (the forward first, each allocating, computing and freeing as a single op
// would, each timed as its own OpTiming), and both outputs are sent when the
// pair ends, the forward's first. A bidirectional schedule's rank ends each
// iteration with its copy reduce (ExecStage::copy_exchanges): after its last
// op it sends each partner the gradients of their shared stages and receives
// the partner's, through RuntimeEnv::copy_transport, timed as a
// CopyReduceTiming.
//
// Faults end the run, never hang it. A worker that fails or throws, an op
// past `watchdog_factor` x its predicted time (+ `watchdog_floor_ns`), a
// message that does not arrive within `recv_timeout_ns`, an allocation over a
// stage's limit (or a worker thread the system cannot start), and (when every
// rank runs in this process) all ranks waiting on each other: each sets a
// shared abort flag, the other workers stop at their next look at it, and
// RunStages returns the first diagnosis, which names the stage and the op.
// RunStages returns only once every worker thread has ended, so nothing a
// worker uses (env's transports, pools, groups, work, clock) is freed under
// it. A worker stuck inside an op that cannot be interrupted (a GPU kernel)
// delays that: after a grace of 2 s RunStages calls
// RuntimeOptions::on_workers_stuck, which may end the process.
//
// Thread-safety: RunStages may be called from one thread at a time per
// Transport.
#ifndef PIPECAST_VALIDATE_RUNTIME_H_
#define PIPECAST_VALIDATE_RUNTIME_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "sim/simulator.h"
#include "validate/exec_plan.h"
#include "validate/memory_pool.h"
#include "validate/tensor_group.h"
#include "validate/transport.h"
#include "validate/work.h"

namespace pipecast::validate {

// A fault injected on purpose, to test that the validator diagnoses it
// (`--inject-fault KIND:ACTION`, test-only). It fires the first time the
// action runs.
struct Fault {
  enum class Kind {
    kThrow,  // the worker throws inside the op
    kStall,  // the op computes for an hour (the watchdog must stop it)
    kDrop,   // the op's output message is never sent
    kOom,    // the op asks for more memory than the stage can have
  };
  Kind kind = Kind::kThrow;
  Action action;
};
// "throw:1F2", "stall:0B1", "drop:0F0", "oom:1F0"; InvalidArgument otherwise.
Result<Fault> ParseFault(const std::string& text);
// Whether the fault is meant for `action`: the same stage, kind and
// micro-batch (a half of an overlapped pair is named as a single op).
bool FaultNames(const Fault& fault, const Action& action);

struct RuntimeOptions {
  int warmup_iterations = 1;  // run, not measured
  int iterations = 3;         // measured; the report takes their median
  // An op whose thread has used more CPU time than watchdog_factor x its
  // predicted time plus watchdog_floor_ns is reported as stuck (a computation
  // that does not end); so is one past that limit in wall time while no
  // local rank has made progress for recv_timeout_ns (a call that blocks for
  // ever). CPU time, not wall time, so that a loaded machine, where a thread
  // waits long for a core, slows ops without tripping the watchdog. 10x: far
  // beyond the CPU cost of noise or a sanitizer; the floor keeps tiny ops
  // from tripping it.
  double watchdog_factor = 10;
  TimeNs watchdog_floor_ns = 500'000'000;  // 0.5 s
  // How long a worker waits for one message (or barrier) with no progress on
  // any rank of this process (no op ending, no message arriving, no barrier
  // opening) before declaring it lost. A late message in a run that is still
  // moving is waited for.
  TimeNs recv_timeout_ns = 10'000'000'000;  // 10 s
  // When every rank runs in this process: all unfinished ranks waiting at
  // once, each for a message that no rank has sent, for this long is a
  // deadlock (no one is left to send). A wait for a message already sent
  // never counts, however long the receiver's thread takes to wake.
  TimeNs deadlock_grace_ns = 200'000'000;  // 0.2 s
  std::optional<Fault> fault;
  // Called once, from RunStages' thread, when workers are still running 2 s
  // after a failure (stuck in an op that cannot be interrupted), with the
  // diagnosis; RunStages then keeps waiting for them. A tool may print the
  // diagnosis and end the process, which is the only way to leave a thread
  // that cannot be stopped. Empty: just wait.
  std::function<void(const Status&)> on_workers_stuck;

  Status Validate() const;
};

struct OpTiming {
  int iteration = 0;  // 0 = first measured iteration
  Action action;
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
  // Of the op's time, what its tensor-parallel all-reduces (expert-parallel
  // all-to-alls) took (0 at t = 1 and ep = 1).
  TimeNs collective_ns = 0;
};

// One copy-reduce exchange as a worker measured it (bidirectional schedules).
struct CopyReduceTiming {
  int iteration = 0;
  int peer_rank = 0;    // the partner's pipeline rank
  Bytes bytes = 0;      // sent, and received back
  TimeNs start_ns = 0;  // this worker was ready: its last op of the iteration had ended
  TimeNs end_ns = 0;    // the partner's bytes were in
};

struct MessageTiming {
  int iteration = 0;
  Message message;     // peer_rank = the other side
  TimeNs time_ns = 0;  // sender: op end (handed to the transport); receiver: message in hand
};

// What one worker measured over the measured iterations: a rank's, or with
// tensor parallelism one tensor rank's of it.
struct StageRun {
  int rank = 0;               // the pipeline rank
  int tensor_rank = 0;        // 0 .. t-1
  int expert_rank = 0;        // 0 .. ep-1 (expert parallelism over replicas)
  std::vector<OpTiming> ops;  // in execution order
  std::vector<MessageTiming> sends;
  std::vector<MessageTiming> recvs;
  std::vector<CopyReduceTiming> copy_reduces;  // in order, per measured iteration
  Bytes static_bytes = 0;
  Bytes peak_bytes = 0;  // high-water mark of everything held, static included
  Bytes peak_activation_bytes = 0;
  Bytes peak_comm_bytes = 0;
  Bytes peak_workspace_bytes = 0;
  std::vector<MemorySample> memory_timeline;  // static excluded
};

struct RuntimeEnv {
  Transport* transport = nullptr;
  OpWork* work = nullptr;
  const Clock* clock = nullptr;
  std::vector<MemoryPool*> pools;  // indexed by worker (world rank); set for the local ones
  bool all_ranks_local = false;    // enables deadlock detection
  // Indexed by pipeline rank, set for the local ranks when t > 1 or ep > 1:
  // the group whose all-reduce (all-to-all) the rank's workers run
  // (tensor_group.h).
  std::vector<TensorGroup*> groups;
  // The copy reduce's messages (plans with ExecStage::copy_exchanges): the
  // transport they travel by and, per worker, the pool their buffers are
  // charged to. Not the stage's pool: the simulator counts no memory for the
  // copy reduce (an in-place all-reduce of gradients the static memory
  // holds), so its buffers stay out of the stage's peak. May be `transport`
  // itself where Recv allocates from the pool it is given (MPI); the
  // in-process transport charges the destination's pool at arrival, so the
  // cpu backend gives a second one over these pools. Null: RunStages refuses
  // plans that need it.
  Transport* copy_transport = nullptr;
  std::vector<MemoryPool*> copy_pools;  // indexed by worker; set for the local ones
};

// Runs `local_ranks` of `plan` (workers, i.e. world ranks: rank·t + tensor
// rank, or rank·ep + expert rank) in threads of this process, one per worker.
// Returns their StageRuns in the order of `local_ranks`, or the first
// failure's diagnosis (FailedPrecondition for faults, timeouts, deadlocks and
// out of memory, and for a plan with a copy reduce on an env without
// copy_transport; Internal for a worker that threw).
// REQUIRES: env's pointers outlive the call; options.Validate() is OK.
Result<std::vector<StageRun>> RunStages(const ExecPlan& plan, const std::vector<int>& local_ranks,
                                        const RuntimeOptions& options, const RuntimeEnv& env);

// Runs of a plan that ExpandTensorParallel (exec_plan.h) turned into ranks·t
// ranks, as RunStages would have recorded them on the plan itself: each
// run's rank w becomes rank w / t, tensor rank (`expert`: expert rank) w % t,
// and its messages' peers the peers' ranks (copy-reduce partners too).
// Nothing at t = 1.
void FoldExpandedRuns(int tensor_parallel, std::vector<StageRun>* runs, bool expert = false);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_RUNTIME_H_
