// Measured runs from traces: hand-worked two-rank pipelines, an overlapped pair, the errors of
// traces that do not fit together, and published traces (Holistic Trace Analysis' samples,
// trimmed in tests/traces/hta; DeepSeek's profile-data train.json when PIPECAST_DEEPSEEK_TRACE
// names a copy).
#include "measured/measured_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "measured/pair_check.h"
#include "measured/summary.h"

namespace pipecast::measured {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr TimeNs kUs = 1000;

// A Kineto trace built event by event; times in microseconds.
class KinetoBuilder {
 public:
  explicit KinetoBuilder(int rank, int world = 2) : rank_(rank), world_(world) {}

  KinetoBuilder& Range(const std::string& name, double ts, double dur, int tid = 1,
                       const std::string& cat = "user_annotation") {
    events_.push_back({{"ph", "X"},
                       {"cat", cat},
                       {"name", name},
                       {"pid", 10},
                       {"tid", tid},
                       {"ts", ts},
                       {"dur", dur}});
    return *this;
  }
  // A kernel on `stream` launched at `launch_ts` by thread `tid`.
  KinetoBuilder& Kernel(const std::string& name, double launch_ts, double ts, double dur,
                        int stream = 7, int tid = 1) {
    const int corr = next_corr_++;
    events_.push_back({{"ph", "X"},
                       {"cat", "cuda_runtime"},
                       {"name", "cudaLaunchKernel"},
                       {"pid", 10},
                       {"tid", tid},
                       {"ts", launch_ts},
                       {"dur", 2},
                       {"args", {{"correlation", corr}}}});
    events_.push_back({{"ph", "X"},
                       {"cat", "kernel"},
                       {"name", name},
                       {"pid", 0},
                       {"tid", stream},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", {{"correlation", corr}, {"stream", stream}, {"device", 0}}}});
    return *this;
  }
  KinetoBuilder& Memory(double ts, int64_t total) {
    events_.push_back(
        {{"ph", "i"},
         {"cat", "cpu_instant_event"},
         {"name", "[memory]"},
         {"pid", 10},
         {"tid", 1},
         {"ts", ts},
         {"args", {{"Device Type", 1}, {"Device Id", 0}, {"Total Allocated", total}}}});
    return *this;
  }
  TraceFile Build(const std::string& origin) const {
    Json j = {{"schemaVersion", 1},
              {"distributedInfo", {{"rank", rank_}, {"world_size", world_}}},
              {"traceEvents", events_}};
    Result<TraceFile> t = ParseTraceText(j.dump(), origin);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? *t : TraceFile{};
  }

 private:
  int rank_, world_;
  int next_corr_ = 1;
  Json events_ = Json::array();
};

constexpr char kGemm[] = "sm90_xmma_gemm_bf16bf16";
constexpr char kSend[] = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)";
constexpr char kAllReduce[] = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)";

// Rank 0 of a 2-stage pipeline, step 3 (hand-worked, times in us):
//   0F0 compute [100, 300]; 0F1 compute [300, 500] and its send [310, 360] (launched inside
//   0F1 under nccl:send); 0B0 compute [700, 1000], launched by the autograd thread (tid 2)
//   while the main thread's PP:0B0 range is open; a gradient all-reduce [950, 1100] launched
//   outside every action. Memory peaks at 3000 bytes.
KinetoBuilder Rank0() {
  KinetoBuilder b(0);
  b.Range("ProfilerStep#3", 0, 1200)
      .Range("PP:0F0", 10, 50)
      .Kernel(kGemm, 20, 100, 200)
      .Range("PP:0F1", 200, 100)
      .Kernel(kGemm, 210, 300, 200)
      .Range("nccl:send 0->1", 245, 10)
      .Kernel(kSend, 250, 310, 50, 20)
      .Range("PP:0B0", 600, 100)
      .Kernel(kGemm, 610, 700, 300, 7, /*tid=*/2)
      .Kernel(kAllReduce, 900, 950, 150, 20)
      .Memory(15, 1000)
      .Memory(620, 3000)
      .Memory(1100, 2000);
  return b;
}

// Rank 1: 1F0 compute [400, 600], 1B0 compute [600, 700].
KinetoBuilder Rank1() {
  KinetoBuilder b(1);
  b.Range("ProfilerStep#3", 0, 1200)
      .Range("PP:1F0", 320, 20)
      .Kernel(kGemm, 330, 400, 200)
      .Range("PP:1B0", 340, 20)
      .Kernel(kGemm, 345, 600, 100);
  return b;
}

TEST(MeasuredRun, TwoRankPipelineHandWorked) {
  Result<MeasuredRun> run =
      BuildMeasuredRun({Rank0().Build("rank0.json"), Rank1().Build("rank1.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->steps, std::vector<int>{3});
  // Latest end (rank 0's all-reduce, 1100) less earliest start (rank 0's 0F0, 100).
  EXPECT_EQ(run->iteration_ns[0], 1000 * kUs);
  const RankStep& r0 = run->Step(0, 0);
  EXPECT_EQ(r0.start_ns, 100 * kUs);
  EXPECT_EQ(r0.end_ns, 1100 * kUs);
  // Compute: [100, 500] and [700, 1000]. Communication: the send [310, 360] under 0F1's
  // compute, the all-reduce [950, 1100] of which [950, 1000] under 0B0's.
  EXPECT_EQ(r0.compute_ns, 700 * kUs);
  EXPECT_EQ(r0.comm_ns, 200 * kUs);
  EXPECT_EQ(r0.exposed_comm_ns, 100 * kUs);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kSendRecv)], 50 * kUs);
  EXPECT_EQ(r0.exposed_by_kind[static_cast<int>(CommKind::kSendRecv)], 0);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kAllReduce)], 150 * kUs);
  EXPECT_EQ(r0.exposed_by_kind[static_cast<int>(CommKind::kAllReduce)], 100 * kUs);
  EXPECT_EQ(r0.compute_by_phase[static_cast<int>(Phase::kForward)], 400 * kUs);
  EXPECT_EQ(r0.compute_by_phase[static_cast<int>(Phase::kBackward)], 300 * kUs);
  EXPECT_EQ(r0.comm_by_phase[static_cast<int>(Phase::kForward)], 50 * kUs);  // the send
  EXPECT_EQ(r0.comm_by_phase[static_cast<int>(Phase::kOther)], 150 * kUs);   // the all-reduce
  EXPECT_EQ(r0.stream_busy.at(7), 700 * kUs);
  EXPECT_EQ(r0.stream_busy.at(20), 200 * kUs);
  EXPECT_EQ(r0.peak_allocated_bytes, 3000);
  EXPECT_FALSE(r0.phases_inferred);
  ASSERT_EQ(r0.ops.size(), 3u);
  EXPECT_EQ(r0.ops[0].action, (Action{0, OpKind::kForward, 0}));
  EXPECT_EQ(r0.ops[0].start_ns, 100 * kUs);
  EXPECT_EQ(r0.ops[0].end_ns, 300 * kUs);
  EXPECT_EQ(r0.ops[1].action, (Action{0, OpKind::kForward, 1}));
  EXPECT_EQ(r0.ops[1].comm_ns, 50 * kUs);
  EXPECT_EQ(r0.ops[2].action, (Action{0, OpKind::kBackward, 0}));  // from the autograd thread
  EXPECT_EQ(r0.ops[2].start_ns, 700 * kUs);
  EXPECT_EQ(run->ranks[0].ops_from, "pipeline actions (PP:<action> ranges)");

  // As a timeline: origin at 100 us; busy = compute; bubble = 1 - busy / 1000 us.
  const SimResult m = MeasuredTimeline(*run, 0);
  EXPECT_EQ(m.ranks, 2);
  EXPECT_EQ(m.pipeline_ns, 1000 * kUs);
  EXPECT_EQ(m.per_rank[0].busy_ns, 700 * kUs);
  EXPECT_DOUBLE_EQ(m.per_rank[0].bubble_ratio, 0.3);
  EXPECT_EQ(m.per_rank[1].busy_ns, 300 * kUs);
  EXPECT_DOUBLE_EQ(m.per_rank[1].bubble_ratio, 0.7);
  EXPECT_DOUBLE_EQ(m.bubble_ratio, 0.5);
  ASSERT_EQ(m.ops.size(), 5u);
  EXPECT_EQ(m.ops[3].rank, 1);
  EXPECT_EQ(m.ops[3].start_ns, 300 * kUs);  // 1F0 at 400 us, 300 after the origin
  // Megatron's form, idle / busy: 300 / 700 on rank 0. Micro-batch 0 is held from 0F0's start
  // to 0B0's end; micro-batch 1 has no backward in the step and is not counted.
  EXPECT_DOUBLE_EQ(m.per_rank[0].bubble_fraction_of_ideal, 300.0 / 700.0);
  EXPECT_EQ(m.per_rank[0].peak_inflight_microbatches, 1);
}

// PyTorch's overlapped pair is one range: its GPU span [700, 1000] us is split evenly between
// the halves, each marked overlapped as the simulator's pairs are.
TEST(MeasuredRun, AnOverlappedPairRangeGivesTwoHalves) {
  KinetoBuilder b(0, 1);
  b.Range("ProfilerStep#1", 0, 2000)
      .Range("PP:(0F2;1B0)OVERLAP_F_B", 600, 100)
      .Kernel(kGemm, 610, 700, 200)
      .Kernel(kGemm, 620, 900, 100, 9);
  Result<MeasuredRun> run = BuildMeasuredRun({b.Build("pair.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  const std::vector<MeasuredOp>& ops = run->Step(0, 0).ops;
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].action, (Action{0, OpKind::kForward, 2, true}));
  EXPECT_EQ(ops[0].start_ns, 700 * kUs);
  EXPECT_EQ(ops[0].end_ns, 850 * kUs);
  EXPECT_EQ(ops[1].action, (Action{1, OpKind::kBackward, 0, true}));
  EXPECT_EQ(ops[1].start_ns, 850 * kUs);
  EXPECT_EQ(ops[1].end_ns, 1000 * kUs);
  EXPECT_EQ(ops[0].compute_ns + ops[1].compute_ns, 300 * kUs);
}

TEST(MeasuredRun, OnlyTheStepsEveryRankHasAreCompared) {
  KinetoBuilder r0 = Rank0();
  r0.Range("ProfilerStep#4", 1200, 1000).Range("PP:0F0", 1210, 10).Kernel(kGemm, 1212, 1300, 50);
  Result<MeasuredRun> run = BuildMeasuredRun({r0.Build("rank0.json"), Rank1().Build("rank1.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->steps, std::vector<int>{3});
  EXPECT_EQ(run->ranks[0].steps.size(), 2u);
}

TEST(MeasuredRun, UnmarkedStepsInferForwardFromTheMainThreadAndBackwardFromAutograd) {
  KinetoBuilder b(0, 1);
  b.Range("ProfilerStep#1", 0, 1000)
      .Kernel(kGemm, 10, 100, 100)  // main thread, nothing marked: forward
      .Kernel(kGemm, 20, 200, 100)
      .Range("autograd::engine::evaluate_function: MmBackward0", 300, 50, /*tid=*/2, "cpu_op")
      .Kernel(kGemm, 310, 400, 200, 7, /*tid=*/2)  // under autograd: backward
      .Kernel(kGemm, 500, 650, 50);                // main thread again: forward, a second run
  Result<MeasuredRun> run = BuildMeasuredRun({b.Build("ddp.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankStep& s = run->Step(0, 0);
  EXPECT_TRUE(s.phases_inferred);
  EXPECT_EQ(s.compute_by_phase[static_cast<int>(Phase::kForward)], 250 * kUs);
  EXPECT_EQ(s.compute_by_phase[static_cast<int>(Phase::kBackward)], 200 * kUs);
  ASSERT_EQ(s.ops.size(), 3u);
  EXPECT_TRUE(s.ops[0].inferred);
  EXPECT_EQ(s.ops[0].action.kind, OpKind::kForward);
  EXPECT_EQ(s.ops[0].start_ns, 100 * kUs);
  EXPECT_EQ(s.ops[0].end_ns, 300 * kUs);
  EXPECT_EQ(s.ops[1].action.kind, OpKind::kBackward);
  EXPECT_EQ(s.ops[2].action, (Action{0, OpKind::kForward, 1}));
  EXPECT_THAT(run->notes.back(), HasSubstr("forward the main thread's other launches (inferred)"));
}

// An overlapped F&B pair in DeepSeek's naming (hand-worked, us): attn(F) compute [0, 100],
// dispatch(F) DeepEP [0, 300] on the communication stream; mlp(B) compute [100, 400],
// combine(B) [300, 400]; mlp(W) compute [400, 450]. F = 100 + 300 with 300 communication,
// B = 300 + 50 + 100 with 100: the forward's 300 hide behind the backward's 350 of compute,
// the backward's 100 behind the forward's 100: 100 + 350 = 450 us, the measured window.
TEST(MeasuredRun, AnOverlappedPairIsHeldToThePairModel) {
  KinetoBuilder b(0, 64);
  b.Range("ProfilerStep#1", 0, 1000)
      .Range("1F1B", 1, 900)
      .Range("attn(F)", 2, 5)
      .Kernel("flash_fwd", 3, 0, 100)
      .Range("dispatch(F)", 8, 5)
      .Kernel("void dpsk::ep::internode::dispatch<false, 8>(int4*)", 9, 0, 300, 27)
      .Range("mlp(B)", 14, 5)
      .Kernel("grouped_gemm_dgrad", 15, 100, 300)
      .Range("combine(B)", 20, 5)
      .Kernel("void deep_ep::internode::combine<8>(int4*)", 21, 300, 100, 27)
      .Range("mlp(W)", 26, 5)
      .Kernel("grouped_gemm_wgrad", 27, 400, 50);
  Result<MeasuredRun> run = BuildMeasuredRun({b.Build("pair.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankStep& s = run->Step(0, 0);
  EXPECT_TRUE(s.forward_backward_interleave);
  EXPECT_EQ(s.comm_by_kind[static_cast<int>(CommKind::kAllToAll)], 400 * kUs);
  std::optional<PairCheck> pair = CheckPair(s);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(pair->forward_compute_ns, 100 * kUs);
  EXPECT_EQ(pair->forward_comm_ns, 300 * kUs);
  EXPECT_EQ(pair->backward_compute_ns, 300 * kUs);
  EXPECT_EQ(pair->weight_compute_ns, 50 * kUs);
  EXPECT_EQ(pair->backward_comm_ns, 100 * kUs);
  EXPECT_EQ(pair->predicted_ns, 450 * kUs);
  EXPECT_EQ(pair->measured_ns, 450 * kUs);
  EXPECT_EQ(pair->serial_ns, 850 * kUs);
  // The (B) ranges beside (W) ones are input gradients: ops I, not B.
  bool input_gradient = false;
  for (const MeasuredOp& op : s.ops)
    input_gradient = input_gradient || op.action.kind == OpKind::kBackwardInput;
  EXPECT_TRUE(input_gradient);
  EXPECT_THAT(MeasuredRunText(*run), HasSubstr("pair model"));
}

TEST(MeasuredRun, TracesThatDoNotFitTogetherAreRefusedNamingTheFiles) {
  // No ProfilerStep.
  KinetoBuilder none(0);
  none.Kernel(kGemm, 1, 2, 3);
  Result<MeasuredRun> run = BuildMeasuredRun({none.Build("nostep.json")});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("nostep.json: no ProfilerStep#N range"));
  // Steps with no GPU work.
  KinetoBuilder cpu(0);
  cpu.Range("ProfilerStep#1", 0, 10);
  run = BuildMeasuredRun({cpu.Build("cpu.json")});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(),
              HasSubstr("cpu.json: its 1 ProfilerStep ranges launched no GPU work"));
  // No step in common.
  KinetoBuilder late(1);
  late.Range("ProfilerStep#9", 0, 1000).Kernel(kGemm, 5, 10, 10);
  run = BuildMeasuredRun({Rank0().Build("rank0.json"), late.Build("rank1.json")});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(),
              HasSubstr("share no ProfilerStep number (rank0.json: steps 3; rank1.json: steps 9)"));
  // The same rank twice.
  run = BuildMeasuredRun({Rank0().Build("a.json"), Rank0().Build("b.json")});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("a.json and b.json are both rank 0"));
  // Different world sizes.
  KinetoBuilder other(1, 4);
  other.Range("ProfilerStep#3", 0, 1000).Kernel(kGemm, 5, 10, 10);
  run = BuildMeasuredRun({Rank0().Build("rank0.json"), other.Build("rank1.json")});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(),
              HasSubstr("rank0.json says world size 2 but rank1.json says 4"));
  // Skipping every step.
  MeasureOptions skip;
  skip.skip_steps = 1;
  run = BuildMeasuredRun({Rank0().Build("rank0.json")}, skip);
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("--skip-steps 1 leaves none"));
}

std::string Fixture(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/tests/traces/" + name;
}

// Holistic Trace Analysis' sample of a 128-GPU recommendation-model job, ranks 0 and 1, step
// 552 (tests/traces/README.md: trimmed, MIT). The figures are scripts/kineto_figures.py's on
// the same files, an independent count by brute force (us):
//   rank 0: window 615601, compute 104723, comm 200872, exposed 164253; all-gather 63644 (all
//     exposed), all-reduce 48277 (16598 exposed), all-to-all 88951 (84011) -- NCCL's SendRecv
//     kernels launched under nccl:all_to_all; forward compute 28755, backward 68290,
//     optimizer 3101; stream 7 busy 100311, stream 84 busy 137228.
//   rank 1: window 623286, compute 142356, comm 211026, exposed 165691.
TEST(PublishedTraces, HolisticTraceAnalysisTwoRanks) {
  Result<MeasuredRun> run = MeasureFiles({Fixture("hta/trace_filter_rank0_step552.json"),
                                          Fixture("hta/trace_filter_rank1_step552.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->steps, std::vector<int>{552});
  EXPECT_EQ(run->ranks[0].global_rank, 0);
  EXPECT_EQ(run->ranks[1].world_size, 128);
  const RankStep& r0 = run->Step(0, 0);
  EXPECT_EQ(r0.span_ns(), 615'601 * kUs);
  EXPECT_EQ(r0.compute_ns, 104'723 * kUs);
  EXPECT_EQ(r0.comm_ns, 200'872 * kUs);
  EXPECT_EQ(r0.exposed_comm_ns, 164'253 * kUs);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kAllGather)], 63'644 * kUs);
  EXPECT_EQ(r0.exposed_by_kind[static_cast<int>(CommKind::kAllGather)], 63'644 * kUs);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kAllReduce)], 48'277 * kUs);
  EXPECT_EQ(r0.exposed_by_kind[static_cast<int>(CommKind::kAllReduce)], 16'598 * kUs);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kAllToAll)], 88'951 * kUs);
  EXPECT_EQ(r0.exposed_by_kind[static_cast<int>(CommKind::kAllToAll)], 84'011 * kUs);
  EXPECT_EQ(r0.comm_by_kind[static_cast<int>(CommKind::kSendRecv)], 0);
  EXPECT_EQ(r0.compute_by_phase[static_cast<int>(Phase::kForward)], 28'755 * kUs);
  EXPECT_EQ(r0.compute_by_phase[static_cast<int>(Phase::kBackward)], 68'290 * kUs);
  EXPECT_EQ(r0.compute_by_phase[static_cast<int>(Phase::kOptimizer)], 3'101 * kUs);
  EXPECT_EQ(r0.stream_busy.at(7), 100'311 * kUs);
  EXPECT_EQ(r0.stream_busy.at(84), 137'228 * kUs);
  const RankStep& r1 = run->Step(1, 0);
  EXPECT_EQ(r1.span_ns(), 623'286 * kUs);
  EXPECT_EQ(r1.compute_ns, 142'356 * kUs);
  EXPECT_EQ(r1.comm_ns, 211'026 * kUs);
  EXPECT_EQ(r1.exposed_comm_ns, 165'691 * kUs);
  // The run's iteration: the latest end less the earliest start over both ranks.
  EXPECT_EQ(run->iteration_ns[0],
            std::max(r0.end_ns, r1.end_ns) - std::min(r0.start_ns, r1.start_ns));
}

// HTA's NCCL parser sample: DistributedDataParallel on 2 GPUs (rank 0, step 5), its gradient
// all-reduce overlapping the backward. scripts/kineto_figures.py (us): window 213532.750,
// compute 39296.837, comm 12300.029, exposed 10432.089; all-reduce 12261.533 (10393.593
// exposed), broadcast 38.496; forward compute 12878.104, backward 25726.744, optimizer 691.989.
TEST(PublishedTraces, HolisticTraceAnalysisDdpAllReduce) {
  Result<MeasuredRun> run = MeasureFiles({Fixture("hta/nccl_ddp_rank0_step5.json")});
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankStep& s = run->Step(0, 0);
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.span_ns(), 213'532'750);
  EXPECT_EQ(s.compute_ns, 39'296'837);
  EXPECT_EQ(s.comm_ns, 12'300'029);
  EXPECT_EQ(s.exposed_comm_ns, 10'432'089);
  EXPECT_EQ(s.comm_by_kind[static_cast<int>(CommKind::kAllReduce)], 12'261'533);
  EXPECT_EQ(s.exposed_by_kind[static_cast<int>(CommKind::kAllReduce)], 10'393'593);
  EXPECT_EQ(s.comm_by_kind[static_cast<int>(CommKind::kBroadcast)], 38'496);
  EXPECT_EQ(s.compute_by_phase[static_cast<int>(Phase::kForward)], 12'878'104);
  EXPECT_EQ(s.compute_by_phase[static_cast<int>(Phase::kBackward)], 25'726'744);
  EXPECT_EQ(s.compute_by_phase[static_cast<int>(Phase::kOptimizer)], 691'989);
}

// DeepSeek's profile of one DualPipe F&B chunk pair (deepseek-ai/profile-data train.json,
// no licence: not kept here; fetch it and set PIPECAST_DEEPSEEK_TRACE to its path). The
// kernel sums per phase and stream are docs/calibration.md's hand-counted pair table
// (scripts/deepseek_pair_times.py): compute stream 7 F 35.866 ms, B 58.587, W 23.712;
// communication stream 27 F 61.497, B 53.024 (DeepEP 51.943 + a 1.081 ms cast kernel);
// the pair's span 129.012 ms.
TEST(PublishedTraces, DeepSeekDualPipePair) {
  const char* path = std::getenv("PIPECAST_DEEPSEEK_TRACE");
  if (path == nullptr) {
    GTEST_SKIP() << "set PIPECAST_DEEPSEEK_TRACE to a copy of deepseek-ai/profile-data's "
                    "train.json (not redistributable: the repository has no licence)";
  }
  Result<MeasuredRun> run = MeasureFiles({path});
  ASSERT_TRUE(run.ok()) << run.status().message();
  const RankStep& s = run->Step(0, 0);
  EXPECT_EQ(run->ranks[0].world_size, 64);
  EXPECT_EQ(s.span_ns(), 129'012 * kUs);
  const auto sum = [&](Phase p, int stream) {
    auto it = s.kernel_sum_by_phase_stream.find({static_cast<int>(p), stream});
    return it == s.kernel_sum_by_phase_stream.end() ? TimeNs{0} : it->second;
  };
  EXPECT_EQ(sum(Phase::kForward, 7), 35'866 * kUs);
  EXPECT_EQ(sum(Phase::kBackward, 7), 58'587 * kUs);
  EXPECT_EQ(sum(Phase::kWeightGrad, 7), 23'712 * kUs);
  EXPECT_EQ(sum(Phase::kForward, 27), 61'497 * kUs);
  EXPECT_EQ(sum(Phase::kBackward, 27), 53'024 * kUs);
  EXPECT_EQ(sum(Phase::kWeightGrad, 23), 11'355 * kUs);
  // Communication by name: DeepEP's kernels, all-to-all; no pipeline send/recv (left out of
  // the profile, its README says).
  EXPECT_EQ(s.comm_by_kind[static_cast<int>(CommKind::kSendRecv)], 0);
  EXPECT_EQ(s.comm_by_phase[static_cast<int>(Phase::kForward)], 61'497 * kUs);
  EXPECT_EQ(s.comm_by_phase[static_cast<int>(Phase::kBackward)], 51'943 * kUs);
  std::optional<PairCheck> pair = CheckPair(s);
  ASSERT_TRUE(pair.has_value());
  // docs/calibration.md, "the importer's count" row.
  EXPECT_EQ(pair->predicted_ns, 141'416 * kUs);
  EXPECT_NEAR(pair->error, 0.096, 0.001);
}

}  // namespace
}  // namespace pipecast::measured
