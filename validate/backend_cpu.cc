// The cpu backend (backend.h): one thread per rank in this process (t per
// rank with tensor parallelism, all-reducing through InProcessTensorGroup;
// ep per rank with expert parallelism, exchanging tokens through its
// AllToAll),
// messages copied between the workers' pools by InProcessTransport (the copy
// reduce of a bidirectional schedule by a second one, between pools of its own).
#include <fmt/format.h>

#include <memory>
#include <thread>

#include "validate/backend.h"

namespace pipecast::validate {
namespace {

class CpuBackend final : public Backend {
 public:
  Result<Link> ProbeLink(Bytes bytes) override {
    MemoryPool p0("probe rank 0", 0, &clock_), p1("probe rank 1", 0, &clock_);
    InProcessTransport transport({&p0, &p1});
    Result<Link> peer = Link{};
    std::thread other([&] { peer = ProbeAsRank(1, &transport, &p1, &clock_, bytes); });
    Result<Link> link = ProbeAsRank(0, &transport, &p0, &clock_, bytes);
    other.join();
    if (!peer.ok()) return peer.status();
    return link;
  }

  Result<std::vector<StageRun>> Run(const ExecPlan& plan, const RuntimeOptions& options,
                                    OpWork* work, Bytes memory_limit_bytes) override {
    const int t = plan.workers_per_rank();
    const char* member = plan.expert_parallel > 1 ? "expert" : "tensor";
    std::vector<std::unique_ptr<MemoryPool>> pools;
    std::vector<MemoryPool*> raw;
    std::vector<int> workers;
    for (int w = 0; w < plan.workers(); ++w) {
      const int r = w / t;
      pools.push_back(std::make_unique<MemoryPool>(
          t > 1 ? fmt::format("stage {} (rank {}, {} rank {})", r, r, member, w % t)
                : fmt::format("stage {} (rank {})", r, r),
          memory_limit_bytes, &clock_));
      raw.push_back(pools.back().get());
      workers.push_back(w);
    }
    // One all-reduce (all-to-all) group per rank, over its t (ep) worker threads.
    std::vector<std::unique_ptr<InProcessTensorGroup>> groups;
    std::vector<TensorGroup*> group_ptrs;
    for (int r = 0; t > 1 && r < plan.ranks; ++r) {
      groups.push_back(std::make_unique<InProcessTensorGroup>(t));
      group_ptrs.push_back(groups.back().get());
    }
    InProcessTransport transport(raw);
    // The copy reduce's buffers (bidirectional schedules) in pools of their own, outside the
    // stages' peaks (runtime.h, RuntimeEnv::copy_pools).
    std::vector<std::unique_ptr<MemoryPool>> copy_pools;
    std::vector<MemoryPool*> copy_raw;
    for (int w = 0; w < plan.workers(); ++w) {
      copy_pools.push_back(std::make_unique<MemoryPool>(
          fmt::format("the copy reduce of worker {}", w), /*limit_bytes=*/0, &clock_));
      copy_raw.push_back(copy_pools.back().get());
    }
    InProcessTransport copy_transport(copy_raw);
    RuntimeEnv env{&transport,      work,    &clock_, raw, /*all_ranks_local=*/true, group_ptrs,
                   &copy_transport, copy_raw};
    ranks_ = plan.ranks;
    tensor_parallel_ = plan.tensor_parallel;
    expert_parallel_ = plan.expert_parallel;
    all_gather_ = plan.ep_dispatcher == ExpertDispatcher::kAllGather;
    return RunStages(plan, workers, options, env);
  }

  std::vector<std::string> Notes() const override {
    std::vector<std::string> notes = {fmt::format(
        "backend cpu: {} worker threads in one process on {} hardware threads; "
        "messages are memory copies between the stages' buffers; one "
        "steady_clock for every record",
        ranks_ * tensor_parallel_ * expert_parallel_, std::thread::hardware_concurrency())};
    if (tensor_parallel_ > 1) {
      notes.push_back(fmt::format(
          "tensor parallelism: {} worker threads a stage, each with its own memory pool; an "
          "all-reduce is an in-process reduction (each thread sums its 1/{} of the elements over "
          "the {} threads in tensor-rank order and writes the sum into every thread's buffer)",
          tensor_parallel_, tensor_parallel_, tensor_parallel_));
    }
    if (expert_parallel_ > 1) {
      notes.push_back(fmt::format(
          "expert parallelism: {} worker threads a stage, each a data-parallel replica with its "
          "own micro-batches, its own memory pool and 1/{} of every MoE layer's experts; {}",
          expert_parallel_, expert_parallel_,
          all_gather_
              ? "Megatron-LM's all-gather dispatcher: an all-gather is an in-process exchange "
                "(between two barriers each thread copies every thread's send buffer), a "
                "reduce-scatter likewise sums its block of every thread's buffer in thread order"
              : "an all-to-all is an in-process exchange (between two barriers each thread "
                "copies its rows out of every thread's send buffer)"));
    }
    return notes;
  }
  const Clock* clock() const override { return &clock_; }

 private:
  SteadyClock clock_;
  int ranks_ = 0;
  int tensor_parallel_ = 1;
  int expert_parallel_ = 1;
  bool all_gather_ = false;  // the plan's ep_dispatcher is allgather
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace pipecast::validate
