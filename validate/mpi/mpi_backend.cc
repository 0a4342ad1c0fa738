// The mpi backend (backend.h): one process per pipeline rank under mpirun,
// activations and gradients as MPI point-to-point messages (Isend/Irecv on
// MPI_COMM_WORLD, tag = the runtime's message tag), the same Runtime as the
// cpu backend. Rank 0 gathers every rank's records, on its clock, and writes
// the report (MpiSession, mpi_session.h).
#include <fmt/format.h>

#include <memory>

#include "validate/backend.h"
#include "validate/mpi/mpi_session.h"

namespace pipecast::validate {
namespace {

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(std::unique_ptr<MpiSession> session) : mpi_(std::move(session)) {}

  int processes() const override { return mpi_->size(); }
  bool is_root() const override { return mpi_->rank() == 0; }

  Result<Link> ProbeLink(Bytes bytes) override {
    if (mpi_->size() < 2) {
      return Status::InvalidArgument(
          "--backend mpi runs one process per stage: start it with mpirun -np <stages>");
    }
    std::unique_ptr<Transport> transport = mpi_->MakeTransport();
    MemoryPool pool("probe", 0, &clock_);
    Result<Link> link = Link{};
    if (mpi_->rank() < 2) link = ProbeAsRank(mpi_->rank(), transport.get(), &pool, &clock_, bytes);
    double v[3] = {link.ok() ? 1.0 : 0.0, link.ok() ? link->bandwidth_gbps : 0,
                   link.ok() ? link->latency_us : 0};
    PIPECAST_RETURN_IF_ERROR(mpi_->Broadcast(v, sizeof(v)));
    if (!link.ok()) return link.status();
    if (v[0] == 0) return Status::Unavailable("the link probe failed on rank 0");
    return Link{v[1], v[2]};
  }

  Result<std::vector<StageRun>> Run(const ExecPlan& plan, const RuntimeOptions& options,
                                    OpWork* work, Bytes memory_limit_bytes) override {
    const int rank = mpi_->rank();
    const int t = plan.workers_per_rank();
    const bool expert = plan.expert_parallel > 1;
    if (plan.workers() != mpi_->size()) {
      return Status::InvalidArgument(
          fmt::format("the plan has {} pipeline stages x {} {} workers but {} MPI processes were "
                      "started: run mpirun -np {}",
                      plan.ranks, t, expert ? "expert-parallel" : "tensor-parallel", mpi_->size(),
                      plan.workers()));
    }
    // Tensor (expert) parallelism innermost: process rank·t + j is tensor (expert) rank j of
    // `rank`.
    MemoryPool pool(t > 1 ? fmt::format("stage {} (rank {}, {} rank {})", rank / t, rank / t,
                                        expert ? "expert" : "tensor", rank % t)
                          : fmt::format("stage {} (rank {})", rank, rank),
                    memory_limit_bytes, &clock_);
    std::vector<MemoryPool*> pools(plan.workers(), nullptr);
    pools[rank] = &pool;
    std::unique_ptr<TensorGroup> group;
    if (t > 1) {
      Result<std::unique_ptr<TensorGroup>> made = mpi_->MakeTensorGroup(rank / t, rank % t, t);
      PIPECAST_RETURN_IF_ERROR(mpi_->AllOk(made.status()));
      group = std::move(*made);
      tensor_parallel_ = plan.tensor_parallel;
      expert_parallel_ = plan.expert_parallel;
      all_gather_ = plan.ep_dispatcher == ExpertDispatcher::kAllGather;
    }
    std::vector<TensorGroup*> groups(plan.ranks, nullptr);
    groups[rank / t] = group.get();
    // The copy reduce (bidirectional schedules) uses the same transport: its Recv allocates from
    // the pool it is given, here one outside the stage's peak (RuntimeEnv::copy_pools).
    MemoryPool copy_pool(fmt::format("the copy reduce of process {}", rank), /*limit_bytes=*/0,
                         &clock_);
    std::vector<MemoryPool*> copy_pools(plan.workers(), nullptr);
    copy_pools[rank] = &copy_pool;
    Result<std::vector<StageRun>> mine = Status::Internal("not run");
    {
      std::unique_ptr<Transport> transport = mpi_->MakeTransport();
      RuntimeEnv env{transport.get(),           work,   &clock_,         pools,
                     /*all_ranks_local=*/false, groups, transport.get(), copy_pools};
      mine = RunStages(plan, {rank}, options, env);
    }
    return mpi_->Gather(mine, clock_, &offsets_note_);
  }

  std::vector<std::string> Notes() const override {
    std::vector<std::string> notes = {fmt::format(
        "backend mpi: {} processes (one per stage{}), MPI point-to-point "
        "messages; each rank's steady_clock aligned to rank 0's after a barrier "
        "by ping-pong offset estimates ({})",
        mpi_->size(),
        tensor_parallel_ > 1   ? fmt::format(" and tensor rank, {} a stage", tensor_parallel_)
        : expert_parallel_ > 1 ? fmt::format(" and expert rank, {} a stage", expert_parallel_)
                               : "",
        offsets_note_)};
    if (tensor_parallel_ > 1) {
      notes.push_back(fmt::format(
          "tensor parallelism: MPI_Comm_split into one communicator per stage (processes "
          "stage x {} + j), MPI_Iallreduce (MPI_SUM, in place) of each all-reduce",
          tensor_parallel_));
    }
    if (expert_parallel_ > 1) {
      notes.push_back(fmt::format(
          "expert parallelism: MPI_Comm_split into one communicator per stage (processes "
          "stage x {} + j, each a data-parallel replica), {}",
          expert_parallel_,
          all_gather_ ? "Megatron-LM's all-gather dispatcher: MPI_Iallgather of each MoE "
                        "layer's routing map, probs and tokens and MPI_Ireduce_scatter_block "
                        "(MPI_SUM) of its outputs, their gradients' pair in the backward"
                      : "MPI_Ialltoallv of each MoE layer's dispatch and combine"));
    }
    return notes;
  }
  const Clock* clock() const override { return &clock_; }

  Status Agree(const Status& root_status) override { return mpi_->Agree(root_status); }

 private:
  std::unique_ptr<MpiSession> mpi_;
  SteadyClock clock_;
  std::string offsets_note_ = "not measured";
  int tensor_parallel_ = 1;
  int expert_parallel_ = 1;
  bool all_gather_ = false;  // the plan's ep_dispatcher is allgather
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeMpiBackend(int* argc, char*** argv) {
  PIPECAST_ASSIGN_OR_RETURN(std::unique_ptr<MpiSession> session, MpiSession::Init(argc, argv));
  return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(std::move(session)));
}

}  // namespace pipecast::validate
