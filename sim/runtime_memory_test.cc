// Memory as the GPU reports it: each term worked by hand from its source's figure.
#include "sim/runtime_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

const DeviceMemoryTerm& Term(const DeviceMemory& m, const std::string& prefix) {
  for (const DeviceMemoryTerm& t : m.terms) {
    if (t.name.rfind(prefix, 0) == 0) return t;
  }
  ADD_FAILURE() << "no term " << prefix;
  return m.terms.front();
}

TEST(RuntimeMemory, NcclConnectionIsItsThreeProtocolBuffers) {
  // SIMPLE 4 MiB + LL 512 KiB + LL128 4,915,200 B (NCCL src/init.cc defaults)
  EXPECT_EQ(kNcclConnectionBytes, 4194304 + 524288 + 4915200);
  EXPECT_EQ(kNcclConnectionBytes, 9633792);
  // Hopper maps it in 2 MiB cuMem granules: 10 MiB, nccl#1685's ALLOC size 10485760.
  EXPECT_EQ(NcclConnectionBytes(ClusterPreset("h100-sxm")->gpu), 10485760);
  EXPECT_EQ(NcclConnectionBytes(ClusterPreset("a100-80gb")->gpu), 9633792);
  // Communicators: 688e6 / 9633792 = 71.4 -> 71, 544e6 / 9633792 = 56.5 -> 56 (A100);
  // 1.06e9 / 10485760 = 101.1 -> 101, 3.28e9 / 7 / 10485760 = 44.7 -> 45 (Hopper).
  const GpuSpec a100 = ClusterPreset("a100-80gb")->gpu, h100 = ClusterPreset("h100-sxm")->gpu;
  EXPECT_EQ(NcclCollectiveConnections(a100, 8), 71);
  EXPECT_EQ(NcclCollectiveConnections(a100, 2), 56);
  EXPECT_EQ(NcclCollectiveConnections(a100, 1), 0);
  EXPECT_EQ(NcclPairConnections(a100), 56);
  EXPECT_EQ(NcclCollectiveConnections(h100, 8), 101);
  EXPECT_EQ(NcclPairConnections(h100), 45);
}

TEST(RuntimeMemory, FsdpOnOneH100NodeByTerm) {
  // Given d = 8 on one H100 node, 60 GiB allocated at the peak
  const Cluster cluster = ClusterPreset("h100-sxm").value();
  TrainingConfig config;
  config.layout.pipeline_stages = 1;
  config.layout.data_parallel = 8;
  config.memory.zero = 3;
  const DeviceMemory m = DeviceMemoryFor(cluster, config, 60 * kGiB, 0);
  // then: allocated 60 GiB; the allocator's cache 5% of it, 3 GiB; the context 512 MiB;
  // cuBLAS 2 x 32 MiB; NCCL 101 x 10 MiB for the data-parallel group and again for the
  // default group
  EXPECT_EQ(Term(m, "allocated").bytes, 60 * kGiB);
  EXPECT_EQ(Term(m, "allocator cache").bytes, 3 * kGiB);
  EXPECT_TRUE(Term(m, "allocator cache").estimated);
  EXPECT_EQ(Term(m, "CUDA context").bytes, 512 * kMiB);
  EXPECT_EQ(Term(m, "cuBLAS").bytes, 64 * kMiB);
  EXPECT_FALSE(Term(m, "cuBLAS").estimated);
  EXPECT_EQ(Term(m, "NCCL: data-parallel group (8 GPUs)").bytes, 1010 * kMiB);
  EXPECT_EQ(Term(m, "NCCL: default group (8 GPUs)").bytes, 1010 * kMiB);
  EXPECT_EQ(m.terms.size(), 6u);
  EXPECT_EQ(m.Total(), 63 * kGiB + (512 + 64 + 2020) * kMiB);
  EXPECT_EQ(m.RuntimeBytes(), (512 + 64 + 2020) * kMiB);
  const std::string text = DeviceMemoryText(m);
  EXPECT_THAT(text, HasSubstr("estimated"));
  EXPECT_THAT(text, HasSubstr("65.54"));  // 63 + 2596 / 1024 GiB
}

TEST(RuntimeMemory, EveryCommunicatorOfAThreeDimensionalA100Plan) {
  // t = 2, p = 4, d = 2 on A100s, an interior rank (two pipeline neighbours)
  const Cluster cluster = ClusterPreset("a100-80gb").value();
  TrainingConfig config;
  config.layout.tensor_parallel = 2;
  config.layout.pipeline_stages = 4;
  config.layout.data_parallel = 2;
  const DeviceMemory m = DeviceMemoryFor(cluster, config, 10 * kGiB, 2);
  // data-parallel and tensor-parallel groups of 2: 56 connections each; two pairs: 112; the
  // default group of 16: 71; cuBLAS 2 x 8.125 MiB
  EXPECT_EQ(Term(m, "NCCL: data-parallel").bytes, 56 * kNcclConnectionBytes);
  EXPECT_EQ(Term(m, "NCCL: tensor-parallel").bytes, 56 * kNcclConnectionBytes);
  EXPECT_EQ(Term(m, "NCCL: pipeline neighbours (2)").bytes, 112 * kNcclConnectionBytes);
  EXPECT_EQ(Term(m, "NCCL: default group (16 GPUs)").bytes, 71 * kNcclConnectionBytes);
  EXPECT_EQ(Term(m, "cuBLAS").bytes, 2 * (8 * kMiB + 128 * kKiB));
}

TEST(RuntimeMemory, HybridShardingAddsTheReplicaGroupAndIdealHasOnlyTheAllocated) {
  const Cluster cluster = ClusterPreset("h100-sxm").value();
  TrainingConfig config;
  config.layout.pipeline_stages = 1;
  config.layout.data_parallel = 16;
  config.memory.zero = 3;
  config.memory.sharding.shard_group = 8;
  const DeviceMemory m = DeviceMemoryFor(cluster, config, kGiB, 0);
  EXPECT_EQ(Term(m, "NCCL: data-parallel group (8 GPUs)").bytes, 1010 * kMiB);
  EXPECT_EQ(Term(m, "NCCL: replica group (2 GPUs, hybrid sharding)").bytes, 1010 * kMiB);
  Cluster ideal;
  ideal.name = "ideal";
  const DeviceMemory only = DeviceMemoryFor(ideal, config, kGiB, 0);
  ASSERT_EQ(only.terms.size(), 1u);
  EXPECT_EQ(only.Total(), kGiB);
}

}  // namespace
}  // namespace pipecast
