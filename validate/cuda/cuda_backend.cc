// The cuda backend (backend.h): one worker thread per stage in this process,
// each on its own CUDA stream. With at least as many GPUs as stages, stage r
// runs on GPU r; with fewer, the stages of one GPU share it, each in its own
// green context holding an equal partition of the SMs (CUDA 12.4+
// cuGreenCtxCreate), and the report says so.
//
// Ops are busy-work kernels spinning on the GPU's timer for the op's
// profiled duration over the stage's SMs; each op's device time is also
// measured with CUDA events. Activations are allocated on the device
// (cudaMallocAsync) at a forward and freed at its backward (or W), and
// charged to the stage's MemoryPool. Messages between stages are staged
// through host buffers (device-to-host, the runtime's in-process transport,
// host-to-device); NCCL point-to-point is not implemented in this backend.
// Op start and end are read on the host clock after the stream finished.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "validate/backend.h"

cudaError_t PipecastLaunchSpin(cudaStream_t stream, unsigned long long ns, int blocks);

namespace pipecast::validate {
namespace {

// The driver API, looked up through the runtime (cudaGetDriverEntryPoint-
// ByVersion) rather than linked: the validator must start on machines
// without an NVIDIA driver, where libcuda.so does not exist.
struct Driver {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuDeviceGetDevResource) DeviceGetDevResource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) DevSmResourceSplitByCount = nullptr;
  decltype(&::cuDevResourceGenerateDesc) DevResourceGenerateDesc = nullptr;
  decltype(&::cuGreenCtxCreate) GreenCtxCreate = nullptr;
  decltype(&::cuCtxFromGreenCtx) CtxFromGreenCtx = nullptr;
  decltype(&::cuGreenCtxStreamCreate) GreenCtxStreamCreate = nullptr;
};

template <typename F>
bool Load(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

const Driver* GetDriver() {
  static const Driver* const kDriver = [] {
    auto* d = new Driver;
    const bool ok = Load("cuInit", &d->Init) && Load("cuDeviceGet", &d->DeviceGet) &&
                    Load("cuCtxGetCurrent", &d->CtxGetCurrent) &&
                    Load("cuCtxSetCurrent", &d->CtxSetCurrent) &&
                    Load("cuGetErrorString", &d->GetErrorString) &&
                    Load("cuDeviceGetDevResource", &d->DeviceGetDevResource) &&
                    Load("cuDevSmResourceSplitByCount", &d->DevSmResourceSplitByCount) &&
                    Load("cuDevResourceGenerateDesc", &d->DevResourceGenerateDesc) &&
                    Load("cuGreenCtxCreate", &d->GreenCtxCreate) &&
                    Load("cuCtxFromGreenCtx", &d->CtxFromGreenCtx) &&
                    Load("cuGreenCtxStreamCreate", &d->GreenCtxStreamCreate);
    return ok ? d : nullptr;
  }();
  return kDriver;
}

std::string CudaText(cudaError_t e) { return fmt::format("{} ({})", cudaGetErrorString(e), static_cast<int>(e)); }

std::string CuText(CUresult r) {
  const char* s = nullptr;
  if (GetDriver() != nullptr) GetDriver()->GetErrorString(r, &s);
  return fmt::format("{} ({})", s ? s : "unknown", static_cast<int>(r));
}

// Green contexts need a partition of at least this many SMs (Hopper's
// minimum; the driver rounds to its own granularity).
constexpr unsigned kMinSmsPerPartition = 8;

struct StageDevice {
  int gpu = 0;
  CUcontext ctx = nullptr;  // green context (as a CUcontext) or the primary one
  cudaStream_t stream = nullptr;
  int sms = 0;
};

class CudaWork final : public OpWork {
 public:
  explicit CudaWork(std::vector<StageDevice> devices) : dev_(std::move(devices)), busy_ns_(dev_.size()) {}

  bool ManagesActivations() const override { return true; }
  std::string Description() const override {
    return "ops are busy-work kernels of the profiled durations on the GPU (spinning on its "
           "timer over the stage's SMs), not real layers";
  }

  Status Run(const OpCall& call) override {
    const StageDevice& d = dev_[call.rank];
    if (CUresult r = GetDriver()->CtxSetCurrent(d.ctx); r != CUDA_SUCCESS) {
      return Status::Internal("cuCtxSetCurrent: " + CuText(r));
    }
    void* in = nullptr;
    void* out = nullptr;
    if (!call.input.empty()) {
      PIPECAST_RETURN_IF_ERROR(Check(cudaMallocAsync(&in, call.input.size(), d.stream), call));
      PIPECAST_RETURN_IF_ERROR(Check(cudaMemcpyAsync(in, call.input.data(), call.input.size(),
                                                     cudaMemcpyHostToDevice, d.stream), call));
    }
    const auto key = std::tuple{call.rank, call.action.stage, call.action.microbatch};
    const Bytes act = call.action.kind == OpKind::kForward ? activation_bytes(call) : 0;
    void* act_ptr = nullptr;
    if (act > 0) {
      cudaError_t e = cudaMallocAsync(&act_ptr, static_cast<size_t>(act), d.stream);
      if (e == cudaErrorMemoryAllocation) {
        return Status::FailedPrecondition(fmt::format(
            "out of device memory on stage {} (rank {}) at {}: the activations need {:.1f} MiB",
            call.action.stage, call.rank, ActionName(call.action), static_cast<double>(act) / kMiB));
      }
      PIPECAST_RETURN_IF_ERROR(Check(e, call));
    }
    cudaEvent_t start, end;
    cudaEventCreate(&start);
    cudaEventCreate(&end);
    cudaEventRecord(start, d.stream);
    PIPECAST_RETURN_IF_ERROR(Check(
        PipecastLaunchSpin(d.stream, static_cast<unsigned long long>(call.predicted_ns), d.sms),
        call));
    cudaEventRecord(end, d.stream);
    if (!call.output.empty()) {
      PIPECAST_RETURN_IF_ERROR(Check(cudaMallocAsync(&out, call.output.size(), d.stream), call));
      cudaMemsetAsync(out, 0, call.output.size(), d.stream);
      PIPECAST_RETURN_IF_ERROR(Check(cudaMemcpyAsync(call.output.data(), out, call.output.size(),
                                                     cudaMemcpyDeviceToHost, d.stream), call));
      cudaFreeAsync(out, d.stream);
    }
    if (in != nullptr) cudaFreeAsync(in, d.stream);
    const bool frees = call.action.kind == OpKind::kBackward ||
                       call.action.kind == OpKind::kBackwardWeight;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (act_ptr != nullptr) {
        Result<Allocation> charge = call.pool->Charge(
            act, MemoryKind::kActivation, "the device activations of " + ActionName(call.action));
        if (!charge.ok()) return charge.status();
        held_[key] = Held{act_ptr, std::move(*charge)};
      }
      if (frees) {
        auto it = held_.find(key);
        if (it != held_.end()) {
          cudaFreeAsync(it->second.ptr, d.stream);
          held_.erase(it);
        }
      }
    }
    PIPECAST_RETURN_IF_ERROR(Check(cudaStreamSynchronize(d.stream), call));
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    cudaEventDestroy(start);
    cudaEventDestroy(end);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ns_[call.rank] += static_cast<TimeNs>(ms * 1e6);
    return Status::Ok();
  }

  // Bytes a forward keeps: set by the backend from the ExecPlan.
  void SetActivationBytes(std::map<std::pair<int, int>, Bytes> bytes) { act_ = std::move(bytes); }
  std::vector<TimeNs> device_busy_ns() const { return busy_ns_; }

 private:
  struct Held {
    void* ptr = nullptr;
    Allocation charge;
  };
  Bytes activation_bytes(const OpCall& call) const {
    auto it = act_.find({call.rank, call.action.stage});
    return it == act_.end() ? 0 : it->second;
  }
  Status Check(cudaError_t e, const OpCall& call) {
    if (e == cudaSuccess) return Status::Ok();
    return Status::Internal(fmt::format("stage {} (rank {}) op {}: CUDA error {}",
                                        call.action.stage, call.rank, ActionName(call.action),
                                        CudaText(e)));
  }
  std::vector<StageDevice> dev_;
  std::map<std::pair<int, int>, Bytes> act_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, Held> held_;
  std::vector<TimeNs> busy_ns_;
};

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
    Result<std::vector<StageDevice>> devices = MakeDevices(plan.ranks);
    if (!devices.ok()) return devices.status();
    CudaWork work(*devices);
    std::map<std::pair<int, int>, Bytes> act;
    for (const ExecStage& st : plan.per_rank) {
      for (const ExecOp& op : st.ops) {
        if (op.action.kind == OpKind::kForward) act[{st.rank, op.action.stage}] = op.activation_bytes;
      }
    }
    work.SetActivationBytes(std::move(act));
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
    RuntimeEnv env{&transport, &work, &clock_, raw, true};
    Result<std::vector<StageRun>> runs = RunStages(plan, ranks, options, env);
    std::vector<TimeNs> busy = work.device_busy_ns();
    const int iterations = options.warmup_iterations + options.iterations;
    std::string per;
    for (size_t r = 0; r < busy.size(); ++r) {
      per += fmt::format("{}stage {} {:.3f} ms", r ? ", " : "", r, NsToMs(busy[r] / std::max(iterations, 1)));
    }
    notes_.push_back("device busy time per iteration by CUDA events: " + per);
    return runs;
  }

  std::vector<std::string> Notes() const override { return notes_; }
  const Clock* clock() const override { return &clock_; }

 private:
  Result<std::vector<StageDevice>> MakeDevices(int stages) {
    if (CUresult r = GetDriver()->Init(0); r != CUDA_SUCCESS) return Status::Unavailable("cuInit: " + CuText(r));
    std::vector<StageDevice> out(stages);
    const bool shared = gpus_ < stages;
    for (int g = 0; g < std::min(gpus_, stages); ++g) {
      cudaSetDevice(g);
      cudaFree(nullptr);  // creates the primary context
      CUdevice dev;
      GetDriver()->DeviceGet(&dev, g);
      std::vector<int> mine;
      for (int r = g; r < stages; r += gpus_) mine.push_back(r);
      cudaDeviceProp prop{};
      cudaGetDeviceProperties(&prop, g);
      if (!shared) {
        StageDevice& d = out[mine[0]];
        d.gpu = g;
        GetDriver()->CtxGetCurrent(&d.ctx);
        cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking);
        d.sms = prop.multiProcessorCount;
        continue;
      }
      CUdevResource sm{};
      if (CUresult r = GetDriver()->DeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS) {
        return Status::Unavailable("green contexts unavailable (cuDeviceGetDevResource): " + CuText(r));
      }
      unsigned per = sm.sm.smCount / static_cast<unsigned>(mine.size());
      per = std::max(kMinSmsPerPartition, per / kMinSmsPerPartition * kMinSmsPerPartition);
      std::vector<CUdevResource> groups(mine.size());
      unsigned n = static_cast<unsigned>(mine.size());
      CUdevResource rest{};
      if (CUresult r = GetDriver()->DevSmResourceSplitByCount(groups.data(), &n, &sm, &rest, 0, per);
          r != CUDA_SUCCESS || n < mine.size()) {
        return Status::Unavailable(fmt::format(
            "cannot split GPU {}'s {} SMs into {} partitions of {}: {}", g, sm.sm.smCount,
            mine.size(), per, CuText(r)));
      }
      for (size_t i = 0; i < mine.size(); ++i) {
        StageDevice& d = out[mine[i]];
        d.gpu = g;
        CUdevResourceDesc desc;
        GetDriver()->DevResourceGenerateDesc(&desc, &groups[i], 1);
        CUgreenCtx green;
        if (CUresult r = GetDriver()->GreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
            r != CUDA_SUCCESS) {
          return Status::Unavailable("cuGreenCtxCreate: " + CuText(r));
        }
        GetDriver()->CtxFromGreenCtx(&d.ctx, green);
        CUstream s;
        GetDriver()->GreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0);
        d.stream = reinterpret_cast<cudaStream_t>(s);
        d.sms = static_cast<int>(groups[i].sm.smCount);
      }
      notes_.push_back(fmt::format(
          "backend cuda: {} stages share GPU {} ({}), each on its own green context of {} of its "
          "{} SMs: fewer GPUs ({}) than stages",
          mine.size(), g, prop.name, groups[0].sm.smCount, sm.sm.smCount, gpus_));
    }
    if (!shared) {
      cudaDeviceProp prop{};
      cudaGetDeviceProperties(&prop, 0);
      notes_.push_back(fmt::format("backend cuda: one GPU per stage ({} x {})", stages, prop.name));
    }
    notes_.push_back("messages are staged through host memory (cudaMemcpy); NCCL point-to-point "
                     "is not implemented in this backend; op times are read on the host clock "
                     "after each op's stream finished");
    return out;
  }

  int gpus_;
  SteadyClock clock_;
  std::vector<std::string> notes_;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeCudaBackend(int) {
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
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(n));
}

}  // namespace pipecast::validate
