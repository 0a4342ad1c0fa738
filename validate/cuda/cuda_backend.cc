// The cuda backend (backend.h): one worker thread per rank in this process
// (or one process per rank under mpirun: cuda_mpi.cc), each on its own CUDA
// stream. Stage r runs on GPU PlaceRanks(...)[r].gpu; ranks of one process
// sharing a GPU each get a green context with an equal share of its SMs.
//
// Every byte a stage holds is device memory: its MemoryPool allocates with
// DeviceAllocator (cudaMalloc), so weights, gradients and optimizer state,
// activations, workspace and message buffers are on the GPU and the pool's
// high-water mark is the stage's peak device memory, counted as the
// simulator counts it. Ops are busy-work kernels spinning on the GPU's timer
// for the op's profiled duration over the stage's SMs; each op's device time
// is measured with CUDA events. An op writes MessagePattern(tag) into the
// message it sends and checks, on the device, that the message it received
// holds its sender's pattern: a transport that delivers wrong bytes fails
// the run. Messages travel by DeviceTransport (NCCL, device-to-device copy
// or host-staged, per directed pair). A bidirectional schedule's copy reduce
// travels by a second DeviceTransport in exchange mode, over device pools of
// its own (outside the stages' peaks, as the simulator counts it), with
// channels of its own for the partner pairs. Op start and end are read on the
// host clock after the stage's stream finished.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "validate/backend.h"
#include "validate/cuda/cuda_backend_internal.h"
#include "validate/cuda/device_state.h"
#include "validate/cuda/device_transport.h"
#include "validate/cuda/nccl_api.h"

cudaError_t PipecastLaunchSpin(cudaStream_t stream, unsigned long long ns, int blocks);
cudaError_t PipecastLaunchCheck(cudaStream_t stream, const void* data, size_t bytes,
                                unsigned char value, unsigned long long* mismatches, int blocks);

namespace pipecast::validate::cuda {
namespace {

// Blocks of the message check kernel (256 threads each): enough to read a
// few MiB at memory speed on any GPU.
constexpr int kCheckBlocks = 64;
// An op's all-reduces wait without a timeout of their own: the runtime's
// watchdog aborts an op stuck in them (the abort flag ends the wait).
constexpr TimeNs kNoAllReduceTimeoutNs = std::numeric_limits<TimeNs>::max() / 2;

}  // namespace

CudaWork::CudaWork(const std::vector<StageDevice>* devices, const ExecPlan& plan,
                   DeviceTensorGroups* tp, const Clock* clock)
    : dev_(devices), tp_(tp), clock_(clock), per_rank_(devices->size()) {
  for (const ExecStage& st : plan.per_rank) {
    for (const ExecOp& op : st.ops) {
      ops_[Key(st.rank, op.action)] = OpInfo{op.recv.present() ? op.recv.tag : -1,
                                             op.send.present() ? op.send.tag : -1,
                                             op.tp_collectives,
                                             op.tp_comm_ns,
                                             op.ep_collectives,
                                             op.ep_comm_ns};
    }
  }
}

CudaWork::~CudaWork() {
  for (PerRank& p : per_rank_) {
    if (p.start) cudaEventDestroy(p.start);
    if (p.end) cudaEventDestroy(p.end);
    if (p.mismatches) cudaFree(p.mismatches);
  }
}

CudaWork::OpKey CudaWork::Key(int rank, const Action& a) {
  return {rank, a.stage, static_cast<int>(a.kind), a.microbatch};
}

Status CudaWork::Init(const std::vector<int>& local_ranks) {
  for (int r : local_ranks) {
    PerRank& p = per_rank_[r];
    PIPECAST_RETURN_IF_ERROR(MakeCurrent((*dev_)[r]));
    cudaError_t e = cudaEventCreate(&p.start);
    if (e == cudaSuccess) e = cudaEventCreate(&p.end);
    if (e == cudaSuccess) e = cudaMalloc(&p.mismatches, sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMemset(p.mismatches, 0, sizeof(unsigned long long));
    if (e != cudaSuccess) return Status::Unavailable(fmt::format("rank {}: {}", r, CudaText(e)));
  }
  return Status::Ok();
}

std::string CudaWork::Description() const { return KernelOpsDescription(); }

std::string KernelOpsDescription() {
  return "ops are busy-work kernels of the profiled durations on the GPU (spinning on its timer "
         "over the stage's SMs), not real layers; with tensor parallelism each op's all-reduces, "
         "with expert parallelism its all-to-alls, then run for real (NCCL)";
}

Status CudaWork::Check(cudaError_t e) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(fmt::format("CUDA error {}", CudaText(e)));
}

Status CudaWork::Run(const OpCall& call) {
  const StageDevice& d = (*dev_)[call.rank];
  PerRank& p = per_rank_[call.rank];
  PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
  const OpInfo& info = ops_.at(Key(call.rank, call.action));
  const bool all_reduces = tp_ != nullptr && !info.tp_collectives.empty();
  const bool all_to_alls = tp_ != nullptr && !info.ep_collectives.empty();
  if (!call.input.empty()) {
    PIPECAST_RETURN_IF_ERROR(
        Check(PipecastLaunchCheck(d.stream, call.input.data(), call.input.size(),
                                  MessagePattern(info.recv_tag), p.mismatches, kCheckBlocks)));
    ++p.checked;
  }
  // The compute part of the op: what the simulator gives it beyond its all-reduces.
  const TimeNs compute_ns = std::max<TimeNs>(
      call.predicted_ns - (all_reduces ? info.tp_comm_ns : 0) - (all_to_alls ? info.ep_comm_ns : 0),
      0);
  cudaEventRecord(p.start, d.stream);
  PIPECAST_RETURN_IF_ERROR(
      Check(PipecastLaunchSpin(d.stream, static_cast<unsigned long long>(compute_ns), d.sms)));
  cudaEventRecord(p.end, d.stream);
  if (!call.output.empty()) {
    PIPECAST_RETURN_IF_ERROR(Check(cudaMemsetAsync(
        call.output.data(), MessagePattern(info.send_tag), call.output.size(), d.stream)));
  }
  PIPECAST_RETURN_IF_ERROR(Check(cudaStreamSynchronize(d.stream)));
  if (all_reduces) {
    static const std::atomic<bool> kNever{false};
    const TimeNs t0 = clock_->NowNs();
    PIPECAST_RETURN_IF_ERROR(tp_->AllReduce(call.rank, info.tp_collectives, d.stream,
                                            kNoAllReduceTimeoutNs,
                                            call.abort != nullptr ? *call.abort : kNever));
    if (call.collective_ns != nullptr) *call.collective_ns += clock_->NowNs() - t0;
    PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
  }
  if (all_to_alls) {
    static const std::atomic<bool> kNever{false};
    const TimeNs t0 = clock_->NowNs();
    PIPECAST_RETURN_IF_ERROR(tp_->ExpertCollectives(call.rank, info.ep_collectives, d.stream,
                                                    kNoAllReduceTimeoutNs,
                                                    call.abort != nullptr ? *call.abort : kNever));
    if (call.collective_ns != nullptr) *call.collective_ns += clock_->NowNs() - t0;
    PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, p.start, p.end);
  p.busy_ns += static_cast<TimeNs>(static_cast<double>(ms) * 1e6);
  return Status::Ok();
}

Result<CudaWork::Totals> CudaWork::Collect(const std::vector<int>& local_ranks) const {
  Totals t;
  t.busy_ns.assign(per_rank_.size(), 0);
  for (int r : local_ranks) {
    const PerRank& p = per_rank_[r];
    PIPECAST_RETURN_IF_ERROR(MakeCurrent((*dev_)[r]));
    unsigned long long bad = 0;
    if (cudaError_t e = cudaMemcpy(&bad, p.mismatches, sizeof(bad), cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return Status::Internal("reading the message check: " + CudaText(e));
    }
    t.mismatched_bytes += bad;
    t.checked_messages += p.checked;
    t.busy_ns[r] = p.busy_ns;
  }
  return t;
}

namespace {

struct Prepared {
  std::vector<StageDevice> devices;
  std::map<DirectedPair, P2pRoute> routes;
  std::map<DirectedPair, P2pRoute> copy_routes;  // the copy reduce's (bidirectional schedules)
  const Nccl* nccl = nullptr;
};

// Devices and routes; the part of a run that may fail on one process alone.
Result<Prepared> Prepare(const ExecPlan& plan, const DeviceRunSetup& setup,
                         const std::map<DirectedPair, std::vector<PairMessage>>& seqs,
                         const std::map<DirectedPair, std::vector<PairMessage>>& copy_seqs,
                         std::vector<std::string>* notes) {
  Prepared p;
  const int t = setup.tensor_parallel;
  PIPECAST_RETURN_IF_ERROR(CheckTensorGroupsOnDistinctGpus(setup.placement, t));
  PIPECAST_ASSIGN_OR_RETURN(std::vector<StageDevice> devices,
                            MakeStageDevices(setup.placement, setup.local_ranks, notes));
  p.devices = std::move(devices);
  // NCCL is loaded only when a pair needs it.
  bool distinct = false;
  for (const auto* pairs : {&seqs, &copy_seqs}) {
    for (const auto& [pair, seq] : *pairs) {
      const RankPlacement &a = setup.placement[pair.first], &b = setup.placement[pair.second];
      distinct = distinct || a.node != b.node || a.gpu != b.gpu;
    }
  }
  if (distinct || t > 1) {
    Result<const Nccl*> loaded = LoadNccl();
    if (loaded.ok()) {
      p.nccl = *loaded;
    } else if (t > 1) {
      return Status::Unavailable(
          fmt::format("tensor parallelism on the cuda backend all-reduces with NCCL, which is not "
                      "available: {}",
                      loaded.status().message()));
    } else {
      notes->push_back(loaded.status().message());
    }
  }
  PIPECAST_ASSIGN_OR_RETURN(auto routes, RouteTable(plan, setup.placement, p.nccl != nullptr));
  p.routes = std::move(routes);
  for (const auto& [pair, route] : p.routes) {
    notes->push_back(
        fmt::format("messages rank {} -> rank {}: {}{}", pair.first, pair.second, RouteName(route),
                    route == P2pRoute::kNccl
                        ? fmt::format(" ({}, version {})", p.nccl->library, p.nccl->version)
                        : std::string()));
  }
  PIPECAST_ASSIGN_OR_RETURN(auto copy_routes,
                            RouteTable(copy_seqs, setup.placement, p.nccl != nullptr));
  p.copy_routes = std::move(copy_routes);
  for (const auto& [pair, route] : p.copy_routes) {
    notes->push_back(fmt::format(
        "copy reduce rank {} -> rank {}: {}{}", pair.first, pair.second, RouteName(route),
        route == P2pRoute::kNccl ? " (communicators of its own; each rank's send and receive in "
                                   "one NCCL group)"
                                 : std::string()));
  }
  if (p.nccl != nullptr) {
    PostingReport posting = SimulatePosting(plan, StreamLayout::kStreamPerDirectedPair);
    if (!posting.completes) {
      return Status::FailedPrecondition("the schedule deadlocks: " + posting.stuck);
    }
    PostingReport copy = SimulateCopyReduce(plan, CopyPosting::kGroupedExchange);
    if (!copy.completes) {
      return Status::FailedPrecondition("the plan's copy reduce deadlocks: " + copy.stuck);
    }
  }
  return p;
}

// Each local rank's device allocator and memory pool (`name` names a rank's pool in errors);
// `raw` has every rank's pool, null where the rank runs in another process.
struct DevicePools {
  std::vector<std::unique_ptr<DeviceAllocator>> allocators;
  std::vector<std::unique_ptr<MemoryPool>> pools;
  std::vector<MemoryPool*> raw;
};

DevicePools MakeDevicePools(int ranks, const std::vector<int>& local,
                            std::vector<StageDevice>* devices, Bytes limit_bytes,
                            const Clock* clock, const std::function<std::string(int)>& name) {
  DevicePools out;
  out.allocators.resize(ranks);
  out.pools.resize(ranks);
  out.raw.assign(ranks, nullptr);
  for (int r : local) {
    out.allocators[r] = std::make_unique<DeviceAllocator>(&(*devices)[r]);
    out.pools[r] =
        std::make_unique<MemoryPool>(name(r), limit_bytes, clock, out.allocators[r].get());
    out.raw[r] = out.pools[r].get();
  }
  return out;
}

// The stages' tensor- or expert-parallel NCCL groups at t > 1 (null at t = 1), with a scratch
// for the largest collective, and the note that says how they run.
Result<std::unique_ptr<DeviceTensorGroups>> ConnectGroups(const ExecPlan& plan,
                                                          const DeviceRunSetup& setup,
                                                          std::vector<StageDevice>* devices,
                                                          const Nccl* nccl,
                                                          std::vector<std::string>* notes) {
  std::unique_ptr<DeviceTensorGroups> groups;
  const int t = setup.tensor_parallel;
  if (t > 1) {
    // The scratch holds the largest all-reduce, or an expert collective's send and receive
    // parts (DeviceTensorGroups::ScratchBytes).
    Bytes largest = 0;
    bool all_to_all = false, gathers = false;
    for (const ExecStage& st : plan.per_rank) {
      for (const ExecOp& op : st.ops) {
        for (Bytes b : op.tp_collectives) largest = std::max(largest, b);
        for (const ExpertCollective& c : op.ep_collectives) {
          largest = std::max(largest, DeviceTensorGroups::ScratchBytes(c, t));
          gathers = gathers || c.kind != ExpertCollective::Kind::kAllToAll;
        }
        all_to_all = all_to_all || !op.ep_collectives.empty();
      }
    }
    groups = std::make_unique<DeviceTensorGroups>(devices, nccl, t);
    PIPECAST_RETURN_IF_ERROR(groups->Connect(plan.ranks / t, setup.local_ranks, largest,
                                             setup.make_ids, setup.share_ids, setup.ready));
    if (all_to_all) {
      notes->push_back(fmt::format(
          "expert parallelism: {} workers a stage on distinct GPUs, one NCCL communicator per "
          "stage ({}, version {}); each op's kernel spins for its predicted time less its "
          "predicted dispatch and combine time, then its MoE layers' {} run ({}, on a scratch "
          "buffer of {} bytes, not counted in the stage's memory)",
          t, nccl->library, nccl->version,
          gathers ? "all-gathers and reduce-scatters (Megatron-LM's all-gather dispatcher)"
                  : "dispatch and combine all-to-alls",
          gathers ? "ncclAllGather, ncclReduceScatter of floats"
                  : fmt::format("grouped ncclSend/ncclRecv of bytes / {} to every member", t),
          largest));
    } else {
      notes->push_back(fmt::format(
          "tensor parallelism: {} workers a stage on distinct GPUs, one NCCL communicator per "
          "stage ({}, version {}); each op's kernel spins for its predicted time less its "
          "predicted all-reduce time, then its all-reduces run (ncclAllReduce, sum of floats, in "
          "place on a scratch buffer of the largest collective's {} bytes, not counted in the "
          "stage's memory)",
          t, nccl->library, nccl->version, largest));
    }
  }
  return groups;
}

}  // namespace

Result<std::vector<StageRun>> RunOnDevices(const ExecPlan& plan, const RuntimeOptions& options,
                                           Bytes memory_limit_bytes, const DeviceRunSetup& setup,
                                           const Clock* clock, std::vector<std::string>* notes) {
  const int ranks = plan.ranks;
  const std::vector<int>& local = setup.local_ranks;
  const std::map<DirectedPair, std::vector<PairMessage>> seqs = SendSequences(plan);
  const std::map<DirectedPair, std::vector<PairMessage>> copy_seqs = CopySendSequences(plan);
  Result<Prepared> prepared = Prepare(plan, setup, seqs, copy_seqs, notes);
  PIPECAST_RETURN_IF_ERROR(setup.ready(prepared.ok() ? Status::Ok() : prepared.status()));
  std::vector<StageDevice>& devices = prepared->devices;
  const std::map<DirectedPair, P2pRoute>& routes = prepared->routes;
  const Nccl* nccl = prepared->nccl;
  DevicePools stage_pools =
      MakeDevicePools(ranks, local, &devices, memory_limit_bytes, clock,
                      [](int r) { return fmt::format("stage {} (rank {})", r, r); });
  const std::vector<MemoryPool*>& raw = stage_pools.raw;
  std::unique_ptr<InProcessTransport> in_process;
  Transport* control = setup.control;
  if (control == nullptr) {
    in_process = std::make_unique<InProcessTransport>(raw);
    control = in_process.get();
  }
  DeviceTransport transport(&devices, raw, control, nccl);
  PIPECAST_RETURN_IF_ERROR(
      transport.Connect(routes, seqs, local, setup.make_ids, setup.share_ids, setup.ready));
  // The copy reduce (bidirectional schedules): device pools of its own, unlimited and outside
  // the stages' peaks (runtime.h, RuntimeEnv::copy_pools), and a transport in exchange mode.
  // Every process sees the same plan, so all of them connect it, or none.
  DevicePools copy_pools;
  std::vector<MemoryPool*> copy_raw;
  std::unique_ptr<DeviceTransport> copy_transport;
  if (!copy_seqs.empty()) {
    copy_pools = MakeDevicePools(ranks, local, &devices, /*limit_bytes=*/0, clock, [](int r) {
      return fmt::format("the copy reduce of rank {}", r);
    });
    copy_raw = copy_pools.raw;
    copy_transport = std::make_unique<DeviceTransport>(&devices, copy_raw, control, nccl,
                                                       /*exchange=*/true);
    PIPECAST_RETURN_IF_ERROR(copy_transport->Connect(prepared->copy_routes, copy_seqs, local,
                                                     setup.make_ids, setup.share_ids, setup.ready));
  }
  PIPECAST_ASSIGN_OR_RETURN(std::unique_ptr<DeviceTensorGroups> groups,
                            ConnectGroups(plan, setup, &devices, nccl, notes));
  CudaWork work(&devices, plan, groups.get(), clock);
  PIPECAST_RETURN_IF_ERROR(work.Init(local));
  const bool all_local = static_cast<int>(local.size()) == ranks;
  RuntimeEnv env{&transport, &work, clock, raw, all_local, {}, copy_transport.get(), copy_raw};
  Result<std::vector<StageRun>> runs = RunStages(plan, local, options, env);
  if (!runs.ok()) {
    transport.Abort();
    if (copy_transport != nullptr) copy_transport->Abort();
    if (groups != nullptr) groups->Abort();
    return runs.status();
  }
  PIPECAST_ASSIGN_OR_RETURN(CudaWork::Totals totals, work.Collect(local));
  if (totals.mismatched_bytes > 0) {
    return Status::Internal(fmt::format(
        "{} bytes of the {} messages received differ from what their senders wrote: the "
        "transport delivered wrong data",
        totals.mismatched_bytes, totals.checked_messages));
  }
  const int iterations = std::max(options.warmup_iterations + options.iterations, 1);
  std::string per;
  for (int r : local) {
    per += fmt::format("{}rank {} {:.3f} ms", per.empty() ? "" : ", ", r,
                       NsToMs(totals.busy_ns[r] / iterations));
  }
  notes->push_back("device busy time per iteration by CUDA events: " + per);
  notes->push_back(fmt::format(
      "{} messages received on this process, each checked on the device to hold the bytes its "
      "sender wrote (all equal); {} at most were received ahead of their op and held",
      totals.checked_messages, transport.max_buffered()));
  return runs;
}

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int gpus) : gpus_(gpus) {}

  bool has_link_probe() const override { return false; }
  Result<Link> ProbeLink(Bytes) override {
    return Status::Unavailable("the cuda backend predicts on the plan's cluster; no probe");
  }

  Result<std::vector<StageRun>> Run(const ExecPlan& plan, const RuntimeOptions& options,
                                    OpWork* /*busy-work is replaced by GPU kernels*/,
                                    Bytes memory_limit_bytes) override {
    PIPECAST_RETURN_IF_ERROR(RefuseExpertTensorParallel(plan));
    // Tensor (expert) parallelism: every worker a rank of its own (ExpandTensorParallel).
    const int t = plan.workers_per_rank();
    const ExecPlan expanded = t > 1 ? ExpandTensorParallel(plan) : plan;
    PIPECAST_ASSIGN_OR_RETURN(std::vector<RankPlacement> placement,
                              PlaceRanks(expanded.ranks, gpus_, {0}));
    DeviceRunSetup setup;
    setup.placement = placement;
    setup.tensor_parallel = t;
    for (int r = 0; r < expanded.ranks; ++r) setup.local_ranks.push_back(r);
    notes_.push_back(fmt::format("backend cuda: {} worker threads in one process, {} GPU(s){}",
                                 expanded.ranks, gpus_,
                                 gpus_ < expanded.ranks ? ": fewer GPUs than workers, so workers "
                                                          "share GPUs"
                                                        : ""));
    Result<std::vector<StageRun>> runs =
        RunOnDevices(expanded, options, memory_limit_bytes, setup, &clock_, &notes_);
    notes_.push_back(MeasurementNote());
    if (runs.ok()) FoldExpandedRuns(t, &*runs, plan.expert_parallel > 1);
    return runs;
  }

  std::string OwnOpsDescription() const override { return KernelOpsDescription(); }
  std::vector<std::string> Notes() const override { return notes_; }
  const Clock* clock() const override { return &clock_; }

 private:
  int gpus_;
  SteadyClock clock_;
  std::vector<std::string> notes_;
};

}  // namespace

std::string MeasurementNote() {
  return "op start and end are read on the host clock after the stage's stream finished; peak "
         "memory counts every byte a stage holds in device memory (cudaMalloc: weights, "
         "gradients, optimizer state, activations, workspace, message buffers), as the "
         "simulator counts it, not the CUDA context, NCCL's own buffers or the allocator's "
         "rounding";
}

Status CheckCudaDevices(int* count) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    return Status::Unavailable(fmt::format(
        "no CUDA device: {} (the cuda backend needs an NVIDIA GPU; use --backend cpu or mpi)",
        e == cudaSuccess ? "none found" : CudaText(e)));
  }
  if (GetDriver() == nullptr) {
    return Status::Unavailable(
        "the NVIDIA driver lacks the green-context API (CUDA 12.4 or newer is needed)");
  }
  *count = n;
  return Status::Ok();
}

}  // namespace pipecast::validate::cuda

namespace pipecast::validate {

Result<std::unique_ptr<Backend>> MakeCudaBackend(int) {
  int n = 0;
  PIPECAST_RETURN_IF_ERROR(cuda::CheckCudaDevices(&n));
  if (cuda::StartedByMpirun()) return cuda::MakeCudaMpiBackend(n);
  return std::unique_ptr<Backend>(std::make_unique<cuda::CudaBackend>(n));
}

}  // namespace pipecast::validate
