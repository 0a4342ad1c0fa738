// Backend: where the validator's workers run and how their messages travel.
//   cpu   threads of this process, InProcessTransport (real copies)
//   mpi   one process per rank (`mpirun -np P validator --backend mpi`), MPI
//         point-to-point messages; rank 0 gathers every record
//   cuda  GPUs (validate/cuda/): NCCL point-to-point, CUDA events, the
//         device allocator
// With tensor parallelism each rank has t workers (threads, processes or
// GPUs) that all-reduce over a TensorGroup (tensor_group.h) or, on cuda, NCCL.
// Every backend runs the same Runtime (runtime.h). A backend belongs to one
// thread. Make* return Unavailable when this build or machine lacks what the
// backend needs ("this build has no MPI", "no CUDA device").
#ifndef PIPECAST_VALIDATE_BACKEND_H_
#define PIPECAST_VALIDATE_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "sim/cluster.h"
#include "validate/exec_plan.h"
#include "validate/runtime.h"
#include "validate/work.h"

namespace pipecast::validate {

class Backend {
 public:
  virtual ~Backend() = default;

  // The processes' count (1 for cpu) and this one's index; only the root
  // (index 0) gets records and writes the report.
  virtual int processes() const { return 1; }
  virtual bool is_root() const { return true; }

  // False where the link is not probed (cuda: the plan's cluster is used).
  virtual bool has_link_probe() const { return true; }

  // Measures the link between rank 0 and rank 1 the way the plan's messages
  // travel, with messages of `bytes` (and tiny ones for the latency). Every
  // process gets the same answer. Unavailable on a backend with no probe.
  virtual Result<Link> ProbeLink(Bytes bytes) = 0;

  // Runs the plan; the root gets every worker's StageRun (one per rank, or
  // with tensor parallelism one per rank and tensor rank, StageRun::rank and
  // tensor_rank set), on one clock; other processes get an empty vector. `memory_limit_bytes`
  // applies to each stage (0 = unlimited).
  virtual Result<std::vector<StageRun>> Run(const ExecPlan& plan, const RuntimeOptions& options,
                                            OpWork* work, Bytes memory_limit_bytes) = 0;

  // What the ops are when the backend runs its own (cuda: GPU kernels) and
  // ignores Run's `work`; empty when it runs the OpWork it is given.
  virtual std::string OwnOpsDescription() const { return ""; }

  // What ran where, and how time was read: lines for the report.
  virtual std::vector<std::string> Notes() const = 0;
  virtual const Clock* clock() const = 0;
  // A root's error, or OK, made the same on every process (MPI: broadcast),
  // so that all stop alike; the root reports it and carries the exit code.
  virtual Status Agree(const Status& root_status) { return root_status; }
};

// Threads in this process.
std::unique_ptr<Backend> MakeCpuBackend();
// One process per rank under mpirun; defined in mpi_backend.cc, or in
// mpi_unavailable.cc (Unavailable) when CMake found no MPI.
Result<std::unique_ptr<Backend>> MakeMpiBackend(int* argc, char*** argv);
// validate/cuda/cuda_backend.cc, or cuda_unavailable.cc without CUDA.
Result<std::unique_ptr<Backend>> MakeCudaBackend(int stages);

// The probe both CPU backends share: ranks 0 and 1 exchange `rounds`
// messages through `transport`; rank 0 returns the link (latency from tiny
// round trips, bandwidth from `bytes`-sized ones), rank 1 a default Link.
// REQUIRES: called by ranks 0 and 1 at once (two threads or two processes).
Result<Link> ProbeAsRank(int rank, Transport* transport, MemoryPool* pool, const Clock* clock,
                         Bytes bytes);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_BACKEND_H_
