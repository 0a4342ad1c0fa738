// --sharded-state fsdp2 (sim/memory.h ShardedState; docs/simulator.md, "FSDP2's sharded
// state"): the bytes per parameter, the refusals, and the simulated peak of small models worked
// by hand in closed form: 12 B per parameter / d before the rank's first backward ends, 16 B from
// there on, plus ZeRO-3's gathered layers and the live activations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "sim/internal/reference_simulator.h"
#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using test_util::IdealCluster;
using test_util::UniformModel;

constexpr TimeNs kMs = 1000 * kNsPerUs;
constexpr Bytes kMB = 1'000'000;

MemoryConfig Fsdp2(const std::string& precision = "bf16", const std::string& optimizer = "adam") {
  MemoryConfig m = MemoryConfigFor(precision, optimizer).value();
  m.zero = 3;
  m.sharded_state = ShardedState::kFsdp2;
  return m;
}

TEST(Fsdp2Bytes, Bf16AdamIsTwelveBytesOfStateAndFourOfGradientsOverD) {
  // FSDP2: the fp32 shard (4 B, also the optimizer's main copy) + AdamW's two fp32 moments
  // (8 B) + the fp32 sharded gradients (4 B), each / d; no bf16 shard. ZeRO-3: 2 + 4 + 12.
  const ShardedBytes b = ShardedBytesPerParam(Fsdp2(), 8);
  EXPECT_DOUBLE_EQ(b.weights, 4.0 / 8);
  EXPECT_DOUBLE_EQ(b.optimizer, 8.0 / 8);
  EXPECT_DOUBLE_EQ(b.gradients, 4.0 / 8);
  EXPECT_DOUBLE_EQ(b.fp8_weights, 0);
  EXPECT_DOUBLE_EQ(b.Total(), 16.0 / 8);
  MemoryConfig zero3 = MemoryConfigFor("bf16", "adam").value();
  zero3.zero = 3;
  EXPECT_DOUBLE_EQ(ShardedBytesPerParam(zero3, 8).Total(), 18.0 / 8);
}

TEST(Fsdp2Bytes, Fp32TrainingHasNoMainCopyAndFp8KeepsNoCopies) {
  // fp32: the shard is the parameter (4 B), Adam 8 B, gradients 4 B: 16 B, as at ZeRO 3.
  const ShardedBytes fp32 = ShardedBytesPerParam(Fsdp2("fp32"), 4);
  EXPECT_DOUBLE_EQ(fp32.weights, 1.0);
  EXPECT_DOUBLE_EQ(fp32.optimizer, 2.0);
  EXPECT_DOUBLE_EQ(fp32.gradients, 1.0);
  // SGD with momentum: 4 B shard + 4 B momentum + 4 B gradients.
  const ShardedBytes sgd = ShardedBytesPerParam(Fsdp2("bf16", "sgd"), 1);
  EXPECT_DOUBLE_EQ(sgd.weights + sgd.optimizer + sgd.gradients, 12.0);
  // FP8 with FP8 gathers (torchao's float8 all-gather): the fp32 shard is cast at each gather,
  // no FP8 copy is kept; the gathers move 1 B per parameter.
  MemoryConfig fp8 = MemoryConfigFor("fp8", "adam", "fp32", "current", true).value();
  fp8.zero = 3;
  fp8.sharded_state = ShardedState::kFsdp2;
  const ShardedBytes f = ShardedBytesPerParam(fp8, 2);
  EXPECT_DOUBLE_EQ(f.weights, 2.0);
  EXPECT_DOUBLE_EQ(f.optimizer, 4.0);
  EXPECT_DOUBLE_EQ(f.fp8_weights, 0);
  EXPECT_DOUBLE_EQ(fp8.GatherBytesPerParam(), 1.0);
}

TEST(Fsdp2Bytes, RefusesWhatItCannotDescribeNamingTheFlags) {
  MemoryConfig m = Fsdp2();
  m.zero = 1;
  EXPECT_THAT(m.Validate().message(), ::testing::HasSubstr("--sharded-state fsdp2 needs --zero 3"));
  m = Fsdp2();
  m.sharding.reduce_every_microbatch = false;
  EXPECT_THAT(m.Validate().message(), ::testing::HasSubstr("needs --reduce-every-microbatch on"));
  m = MemoryConfigFor("bf16", "adam", "bf16").value();
  m.zero = 3;
  m.sharded_state = ShardedState::kFsdp2;
  EXPECT_THAT(m.Validate().message(), ::testing::HasSubstr("needs --grad-dtype fp32"));
  EXPECT_TRUE(Fsdp2().Validate().ok());
  EXPECT_THAT(ParseShardedState("fsdp").status().message(),
              ::testing::HasSubstr("--sharded-state is 'fsdp'"));
  EXPECT_EQ(*ParseShardedState("fsdp2"), ShardedState::kFsdp2);
  EXPECT_STREQ(ShardedStateName(ShardedState::kZero), "zero");
}

// Four layers of 10 M parameters (40 M) and `activation` bytes each, one stage, d = 4, on the
// ideal cluster (no buffers, no limit). Per GPU under fsdp2: shard 4 B x 40 M / 4 = 40 MB,
// moments 8 B: 80 MB, gradients 4 B: 40 MB; ZeRO-3's gathered copies, the largest layer twice at
// 2 B: 40 MB.
SimResult OneStage(Bytes activation, int m, ShardedState state) {
  const Model model = UniformModel(4, kMs, 2 * kMs, activation, 0, 10'000'000);
  SimOptions o;
  o.config.layout.data_parallel = 4;
  o.config.memory.zero = 3;
  o.config.memory.sharded_state = state;
  o.config.microbatches = m;
  return Simulate(model, IdealCluster(), MakeSchedule(ScheduleKind::k1F1B, 1, m).value(), o)
      .value();
}

TEST(Fsdp2Peak, OneMicrobatchPeaksAtTheBackwardsStartWithoutGradients) {
  // F0 B0, 4 x 100 MB of activations: the peak is B0's start, 12 B / d (120 MB) + 40 MB
  // gathered + 400 MB, before any gradient exists; ZeRO 3 holds 18 B / d (180 MB) there.
  const SimResult fsdp2 = OneStage(100 * kMB, 1, ShardedState::kFsdp2);
  EXPECT_EQ(fsdp2.per_rank[0].peak_memory_bytes, 120 * kMB + 40 * kMB + 400 * kMB);
  EXPECT_EQ(fsdp2.per_rank[0].memory.gradients, 40 * kMB);
  EXPECT_EQ(fsdp2.per_rank[0].memory.weights, 40 * kMB);
  EXPECT_EQ(fsdp2.per_rank[0].memory.optimizer, 80 * kMB);
  EXPECT_EQ(fsdp2.sharded_state, ShardedState::kFsdp2);
  const SimResult zero = OneStage(100 * kMB, 1, ShardedState::kZero);
  EXPECT_EQ(zero.per_rank[0].peak_memory_bytes, 180 * kMB + 40 * kMB + 400 * kMB);
}

TEST(Fsdp2Peak, GradientsAloneWhenTheActivationsAreSmaller) {
  // 1 MB a layer: B0's start holds 4 MB of activations, its end the 40 MB of gradients (the
  // activations freed): the peak is 120 + 40 gathered + max(4, 40) MB.
  const SimResult r = OneStage(1 * kMB, 1, ShardedState::kFsdp2);
  EXPECT_EQ(r.per_rank[0].peak_memory_bytes, 120 * kMB + 40 * kMB + 40 * kMB);
}

TEST(Fsdp2Peak, LaterMicrobatchesRunBesideTheGradients) {
  // F0 B0 F1 B1: B0 makes the gradients, F1 fills the activations again beside them: 16 B / d
  // (160 MB) + 40 MB gathered + 400 MB, as ZeRO 3's 18 B / d would hold 20 MB more.
  const SimResult r = OneStage(100 * kMB, 2, ShardedState::kFsdp2);
  EXPECT_EQ(r.per_rank[0].peak_memory_bytes, 160 * kMB + 40 * kMB + 400 * kMB);
  const SimResult zero = OneStage(100 * kMB, 2, ShardedState::kZero);
  EXPECT_EQ(zero.per_rank[0].peak_memory_bytes, 180 * kMB + 40 * kMB + 400 * kMB);
}

TEST(Fsdp2Peak, TheGradientsJoinAtTheFirstBackwardsEnd) {
  // F0 B0 F1 B1 on the ideal cluster: F0 4 x 1 ms, B0 4 x 2 ms, so B0 ends at 12 ms, and the
  // gradients (40 MB) are held from there on. Held the whole step: the 12 B / d (120 MB) and the
  // 40 MB gathered. The timeline's live set plus the gradients held at each sample peaks at the
  // simulated peak (F1 fills 400 MB beside them).
  const SimResult r = OneStage(100 * kMB, 2, ShardedState::kFsdp2);
  const StageResult& s = r.per_rank[0];
  EXPECT_EQ(s.gradients_from_ns, 12 * kMs);
  EXPECT_EQ(s.HeldAllStepBytes(), 160 * kMB);
  EXPECT_EQ(s.GradientsAt(12 * kMs - 1), 0);
  EXPECT_EQ(s.GradientsAt(12 * kMs), 40 * kMB);
  Bytes above = 0;
  for (const MemorySample& m : s.memory_timeline) {
    above = std::max(above,
                     m.activations + m.comm_buffers + m.workspace + s.LateGradientsAt(m.time_ns));
  }
  EXPECT_EQ(s.HeldAllStepBytes() + above, s.peak_memory_bytes);
  // ZeRO's accounting holds them the whole step: 18 B / d + gathered.
  const SimResult zero = OneStage(100 * kMB, 2, ShardedState::kZero);
  EXPECT_EQ(zero.per_rank[0].gradients_from_ns, 0);
  EXPECT_EQ(zero.per_rank[0].HeldAllStepBytes(), 220 * kMB);
  EXPECT_EQ(zero.per_rank[0].LateGradientsAt(0), 0);
}

TEST(Fsdp2Peak, RefusedBelowZeroThreeBySimulate) {
  const Model model = UniformModel(2, kMs, 2 * kMs, 0, 0, 1000);
  SimOptions o;
  o.config.layout.data_parallel = 2;
  o.config.memory.zero = 2;
  o.config.memory.sharded_state = ShardedState::kFsdp2;
  Result<SimResult> r =
      Simulate(model, IdealCluster(), MakeSchedule(ScheduleKind::k1F1B, 1, 1).value(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("--sharded-state fsdp2 needs --zero 3"));
}

// The engine's memory sweep and the reference simulator agree under fsdp2 on pipelines with split
// backwards (the gradients at the first W's end), interleaving and bidirectional schedules.
TEST(Fsdp2Peak, EngineMatchesTheReferenceSimulator) {
  Model model = UniformModel(8, kMs, 3 * kMs, 50 * kMB, 5 * kMB, 20'000'000);
  for (Layer& l : model.layers) l.profiles[0].backward_weight_ns = kMs;
  int simulated = 0;
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kZBH1,
                            ScheduleKind::kInterleaved1F1B, ScheduleKind::kZBV,
                            ScheduleKind::kDualPipeV, ScheduleKind::kDualPipe}) {
    for (int m : {2, 4, 8}) {
      const bool one_chunk = kind == ScheduleKind::k1F1B || kind == ScheduleKind::kGPipe ||
                             kind == ScheduleKind::kZBH1;
      Result<Schedule> schedule = MakeSchedule(kind, 2, m, one_chunk ? 1 : 2);
      if (!schedule.ok()) {
        std::printf("%s m=%d: %s\n", ScheduleKindName(kind), m,
                    std::string(schedule.status().message()).c_str());
        continue;
      }
      SimOptions o;
      o.config.layout.pipeline_stages = 2;
      o.config.layout.chunks = schedule->ChunksPerRank();
      o.config.layout.data_parallel = 2;
      o.config.microbatches = m;
      o.config.memory.zero = 3;
      o.config.memory.sharded_state = ShardedState::kFsdp2;
      o.record_timeline = false;
      Result<SimResult> got = Simulate(model, IdealCluster(), *schedule, o);
      Result<SimResult> want = internal::ReferenceSimulate(model, IdealCluster(), *schedule, o);
      ASSERT_EQ(got.ok(), want.ok()) << schedule->name;
      if (!got.ok()) {
        std::printf("%s m=%d: %s\n", ScheduleKindName(kind), m,
                    std::string(got.status().message()).c_str());
        continue;
      }
      ++simulated;
      for (size_t k = 0; k < got->per_rank.size(); ++k) {
        EXPECT_EQ(got->per_rank[k].peak_memory_bytes, want->per_rank[k].peak_memory_bytes)
            << schedule->name << " m=" << m << " rank " << k;
        EXPECT_EQ(got->per_rank[k].gradients_from_ns, want->per_rank[k].gradients_from_ns)
            << schedule->name << " m=" << m << " rank " << k;
        EXPECT_GT(got->per_rank[k].gradients_from_ns, 0) << schedule->name;
        // The gradients are in the peak: at least the 16 B / d of the rank's parameters.
        const MemoryBreakdown& b = got->per_rank[k].memory;
        EXPECT_GE(got->per_rank[k].peak_memory_bytes,
                  b.weights + b.optimizer + b.gradients + b.gathered_weights)
            << schedule->name;
      }
    }
  }
  EXPECT_GE(simulated, 19);  // all but dualpipev and dualpipe at m = 2
}

}  // namespace
}  // namespace pipecast
