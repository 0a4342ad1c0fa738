// The simulator's timeline cost (issue 17): one Simulate() call with the
// timeline off (the planner's search) and on (traces, reports, the critical
// path), on the ideal cluster (transfers take no time, so many events fall at
// one instant) and on h100-sxm, side by side; and the memory of writing the
// Chrome trace and the HTML report of such a result.
//
// Model: one synthetic layer per stage (100 us forward, 200 us backward of
// which 100 us weight gradient, 1 MiB activations and outputs). Shapes: GPipe
// and 1F1B at p=64, m=1024 (the case) and ZB-H1 at p=64, m=1024.
//
// BM_Timeline/<schedule>/p:64/m:1024/<cluster>/timeline:<off|on>, one path each.
// Counters: ns_per_op (wall, per compute op: Schedule::NumActions()),
// cpu_ns_per_op (this thread), bytes_per_op: the heap the SimResult holds
// once Simulate() returns (HeldBytes(): its containers' sizes), and
// faults_per_op: the minor page faults of the calls (fresh memory the kernel
// maps and zeroes: where glibc returns a freed result to the system, the next
// call faults its own in again; GLIBC_TUNABLES can keep the heap, see
// docs/benchmarks.md, "Fresh memory").
//
// BM_TimelineSideBySide/<schedule>/p:64/m:1024/<cluster>: both paths in one
// loop, alternately, so load on a shared machine hits both alike:
// off_cpu_ns_per_op, on_cpu_ns_per_op, on_over_off (the target: at
// most 2) and on_bytes_per_op. The timeline path is record_timeline alone;
// .../critical_path adds SimOptions::critical_path, as the tools run it.
//
// BM_RecordFloor/<schedule>/p:64/m:1024/<cluster>: the same records as the
// timeline path's result (ops, transfers, memory samples) written from their
// index with no simulation: cpu_ns_per_op, what the result's bytes cost alone.
//
// BM_TraceMemory/<schedule>/p:8/m:<m>/<trace|report>: the peak heap while
// writing the trace (WriteTraceJson() into a sink that drops the text, as the
// tools stream it to the file) or building the HTML report of one result,
// above the heap with the result alive, per compute op (peak_bytes_per_op),
// from this program's counting operator new; and the result's own bytes
// (result_bytes_per_op, HeldBytes()).
//
//   build/bench/timeline_bench
//   build/bench/timeline_bench --benchmark_filter='gpipe.*ideal'
//   build/bench/timeline_bench --benchmark_filter=SideBySide
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "base/units.h"
#include "bench/bench_util.h"
#include "report/html_report.h"
#include "report/trace.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

// Counting operator new: the bytes live and their peak, for BM_TraceMemory
// (mallinfo2 has no peak). Sizes come from malloc_usable_size, so a delete
// takes back what its new added.
namespace {
std::atomic<size_t> live_bytes{0};
std::atomic<size_t> peak_bytes{0};

void* CountedNew(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const size_t live = live_bytes += malloc_usable_size(p);
  size_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return p;
}
void CountedDelete(void* p) {
  if (p == nullptr) return;
  live_bytes -= malloc_usable_size(p);
  std::free(p);
}
}  // namespace

void* operator new(size_t n) { return CountedNew(n); }
void* operator new[](size_t n) { return CountedNew(n); }
void operator delete(void* p) noexcept { CountedDelete(p); }
void operator delete[](void* p) noexcept { CountedDelete(p); }
void operator delete(void* p, size_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, size_t) noexcept { CountedDelete(p); }

namespace pipecast {
namespace {

using bench::SyntheticModel;
using bench::ThreadCpuNs;

// The heap a result holds, from its containers' sizes (the memory timelines'
// shared block counted as their slices, sim/memory_timeline.h): the
// allocator's in-use counts miss a large block the engine hands out again from
// its cache (sim/internal/large_alloc_linux.cc), in use before the call too.
size_t HeldBytes(const SimResult& r) {
  size_t bytes = r.ops.capacity() * sizeof(OpRecord) +
                 r.transfers.capacity() * sizeof(TransferRecord) +
                 r.per_rank.capacity() * sizeof(StageResult) + r.schedule_name.capacity();
  for (const std::string& note : r.notes) bytes += note.capacity();
  for (const StageResult& s : r.per_rank) {
    bytes += s.stages.capacity() * sizeof(int) + s.layers.capacity() * sizeof(StageLayers) +
             s.memory_timeline.HeapBytes();
  }
  if (r.critical_path) {
    const CriticalPath& cp = *r.critical_path;
    bytes += cp.steps.capacity() * sizeof(CriticalStep) +
             cp.compute_by_rank.capacity() * sizeof(TimeNs) +
             cp.communication_by_link.capacity() * sizeof(CriticalPath::LinkTime);
  }
  return bytes;
}

double MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<double>(usage.ru_minflt);
}

struct Setup {
  Model model;
  Cluster cluster;
  Schedule schedule;
};

// The synthetic model on `cluster_name`, or false after SkipWithError.
bool MakeSetup(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
               const std::string& cluster_name, Setup* setup) {
  Result<Cluster> cluster = ClusterPreset(cluster_name);
  Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, 1);
  if (!cluster.ok() || !schedule.ok()) {
    state.SkipWithError(!cluster.ok() ? cluster.status().message().c_str()
                                      : schedule.status().message().c_str());
    return false;
  }
  *setup = Setup{SyntheticModel(ranks), std::move(*cluster), std::move(*schedule)};
  return true;
}

void BM_Timeline(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                 const std::string& cluster_name, bool timeline) {
  const Model model = SyntheticModel(ranks);
  const Result<Cluster> cluster = ClusterPreset(cluster_name);
  const Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, 1);
  if (!cluster.ok() || !schedule.ok()) {
    state.SkipWithError(!cluster.ok() ? cluster.status().message().c_str()
                                      : schedule.status().message().c_str());
    return;
  }
  SimOptions options;
  options.record_timeline = timeline;
  const double ops = static_cast<double>(schedule->NumActions());
  double held_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ThreadCpuNs();
  const double faults_start = MinorFaults();
  for (auto _ : state) {
    Result<SimResult> result = Simulate(model, *cluster, *schedule, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    held_bytes = static_cast<double>(HeldBytes(*result));
    benchmark::DoNotOptimize(result);
  }
  const double wall =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const double cpu = ThreadCpuNs() - cpu_start;
  const double total = ops * static_cast<double>(state.iterations());
  state.counters["ops"] = ops;
  state.counters["ns_per_op"] = wall / total;
  state.counters["cpu_ns_per_op"] = cpu / total;
  state.counters["bytes_per_op"] = held_bytes / ops;
  state.counters["faults_per_op"] = (MinorFaults() - faults_start) / total;
}

void BM_TimelineSideBySide(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                           const std::string& cluster_name, bool critical_path) {
  Setup setup;
  if (!MakeSetup(state, kind, ranks, microbatches, cluster_name, &setup)) return;
  SimOptions off, on;
  off.record_timeline = false;
  on.record_timeline = true;
  on.critical_path = critical_path;
  double cpu_off = 0, cpu_on = 0, held_bytes = 0;
  for (auto _ : state) {
    const double t0 = ThreadCpuNs();
    Result<SimResult> a = Simulate(setup.model, setup.cluster, setup.schedule, off);
    const double t1 = ThreadCpuNs();
    benchmark::DoNotOptimize(a);
    const double t2 = ThreadCpuNs();
    Result<SimResult> b = Simulate(setup.model, setup.cluster, setup.schedule, on);
    const double t3 = ThreadCpuNs();
    if (!a.ok() || !b.ok()) {
      state.SkipWithError(!a.ok() ? a.status().message().c_str() : b.status().message().c_str());
      return;
    }
    held_bytes = static_cast<double>(HeldBytes(*b));
    benchmark::DoNotOptimize(b);
    cpu_off += t1 - t0;
    cpu_on += t3 - t2;
  }
  const double ops = static_cast<double>(setup.schedule.NumActions());
  const double total = ops * static_cast<double>(state.iterations());
  state.counters["ops"] = ops;
  state.counters["off_cpu_ns_per_op"] = cpu_off / total;
  state.counters["on_cpu_ns_per_op"] = cpu_on / total;
  state.counters["on_over_off"] = cpu_off > 0 ? cpu_on / cpu_off : 0;
  state.counters["on_bytes_per_op"] = held_bytes / ops;
}

// The floor under the timeline path: the same records as one result with a
// timeline (as many ops, transfers and memory samples per rank, sized the way
// the engine sizes them), filled from their index with no
// simulation, one fresh set per iteration. What writing the result's bytes
// costs on this machine, whatever computes them.
void BM_RecordFloor(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                    const std::string& cluster_name) {
  Setup setup;
  if (!MakeSetup(state, kind, ranks, microbatches, cluster_name, &setup)) return;
  SimOptions options;
  options.record_timeline = true;
  Result<SimResult> shape = Simulate(setup.model, setup.cluster, setup.schedule, options);
  if (!shape.ok()) {
    state.SkipWithError(shape.status().message().c_str());
    return;
  }
  std::vector<size_t> samples;
  size_t total_samples = 0;
  for (const StageResult& r : shape->per_rank) {
    samples.push_back(r.memory_timeline.size());
    total_samples += samples.back();
  }
  const size_t num_ops = shape->ops.size(), num_transfers = shape->transfers.size();
  double cpu = 0;
  for (auto _ : state) {
    const double t0 = ThreadCpuNs();
    SimResult out;
    out.ops.resize(num_ops);
    for (size_t i = 0; i < num_ops; ++i) {
      const auto t = static_cast<TimeNs>(i);
      out.ops[i] = OpRecord{static_cast<int>(i & 63), Action{}, t, t + 1};
    }
    out.transfers.resize(num_transfers);
    for (size_t i = 0; i < num_transfers; ++i) {
      const auto t = static_cast<TimeNs>(i);
      const int x = static_cast<int>(i & 63);
      out.transfers[i] = TransferRecord{x, x + 1, x, x + 1, x, false, 1, t, t + 1, t + 2};
    }
    out.per_rank.resize(samples.size());
    // Every rank's changes in one block, each rank's timeline its slice (as the engine writes
    // them, sim/internal/engine_memory.cc; here from the heap rather than its large blocks).
    std::shared_ptr<MemoryTimeline::Change[]> block(new MemoryTimeline::Change[total_samples]);
    size_t first = 0;
    for (size_t r = 0; r < samples.size(); ++r) {
      MemoryTimeline::Change* changes = block.get() + first;
      for (size_t i = 0; i < samples[r]; ++i) {
        changes[i] = MemoryTimeline::Change{static_cast<TimeNs>(i), static_cast<int32_t>(i & 1)};
      }
      out.per_rank[r].memory_timeline =
          MemoryTimeline({MemoryDelta{1, 0, 0}, MemoryDelta{-1, 0, 0}}, block, first, samples[r]);
      first += samples[r];
    }
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
    cpu += ThreadCpuNs() - t0;
  }
  const double ops = static_cast<double>(setup.schedule.NumActions());
  state.counters["ops"] = ops;
  state.counters["cpu_ns_per_op"] = cpu / (ops * static_cast<double>(state.iterations()));
}

void BM_TraceMemory(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                    bool report) {
  Setup setup;
  if (!MakeSetup(state, kind, ranks, microbatches, "h100-sxm", &setup)) return;
  SimOptions options;
  options.record_timeline = true;
  options.critical_path = true;  // as the tools write traces and reports
  Result<SimResult> result = Simulate(setup.model, setup.cluster, setup.schedule, options);
  if (!result.ok()) {
    state.SkipWithError(result.status().message().c_str());
    return;
  }
  const double result_bytes = static_cast<double>(HeldBytes(*result));
  const ReportInputs inputs =
      MakeReportInputs(setup.model, setup.cluster, setup.schedule, options, "");
  double peak = 0, written = 0;
  for (auto _ : state) {
    const size_t base = live_bytes.load();
    peak_bytes = base;
    if (report) {
      std::string html = SimulationReportHtml(*result, inputs);
      written = static_cast<double>(html.size());
      benchmark::DoNotOptimize(html);
    } else {
      size_t bytes = 0;
      WriteTraceJson(*result, TraceOptions{}, [&](std::string_view piece) {
        bytes += piece.size();
        benchmark::DoNotOptimize(piece.data());
      });
      written = static_cast<double>(bytes);
    }
    peak = std::max(peak, static_cast<double>(peak_bytes.load() - base));
  }
  const double ops = static_cast<double>(setup.schedule.NumActions());
  state.counters["ops"] = ops;
  state.counters["peak_bytes_per_op"] = peak / ops;
  state.counters["result_bytes_per_op"] = result_bytes / ops;
  state.counters["output_bytes_per_op"] = written / ops;
}

void RegisterAll() {
  const std::pair<ScheduleKind, const char*> kinds[] = {{ScheduleKind::kGPipe, "gpipe"},
                                                        {ScheduleKind::k1F1B, "1f1b"},
                                                        {ScheduleKind::kZBH1, "zb-h1"}};
  for (const auto& [kind, name] : kinds) {
    for (const char* cluster : {"ideal", "h100-sxm"}) {
      for (bool timeline : {false, true}) {
        const std::string label = std::string("BM_Timeline/") + name + "/p:64/m:1024/" + cluster +
                                  "/timeline:" + (timeline ? "on" : "off");
        benchmark::RegisterBenchmark(label.c_str(), BM_Timeline, kind, 64, 1024,
                                     std::string(cluster), timeline)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
      for (bool critical_path : {false, true}) {
        const std::string label = std::string("BM_TimelineSideBySide/") + name + "/p:64/m:1024/" +
                                  cluster + (critical_path ? "/critical_path" : "");
        benchmark::RegisterBenchmark(label.c_str(), BM_TimelineSideBySide, kind, 64, 1024,
                                     std::string(cluster), critical_path)
            ->Unit(benchmark::kMillisecond);
      }
      const std::string floor = std::string("BM_RecordFloor/") + name + "/p:64/m:1024/" + cluster;
      benchmark::RegisterBenchmark(floor.c_str(), BM_RecordFloor, kind, 64, 1024,
                                   std::string(cluster))
          ->Unit(benchmark::kMillisecond);
    }
  }
  // The tools' case (examples of --trace and --report): p=8, many micro-batches.
  for (int m : {1000, 20000}) {
    for (bool report : {false, true}) {
      const std::string label =
          "BM_TraceMemory/gpipe/p:8/m:" + std::to_string(m) + (report ? "/report" : "/trace");
      benchmark::RegisterBenchmark(label.c_str(), BM_TraceMemory, ScheduleKind::kGPipe, 8, m,
                                   report)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
    }
  }
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
