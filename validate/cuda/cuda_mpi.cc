// The cuda backend under mpirun: one process per rank (`mpirun -np P
// validator --backend cuda ...`), each on GPU (its index among the processes
// of its machine) mod (the machine's GPU count). Process 0 makes the NCCL ids
// of every directed pair and broadcasts them over MPI; each process creates
// its ends of its pairs' communicators. Barriers, the clock alignment and the
// gathering of records are the mpi backend's (MpiSession). Two processes on
// one GPU are refused (ChooseRoute): CUDA IPC is not implemented.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "validate/cuda/cuda_backend_internal.h"
#include "validate/mpi/mpi_session.h"

namespace pipecast::validate::cuda {
namespace {

class CudaMpiBackend final : public Backend {
 public:
  CudaMpiBackend(std::unique_ptr<MpiSession> session, int gpus)
      : mpi_(std::move(session)), gpus_(gpus) {}

  int processes() const override { return mpi_->size(); }
  bool is_root() const override { return mpi_->rank() == 0; }
  bool has_link_probe() const override { return false; }
  Result<Link> ProbeLink(Bytes) override {
    return Status::Unavailable("the cuda backend predicts on the plan's cluster; no probe");
  }

  Result<std::vector<StageRun>> Run(const ExecPlan& plan, const RuntimeOptions& options, OpWork*,
                                    Bytes memory_limit_bytes) override {
    PIPECAST_RETURN_IF_ERROR(RefuseExpertTensorParallel(plan));
    const int rank = mpi_->rank();
    const int t = plan.workers_per_rank();
    if (plan.workers() != mpi_->size()) {
      return Status::InvalidArgument(fmt::format(
          "the plan has {} pipeline stages x {} {} workers but {} MPI processes "
          "were started: run mpirun -np {}",
          plan.ranks, t, plan.expert_parallel > 1 ? "expert-parallel" : "tensor-parallel",
          mpi_->size(), plan.workers()));
    }
    // Tensor parallelism: every worker a rank (process) of its own.
    const ExecPlan expanded = t > 1 ? ExpandTensorParallel(plan) : plan;
    // Machines by host name, in order of first appearance.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::map<std::string, int> node_ids;
    std::vector<int> node_of_process;
    for (const std::string& h : mpi_->AllGather(host)) {
      const int next = static_cast<int>(node_ids.size());
      node_of_process.push_back(node_ids.emplace(h, next).first->second);
    }
    PIPECAST_ASSIGN_OR_RETURN(std::vector<RankPlacement> placement,
                              PlaceRanks(expanded.ranks, gpus_, node_of_process));
    std::unique_ptr<Transport> control = mpi_->MakeTransport();
    DeviceRunSetup setup;
    setup.placement = placement;
    setup.local_ranks = {rank};
    setup.tensor_parallel = t;
    setup.control = control.get();
    setup.make_ids = rank == 0;
    setup.share_ids = [this](std::vector<ncclUniqueId>* ids) {
      return mpi_->Broadcast(ids->data(), ids->size() * sizeof(ncclUniqueId));
    };
    setup.ready = [this](const Status& mine) { return mpi_->AllOk(mine); };
    std::vector<std::string> notes;
    Result<std::vector<StageRun>> runs =
        RunOnDevices(expanded, options, memory_limit_bytes, setup, &clock_, &notes);
    std::string offsets;
    Result<std::vector<StageRun>> all = mpi_->Gather(runs, clock_, &offsets);
    if (all.ok()) FoldExpandedRuns(t, &*all, plan.expert_parallel > 1);
    notes_.push_back(fmt::format(
        "backend cuda under MPI: {} processes (one per stage and tensor rank) on {} machine(s), "
        "each rank on "
        "GPU (its index on its machine) mod {}; records aligned to rank 0's clock ({})",
        mpi_->size(), node_ids.size(), gpus_, offsets));
    for (const std::string& n : notes) notes_.push_back("rank 0: " + n);
    notes_.push_back(MeasurementNote());
    return all;
  }

  std::string OwnOpsDescription() const override { return KernelOpsDescription(); }
  std::vector<std::string> Notes() const override { return notes_; }
  const Clock* clock() const override { return &clock_; }
  Status Agree(const Status& root_status) override { return mpi_->Agree(root_status); }

 private:
  std::unique_ptr<MpiSession> mpi_;
  int gpus_;
  SteadyClock clock_;
  std::vector<std::string> notes_;
};

}  // namespace

bool StartedByMpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && std::atoi(s) > 1) return true;
  }
  return false;
}

Result<std::unique_ptr<Backend>> MakeCudaMpiBackend(int gpus) {
  PIPECAST_ASSIGN_OR_RETURN(std::unique_ptr<MpiSession> session,
                            MpiSession::Init(nullptr, nullptr));
  return std::unique_ptr<Backend>(std::make_unique<CudaMpiBackend>(std::move(session), gpus));
}

}  // namespace pipecast::validate::cuda
