// The mpi backend's expert tensor parallelism held to the sequential run, as
// validate/layer_work_test.cc holds the in-process groups: ep 2 x etp 2, one
// pipeline stage of four workers, one MPI process each (MakeMpiBackend, the
// validator's own backend: MPI_Comm_split, then MPI_Ialltoallv for the
// all-to-all dispatcher's sub-group exchanges, MPI_Iallgather and
// MPI_Ireduce_scatter_block for the all-gather dispatcher's). Every process
// runs the same tests: it builds the same plan, runs its worker, and checks
// its own expert shards' gradients against the whole blocks run on one
// thread; process 0, which gathers every worker's record, checks each
// worker's activation peak against the simulator's. A test program started
// by validator_cli_moe_test.cc under `mpirun -np 4`; run alone it fails,
// saying so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "testing/validate_test_util.h"
#include "validate/backend.h"
#include "validate/layer_work.h"
#include "validate/runtime.h"

namespace pipecast::validate {
namespace {

// The expert group: ep 2 x etp 2, member m = j·etp + r (expert rank j, tensor
// rank r) is MPI process m.
constexpr int kEp = 2;
constexpr int kEtp = 2;
constexpr int kMembers = kEp * kEtp;
constexpr int kLayers = 4;
constexpr int kMicrobatches = 3;

Backend* g_backend = nullptr;  // main's, for the whole run

int ProcessRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Given 4 MoE layers on one stage of ep 2 x etp 2 (4 data-parallel replicas)
// under 1F1B with 3 micro-batches, the tokens exchanged as `dispatcher` does
// between 4 MPI processes: each member's W2 gradient is its slice of the
// sequential run's, and each worker's activation peak is the simulator's
// (which counts etp x the expert rows of x, ExpertAllToAll::etp_kept_bytes).
void ExpectMpiExpertTensorParallelGivesTheSequentialGradients(ExpertDispatcher dispatcher) {
  ASSERT_NE(g_backend, nullptr);
  ASSERT_EQ(g_backend->processes(), kMembers) << "run under mpirun -np " << kMembers;
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 1, kMicrobatches);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const testing::World w =
      testing::MakeWorld(testing::MoeWorkloadModel(kLayers), *s, Recompute::kOff,
                         /*tensor_parallel=*/1, kEp, dispatcher, kEtp);
  ASSERT_EQ(w.exec.expert_parallel, kMembers);
  ASSERT_EQ(w.exec.expert_tensor_parallel, kEtp);
  ASSERT_EQ(w.exec.workers(), kMembers);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan, g_backend->clock());
  ASSERT_TRUE(work.ok()) << work.status().message();
  RuntimeOptions ro;
  ro.warmup_iterations = 0;
  ro.iterations = 1;
  Result<std::vector<StageRun>> runs =
      g_backend->Run(w.exec, ro, work->get(), /*memory_limit_bytes=*/0);
  ASSERT_TRUE(runs.ok()) << runs.status().message();

  const int m = ProcessRank();
  const std::vector<cpu::Block> ref =
      testing::SequentialMoeBlocks(kLayers, kMicrobatches, kMembers);
  for (int l = 0; l < kLayers; ++l) {
    ASSERT_NO_FATAL_FAILURE(
        testing::ExpectExpertShardGradient(ref[l], (*work)->blocks(m)[l], m, kEp, kEtp, l));
  }
  if (!g_backend->is_root()) {
    EXPECT_TRUE(runs->empty());
    return;
  }
  ASSERT_EQ(runs->size(), static_cast<size_t>(kMembers));
  for (const StageRun& run : *runs) {
    EXPECT_EQ(run.peak_activation_bytes, w.predicted.per_rank[run.rank].memory.activations_peak)
        << "rank " << run.rank << " expert rank " << run.expert_rank;
    TimeNs collective = 0;
    for (const OpTiming& op : run.ops) collective += op.collective_ns;
    EXPECT_GT(collective, 0) << "expert rank " << run.expert_rank;
  }
}

TEST(MpiExpertTensorParallel, AllToAllDispatcherGivesTheSequentialGradients) {
  ExpectMpiExpertTensorParallelGivesTheSequentialGradients(ExpertDispatcher::kAllToAll);
}

TEST(MpiExpertTensorParallel, AllGatherDispatcherGivesTheSequentialGradients) {
  ExpectMpiExpertTensorParallelGivesTheSequentialGradients(ExpertDispatcher::kAllGather);
}

}  // namespace
}  // namespace pipecast::validate

int main(int argc, char** argv) {
  pipecast::Result<std::unique_ptr<pipecast::validate::Backend>> backend =
      pipecast::validate::MakeMpiBackend(&argc, &argv);
  if (!backend.ok()) {
    std::fprintf(stderr, "mpi_expert_test: %s\n", backend.status().message().c_str());
    return 1;
  }
  pipecast::validate::g_backend = backend->get();
  ::testing::InitGoogleMock(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  pipecast::validate::g_backend = nullptr;
  backend->reset();  // MPI_Finalize
  return failed;
}
