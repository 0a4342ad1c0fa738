// The cpu backend's in-process all-reduce (validate/tensor_group.h): the
// time one all-reduce of n floats takes t threads that call it back to back,
// i.e. its own cost without any compute between (two barriers and one pass
// over the data). docs/benchmarks.md has the figures.
#include <benchmark/benchmark.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "validate/tensor_group.h"

namespace pipecast::validate {
namespace {

// One group per thread count, shared by the benchmark's threads.
InProcessTensorGroup* GroupOf(int threads) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<InProcessTensorGroup>> groups;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<InProcessTensorGroup>& g = groups[threads];
  if (g == nullptr) g = std::make_unique<InProcessTensorGroup>(threads);
  return g.get();
}

void BM_InProcessAllReduce(benchmark::State& state) {
  InProcessTensorGroup* group = GroupOf(state.threads());
  std::vector<float> data(static_cast<size_t>(state.range(0)), 0.0f);
  const std::atomic<bool> abort{false};
  for (auto _ : state) {
    const Status st = group->AllReduceSum(state.thread_index(), data, abort);
    benchmark::DoNotOptimize(st.ok());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) *
                          static_cast<int64_t>(sizeof(float)));
}
// 8192 floats: the CI test's activation (64 tokens x hidden 128); 262144: 1 MiB.
BENCHMARK(BM_InProcessAllReduce)->Arg(8192)->Arg(262144)->Threads(2)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace pipecast::validate

BENCHMARK_MAIN();
