// pipecast_block_runner: runs the built-in transformer block (one chain of
// --layers blocks) for --steps training steps with NVTX ranges named by the
// profiler's convention (docs/profiler.md). `profiler builtin` runs it
// under the CUPTI injection library, exactly as `profiler cupti` runs a
// user's program; run by hand it is a plain CUDA benchmark.
//
// Each step (pipecast:step): forward of every block in order
// (pipecast:block.<i>:forward:params=P:out=B:ckpt=B:wgrad=W), then per block in reverse
// order its input gradient (…:backward) and its weight gradient
// (…:weight_grad). Prints the mean CUDA-event time of a step to stderr.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "profiler/cupti/builtin_block.h"

namespace pipecast {
namespace {

struct Flags {
  BlockShape shape;
  int microbatch = 1;
  int steps = 12;
  int device = 0;
};

Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Unavailable(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

// Pushes an NVTX range for the life of the object.
class Range {
 public:
  explicit Range(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~Range() { nvtxRangePop(); }
};

Status Run(const Flags& f) {
  PIPECAST_RETURN_IF_ERROR(Check(cudaSetDevice(f.device), "cudaSetDevice"));
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  for (int i = 0; i < f.shape.layers; ++i) {
    PIPECAST_ASSIGN_OR_RETURN(std::unique_ptr<TransformerBlock> block,
                              TransformerBlock::Create(f.shape, 1000 + i));
    blocks.push_back(std::move(block));
  }
  const int64_t bytes = blocks.front()->HiddenBytes(f.microbatch);
  const int n = f.shape.layers;
  // Hidden states h[0..n] and their gradients, allocated once outside the ranges.
  std::vector<void*> hs(n + 1), grads(n + 1);
  for (int i = 0; i <= n; ++i) {
    PIPECAST_RETURN_IF_ERROR(Check(cudaMalloc(&hs[i], bytes), "cudaMalloc hidden state"));
    PIPECAST_RETURN_IF_ERROR(Check(cudaMalloc(&grads[i], bytes), "cudaMalloc gradient"));
  }
  PIPECAST_RETURN_IF_ERROR(FillDeviceBf16(hs[0], bytes, 1.f, 1));
  PIPECAST_RETURN_IF_ERROR(FillDeviceBf16(grads[n], bytes, 0.01f, 2));
  cudaEvent_t begin, end;
  PIPECAST_RETURN_IF_ERROR(Check(cudaEventCreate(&begin), "cudaEventCreate"));
  PIPECAST_RETURN_IF_ERROR(Check(cudaEventCreate(&end), "cudaEventCreate"));
  double total_ms = 0;
  for (int step = 0; step < f.steps; ++step) {
    PIPECAST_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    PIPECAST_RETURN_IF_ERROR(Check(cudaEventRecord(begin), "cudaEventRecord"));
    {
      Range step_range("pipecast:step");
      for (int i = 0; i < n; ++i) {
        // ckpt: full recomputation keeps the block's input (one hidden
        // state); wgrad: what the weight gradient needs after the input
        // gradient (builtin_block.h). Both declared, not measured.
        Range r(fmt::format("pipecast:block.{}:forward:params={}:out={}:ckpt={}:wgrad={}", i,
                            blocks[i]->Parameters(), bytes, bytes,
                            blocks[i]->WeightGradBytes(f.microbatch)));
        PIPECAST_RETURN_IF_ERROR(blocks[i]->Forward(hs[i], hs[i + 1], f.microbatch));
      }
      for (int i = n - 1; i >= 0; --i) {
        {
          Range r(fmt::format("pipecast:block.{}:backward", i));
          PIPECAST_RETURN_IF_ERROR(blocks[i]->BackwardInput(grads[i + 1], grads[i]));
        }
        Range r(fmt::format("pipecast:block.{}:weight_grad", i));
        PIPECAST_RETURN_IF_ERROR(blocks[i]->BackwardWeight());
      }
      PIPECAST_RETURN_IF_ERROR(Check(cudaEventRecord(end), "cudaEventRecord"));
      PIPECAST_RETURN_IF_ERROR(Check(cudaEventSynchronize(end), "cudaEventSynchronize"));
    }
    float ms = 0;
    PIPECAST_RETURN_IF_ERROR(Check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime"));
    total_ms += ms;
  }
  fmt::print(stderr, "pipecast_block_runner: {} steps, mean step {:.1f} us (CUDA events)\n",
             f.steps, 1000.0 * total_ms / f.steps);
  blocks.clear();
  for (int i = 0; i <= n; ++i) {
    cudaFree(hs[i]);
    cudaFree(grads[i]);
  }
  return Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::Flags f;
  CLI::App app{"pipecast_block_runner: run the built-in CUDA transformer block with NVTX ranges"};
  app.add_option("--hidden", f.shape.hidden)->capture_default_str();
  app.add_option("--heads", f.shape.heads)->capture_default_str();
  app.add_option("--ffn", f.shape.ffn)->capture_default_str();
  app.add_option("--seq", f.shape.seq)->capture_default_str();
  app.add_option("--layers", f.shape.layers)->capture_default_str();
  // One GPU's shard of a Megatron-LM block at t (builtin_block.h); params= stays the whole
  // block's count, as model.json's layer parameters are (docs/formats.md).
  app.add_option("--tensor-parallel", f.shape.tensor_parallel)->capture_default_str();
  app.add_option("--microbatch", f.microbatch)->capture_default_str();
  app.add_option("--steps", f.steps)->capture_default_str();
  app.add_option("--device", f.device)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (pipecast::Status st = f.shape.Validate(); !st.ok()) {
    fmt::print(stderr, "pipecast_block_runner: error: {}\n", st.message());
    return 1;
  }
  if (f.microbatch < 1 || f.steps < 1) {
    fmt::print(stderr, "pipecast_block_runner: error: --microbatch and --steps must be >= 1\n");
    return 1;
  }
  pipecast::Status st = pipecast::Run(f);
  if (!st.ok()) {
    fmt::print(stderr, "pipecast_block_runner: error: {}\n", st.message());
    return 1;
  }
  return 0;
}
