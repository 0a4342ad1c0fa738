#include "validate/runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "formats/schedule_text.h"
#include "testing/validate_test_util.h"

namespace pipecast::validate {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Every rank of `ep` in threads over an in-process transport, the copy reduce
// over a second one between pools of its own (as the cpu backend does).
struct Harness {
  explicit Harness(const ExecPlan& ep, Bytes limit = 0) : plan(ep) {
    for (int r = 0; r < ep.ranks; ++r) {
      pools.push_back(std::make_unique<MemoryPool>("stage " + std::to_string(r), limit, &clock));
      raw.push_back(pools.back().get());
      copy_pools.push_back(std::make_unique<MemoryPool>("copy " + std::to_string(r), 0, &clock));
      copy_raw.push_back(copy_pools.back().get());
      ranks.push_back(r);
    }
    transport = std::make_unique<InProcessTransport>(raw);
    copy_transport = std::make_unique<InProcessTransport>(copy_raw);
  }
  Result<std::vector<StageRun>> Run(OpWork* work, RuntimeOptions o = {}) {
    RuntimeEnv env{transport.get(), work, &clock, raw, true, {}, copy_transport.get(), copy_raw};
    return RunStages(plan, ranks, o, env);
  }
  ExecPlan plan;
  SteadyClock clock;
  std::vector<std::unique_ptr<MemoryPool>> pools, copy_pools;
  std::vector<MemoryPool*> raw, copy_raw;
  std::vector<int> ranks;
  std::unique_ptr<InProcessTransport> transport, copy_transport;
};

// One measured iteration. The receive timeout is wide: a run whose ranks all
// wait on a loaded machine is not lost, and tests that expect a timeout set
// their own (issue 28: tests must pass while other work loads the cores).
RuntimeOptions Quick() {
  RuntimeOptions o;
  o.warmup_iterations = 0;
  o.iterations = 1;
  o.recv_timeout_ns = 30'000'000'000;
  return o;
}

class RuntimeOrder : public ::testing::TestWithParam<std::tuple<ScheduleKind, int>> {};

TEST_P(RuntimeOrder, EachRankRunsExactlyItsActionListInOrder) {
  const auto [kind, chunks] = GetParam();
  testing::World w = testing::MakeWorld(kind, 2, 4, chunks, 1);
  Harness h(w.exec);
  testing::RecordingWork work(2);
  RuntimeOptions o = Quick();
  o.iterations = 2;

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  for (int r = 0; r < 2; ++r) {
    std::vector<Action> twice = w.plan.schedule.actions[r];
    twice.insert(twice.end(), w.plan.schedule.actions[r].begin(), w.plan.schedule.actions[r].end());
    EXPECT_EQ(work.order()[r], twice) << "rank " << r;
    // The records hold the same order, with starts after ends of the previous op.
    ASSERT_EQ((*runs)[r].ops.size(), twice.size());
    for (size_t i = 0; i < twice.size(); ++i) {
      EXPECT_EQ((*runs)[r].ops[i].action, twice[i]);
      if (i > 0) {
        EXPECT_GE((*runs)[r].ops[i].start_ns, (*runs)[r].ops[i - 1].end_ns);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, RuntimeOrder,
                         ::testing::Values(std::tuple{ScheduleKind::kGPipe, 1},
                                           std::tuple{ScheduleKind::k1F1B, 1},
                                           std::tuple{ScheduleKind::kInterleaved1F1B, 2},
                                           std::tuple{ScheduleKind::kZBH1, 1},
                                           std::tuple{ScheduleKind::kPipeDream, 1},
                                           std::tuple{ScheduleKind::kDualPipeV, 2},
                                           std::tuple{ScheduleKind::kDualPipe, 2}));

TEST(Runtime, GPipeStageZeroHoldsEveryMicrobatchsActivationsAtOnce) {
  // GPipe's stage 0 runs all 4 forwards before any backward: its activation
  // high-water mark is exactly 4 x (2 layers x 1 MiB), as the simulator says.
  testing::World w = testing::MakeWorld(ScheduleKind::kGPipe, 2, 4);
  Harness h(w.exec);
  testing::RecordingWork work(2);

  Result<std::vector<StageRun>> runs = h.Run(&work, Quick());

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ((*runs)[0].peak_activation_bytes, 8 * kMiB);
  EXPECT_EQ((*runs)[0].peak_activation_bytes, w.predicted.per_rank[0].memory.activations_peak);
  EXPECT_EQ((*runs)[0].peak_workspace_bytes, 256 * kKiB);
  EXPECT_EQ((*runs)[0].static_bytes, 36'000);  // 2 x 1000 parameters x 18 bytes
  EXPECT_GE((*runs)[0].peak_bytes, 36'000 + 8 * kMiB + 256 * kKiB);
}

TEST(Runtime, ZeroBubbleInputGradientFreesWhatTheWeightGradientDoesNotKeep) {
  // Given ZB-H2 on 2 ranks, 4 micro-batches, layers of 1 MiB whose W keeps
  // 256 KiB: I frees the other 768 KiB (sim/stage_costs.h).
  Model model = testing::UniformModel(4);
  for (Layer& l : model.layers) l.profiles[0].weight_grad_bytes = 256 * kKiB;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kZBH2, 2, 4, 1);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(model, *s);
  Harness h(w.exec);
  testing::RecordingWork work(2);

  Result<std::vector<StageRun>> runs = h.Run(&work, Quick());

  // Then each rank's measured activation high-water mark is the simulator's,
  // below the 4 x 2 MiB of keeping every activation until W.
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*runs)[r].peak_activation_bytes, w.predicted.per_rank[r].memory.activations_peak)
        << "rank " << r;
  }
  EXPECT_LT((*runs)[0].peak_activation_bytes, 8 * kMiB);
}

// The measured record of `name` ("0F3") on a rank, first iteration.
const OpTiming& Timed(const StageRun& run, const std::string& name) {
  for (const OpTiming& op : run.ops) {
    if (ActionName(op.action) == name) return op;
  }
  ADD_FAILURE() << "rank " << run.rank << " ran no " << name;
  static const OpTiming kNone;
  return kNone;
}

// --sharded-state fsdp2, ZeRO 3 over d = 2: FSDP2 makes the gradients in the backward, so the
// runtime allocates them at each rank's first backward's end (each iteration; freed at its end),
// where the simulator adds them (StageResult::gradients_from_ns), and each rank's measured peak
// is the predicted one. Per rank 2 layers of 100,000 parameters: 4 B of fp32 gradients / 2 =
// 400,000 B, against 2 MiB of activations a micro-batch. At m = 1 every rank peaks at its B0's
// start, before the gradients exist: allocated with the weights they would add 400,000 B there,
// more than the 64 KiB the runtime's measured peak may differ by.
TEST(Runtime, Fsdp2GradientsAreMadeAtTheFirstBackwardsEnd) {
  testing::LayerSpec spec;
  spec.parameters = 100'000;
  for (int m : {1, 4}) {
    SCOPED_TRACE("m = " + std::to_string(m));
    SimOptions o;
    o.config.layout.data_parallel = 2;
    o.config.microbatches = m;
    o.config.memory.zero = 3;
    o.config.memory.sharded_state = ShardedState::kFsdp2;
    const testing::World w = testing::MakeWorldWith(
        testing::UniformModel(4, spec), MakeSchedule(ScheduleKind::k1F1B, 2, m).value(), o);
    ASSERT_EQ(w.exec.per_rank.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      const StageResult& p = w.predicted.per_rank[r];
      EXPECT_EQ(w.exec.per_rank[r].gradient_bytes_made_in_step, Bytes{400'000}) << "rank " << r;
      EXPECT_EQ(w.exec.per_rank[r].static_bytes, p.HeldAllStepBytes()) << "rank " << r;
      EXPECT_GT(p.gradients_from_ns, 0) << "rank " << r;
    }
    Harness h(w.exec);
    testing::RecordingWork work(2);
    RuntimeOptions twice = Quick();
    twice.warmup_iterations = 1;  // the measured iteration makes them again
    Result<std::vector<StageRun>> runs = h.Run(&work, twice);
    ASSERT_TRUE(runs.ok()) << runs.status().message();
    // The runtime's two documented differences (docs/validator.md): an op's output buffer is
    // held from its start, and a received buffer counts from its arrival, which the threads'
    // timing moves: the peaks agree within one output buffer (64 KiB), the activations exactly.
    constexpr Bytes kOutput = 64 * kKiB;
    for (int r = 0; r < 2; ++r) {
      const StageResult& p = w.predicted.per_rank[r];
      const StageRun& run = (*runs)[r];
      EXPECT_EQ(run.peak_activation_bytes, p.memory.activations_peak) << "rank " << r;
      EXPECT_GE(run.peak_bytes, p.peak_memory_bytes - kOutput) << "rank " << r;
      EXPECT_LE(run.peak_bytes, p.peak_memory_bytes + kOutput) << "rank " << r;
      if (m == 1) {  // the peak is the largest live set beside the static memory alone
        Bytes live = 0;
        for (const MemorySample& x : p.memory_timeline) {
          live = std::max(live, x.activations + x.comm_buffers + x.workspace);
        }
        EXPECT_EQ(p.peak_memory_bytes, p.HeldAllStepBytes() + live) << "rank " << r;
        EXPECT_LE(run.peak_bytes, p.HeldAllStepBytes() + live + kOutput) << "rank " << r;
      }
    }
  }
}

TEST(Runtime, APairStartsWithBothInputsInAndSendsBothOutputsAtItsEnd) {
  // Given dualpipev on p=2, m=4: rank 0's pair (0F3;3B1) sends 0F3's activation and 3B1's
  // gradient to rank 1, whose pair (1F3;2B1) needs both.
  testing::World w = testing::MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2, 1);
  Harness h(w.exec);
  testing::RecordingWork work(2);

  Result<std::vector<StageRun>> runs = h.Run(&work, Quick());

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  const StageRun& r0 = (*runs)[0];
  const StageRun& r1 = (*runs)[1];
  // The halves run back to back, the forward first, each timed as its own op.
  const OpTiming& f = Timed(r0, "0F3");
  const OpTiming& b = Timed(r0, "3B1");
  EXPECT_TRUE(f.action.overlapped && b.action.overlapped);
  EXPECT_LE(f.end_ns, b.start_ns);
  // Both outputs leave when the pair ends, the forward's first.
  const int64_t act_tag = MessageTag(1, 3, false, 4), grad_tag = MessageTag(2, 1, true, 4);
  std::vector<MessageTiming> pair_sends;
  for (const MessageTiming& m : r0.sends) {
    if (m.message.tag == act_tag || m.message.tag == grad_tag) pair_sends.push_back(m);
  }
  ASSERT_EQ(pair_sends.size(), 2u);
  EXPECT_EQ(pair_sends[0].message.tag, act_tag);
  EXPECT_EQ(pair_sends[1].message.tag, grad_tag);
  EXPECT_GE(pair_sends[0].time_ns, b.end_ns);
  // Rank 1's pair starts only once both have arrived.
  const OpTiming& f1 = Timed(r1, "1F3");
  for (const MessageTiming& m : r1.recvs) {
    if (m.message.tag == act_tag || m.message.tag == grad_tag) {
      EXPECT_LE(m.time_ns, f1.start_ns);
    }
  }
}

class RuntimeDualPipe : public ::testing::TestWithParam<std::tuple<ScheduleKind, int, int>> {};

TEST_P(RuntimeDualPipe, ActivationPeaksAreThePredictedOnes) {
  // Given a schedule with overlapped pairs on p ranks, m micro-batches.
  const auto [kind, p, m] = GetParam();
  testing::World w = testing::MakeWorld(kind, p, m, 2, 1);
  Harness h(w.exec);
  testing::RecordingWork work(p);

  Result<std::vector<StageRun>> runs = h.Run(&work, Quick());

  // Then every rank ran its list, and its activation high-water mark is the simulator's:
  // a pair's forward allocates at its start, its backward frees at its end.
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ((*runs)[r].ops.size(), w.plan.schedule.actions[r].size()) << "rank " << r;
    EXPECT_EQ((*runs)[r].peak_activation_bytes, w.predicted.per_rank[r].memory.activations_peak)
        << "rank " << r;
    EXPECT_EQ((*runs)[r].peak_workspace_bytes, 256 * kKiB) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, RuntimeDualPipe,
                         ::testing::Values(std::tuple{ScheduleKind::kDualPipeV, 2, 4},
                                           std::tuple{ScheduleKind::kDualPipeV, 4, 8},
                                           std::tuple{ScheduleKind::kDualPipe, 2, 4},
                                           std::tuple{ScheduleKind::kDualPipe, 4, 8}));

TEST(Runtime, DualPipeCopiesExchangeTheirGradientsOutsideTheStagesMemory) {
  // Given dualpipe on p=2, m=4 with 1M parameters a layer: ranks 0 and 1 share both model
  // stages, 4M parameters x 4 bytes = 16 MB of gradients each way.
  testing::LayerSpec spec;
  spec.parameters = 1'000'000;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(testing::UniformModel(4, spec), *s);
  Harness h(w.exec);
  testing::RecordingWork work(2);
  RuntimeOptions o = Quick();
  o.iterations = 2;

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  for (int r = 0; r < 2; ++r) {
    const StageRun& run = (*runs)[r];
    // One exchange per measured iteration, after the rank's last op.
    ASSERT_EQ(run.copy_reduces.size(), 2u) << "rank " << r;
    for (const CopyReduceTiming& c : run.copy_reduces) {
      EXPECT_EQ(c.peer_rank, 1 - r);
      EXPECT_EQ(c.bytes, 16'000'000);
      EXPECT_LE(c.start_ns, c.end_ns);
    }
    EXPECT_GE(run.copy_reduces[0].start_ns, Timed(run, r == 0 ? "0W1" : "2W3").end_ns);
    // Its buffers were the copy pool's, not the stage's: the stage's comm peak is its 64 KiB
    // messages', and its activation peak the prediction's.
    EXPECT_GE(h.copy_pools[r]->peak(), 16'000'000);
    EXPECT_LT(run.peak_comm_bytes, 1 * kMiB);
    EXPECT_EQ(run.peak_activation_bytes, w.predicted.per_rank[r].memory.activations_peak);
  }
}

TEST(Runtime, ACopyReduceWithoutACopyTransportIsRefused) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(testing::UniformModel(4), *s);
  Harness h(w.exec);
  testing::RecordingWork work(2);
  RuntimeEnv env{h.transport.get(), &work, &h.clock, h.raw, true, {}, nullptr, {}};
  Result<std::vector<StageRun>> runs = RunStages(h.plan, h.ranks, Quick(), env);
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(runs.status().message(), HasSubstr("copy reduce"));
}

TEST(Runtime, ALostOutputOfAPairIsDiagnosedNotHung) {
  // Given dualpipev p=2, m=4 where rank 0's pair (0F3;3B1) never sends 0F3's activation:
  // rank 1's pair (1F3;2B1) cannot start, and rank 0 then waits in 3F3 for 2F3's.
  testing::World w = testing::MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2, 1);
  Harness h(w.exec);
  BusyWork work(0.01);
  RuntimeOptions o = Quick();
  o.deadlock_grace_ns = 100'000'000;
  o.fault = *ParseFault("drop:0F3");
  const auto start = std::chrono::steady_clock::now();

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(runs.status().message(),
              AllOf(HasSubstr("deadlocks"), HasSubstr("waits in 1F3 for the activation of 0F3"),
                    HasSubstr("rank 0: waits in 3F3")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Runtime, ALostCopyReduceIsDiagnosedNotHung) {
  // Given dualpipe p=2 whose rank 1 never sends 1B1's gradient, which rank 0's 0I1 needs:
  // rank 1 finishes its ops and waits in its copy reduce for rank 0, which waits in 0I1.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(testing::UniformModel(4), *s);
  Harness h(w.exec);
  BusyWork work(0.01);
  RuntimeOptions o = Quick();
  o.deadlock_grace_ns = 100'000'000;
  o.fault = *ParseFault("drop:1B1");

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_FALSE(runs.ok());
  EXPECT_THAT(runs.status().message(),
              AllOf(HasSubstr("deadlocks"), HasSubstr("rank 0: waits in 0I1 for the gradient"),
                    HasSubstr("rank 1: waits in its copy reduce for the gradients of rank 0")));
}

TEST(Runtime, MessagesCarryTheBoundaryOutputBytes) {
  testing::World w = testing::MakeWorld(ScheduleKind::k1F1B, 2, 3);
  Harness h(w.exec);
  testing::RecordingWork work(2);
  Result<std::vector<StageRun>> runs = h.Run(&work, Quick());
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ((*runs)[0].sends.size(), 3u);  // 3 activations forward
  ASSERT_EQ((*runs)[1].sends.size(), 3u);  // 3 gradients back
  for (const MessageTiming& m : (*runs)[1].recvs) EXPECT_EQ(m.message.bytes, 64 * kKiB);
}

// Faults: each ends the run with a diagnosis naming the stage and op, fast.
class RuntimeFault : public ::testing::Test {
 protected:
  Status RunWithFault(const std::string& fault, RuntimeOptions o = Quick(), Bytes limit = 0) {
    testing::World w = testing::MakeWorld(ScheduleKind::k1F1B, 2, 4);
    Harness h(w.exec, limit);

    BusyWork work(0.01);  // fast: 1 ms ops take ~0.1 ms of real work
    if (!fault.empty()) o.fault = *ParseFault(fault);
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<StageRun>> runs = h.Run(&work, o);
    took = std::chrono::steady_clock::now() - start;
    return runs.ok() ? Status::Ok() : runs.status();
  }
  std::chrono::steady_clock::duration took{};
};

TEST_F(RuntimeFault, AWorkerThatThrowsIsReportedWithItsStageAndOp) {
  Status st = RunWithFault("throw:1F2");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("rank 1"), HasSubstr("threw"), HasSubstr("injected fault")));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(RuntimeFault, AnOpFarPastItsPredictionIsStoppedByTheWatchdog) {
  RuntimeOptions o = Quick();
  o.watchdog_factor = 2;
  o.watchdog_floor_ns = 50'000'000;
  Status st = RunWithFault("stall:0F1", o);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("stage 0 (rank 0) op 0F1"), HasSubstr("watchdog")));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(RuntimeFault, ALostMessageIsNamedByTheStageWaitingForIt) {
  RuntimeOptions o = Quick();
  o.deadlock_grace_ns = 100'000'000;
  Status st = RunWithFault("drop:0F2", o);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  // Rank 1 waits in 1F2 for 0F2's activation; rank 0 waits for a gradient.
  EXPECT_THAT(st.message(), AllOf(HasSubstr("waits in 1F2 for the activation of 0F2 from rank 0"),
                                  HasSubstr("rank 0: waits in")));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(RuntimeFault, ALostMessageTimesOutWhenRanksAreNotAllLocal) {
  // Without deadlock detection (MPI: each process sees one rank) the receive
  // timeout ends it.
  testing::World w = testing::MakeWorld(ScheduleKind::k1F1B, 2, 4);
  Harness h(w.exec);

  BusyWork work(0.01);
  RuntimeOptions o = Quick();
  o.recv_timeout_ns = 200'000'000;
  o.fault = *ParseFault("drop:0F0");
  RuntimeEnv env{h.transport.get(),         &work, &h.clock, h.raw,
                 /*all_ranks_local=*/false, {},    nullptr,  {}};
  Result<std::vector<StageRun>> runs = RunStages(h.plan, h.ranks, o, env);
  ASSERT_FALSE(runs.ok());
  EXPECT_THAT(runs.status().message(),
              AllOf(HasSubstr("the activation of 0F0 from rank 0"), HasSubstr("did not arrive"),
                    HasSubstr("--recv-timeout-ms")));
}

TEST_F(RuntimeFault, AllocationOverTheStageLimitIsOutOfMemory) {
  Status st = RunWithFault("", Quick(), /*limit=*/4 * kMiB);  // 1F1B stage 0 holds 2 x 2 MiB + ...
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("out of memory on stage 0"), HasSubstr("0F1")));
}

TEST_F(RuntimeFault, InjectedOomIsReportedAsOutOfMemory) {
  Status st = RunWithFault("oom:1F0");
  EXPECT_THAT(st.message(), AllOf(HasSubstr("out of memory on stage 1"), HasSubstr("1F0")));
}

TEST(Runtime, ADeadlockingScheduleIsReportedNamingTheWaitingOps) {
  // Rank 1 takes micro-batch 1 first while rank 0 waits for 0's gradient.
  Result<Schedule> s = ParseScheduleText("0F0 0B0 0F1 0B1\n1F1 1B1 1F0 1B0\n", "test");
  ASSERT_TRUE(s.ok()) << s.status().message();
  Model model = testing::UniformModel(2);
  // The simulator finds the cycle too; build the ExecPlan from a runnable
  // order's prediction (same durations), then swap in the deadlocking lists.
  testing::World w = testing::MakeWorld(ScheduleKind::kGPipe, 2, 2, 1, 1);
  ExecPlan ep = w.exec;
  for (int r = 0; r < 2; ++r) {
    std::vector<ExecOp> reordered;
    for (const Action& a : s->actions[r]) {
      for (const ExecOp& op : ep.per_rank[r].ops) {
        if (op.action == a) reordered.push_back(op);
      }
    }
    ep.per_rank[r].ops = reordered;
  }
  Harness h(ep);
  testing::RecordingWork work(2);
  RuntimeOptions o = Quick();
  o.deadlock_grace_ns = 100'000'000;
  const auto start = std::chrono::steady_clock::now();

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_FALSE(runs.ok());
  EXPECT_THAT(runs.status().message(),
              AllOf(HasSubstr("deadlocks"), HasSubstr("rank 0: waits in 0B0"),
                    HasSubstr("rank 1: waits in 1F1")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A receiver whose thread is woken late: every Recv returns its message only
// `delay` after it arrived, as a thread among hundreds on two cores waits for
// a turn.
class LateWakeTransport final : public Transport {
 public:
  LateWakeTransport(Transport* inner, std::chrono::milliseconds delay)
      : inner_(inner), delay_(delay) {}
  Status Send(int src, int dst, int64_t tag, Allocation buffer) override {
    return inner_->Send(src, dst, tag, std::move(buffer));
  }
  Result<Allocation> Recv(int src, int dst, int64_t tag, Bytes bytes, MemoryPool* pool,
                          TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    Result<Allocation> got = inner_->Recv(src, dst, tag, bytes, pool, timeout_ns, abort);
    std::this_thread::sleep_for(delay_);
    return got;
  }
  Status FlushSends(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    return inner_->FlushSends(rank, timeout_ns, abort);
  }
  Status Barrier(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override {
    return inner_->Barrier(rank, timeout_ns, abort);
  }

 private:
  Transport* inner_;
  std::chrono::milliseconds delay_;
};

// Issue 17: on plans of several hundred stages the validator reported
// deadlocks the run did not have: every rank was marked waiting while a
// message sat in a receiver's mailbox, its thread not yet woken.
TEST(Runtime, ValidatorSpuriousDeadlockWithHundredsOfStages) {
  // Given GPipe on 2 stages, where rank 1's receive of each activation
  // returns 3 x the deadlock grace after the message arrived, so that rank 0
  // waits for its first gradient while rank 1 still "waits" for a sent one.
  testing::World w = testing::MakeWorld(ScheduleKind::kGPipe, 2, 2);
  Harness h(w.exec);
  LateWakeTransport late(h.transport.get(), std::chrono::milliseconds(150));
  testing::RecordingWork work(2);
  RuntimeOptions o = Quick();
  o.deadlock_grace_ns = 50'000'000;
  RuntimeEnv env{&late, &work, &h.clock, h.raw, /*all_ranks_local=*/true, {}, nullptr, {}};

  // When it runs, then every op runs and nothing is called a deadlock.
  Result<std::vector<StageRun>> runs = RunStages(h.plan, h.ranks, o, env);

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ((*runs)[1].ops.size(), w.plan.schedule.actions[1].size());
}

// Every op sleeps `ms`: a slow machine, without the CPU cost.
class SleepWork final : public OpWork {
 public:
  explicit SleepWork(int ms) : ms_(ms) {}
  Status Run(const OpCall&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return Status::Ok();
  }
  std::string Description() const override { return "sleep"; }

 private:
  int ms_;
};

// Issue 17, the other half: the receive timeout was a wall-clock bound per
// receive, proportional to nothing. With 500 stages on two cores the first
// gradient takes longer than 10 s to come back through 999 hops, every one of
// them progress, and the run was called lost. A receive now gives up only
// after the timeout passes with no progress on any local rank.
TEST(Runtime, ALateMessageInARunThatIsStillMovingIsWaitedFor) {
  // Given GPipe on 3 stages, 4 micro-batches, 500 ms per op: rank 0 ends its
  // last forward at 2 s and its first gradient arrives at ~4 s, a 2 s wait,
  // while ranks 1 and 2 end an op every 500 ms.
  testing::World w = testing::MakeWorld(ScheduleKind::kGPipe, 3, 4);
  Harness h(w.exec);
  SleepWork work(500);
  RuntimeOptions o = Quick();
  // Shorter than that wait, longer than a gap in progress by 700 ms: room for
  // a loaded machine to wake a sleeping thread late (issue 28).
  o.recv_timeout_ns = 1'200'000'000;

  Result<std::vector<StageRun>> runs = h.Run(&work, o);

  ASSERT_TRUE(runs.ok()) << runs.status().message();
  const std::vector<OpTiming>& ops = (*runs)[0].ops;
  ASSERT_EQ(ops.size(), 8u);
  EXPECT_GE(ops[4].start_ns - ops[3].end_ns, o.recv_timeout_ns) << "the wait was long";
}

// Issue 28: a 64-stage dualpipe plan under a 4 GiB address limit (ulimit -v)
// aborted with an uncaught std::system_error when a worker thread could not
// be created. Given an address space with room for a few threads' stacks
// only (in a child process, which the limit would otherwise outlive), the
// run ends in an out-of-memory diagnosis naming the worker.
TEST(Runtime, AWorkerThreadTheSystemCannotStartIsOutOfMemoryNotTerminate) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no limit fits it";
#else
  testing::World w = testing::MakeWorld(ScheduleKind::kGPipe, 64, 4);
  Harness h(w.exec);
  testing::RecordingWork work(64);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The address space in use now, plus room for about 3 thread stacks of 8 MiB.
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t limit = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (24 << 20);
    const rlimit rl{limit, limit};
    if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    Result<std::vector<StageRun>> runs = h.Run(&work, Quick());
    if (runs.ok()) _exit(4);
    const std::string& m = runs.status().message();
    const bool named = m.find("out of memory: could not start the worker of rank") == 0 &&
                       m.find("the system refused a thread") != std::string::npos;
    _exit(named ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "3: no limit set, 4: every thread started, 5: another message";
#endif
}

TEST(ParseFault, ReadsKindAndAction) {
  Result<Fault> f = ParseFault("stall:12W3");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Fault::Kind::kStall);
  EXPECT_EQ(f->action, (Action{12, OpKind::kBackwardWeight, 3}));
  EXPECT_FALSE(ParseFault("explode:1F2").ok());
  EXPECT_FALSE(ParseFault("throw:1X2").ok());
  EXPECT_FALSE(ParseFault("throw").ok());
  EXPECT_FALSE(ParseFault("throw:F2").ok());
}

TEST(Runtime, ExpandedRunsFoldBackToRanksAndTensorRanks) {
  // Given the run of worker 3 of an expanded t = 2 plan (rank 1, tensor rank
  // 1), which received from worker 1 (rank 0, tensor rank 1).
  StageRun run;
  run.rank = 3;
  run.recvs.push_back(MessageTiming{0, Message{.peer_rank = 1, .tag = 7}, 100});
  run.copy_reduces.push_back(CopyReduceTiming{0, 1, 1000, 100, 200});  // with worker 1
  std::vector<StageRun> runs = {run};
  FoldExpandedRuns(2, &runs);
  EXPECT_EQ(runs[0].rank, 1);
  EXPECT_EQ(runs[0].tensor_rank, 1);
  EXPECT_EQ(runs[0].recvs[0].message.peer_rank, 0);
  EXPECT_EQ(runs[0].copy_reduces[0].peer_rank, 0);
  FoldExpandedRuns(1, &runs);  // t = 1: unchanged
  EXPECT_EQ(runs[0].rank, 1);
}

}  // namespace
}  // namespace pipecast::validate
