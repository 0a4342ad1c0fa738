// Names in PyTorch profiler traces: which ranges mark steps, pipeline actions and phases, and
// which kernels are communication (measured/names.h; docs/measured-runs.md lists the sources).
#include "measured/names.h"

#include <gtest/gtest.h>

namespace pipecast::measured {
namespace {

TEST(ClassifyRange, ProfilerStepGivesTheIterationNumber) {
  const RangeName r = ClassifyRange("ProfilerStep#551");
  EXPECT_EQ(r.kind, RangeName::Kind::kStep);
  EXPECT_EQ(r.step, 551);
  EXPECT_EQ(ClassifyRange("ProfilerStep#x").kind, RangeName::Kind::kNone);
}

// torch.distributed.pipelining's runtime: record_function(f"PP:{action}").
TEST(ClassifyRange, PyTorchPipeliningActionsGiveStageKindAndMicrobatch) {
  RangeName r = ClassifyRange("PP:2B5");
  ASSERT_EQ(r.kind, RangeName::Kind::kAction);
  EXPECT_EQ(r.action, (Action{2, OpKind::kBackward, 5}));
  EXPECT_EQ(r.phase, Phase::kBackward);
  r = ClassifyRange("PP:0W3");
  EXPECT_EQ(r.action, (Action{0, OpKind::kBackwardWeight, 3}));
  EXPECT_EQ(r.phase, Phase::kWeightGrad);
  r = ClassifyRange("PP:1I0");
  EXPECT_EQ(r.action.kind, OpKind::kBackwardInput);
  EXPECT_EQ(r.phase, Phase::kBackward);
  // Communication and sharding actions mark no phase; their kernels are classified by name.
  EXPECT_EQ(ClassifyRange("PP:0SEND_F1").kind, RangeName::Kind::kNone);
  EXPECT_EQ(ClassifyRange("PP:0UNSHARD").kind, RangeName::Kind::kNone);
  EXPECT_EQ(ClassifyRange("PP:0REDUCE_GRAD").kind, RangeName::Kind::kNone);
}

TEST(ClassifyRange, AnOverlappedPairGivesBothHalves) {
  const RangeName r = ClassifyRange("PP:(0F7;7B3)OVERLAP_F_B");
  ASSERT_EQ(r.kind, RangeName::Kind::kAction);
  EXPECT_EQ(r.action, (Action{0, OpKind::kForward, 7, true}));
  ASSERT_TRUE(r.pair_backward.has_value());
  EXPECT_EQ(*r.pair_backward, (Action{7, OpKind::kBackward, 3, true}));
  // Not a forward then a backward: not a pair.
  EXPECT_EQ(ClassifyRange("PP:(0B7;7F3)OVERLAP_F_B").kind, RangeName::Kind::kNone);
}

// DeepSeek's profile-data (attn(F), dispatch(B), mlp(W)) and the training loops of Holistic
// Trace Analysis' sample traces (## forward ##, ## backward ##, ## optimizer ##).
TEST(ClassifyRange, PhaseNamesOfPublishedTraces) {
  EXPECT_EQ(ClassifyRange("attn(F)").phase, Phase::kForward);
  EXPECT_EQ(ClassifyRange("dispatch(B)").phase, Phase::kBackward);
  EXPECT_EQ(ClassifyRange("mlp(W)").phase, Phase::kWeightGrad);
  EXPECT_EQ(ClassifyRange("mlp(X)").kind, RangeName::Kind::kNone);
  EXPECT_EQ(ClassifyRange("## forward ##").phase, Phase::kForward);
  EXPECT_EQ(ClassifyRange("## forward:over_arch ##").phase, Phase::kForward);
  EXPECT_EQ(ClassifyRange("## backward ##").phase, Phase::kBackward);
  EXPECT_EQ(ClassifyRange("## optimizer ##").phase, Phase::kOptimizer);
  EXPECT_EQ(ClassifyRange("## data_load ##").kind, RangeName::Kind::kNone);
  EXPECT_EQ(ClassifyRange("Optimizer.step#FusedAdam.step").phase, Phase::kOptimizer);
  EXPECT_EQ(ClassifyRange("forward").phase, Phase::kForward);
  EXPECT_EQ(ClassifyRange("1F1B").kind, RangeName::Kind::kNone);
}

TEST(ClassifyRange, CollectivesAndAutograd) {
  EXPECT_EQ(ClassifyRange("nccl:all_to_all").comm, CommKind::kAllToAll);
  EXPECT_EQ(ClassifyRange("nccl:_all_gather_base").comm, CommKind::kAllGather);
  EXPECT_EQ(ClassifyRange("nccl:_reduce_scatter_base").comm, CommKind::kReduceScatter);
  EXPECT_EQ(ClassifyRange("nccl:all_reduce").comm, CommKind::kAllReduce);
  EXPECT_EQ(ClassifyRange("nccl:recv 0<-1").comm, CommKind::kSendRecv);
  const RangeName a = ClassifyRange("autograd::engine::evaluate_function: MmBackward0");
  EXPECT_EQ(a.kind, RangeName::Kind::kAutograd);
  EXPECT_EQ(a.phase, Phase::kBackward);
}

TEST(ClassifyKernel, NcclKernelsByCollective) {
  EXPECT_EQ(ClassifyKernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
            CommKind::kAllReduce);
  EXPECT_EQ(ClassifyKernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long)"),
            CommKind::kAllGather);
  EXPECT_EQ(ClassifyKernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)"),
            CommKind::kReduceScatter);
  EXPECT_EQ(ClassifyKernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"),
            CommKind::kSendRecv);
  EXPECT_EQ(ClassifyKernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
            CommKind::kSendRecv);
  EXPECT_EQ(ClassifyKernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)"),
            CommKind::kBroadcast);
  EXPECT_EQ(ClassifyKernel("void at::native::vectorized_elementwise_kernel<4>(int)"), std::nullopt);
}

TEST(ClassifyKernel, DeepEpDispatchAndCombineAreAllToAll) {
  EXPECT_EQ(ClassifyKernel("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)"),
            CommKind::kAllToAll);
  EXPECT_EQ(ClassifyKernel("void deep_ep::internode::combine<8>(int4*)"), CommKind::kAllToAll);
  EXPECT_EQ(ClassifyKernel("void dpsk::ep::internode::cached_notify<false>(int)"),
            CommKind::kAllToAll);
  // DeepSeek's grouped GEMMs share a prefix but compute.
  EXPECT_EQ(ClassifyKernel("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dp>()"),
            std::nullopt);
}

}  // namespace
}  // namespace pipecast::measured
