// The cpu backend (backend.h): one thread per rank in this process, messages
// copied between the ranks' pools by InProcessTransport.
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
    std::vector<std::unique_ptr<MemoryPool>> pools;
    std::vector<MemoryPool*> raw;
    std::vector<int> ranks;
    for (int r = 0; r < plan.ranks; ++r) {
      pools.push_back(std::make_unique<MemoryPool>(fmt::format("stage {} (rank {})", r, r),
                                                   memory_limit_bytes, &clock_));
      raw.push_back(pools.back().get());
      ranks.push_back(r);
    }
    InProcessTransport transport(raw);
    RuntimeEnv env{&transport, work, &clock_, raw, /*all_ranks_local=*/true};
    ranks_ = plan.ranks;
    return RunStages(plan, ranks, options, env);
  }

  std::vector<std::string> Notes() const override {
    return {
        fmt::format("backend cpu: {} worker threads in one process on {} hardware threads; "
                    "messages are memory copies between the stages' buffers; one "
                    "steady_clock for every record",
                    ranks_, std::thread::hardware_concurrency())};
  }
  const Clock* clock() const override { return &clock_; }

 private:
  SteadyClock clock_;
  int ranks_ = 0;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace pipecast::validate
