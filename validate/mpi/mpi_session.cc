// MpiSession (mpi_session.h): MPI's setup and the parts of a run every
// MPI-launched backend shares. Clocks: each process reads its own
// steady_clock. After the run, process 0 estimates every other process's
// offset with ping-pongs (Cristian's method: offset = remote time - midpoint
// of the round trip, keeping the round trip with the smallest duration) and
// shifts that process's records onto its own clock. On one machine
// steady_clock is shared and the offsets come out near zero; across machines
// the error is at most half the best round trip.
#include "validate/mpi/mpi_session.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <list>
#include <nlohmann/json.hpp>

#include "validate/internal/poll.h"

namespace pipecast::validate {
namespace {

using Json = nlohmann::json;

constexpr int kClockRounds = 16;  // ping-pongs per rank for its clock offset
// Above plan and probe tags (Init checks MPI_TAG_UB).
constexpr int kClockTag = (1 << 30) + 100;

// Waits for `req` until done, the timeout, or the abort flag.
Status WaitRequest(MPI_Request* req, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  return internal::PollUntil(
      [req]() -> Result<bool> {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        return done != 0;
      },
      timeout_ns, abort);
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm) : comm_(comm) {}
  ~MpiTransport() override {
    if (barrier_ != MPI_REQUEST_NULL) MPI_Request_free(&barrier_);  // a failed run's
    for (Pending& p : pending_) {
      int done = 0;
      MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
      if (!done) MPI_Request_free(&p.request);  // a failed run's unmatched send
    }
  }

  Status Send(int, int dst, int64_t tag, Allocation buffer) override {
    Reap();
    pending_.push_back(Pending{MPI_REQUEST_NULL, std::move(buffer)});
    Pending& p = pending_.back();
    const int rc = MPI_Isend(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_BYTE, dst,
                             static_cast<int>(tag), comm_, &p.request);
    if (rc != MPI_SUCCESS) {
      return Status::Unavailable(fmt::format("MPI_Isend to rank {} failed ({})", dst, rc));
    }
    return Status::Ok();
  }

  Result<Allocation> Recv(int src, int, int64_t tag, Bytes bytes, MemoryPool* pool,
                          TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    PIPECAST_ASSIGN_OR_RETURN(
        Allocation buf,
        pool->Allocate(bytes, MemoryKind::kComm, fmt::format("a message from rank {}", src)));
    MPI_Request req;
    MPI_Irecv(buf.data(), static_cast<int>(bytes), MPI_BYTE, src, static_cast<int>(tag), comm_,
              &req);
    Status st = WaitRequest(&req, timeout_ns, abort);
    if (!st.ok()) {
      MPI_Cancel(&req);
      MPI_Status status;
      MPI_Wait(&req, &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      // The message matched as the wait gave up: it is here, not lost (a
      // caller that waits again must not wait for it twice).
      if (!cancelled && st.code() == StatusCode::kUnavailable) {
        Reap();
        return buf;
      }
      return st;
    }
    Reap();
    return buf;
  }

  Status FlushSends(int, TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    while (!pending_.empty()) {
      PIPECAST_RETURN_IF_ERROR(WaitRequest(&pending_.front().request, timeout_ns, abort));
      pending_.pop_front();
    }
    return Status::Ok();
  }

  // A barrier that timed out stays posted: the next call resumes it rather
  // than entering another one (the runtime waits again while others progress).
  Status Barrier(int, TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    if (barrier_ == MPI_REQUEST_NULL) MPI_Ibarrier(comm_, &barrier_);
    return WaitRequest(&barrier_, timeout_ns, abort);  // done: MPI_Test nulls barrier_
  }

 private:
  struct Pending {
    MPI_Request request;
    Allocation buffer;
  };
  MPI_Request barrier_ = MPI_REQUEST_NULL;  // a barrier posted and not yet complete
  // Frees the buffers of completed sends.
  void Reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? pending_.erase(it) : std::next(it);
    }
  }
  MPI_Comm comm_;
  std::list<Pending> pending_;
};

Json ToJson(const StageRun& r) {
  Json j;
  j["rank"] = r.rank;
  j["tensor_rank"] = r.tensor_rank;
  j["expert_rank"] = r.expert_rank;
  j["static"] = r.static_bytes;
  j["peak"] = {r.peak_bytes, r.peak_activation_bytes, r.peak_comm_bytes, r.peak_workspace_bytes};
  Json ops = Json::array();
  for (const OpTiming& o : r.ops) {
    ops.push_back({o.iteration, o.action.stage, static_cast<int>(o.action.kind),
                   o.action.microbatch, o.start_ns, o.end_ns, o.collective_ns,
                   o.action.overlapped});
  }
  j["ops"] = std::move(ops);
  Json copies = Json::array();
  for (const CopyReduceTiming& c : r.copy_reduces) {
    copies.push_back({c.iteration, c.peer_rank, c.bytes, c.start_ns, c.end_ns});
  }
  j["copy_reduces"] = std::move(copies);
  auto msgs = [](const std::vector<MessageTiming>& v) {
    Json a = Json::array();
    for (const MessageTiming& m : v) {
      a.push_back({m.iteration, m.message.peer_rank, m.message.tag, m.message.bytes,
                   m.message.gradient, m.message.src_stage, m.message.dst_stage,
                   m.message.microbatch, m.time_ns});
    }
    return a;
  };
  j["sends"] = msgs(r.sends);
  j["recvs"] = msgs(r.recvs);
  Json mem = Json::array();
  for (const MemorySample& s : r.memory_timeline) {
    mem.push_back({s.time_ns, s.activations, s.comm_buffers, s.workspace});
  }
  j["memory"] = std::move(mem);
  return j;
}

StageRun FromJson(const Json& j, TimeNs shift) {
  StageRun r;
  r.rank = j["rank"];
  r.tensor_rank = j["tensor_rank"];
  r.expert_rank = j["expert_rank"];
  r.static_bytes = j["static"];
  r.peak_bytes = j["peak"][0];
  r.peak_activation_bytes = j["peak"][1];
  r.peak_comm_bytes = j["peak"][2];
  r.peak_workspace_bytes = j["peak"][3];
  for (const Json& o : j["ops"]) {
    r.ops.push_back(
        OpTiming{o[0], Action{o[1], static_cast<OpKind>(o[2].get<int>()), o[3], o[7].get<bool>()},
                 o[4].get<TimeNs>() - shift, o[5].get<TimeNs>() - shift, o[6].get<TimeNs>()});
  }
  for (const Json& c : j["copy_reduces"]) {
    r.copy_reduces.push_back(
        CopyReduceTiming{c[0], c[1], c[2], c[3].get<TimeNs>() - shift, c[4].get<TimeNs>() - shift});
  }
  auto msgs = [&](const Json& a, std::vector<MessageTiming>* out) {
    for (const Json& m : a) {
      Message msg{m[1], m[2], m[3], m[4], m[5], m[6], m[7]};
      out->push_back(MessageTiming{m[0], msg, m[8].get<TimeNs>() - shift});
    }
  };
  msgs(j["sends"], &r.sends);
  msgs(j["recvs"], &r.recvs);
  for (const Json& s : j["memory"]) {
    r.memory_timeline.push_back(MemorySample{s[0].get<TimeNs>() - shift, s[1], s[2], s[3]});
  }
  return r;
}

// A tensor-parallel group as an MPI sub-communicator: MPI_Iallreduce in
// place (MPI_SUM on floats), polled so that an abort ends the wait.
class MpiTensorGroup final : public TensorGroup {
 public:
  MpiTensorGroup(MPI_Comm comm, int size) : comm_(comm), size_(size) {}
  ~MpiTensorGroup() override { MPI_Comm_free(&comm_); }

  int size() const override { return size_; }
  Status AllReduceSum(int, std::span<float> data, const std::atomic<bool>& abort) override {
    MPI_Request req;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                  MPI_FLOAT, MPI_SUM, comm_, &req);
    if (rc != MPI_SUCCESS)
      return Status::Unavailable(fmt::format("MPI_Iallreduce failed ({})", rc));
    // No timeout of its own: the runtime's watchdog aborts an op stuck here.
    return WaitRequest(&req, std::numeric_limits<TimeNs>::max() / 2, abort);
  }
  // MPI_Ialltoallv of floats on the stage's sub-communicator (member order is
  // the communicator's rank order: the split's key), polled like the
  // all-reduce.
  Status AllToAll(int, std::span<const float> send, std::span<const size_t> send_counts,
                  std::span<float> recv, std::span<const size_t> recv_counts,
                  const std::atomic<bool>& abort) override {
    if (static_cast<int>(send_counts.size()) != size_ ||
        static_cast<int>(recv_counts.size()) != size_) {
      return Status::Internal("all-to-all counts do not match the group");
    }
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    for (int r = 0, s_at = 0, r_at = 0; r < size_; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);
      rc[r] = static_cast<int>(recv_counts[r]);
      sd[r] = s_at;
      rd[r] = r_at;
      s_at += sc[r];
      r_at += rc[r];
    }
    MPI_Request req;
    const int rc_call = MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_FLOAT, recv.data(),
                                       rc.data(), rd.data(), MPI_FLOAT, comm_, &req);
    if (rc_call != MPI_SUCCESS) {
      return Status::Unavailable(fmt::format("MPI_Ialltoallv failed ({})", rc_call));
    }
    return WaitRequest(&req, std::numeric_limits<TimeNs>::max() / 2, abort);
  }
  // MPI_Iallgather and MPI_Ireduce_scatter_block (MPI_SUM) of floats on the
  // same communicator, polled like the all-reduce.
  Status AllGather(int, std::span<const float> send, std::span<float> recv,
                   const std::atomic<bool>& abort) override {
    if (recv.size() != send.size() * static_cast<size_t>(size_)) {
      return Status::Internal("all-gather sizes do not match the group");
    }
    MPI_Request req;
    const int rc =
        MPI_Iallgather(send.data(), static_cast<int>(send.size()), MPI_FLOAT, recv.data(),
                       static_cast<int>(send.size()), MPI_FLOAT, comm_, &req);
    if (rc != MPI_SUCCESS)
      return Status::Unavailable(fmt::format("MPI_Iallgather failed ({})", rc));
    return WaitRequest(&req, std::numeric_limits<TimeNs>::max() / 2, abort);
  }
  Status ReduceScatter(int, std::span<const float> send, std::span<float> recv,
                       const std::atomic<bool>& abort) override {
    if (send.size() != recv.size() * static_cast<size_t>(size_)) {
      return Status::Internal("reduce-scatter sizes do not match the group");
    }
    MPI_Request req;
    const int rc = MPI_Ireduce_scatter_block(
        send.data(), recv.data(), static_cast<int>(recv.size()), MPI_FLOAT, MPI_SUM, comm_, &req);
    if (rc != MPI_SUCCESS) {
      return Status::Unavailable(fmt::format("MPI_Ireduce_scatter_block failed ({})", rc));
    }
    return WaitRequest(&req, std::numeric_limits<TimeNs>::max() / 2, abort);
  }

 private:
  MPI_Comm comm_;
  int size_;
};

// A failure that is only a consequence of another (a timeout, an abort)
// ranks after a cause (a throw, a stuck op, out of memory).
int Severity(const Json& e) {
  const std::string m = e["message"];
  if (m == "aborted") return 0;
  if (m.find("did not arrive within") != std::string::npos) return 1;
  return 2;
}

}  // namespace

MpiSession::MpiSession() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

Result<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    return Status::Unavailable("MPI_Init_thread failed: run under mpirun (docs/validator.md)");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Status::Unavailable(
        "this MPI library does not allow calls from the worker thread (MPI_THREAD_SERIALIZED)");
  }
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (!flag || *tag_ub < (1 << 30) + 128) {
    MPI_Finalize();
    return Status::Unavailable(
        fmt::format("this MPI library's largest tag ({}) is below the 2^30 the validator needs",
                    flag ? *tag_ub : 0));
  }
  return std::unique_ptr<MpiSession>(new MpiSession());
}

std::unique_ptr<Transport> MpiSession::MakeTransport() const {
  return std::make_unique<MpiTransport>(MPI_COMM_WORLD);
}

Result<std::unique_ptr<TensorGroup>> MpiSession::MakeTensorGroup(int group, int member,
                                                                 int size) const {
  MPI_Comm comm;
  if (MPI_Comm_split(MPI_COMM_WORLD, group, member, &comm) != MPI_SUCCESS) {
    return Status::Unavailable("MPI_Comm_split for the stages' worker groups failed");
  }
  int n = 0;
  MPI_Comm_size(comm, &n);
  if (n != size) {
    MPI_Comm_free(&comm);
    return Status::Internal(
        fmt::format("the worker group of stage {} has {} processes, expected {}", group, n, size));
  }
  return std::unique_ptr<TensorGroup>(std::make_unique<MpiTensorGroup>(comm, size));
}

Status MpiSession::Broadcast(void* data, size_t bytes) const {
  if (MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    return Status::Unavailable("MPI_Bcast failed");
  }
  return Status::Ok();
}

std::vector<std::string> MpiSession::AllGather(const std::string& text) const {
  std::vector<std::string> all = GatherText(text);
  std::string joined;
  if (rank_ == 0) joined = Json(all).dump();
  int n = static_cast<int>(joined.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  joined.resize(n);
  MPI_Bcast(joined.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return Json::parse(joined).get<std::vector<std::string>>();
}

Result<std::vector<StageRun>> MpiSession::Gather(const Result<std::vector<StageRun>>& mine,
                                                 const Clock& clock,
                                                 std::string* offsets_note) const {
  MPI_Barrier(MPI_COMM_WORLD);
  const TimeNs offset = ClockOffset(clock);
  Json j;
  if (mine.ok()) {
    j["ok"] = true;
    j["run"] = ToJson(mine->front());
  } else {
    j["ok"] = false;
    j["code"] = static_cast<int>(mine.status().code());
    j["message"] = mine.status().message();
  }
  j["offset"] = offset;
  std::vector<std::string> texts = GatherText(j.dump());
  if (rank_ != 0) return std::vector<StageRun>{};
  std::vector<Json> all;
  for (const std::string& t : texts) all.push_back(Json::parse(t));
  const Json* worst = nullptr;
  for (const Json& e : all) {
    if (!e["ok"].get<bool>() && (worst == nullptr || Severity(e) > Severity(*worst))) worst = &e;
  }
  if (worst != nullptr) {
    std::string msg = (*worst)["message"];
    if (Severity(*worst) < 2) {
      // Only waits that timed out: every rank's view names the lost message.
      msg = "every failed rank timed out waiting:";
      for (const Json& e : all) {
        if (!e["ok"].get<bool>()) msg += "\n  " + e["message"].get<std::string>();
      }
    }
    return (*worst)["code"].get<int>() == static_cast<int>(StatusCode::kInternal)
               ? Status::Internal(msg)
               : Status::FailedPrecondition(msg);
  }
  std::vector<StageRun> runs;
  double worst_offset = 0;
  for (const Json& e : all) {
    runs.push_back(FromJson(e["run"], e["offset"].get<TimeNs>()));
    worst_offset = std::max(worst_offset, std::abs(e["offset"].get<double>()));
  }
  *offsets_note = fmt::format("largest clock offset corrected: {:.1f} us", worst_offset / 1e3);
  return runs;
}

Status MpiSession::AllOk(const Status& mine) const {
  const std::vector<std::string> all =
      AllGather(mine.ok() ? std::string() : fmt::format("rank {}: {}", rank_, mine.message()));
  for (const std::string& m : all) {
    if (!m.empty()) return mine.ok() ? Status::FailedPrecondition(m) : mine;
  }
  return Status::Ok();
}

Status MpiSession::Agree(const Status& root_status) const {
  int code[2] = {static_cast<int>(root_status.code()), 0};
  MPI_Bcast(code, 2, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank_ == 0 || code[0] == 0) return root_status;
  return Status::FailedPrecondition("rank 0 reported the failure");
}

TimeNs MpiSession::ClockOffset(const Clock& clock) const {
  TimeNs mine = 0;
  for (int peer = 1; peer < size_; ++peer) {
    if (rank_ == 0) {
      TimeNs best_rtt = INT64_MAX, best_offset = 0;
      for (int i = 0; i < kClockRounds; ++i) {
        const TimeNs t0 = clock.NowNs();
        MPI_Send(&t0, 1, MPI_INT64_T, peer, kClockTag, MPI_COMM_WORLD);
        TimeNs remote = 0;
        MPI_Recv(&remote, 1, MPI_INT64_T, peer, kClockTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const TimeNs t1 = clock.NowNs();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_offset = remote - (t0 + t1) / 2;
        }
      }
      MPI_Send(&best_offset, 1, MPI_INT64_T, peer, kClockTag, MPI_COMM_WORLD);
    } else if (rank_ == peer) {
      for (int i = 0; i < kClockRounds; ++i) {
        TimeNs t0 = 0;
        MPI_Recv(&t0, 1, MPI_INT64_T, 0, kClockTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const TimeNs now = clock.NowNs();
        MPI_Send(&now, 1, MPI_INT64_T, 0, kClockTag, MPI_COMM_WORLD);
      }
      MPI_Recv(&mine, 1, MPI_INT64_T, 0, kClockTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
  return mine;
}

std::vector<std::string> MpiSession::GatherText(const std::string& text) const {
  int n = static_cast<int>(text.size());
  std::vector<int> sizes(size_), displs(size_);
  MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank_ == 0) {
    int total = 0;
    for (int i = 0; i < size_; ++i) {
      displs[i] = total;
      total += sizes[i];
    }
    all.resize(total);
  }
  MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank_ == 0) {
    for (int i = 0; i < size_; ++i) out.push_back(all.substr(displs[i], sizes[i]));
  }
  return out;
}

}  // namespace pipecast::validate
