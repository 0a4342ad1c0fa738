// MpiSession: what the mpi backend and the cuda backend under mpirun share:
// MPI's setup (MPI_Init_thread, the tag range check, MPI_Finalize), the MPI
// point-to-point Transport, broadcasts from process 0, and the end of a run
// (each process's records shifted onto process 0's clock and gathered there,
// the worst failure chosen as the diagnosis). Defined in mpi_session.cc,
// built only with MPI.
#ifndef PIPECAST_VALIDATE_MPI_MPI_SESSION_H_
#define PIPECAST_VALIDATE_MPI_MPI_SESSION_H_

#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "validate/runtime.h"
#include "validate/tensor_group.h"
#include "validate/transport.h"

namespace pipecast::validate {

class MpiSession {
 public:
  // MPI_Init_thread (at least MPI_THREAD_SERIALIZED) and a tag range of 2^30.
  static Result<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  ~MpiSession();  // MPI_Finalize
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Isend/Irecv on MPI_COMM_WORLD, tag = the runtime's tag.
  std::unique_ptr<Transport> MakeTransport() const;
  // This process's tensor-parallel group: MPI_Comm_split of MPI_COMM_WORLD by
  // `group` (its pipeline rank), ordered by `member` (its tensor rank).
  // Internal when the group does not come out `size` processes. Collective.
  Result<std::unique_ptr<TensorGroup>> MakeTensorGroup(int group, int member, int size) const;
  // Process 0's `bytes` bytes at `data` to every process. Collective.
  Status Broadcast(void* data, size_t bytes) const;
  // Every process's `text`, in process order, on every process. Collective.
  std::vector<std::string> AllGather(const std::string& text) const;
  // The end of a run: a barrier, this process's clock offset to process 0's
  // (ping-pongs), then process 0 gets every process's StageRun on its clock
  // (or the worst failure), the others an empty vector. `offsets_note` gets
  // the largest offset corrected. Collective.
  Result<std::vector<StageRun>> Gather(const Result<std::vector<StageRun>>& mine,
                                       const Clock& clock, std::string* offsets_note) const;
  // OK on every process when `mine` is OK on every process, else the first
  // failing process's message (every process learns of a failure before a
  // step that would wait for all, such as creating NCCL communicators).
  Status AllOk(const Status& mine) const;
  // Process 0's status made every process's (broadcast).
  Status Agree(const Status& root_status) const;

 private:
  MpiSession();
  TimeNs ClockOffset(const Clock& clock) const;
  std::vector<std::string> GatherText(const std::string& text) const;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_MPI_MPI_SESSION_H_
