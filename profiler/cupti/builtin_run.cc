// `profiler builtin` with CUDA: one run of pipecast_block_runner per
// micro-batch size and tensor-parallel degree under the injection library
// (the `profiler cupti` path), then one model with a profile per size and
// degree (t > 1: one GPU's shard, with its collectives stated).
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "profiler/cupti/injection_runner.h"
#include "profiler/cupti_model.h"
#include "profiler/cupti_profile.h"

namespace pipecast {

namespace {

// The block runner's command line for one micro-batch size b at degree t.
std::vector<std::string> RunnerArgs(const std::string& runner, const BuiltinOptions& options, int t,
                                    int b) {
  const BlockShape& s = options.shape;
  const int steps = options.aggregate.warmup + options.aggregate.iterations;
  return {runner,
          "--hidden",
          std::to_string(s.hidden),
          "--heads",
          std::to_string(s.heads),
          "--ffn",
          std::to_string(s.Ffn()),
          "--seq",
          std::to_string(s.seq),
          "--layers",
          std::to_string(s.layers),
          "--tensor-parallel",
          std::to_string(t),
          "--microbatch",
          std::to_string(b),
          "--steps",
          std::to_string(steps),
          "--device",
          std::to_string(options.device)};
}

// One run of the block runner per micro-batch size at degree t, measured.
Result<std::vector<CuptiMeasurement>> MeasureAt(const BuiltinOptions& options,
                                                const std::string& runner, int t,
                                                std::string* report) {
  std::vector<CuptiMeasurement> at_t;
  for (int b : options.microbatch_sizes) {
    InjectionRun run;
    run.argv = RunnerArgs(runner, options, t, b);
    const std::string what = fmt::format("tensor_parallel {}, micro-batch size {}", t, b);
    Result<std::vector<ActivityTrace>> traces = RunInjected(run);
    if (!traces.ok()) return traces.status().WithPrefix(what);
    Result<CuptiMeasurement> m = MeasureTraces(*traces, b, options.aggregate);
    if (!m.ok()) return m.status().WithPrefix(what);
    if (report != nullptr) *report += (t > 1 ? what + ":\n" : "") + DescribeMeasurement(*m);
    at_t.push_back(std::move(*m));
  }
  return at_t;
}

// What the built-in block runs, and (several degrees) how its shards are cut.
nlohmann::ordered_json Workload(const BuiltinOptions& options) {
  const BlockShape& s = options.shape;
  nlohmann::ordered_json workload = {
      {"kind", "pipecast built-in pre-layernorm GPT block (profiler/cupti/builtin_block.h)"},
      {"hidden", s.hidden},
      {"heads", s.heads},
      {"ffn", s.Ffn()},
      {"seq", s.seq},
      {"layers", s.layers},
      {"dtype", "bf16, fp32 accumulation"},
      {"passes",
       "forward, input gradient (backward ranges), weight gradient (weight_grad "
       "ranges) run separately; activations are cudaMalloc'd per pass"}};
  const std::vector<int> degrees = options.Degrees();
  if (degrees.size() > 1) {
    workload["tensor_parallel"] = {
        {"degrees", degrees},
        {"rule",
         "each t > 1 profile is one GPU's shard of a Megatron-LM block measured alone: QKV and "
         "fc1 column-parallel (heads / t, ffn / t), the attention projection and fc2 "
         "row-parallel, layernorms and the [T, h] residual stream whole; the shard runs no "
         "collective (one GPU), so tp_comm_bytes (b*s*h*2) x 2 forward and 2 backward "
         "all-reduces are stated, not measured"}};
  }
  return workload;
}

}  // namespace

Result<Model> ProfileBuiltin(const BuiltinOptions& options, std::string* report) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(CheckCudaDevice());
  const char* env = std::getenv("PIPECAST_BLOCK_RUNNER");
  const std::string runner = env != nullptr && *env ? env : PIPECAST_BLOCK_RUNNER_PATH;
  const BlockShape& s = options.shape;
  // One run per micro-batch size at each degree t; t = 1 first. The t = 1 runs make the
  // model; each t > 1 makes a model whose profiles join it.
  std::vector<std::pair<int, Model>> shards;
  std::vector<CuptiMeasurement> measurements;
  for (int t : options.Degrees()) {
    PIPECAST_ASSIGN_OR_RETURN(std::vector<CuptiMeasurement> at_t,
                              MeasureAt(options, runner, t, report));
    if (t == 1) {
      measurements = std::move(at_t);
      continue;
    }
    Result<Model> at = BuildCuptiModel(options.name, at_t, options.aggregate, {});
    if (!at.ok()) return at.status().WithPrefix(fmt::format("tensor_parallel {}", t));
    shards.emplace_back(t, std::move(*at));
  }
  PIPECAST_ASSIGN_OR_RETURN(Model model,
                            BuildCuptiModel(options.name, measurements, options.aggregate,
                                            {{"workload", Workload(options).dump()}}));
  const ShardCollectives collectives{.comm_bytes_per_sample = s.HiddenBytes(1),
                                     .forward_collectives = 2,
                                     .backward_collectives = 2};
  for (const auto& [t, at] : shards) {
    PIPECAST_RETURN_IF_ERROR(AddTensorParallelProfiles(&model, at, t, collectives));
  }
  model.dtype = "bf16";
  model.sequence_length = s.seq;
  const double h = s.hidden, f = s.Ffn(), sq = s.seq;
  // Forward FLOPs per sample: the four weight products 2s(4h^2 + 2hf) plus
  // the attention products 4s^2h (full s x s, as Narayanan et al. count).
  const double flops = 2 * sq * (4 * h * h + 2 * h * f) + 4 * sq * sq * h;
  for (Layer& layer : model.layers) layer.forward_flops = flops;
  return model;
}

}  // namespace pipecast
