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
    if (plan.ranks != mpi_->size()) {
      return Status::InvalidArgument(fmt::format(
          "the plan has {} pipeline stages but {} MPI processes were started: run mpirun -np {}",
          plan.ranks, mpi_->size(), plan.ranks));
    }
    MemoryPool pool(fmt::format("stage {} (rank {})", rank, rank), memory_limit_bytes, &clock_);
    std::vector<MemoryPool*> pools(plan.ranks, nullptr);
    pools[rank] = &pool;
    Result<std::vector<StageRun>> mine = Status::Internal("not run");
    {
      std::unique_ptr<Transport> transport = mpi_->MakeTransport();
      RuntimeEnv env{transport.get(), work, &clock_, pools, /*all_ranks_local=*/false};
      mine = RunStages(plan, {rank}, options, env);
    }
    return mpi_->Gather(mine, clock_, &offsets_note_);
  }

  std::vector<std::string> Notes() const override {
    return {
        fmt::format("backend mpi: {} processes (one per stage), MPI point-to-point "
                    "messages; each rank's steady_clock aligned to rank 0's after a barrier "
                    "by ping-pong offset estimates ({})",
                    mpi_->size(), offsets_note_)};
  }
  const Clock* clock() const override { return &clock_; }

  Status Agree(const Status& root_status) override { return mpi_->Agree(root_status); }

 private:
  std::unique_ptr<MpiSession> mpi_;
  SteadyClock clock_;
  std::string offsets_note_ = "not measured";
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeMpiBackend(int* argc, char*** argv) {
  Result<std::unique_ptr<MpiSession>> session = MpiSession::Init(argc, argv);
  if (!session.ok()) return session.status();
  return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(std::move(*session)));
}

}  // namespace pipecast::validate
