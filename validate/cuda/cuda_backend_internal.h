// Parts of the cuda backend shared by its one-process form (cuda_backend.cc)
// and its mpirun form (cuda_mpi.cc). Internal to validate/cuda/.
#ifndef PIPECAST_VALIDATE_CUDA_CUDA_BACKEND_INTERNAL_H_
#define PIPECAST_VALIDATE_CUDA_CUDA_BACKEND_INTERNAL_H_

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "validate/backend.h"
#include "validate/cuda/device_state.h"
#include "validate/cuda/device_tensor_group.h"
#include "validate/cuda/device_transport.h"
#include "validate/internal/p2p_routes.h"

namespace pipecast::validate::cuda {

// The ops on the GPU: the check of the received message, the busy-work
// kernel between two CUDA events, the pattern written into the output.
// With tensor parallelism (`tp` set, `plan` expanded by ExpandTensorParallel)
// an op's kernel spins for its predicted time less its predicted all-reduce
// time, then its all-reduces run over its stage's NCCL communicator
// (DeviceTensorGroups), timed on the host into OpCall::collective_ns; with
// expert parallelism likewise its dispatch and combine collectives
// (ExecOp::ep_collectives, ep_comm_ns) over the stage's expert-parallel communicator.
class CudaWork final : public OpWork {
 public:
  CudaWork(const std::vector<StageDevice>* devices, const ExecPlan& plan,
           DeviceTensorGroups* tp = nullptr, const Clock* clock = nullptr);
  ~CudaWork() override;
  // Events and the mismatch counter of each local rank.
  Status Init(const std::vector<int>& local_ranks);
  Status Run(const OpCall& call) override;
  std::string Description() const override;

  struct Totals {
    uint64_t mismatched_bytes = 0;
    int64_t checked_messages = 0;
    std::vector<TimeNs> busy_ns;  // per rank, over every iteration run
  };
  Result<Totals> Collect(const std::vector<int>& local_ranks) const;

 private:
  using OpKey = std::tuple<int, int, int, int>;  // rank, stage, kind, micro-batch
  static OpKey Key(int rank, const Action& a);
  static Status Check(cudaError_t e);
  struct OpInfo {
    int64_t recv_tag = -1;  // -1: none
    int64_t send_tag = -1;
    std::vector<Bytes> tp_collectives;
    TimeNs tp_comm_ns = 0;
    std::vector<ExpertCollective> ep_collectives;
    TimeNs ep_comm_ns = 0;
  };
  struct PerRank {
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    unsigned long long* mismatches = nullptr;
    int64_t checked = 0;
    TimeNs busy_ns = 0;
  };
  const std::vector<StageDevice>* dev_;
  DeviceTensorGroups* tp_;
  const Clock* clock_;
  std::map<OpKey, OpInfo> ops_;
  std::vector<PerRank> per_rank_;  // each touched by its rank's thread only
};

struct DeviceRunSetup {
  std::vector<RankPlacement> placement;  // every rank's
  std::vector<int> local_ranks;          // run in this process
  Transport* control = nullptr;          // barriers; null: in-process
  bool make_ids = true;                  // this process makes the NCCL ids
  ShareIds share_ids = [](std::vector<ncclUniqueId>*) { return Status::Ok(); };
  // Called by every process once its devices and pools are made, before the
  // NCCL communicators: a failure anywhere becomes every process's.
  Ready ready = [](const Status& s) { return s; };
  // t > 1: the plan is ExpandTensorParallel's, its ranks k·t + j tensor (or
  // expert) rank j of stage k, all-reducing (exchanging all-to-all) over one
  // NCCL communicator per stage.
  int tensor_parallel = 1;
};

// Runs `setup.local_ranks` of `plan` on their GPUs: devices, device pools,
// routes (NCCL loaded when a pair needs it), the transport, the work, the
// runtime; checks every received message. Appends report lines to `notes`.
Result<std::vector<StageRun>> RunOnDevices(const ExecPlan& plan, const RuntimeOptions& options,
                                           Bytes memory_limit_bytes, const DeviceRunSetup& setup,
                                           const Clock* clock, std::vector<std::string>* notes);

// What the ops are: busy-work kernels (whatever the model; real layers do
// not run on this backend).
std::string KernelOpsDescription();
// The report's line on how time and memory are read.
std::string MeasurementNote();
// The count of CUDA devices, or Unavailable "no CUDA device ...".
Status CheckCudaDevices(int* count);

// True when this process was started by mpirun with more than one process
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX... say so).
bool StartedByMpirun();
// The cuda backend with one process per rank (cuda_mpi.cc), or Unavailable
// in a build without MPI.
Result<std::unique_ptr<Backend>> MakeCudaMpiBackend(int gpus);

}  // namespace pipecast::validate::cuda

#endif  // PIPECAST_VALIDATE_CUDA_CUDA_BACKEND_INTERNAL_H_
