#include "validate/runtime.h"

#include <fmt/format.h>
#include <pthread.h>
#include <time.h>

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "base/text_table.h"

namespace pipecast::validate {
namespace {

// After an abort, how long RunStages waits for workers to stop before it
// tells RuntimeOptions::on_workers_stuck (it keeps waiting).
constexpr TimeNs kStopGraceNs = 2'000'000'000;  // 2 s
// The shortest wait Patiently asks the transport for, so that it never spins.
constexpr TimeNs kMinWaitNs = 10'000'000;  // 10 ms
// The watchdog looks at the workers this often.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(10);
// How long a stalled op (the stall fault) would run: an hour, so only the
// watchdog ends it.
constexpr TimeNs kStallNs = 3600 * kNsPerS;
// Keeps a stalled op's spinning from being optimised away.
volatile uint64_t g_stall_sink = 0;
// What the oom fault asks for when the stage has no limit: 1 PiB, beyond any
// machine's address space, so the system allocator refuses.
constexpr Bytes kOomFaultBytes = Bytes{1} << 50;

std::string Ms(TimeNs ns) { return fmt::format("{:.3f} ms", NsToMs(ns)); }

// CPU time a thread has used, by its CPU-time clock (pthread_getcpuclockid):
// any thread of the process may read another's.
TimeNs CpuNs(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return TimeNs{ts.tv_sec} * kNsPerS + ts.tv_nsec;
}

// The calling thread's CPU-time clock.
clockid_t ThisThreadCpuClock() {
  clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) return CLOCK_THREAD_CPUTIME_ID;
  return clock;
}

std::string MessageText(const Message& m) {
  return fmt::format("the {} of {}{}{} from rank {}", m.gradient ? "gradient" : "activation",
                     m.src_stage, m.gradient ? "B" : "F", m.microbatch, m.peer_rank);
}

// What every local worker is doing, for the watchdog and for diagnoses.
class RunControl {
 public:
  enum class State { kIdle, kWaiting, kRunning, kDone };

  explicit RunControl(int ranks) : slots_(ranks) {}

  std::atomic<bool> abort{false};

  void Fail(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = std::move(status);
    abort.store(true);
  }
  Status first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }
  // `rank` and `peer` are workers (world ranks); `peer` is the sender of the
  // message a waiting worker waits for, `tag` its tag. A waiting worker whose
  // `op` is null waits in its copy reduce.
  void Set(int rank, State state, const ExecOp* op = nullptr, TimeNs since = 0, int peer = -1,
           int64_t tag = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t needs = 0;
    if (state == State::kWaiting) needs = ++messages_[MessageKey(peer, rank, tag)].awaited;
    slots_[rank] = Slot{state, op, since, needs, peer, tag};
  }
  // A running op, with its thread's CPU-time clock and the CPU time it had
  // used when the op started, for the watchdog.
  void SetRunning(int rank, const ExecOp* op, TimeNs since, clockid_t cpu_clock) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[rank] = Slot{State::kRunning, op, since, 0, -1, 0, cpu_clock, CpuNs(cpu_clock)};
  }
  // Called before a worker hands message (src, dst, tag) to the transport, so
  // that a receiver waiting for it is never taken for deadlocked, however long
  // its thread waits to be woken.
  void NoteSent(int src, int dst, int64_t tag) {
    std::lock_guard<std::mutex> lock(mu_);
    ++messages_[MessageKey(src, dst, tag)].sent;
  }
  // Something happened at `now` on a local rank: an op ended, a message
  // arrived, a barrier opened.
  void Progress(TimeNs now) {
    TimeNs seen = last_progress_ns_.load();
    while (seen < now && !last_progress_ns_.compare_exchange_weak(seen, now)) {
    }
  }
  TimeNs last_progress_ns() const { return last_progress_ns_.load(); }
  // One line per local rank: what it is doing now.
  std::string Board(const std::vector<int>& ranks, TimeNs now) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (int r : ranks) {
      const Slot& s = slots_[r];
      out += fmt::format("\n  rank {}: ", r);
      switch (s.state) {
        case State::kIdle:
          out += "between ops";
          break;
        case State::kDone:
          out += "finished";
          break;
        case State::kWaiting:
          if (s.op == nullptr) {
            out += fmt::format("waits in its copy reduce for the gradients of rank {} (for {})",
                               s.peer, Ms(now - s.since));
          } else {
            out += fmt::format("waits in {} for {} (for {})", ActionName(s.op->action),
                               MessageText(s.op->recv), Ms(now - s.since));
          }
          break;
        case State::kRunning:
          out += fmt::format("runs {} (for {}, predicted {})", ActionName(s.op->action),
                             Ms(now - s.since), Ms(s.op->predicted_ns));
          break;
      }
    }
    return out;
  }
  // The watchdog's look: a stuck op, or everyone waiting. Returns a
  // diagnosis, or OK.
  //
  // An op is stuck when its thread has used more CPU time than the limit
  // (watchdog_factor x its predicted time + watchdog_floor_ns): it computes
  // far past its profile, e.g. a loop that never ends. CPU time, not wall
  // time: on a loaded machine a thread waits for a core for as long as the
  // load makes it, and an op that ran 524 ms of wall time for 1 ms of work
  // is slow, not stuck. An op that blocks (a kernel or collective that never
  // returns uses no CPU) is stuck when it has run past the limit in wall time
  // and no local rank has made progress for recv_timeout_ns, the receive's
  // own bound for nothing happening.
  Status Check(const std::vector<int>& ranks, const RuntimeOptions& o, bool all_local, TimeNs now) {
    int waiting = 0, done = 0;
    TimeNs waiting_since = 0;
    const TimeNs idle = now - last_progress_ns_.load();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int r : ranks) {
        const Slot& s = slots_[r];
        if (s.state == State::kRunning) {
          const TimeNs limit =
              static_cast<TimeNs>(o.watchdog_factor * s.op->predicted_ns) + o.watchdog_floor_ns;
          const TimeNs cpu = CpuNs(s.cpu_clock) - s.cpu_start_ns;
          const TimeNs wall = now - s.since;
          const bool blocked = wall > limit && idle >= o.recv_timeout_ns;
          if (cpu > limit || blocked) {
            return Status::FailedPrecondition(fmt::format(
                "stage {} (rank {}) op {} has {}, over the watchdog limit of {} ({}x its "
                "predicted {} + {}; --watchdog-factor)",
                s.op->action.stage, r, ActionName(s.op->action),
                blocked
                    ? fmt::format("run {} with no progress on any local rank for {} "
                                  "(--recv-timeout-ms)",
                                  Ms(wall), Ms(idle))
                    : fmt::format("computed for {} of CPU time (running {})", Ms(cpu), Ms(wall)),
                Ms(limit), o.watchdog_factor, Ms(s.op->predicted_ns), Ms(o.watchdog_floor_ns)));
          }
        }
        if (s.state == State::kWaiting) {
          // Waiting for a message already sent is progress still to come:
          // the receiver's thread has not been woken yet (hundreds of
          // threads on two cores wait long for a turn). Only a wait for a
          // message nobody has sent can be part of a deadlock.
          const auto m = messages_.find(MessageKey(s.peer, r, s.tag));
          const int64_t sent = m == messages_.end() ? 0 : m->second.sent;
          if (sent < s.needs) {
            ++waiting;
            waiting_since = std::max(waiting_since, s.since);
          }
        }
        if (s.state == State::kDone) ++done;
      }
    }
    if (all_local && waiting > 0 && waiting + done == static_cast<int>(ranks.size()) &&
        now - waiting_since > o.deadlock_grace_ns) {
      return Status::FailedPrecondition(
          "the schedule deadlocks: every unfinished rank waits for a message that no running "
          "op will send:" +
          Board(ranks, now));
    }
    return Status::Ok();
  }

 private:
  struct Slot {
    State state = State::kIdle;
    const ExecOp* op = nullptr;
    TimeNs since = 0;
    int64_t needs = 0;  // kWaiting: the how-many-th message with this key it waits for
    int peer = -1;      // kWaiting: the sending worker
    int64_t tag = 0;    // kWaiting: the message's tag
    clockid_t cpu_clock = CLOCK_THREAD_CPUTIME_ID;  // kRunning: the worker thread's
    TimeNs cpu_start_ns = 0;                        // kRunning: its CPU time at the op's start
  };
  // Messages by (src, dst, tag) over the whole run: how many were sent, and
  // how many receives began. The same key recurs once per iteration.
  struct MessageCount {
    int64_t sent = 0;
    int64_t awaited = 0;
  };
  using MessageKey = std::tuple<int, int, int64_t>;
  std::mutex mu_;
  std::vector<Slot> slots_;
  std::map<MessageKey, MessageCount> messages_;
  std::atomic<TimeNs> last_progress_ns_{0};
  Status first_error_;
};

struct Shared {
  Shared(const ExecPlan& p, std::vector<int> local, const RuntimeOptions& o, const RuntimeEnv& e)
      : plan(p), local_ranks(std::move(local)), options(o), env(e), control(p.workers()) {}
  const ExecPlan plan;
  const std::vector<int> local_ranks;
  const RuntimeOptions options;
  const RuntimeEnv env;
  RunControl control;
  std::mutex done_mu;
  std::condition_variable done_cv;
  int finished = 0;
};

// `worker` is a world rank; with tensor (expert) parallelism the name gives
// its pipeline rank and tensor (expert) rank.
std::string StageName(const ExecOp& op, int worker, const ExecPlan& plan) {
  const int t = plan.workers_per_rank();
  if (t <= 1) {
    return fmt::format("stage {} (rank {}) op {}", op.action.stage, worker, ActionName(op.action));
  }
  return fmt::format("stage {} (rank {}, {} rank {}) op {}", op.action.stage, worker / t,
                     plan.expert_parallel > 1 ? "expert" : "tensor", worker % t,
                     ActionName(op.action));
}

class Worker {
 public:
  // `rank` is the worker's world rank: tensor (or expert) rank rank % t of
  // pipeline rank rank / t, t the workers a rank.
  Worker(Shared& s, int rank, StageRun* out)
      : s_(s),
        rank_(rank),
        t_(s.plan.workers_per_rank()),
        stage_(s.plan.per_rank[rank / t_]),
        out_(out),
        pool_(s.env.pools[rank]),
        copy_pool_(static_cast<size_t>(rank) < s.env.copy_pools.size() ? s.env.copy_pools[rank]
                                                                       : nullptr),
        group_(static_cast<size_t>(rank / t_) < s.env.groups.size() ? s.env.groups[rank / t_]
                                                                    : nullptr) {}

  Status Run() {
    out_->rank = rank_ / t_;
    out_->tensor_rank = s_.plan.tensor_parallel > 1 ? rank_ % t_ : 0;
    out_->expert_rank = s_.plan.expert_parallel > 1 ? rank_ % t_ : 0;
    out_->static_bytes = stage_.static_bytes;
    PIPECAST_ASSIGN_OR_RETURN(Allocation statics,
                              pool_->Allocate(stage_.static_bytes, MemoryKind::kStatic,
                                              "weights, gradients and optimizer state"));
    const RuntimeOptions& o = s_.options;
    for (int it = 0; it < o.warmup_iterations + o.iterations; ++it) {
      if (it == o.warmup_iterations) pool_->ResetPeak();
      Status st = Patiently([&](TimeNs timeout) {
        return s_.env.transport->Barrier(rank_, timeout, s_.control.abort);
      });
      if (!st.ok()) return WaitFailure(st, fmt::format("rank {} before iteration {}", rank_, it));
      s_.control.Progress(s_.env.clock->NowNs());
      PIPECAST_RETURN_IF_ERROR(RunIteration(it - o.warmup_iterations));
    }
    out_->peak_bytes = pool_->peak();
    out_->peak_activation_bytes = pool_->peak_of(MemoryKind::kActivation);
    out_->peak_comm_bytes = pool_->peak_of(MemoryKind::kComm);
    out_->peak_workspace_bytes = pool_->peak_of(MemoryKind::kWorkspace);
    out_->memory_timeline = pool_->Timeline();
    return Status::Ok();
  }

 private:
  // One op, or one half of an overlapped F&B pair, on its way through the
  // iteration: its fault, the message it received and the one it will send.
  struct Step {
    const ExecOp* op = nullptr;
    std::optional<Fault::Kind> fault;
    Allocation input;
    Allocation output;
  };
  using Held = std::map<std::pair<int, int>, std::vector<Allocation>>;  // (stage, mb)

  Status RunIteration(int iteration) {
    Held held;
    // --sharded-state fsdp2: the gradients the first backward makes, freed at the iteration's
    // end (FSDP2's zero_grad: the next iteration makes them again).
    Allocation grads;
    const std::vector<ExecOp>& ops = stage_.ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      // An overlapped op is a pair's forward with its backward next (BuildExecPlan checks).
      const size_t n = ops[i].action.overlapped && i + 1 < ops.size() ? 2 : 1;
      Step steps[2];
      for (size_t h = 0; h < n; ++h) {
        steps[h].op = &ops[i + h];
        steps[h].fault = FaultHere(ops[i + h]);
      }
      for (size_t h = 0; h < n; ++h) PIPECAST_RETURN_IF_ERROR(Receive(iteration, &steps[h]));
      for (size_t h = 0; h < n; ++h) {
        PIPECAST_RETURN_IF_ERROR(Compute(iteration, &steps[h], &held, &grads));
      }
      for (size_t h = 0; h < n; ++h) PIPECAST_RETURN_IF_ERROR(SendOutput(iteration, &steps[h]));
      i += n - 1;
    }
    PIPECAST_RETURN_IF_ERROR(CopyReduce(iteration));
    Status st = s_.env.transport->FlushSends(rank_, s_.options.recv_timeout_ns, s_.control.abort);
    if (!st.ok()) return WaitFailure(st, fmt::format("rank {}: completing its sends", rank_));
    if (!stage_.copy_exchanges.empty() && s_.env.copy_transport != s_.env.transport) {
      st = s_.env.copy_transport->FlushSends(rank_, s_.options.recv_timeout_ns, s_.control.abort);
      if (!st.ok())
        return WaitFailure(st, fmt::format("rank {}: completing its copy reduce", rank_));
    }
    if (!held.empty()) {
      return Status::Internal(fmt::format(
          "rank {}: activations of stage {} micro-batch {} were never freed by a B or W op", rank_,
          held.begin()->first.first, held.begin()->first.second));
    }
    return Status::Ok();
  }

  // Waits for the op's input message, if it has one.
  Status Receive(int iteration, Step* step) {
    const ExecOp& op = *step->op;
    if (!op.recv.present()) return Status::Ok();
    PIPECAST_ASSIGN_OR_RETURN(
        Allocation got,
        Await(s_.env.transport, pool_, &op, Peer(op.recv), op.recv.tag, op.recv.bytes, [&] {
          return fmt::format("{}: {}", StageName(op, rank_, s_.plan), MessageText(op.recv));
        }));
    step->input = std::move(got);
    if (iteration >= 0) out_->recvs.push_back({iteration, op.recv, s_.env.clock->NowNs()});
    return Status::Ok();
  }

  // Receives message (peer -> this worker, tag) of `bytes` into `pool`,
  // marked as waiting in `op` (null: in the copy reduce) so the deadlock
  // watch can see it; `what` names it if it never comes.
  template <typename What>
  Result<Allocation> Await(Transport* transport, MemoryPool* pool, const ExecOp* op, int peer,
                           int64_t tag, Bytes bytes, What what) {
    const Clock& clock = *s_.env.clock;
    s_.control.Set(rank_, RunControl::State::kWaiting, op, clock.NowNs(), peer, tag);
    Result<Allocation> got = Status::Unavailable("not received");
    Status waited = Patiently([&](TimeNs timeout) {
      got = transport->Recv(peer, rank_, tag, bytes, pool, timeout, s_.control.abort);
      return got.status();
    });
    if (!waited.ok()) return WaitFailure(waited, what());
    s_.control.Progress(clock.NowNs());
    return got;
  }

  // Allocates the op's memory, runs its work, frees what it frees and times
  // it; its output buffer waits in `step` for SendOutput.
  Status Compute(int iteration, Step* step, Held* held, Allocation* grads) {
    const ExecOp& op = *step->op;
    const std::optional<Fault::Kind> fault = step->fault;
    const Clock& clock = *s_.env.clock;
    const TimeNs start = clock.NowNs();
    s_.control.SetRunning(rank_, &op, start, cpu_clock_);
    const std::string name = StageName(op, rank_, s_.plan);
    Bytes act_bytes = s_.env.work->ManagesActivations() ? 0 : op.activation_bytes;
    if (fault == Fault::Kind::kOom) {
      act_bytes = pool_->limit() > 0 ? pool_->limit() + 1 : kOomFaultBytes;
    }
    PIPECAST_ASSIGN_OR_RETURN(Allocation act,
                              pool_->Allocate(act_bytes, MemoryKind::kActivation,
                                              "the activations of " + ActionName(op.action)));
    PIPECAST_ASSIGN_OR_RETURN(Allocation ws,
                              pool_->Allocate(op.workspace_bytes, MemoryKind::kWorkspace,
                                              "the workspace of " + ActionName(op.action)));
    PIPECAST_ASSIGN_OR_RETURN(Allocation output,
                              pool_->Allocate(op.send.bytes, MemoryKind::kComm,
                                              "the output of " + ActionName(op.action)));
    if (fault == Fault::Kind::kThrow) {
      throw std::runtime_error("injected fault (--inject-fault throw)");
    }
    if (fault == Fault::Kind::kStall) {
      // The op hangs computing, whatever its work is (busy-work, real
      // layers, a GPU kernel): the runtime itself spins in it until the
      // watchdog aborts the run, or kStallNs.
      uint64_t spin = 1;
      while (!s_.control.abort.load(std::memory_order_relaxed) &&
             clock.NowNs() - start < kStallNs) {
        spin = spin * 6364136223846793005ULL + 1;
      }
      g_stall_sink = spin;
      return Status::FailedPrecondition("aborted");
    }
    OpCall call;
    call.rank = rank_;
    call.action = op.action;
    call.predicted_ns = op.predicted_ns;
    call.input =
        std::span<const std::byte>(step->input.data(), static_cast<size_t>(step->input.size()));
    call.output = std::span<std::byte>(output.data(), static_cast<size_t>(output.size()));
    call.abort = &s_.control.abort;
    call.pool = pool_;
    const bool expert = s_.plan.expert_parallel > 1;
    call.tensor_rank = expert ? 0 : rank_ % t_;
    call.tensor_group = t_ > 1 && !expert ? group_ : nullptr;
    call.expert_rank = expert ? rank_ % t_ : 0;
    call.expert_group = expert ? group_ : nullptr;
    TimeNs collective_ns = 0;
    call.collective_ns = &collective_ns;
    Status st = s_.env.work->Run(call);
    if (!st.ok()) {
      if (s_.control.abort.load()) return Status::FailedPrecondition("aborted");
      return st.WithPrefix(name);
    }
    ws.Release();
    step->input.Release();
    const std::pair<int, int> key{op.action.stage, op.action.microbatch};
    if (act.size() > 0) (*held)[key].push_back(std::move(act));
    if (op.frees_activations) held->erase(key);
    if (op.kept_after_bytes > 0 && !s_.env.work->ManagesActivations()) {
      PIPECAST_ASSIGN_OR_RETURN(Allocation kept,
                                pool_->Allocate(op.kept_after_bytes, MemoryKind::kActivation,
                                                "what W keeps of " + ActionName(op.action)));
      (*held)[key].push_back(std::move(kept));
    }
    // --sharded-state fsdp2: the first backward's end makes the rank's gradients.
    const bool backward =
        op.action.kind == OpKind::kBackward || op.action.kind == OpKind::kBackwardWeight;
    if (backward && stage_.gradient_bytes_made_in_step > 0 && grads->size() == 0) {
      PIPECAST_ASSIGN_OR_RETURN(
          *grads, pool_->Allocate(stage_.gradient_bytes_made_in_step, MemoryKind::kStatic,
                                  "the gradients FSDP2 makes in the backward"));
    }
    const TimeNs end = clock.NowNs();
    s_.control.Progress(end);
    if (iteration >= 0) out_->ops.push_back({iteration, op.action, start, end, collective_ns});
    s_.control.Set(rank_, RunControl::State::kIdle);
    step->output = std::move(output);
    return Status::Ok();
  }

  // Sends the op's output (not under the drop fault); its time is now: the
  // op's end, or for a pair's halves the pair's.
  Status SendOutput(int iteration, Step* step) {
    const ExecOp& op = *step->op;
    if (!op.send.present() || step->fault == Fault::Kind::kDrop) return Status::Ok();
    if (iteration >= 0) out_->sends.push_back({iteration, op.send, s_.env.clock->NowNs()});
    const int peer = Peer(op.send);
    s_.control.NoteSent(rank_, peer, op.send.tag);
    Status sent = s_.env.transport->Send(rank_, peer, op.send.tag, std::move(step->output));
    if (!sent.ok()) {
      return sent.WithPrefix(StageName(op, rank_, s_.plan) + ": sending " + MessageText(op.send));
    }
    return Status::Ok();
  }

  // The copy reduce of a bidirectional schedule: with each partner, send the
  // shared stages' gradient bytes and receive the partner's (buffers charged
  // to the copy pool, not the stage's). The bytes are exchanged, not summed:
  // the simulator's copy_reduce_ns is the transfer (docs/validator.md).
  Status CopyReduce(int iteration) {
    if (stage_.copy_exchanges.empty()) return Status::Ok();
    const Clock& clock = *s_.env.clock;
    Transport* transport = s_.env.copy_transport;
    if (transport == nullptr || copy_pool_ == nullptr) {
      return Status::Internal(fmt::format("rank {} has no copy-reduce transport or pool", rank_));
    }
    for (const CopyExchange& x : stage_.copy_exchanges) {
      const int peer = x.peer_rank * t_ + rank_ % t_;
      const TimeNs start = clock.NowNs();
      PIPECAST_ASSIGN_OR_RETURN(
          Allocation mine,
          copy_pool_->Allocate(x.bytes, MemoryKind::kComm,
                               fmt::format("the copy gradients for rank {}", peer)));
      s_.control.NoteSent(rank_, peer, x.send_tag);
      Status sent = transport->Send(rank_, peer, x.send_tag, std::move(mine));
      if (!sent.ok()) {
        return sent.WithPrefix(
            fmt::format("rank {}: sending its copy gradients to rank {}", rank_, peer));
      }
      PIPECAST_ASSIGN_OR_RETURN(
          Allocation got, Await(transport, copy_pool_, nullptr, peer, x.recv_tag, x.bytes, [&] {
            return fmt::format("rank {}'s copy reduce: the gradients of rank {}", rank_, peer);
          }));
      s_.control.Set(rank_, RunControl::State::kIdle);
      got.Release();
      if (iteration >= 0) {
        out_->copy_reduces.push_back({iteration, x.peer_rank, x.bytes, start, clock.NowNs()});
      }
    }
    return Status::Ok();
  }

  // Runs `wait(timeout)` (a receive or a barrier) until it ends other than
  // by timing out (Unavailable), or until recv_timeout_ns pass with no
  // progress on any local rank. A pipeline of hundreds of stages on two cores
  // can take longer than the timeout for its first gradient to come back
  // while every hop is progress: a lost message is one nobody is working
  // towards, not one that is late.
  template <typename Wait>
  Status Patiently(Wait wait) {
    const TimeNs timeout = s_.options.recv_timeout_ns;
    const Clock& clock = *s_.env.clock;
    TimeNs left = timeout;
    while (true) {
      Status st = wait(left);
      if (st.code() != StatusCode::kUnavailable) return st;
      const TimeNs idle = clock.NowNs() - std::max(s_.control.last_progress_ns(), started_ns_);
      if (idle >= timeout) return st;
      left = std::max<TimeNs>(timeout - idle, kMinWaitNs);
    }
  }

  // The worker a message of this worker's rank goes to or comes from: the
  // same tensor rank of the peer rank.
  int Peer(const Message& m) const { return m.peer_rank * t_ + rank_ % t_; }

  std::optional<Fault::Kind> FaultHere(const ExecOp& op) {
    const std::optional<Fault>& f = s_.options.fault;
    if (!f || fault_fired_ || !FaultNames(*f, op.action)) return std::nullopt;
    fault_fired_ = true;
    return f->kind;
  }

  Status WaitFailure(const Status& st, const std::string& what) {
    if (st.code() != StatusCode::kUnavailable) return st;  // aborted, or a transport error
    return Status::FailedPrecondition(fmt::format(
        "{} did not arrive within {} of no progress on any local rank (--recv-timeout-ms): the "
        "message was lost, its sender failed or is stuck, or the schedule deadlocks. Local ranks "
        "then:{}",
        what, Ms(s_.options.recv_timeout_ns),
        s_.control.Board(s_.local_ranks, s_.env.clock->NowNs())));
  }

  Shared& s_;
  const int rank_;  // world rank
  const int t_;     // workers per pipeline rank (t, or ep)
  const ExecStage& stage_;
  StageRun* out_;
  MemoryPool* pool_;
  MemoryPool* copy_pool_;  // the copy reduce's buffers; null without one
  TensorGroup* group_;     // the rank's tensor-parallel group; null at t = 1
  bool fault_fired_ = false;
  const TimeNs started_ns_ = s_.env.clock->NowNs();
  const clockid_t cpu_clock_ = ThisThreadCpuClock();  // constructed on the worker's thread
};

void RunWorker(Shared* shared, std::vector<StageRun>* runs, size_t index) {
  const int rank = shared->local_ranks[index];
  Status st;
  try {
    st = Worker(*shared, rank, &(*runs)[index]).Run();
  } catch (const std::bad_alloc&) {
    st = Status::FailedPrecondition(fmt::format(
        "out of memory on rank {}: the system refused memory the worker needed for itself "
        "(std::bad_alloc), outside the stage's pool; give the run more memory (ulimit -v, the "
        "machine) or fewer ranks per machine",
        rank));
  } catch (const std::exception& e) {
    st = Status::Internal(fmt::format("rank {}'s worker threw: {}", rank, e.what()));
  } catch (...) {
    st = Status::Internal(fmt::format("rank {}'s worker threw an unknown exception", rank));
  }
  if (!st.ok()) shared->control.Fail(st);
  shared->control.Set(rank, RunControl::State::kDone);
  std::lock_guard<std::mutex> lock(shared->done_mu);
  ++shared->finished;
  shared->done_cv.notify_all();
}

}  // namespace

void FoldExpandedRuns(int tensor_parallel, std::vector<StageRun>* runs, bool expert) {
  const int t = tensor_parallel;
  if (t <= 1) return;
  for (StageRun& run : *runs) {
    (expert ? run.expert_rank : run.tensor_rank) = run.rank % t;
    run.rank /= t;
    for (MessageTiming& m : run.sends) m.message.peer_rank /= t;
    for (MessageTiming& m : run.recvs) m.message.peer_rank /= t;
    for (CopyReduceTiming& c : run.copy_reduces) c.peer_rank /= t;
  }
}

bool FaultNames(const Fault& fault, const Action& action) {
  return fault.action.stage == action.stage && fault.action.kind == action.kind &&
         fault.action.microbatch == action.microbatch;
}

Result<Fault> ParseFault(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  Fault f;
  if (kind == "throw")
    f.kind = Fault::Kind::kThrow;
  else if (kind == "stall")
    f.kind = Fault::Kind::kStall;
  else if (kind == "drop")
    f.kind = Fault::Kind::kDrop;
  else if (kind == "oom")
    f.kind = Fault::Kind::kOom;
  else {
    return Status::InvalidArgument(fmt::format(
        "--inject-fault '{}': expected KIND:ACTION with KIND throw, stall, drop or oom and "
        "ACTION like 1F2",
        text));
  }
  if (colon == std::string::npos || colon + 4 > text.size()) {
    return Status::InvalidArgument(
        fmt::format("--inject-fault '{}': expected KIND:ACTION, e.g. throw:1F2", text));
  }
  const std::string act = text.substr(colon + 1);
  const size_t k = act.find_first_of("FBIW");
  try {
    if (k == std::string::npos || k == 0 || k + 1 >= act.size()) throw std::invalid_argument("");
    size_t used = 0;
    f.action.stage = std::stoi(act.substr(0, k), &used);
    if (used != k) throw std::invalid_argument("");
    f.action.microbatch = std::stoi(act.substr(k + 1), &used);
    if (used != act.size() - k - 1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    return Status::InvalidArgument(
        fmt::format("--inject-fault '{}': action '{}' is not like 1F2", text, act));
  }
  f.action.kind = act[k] == 'F'   ? OpKind::kForward
                  : act[k] == 'B' ? OpKind::kBackward
                  : act[k] == 'I' ? OpKind::kBackwardInput
                                  : OpKind::kBackwardWeight;
  return f;
}

Status RuntimeOptions::Validate() const {
  if (warmup_iterations < 0) return Status::InvalidArgument("--warmup must be >= 0");
  if (iterations < 1) return Status::InvalidArgument("--iterations must be >= 1");
  // Bounded so that factor x predicted time stays far inside 64-bit ns.
  if (!(watchdog_factor >= 1 && watchdog_factor <= 1e6)) {
    return Status::InvalidArgument(
        fmt::format("--watchdog-factor is {}: give a factor between 1 and 1000000 (default 10)",
                    watchdog_factor));
  }
  if (recv_timeout_ns <= 0) return Status::InvalidArgument("--recv-timeout-ms must be > 0");
  return Status::Ok();
}

Result<std::vector<StageRun>> RunStages(const ExecPlan& plan, const std::vector<int>& local_ranks,
                                        const RuntimeOptions& options, const RuntimeEnv& env) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  for (int r : local_ranks) {
    if (r < 0 || r >= plan.workers() || r >= static_cast<int>(env.pools.size()) ||
        env.pools[r] == nullptr) {
      return Status::Internal(fmt::format("rank {} has no memory pool or is not in the plan", r));
    }
    const int t = std::max(plan.workers_per_rank(), 1);
    const bool copy_ready = env.copy_transport != nullptr &&
                            r < static_cast<int>(env.copy_pools.size()) &&
                            env.copy_pools[r] != nullptr;
    if (!plan.per_rank[r / t].copy_exchanges.empty() && !copy_ready) {
      return Status::FailedPrecondition(fmt::format(
          "rank {} must sum its copies' gradients with rank {} after each iteration (a "
          "bidirectional schedule's copy reduce), which this backend does not run: validate the "
          "plan with --backend cpu or mpi",
          r / t, plan.per_rank[r / t].copy_exchanges.front().peer_rank));
    }
  }
  Shared shared(plan, local_ranks, options, env);
  shared.control.Progress(env.clock->NowNs());  // the run's start counts as progress
  std::vector<StageRun> runs(local_ranks.size());
  const int n = static_cast<int>(local_ranks.size());
  std::vector<std::thread> threads;
  threads.reserve(local_ranks.size());
  for (size_t i = 0; i < local_ranks.size(); ++i) {
    try {
      threads.emplace_back(RunWorker, &shared, &runs, i);
    } catch (const std::system_error& e) {
      // The system has no room for another thread (each reserves its stack
      // in the address space): the workers started so far are stopped and
      // joined, and the run ends in a diagnosis instead of std::terminate.
      shared.control.Fail(Status::FailedPrecondition(fmt::format(
          "out of memory: could not start the worker of rank {} ({} of {} started; the system "
          "refused a thread: {}); give the run more memory (ulimit -v, the machine) or fewer "
          "ranks per machine",
          local_ranks[i], i, n, e.what())));
      std::lock_guard<std::mutex> lock(shared.done_mu);
      shared.finished += n - static_cast<int>(i);  // the ones never started
      break;
    }
  }
  {
    std::unique_lock<std::mutex> lock(shared.done_mu);
    std::optional<std::chrono::steady_clock::time_point> aborted_at;
    bool told_stuck = false;
    while (shared.finished < n) {
      if (shared.done_cv.wait_for(lock, kWatchdogPeriod, [&] { return shared.finished == n; })) {
        break;
      }
      const int running = n - shared.finished;
      lock.unlock();
      if (!shared.control.abort.load()) {
        Status st =
            shared.control.Check(local_ranks, options, env.all_ranks_local, env.clock->NowNs());
        if (!st.ok()) shared.control.Fail(st);
      } else {
        // A worker stuck inside an op that cannot be interrupted (a GPU
        // kernel) is never left behind: it may touch the transports, pools
        // and work until it returns. After the grace the caller hears of it
        // and may end the process (the validator tool does).
        const auto now = std::chrono::steady_clock::now();
        if (!aborted_at) aborted_at = now;
        if (!told_stuck && now - *aborted_at >= std::chrono::nanoseconds(kStopGraceNs)) {
          told_stuck = true;
          if (options.on_workers_stuck) {
            options.on_workers_stuck(shared.control.first_error().WithPrefix(
                fmt::format("{} of {} still running {} after the failure", running,
                            Count(n, "worker", "workers"), Ms(kStopGraceNs))));
          }
        }
      }
      lock.lock();
    }
  }
  for (std::thread& t : threads) t.join();
  Status st = shared.control.first_error();
  if (!st.ok()) return st;
  return runs;
}

}  // namespace pipecast::validate
