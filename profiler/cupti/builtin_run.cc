// `profiler builtin` with CUDA: one run of pipecast_block_runner per
// micro-batch size under the injection library (the `profiler cupti` path),
// then one model with a profile per size.
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "profiler/cupti/injection_runner.h"
#include "profiler/cupti_model.h"
#include "profiler/cupti_profile.h"

namespace pipecast {

Result<Model> ProfileBuiltin(const BuiltinOptions& options, std::string* report) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(CheckCudaDevice());
  const char* env = std::getenv("PIPECAST_BLOCK_RUNNER");
  const std::string runner = env != nullptr && *env ? env : PIPECAST_BLOCK_RUNNER_PATH;
  const BlockShape& s = options.shape;
  const int steps = options.aggregate.warmup + options.aggregate.iterations;
  std::vector<CuptiMeasurement> measurements;
  for (int b : options.microbatch_sizes) {
    InjectionRun run;
    run.argv = {runner,
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
                "--microbatch",
                std::to_string(b),
                "--steps",
                std::to_string(steps),
                "--device",
                std::to_string(options.device)};
    Result<std::vector<ActivityTrace>> traces = RunInjected(run);
    if (!traces.ok()) return traces.status().WithPrefix(fmt::format("micro-batch size {}", b));
    Result<CuptiMeasurement> m = MeasureTraces(*traces, b, options.aggregate);
    if (!m.ok()) return m.status().WithPrefix(fmt::format("micro-batch size {}", b));
    if (report != nullptr) *report += DescribeMeasurement(*m);
    measurements.push_back(std::move(*m));
  }
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
  Result<Model> model = BuildCuptiModel(options.name, measurements, options.aggregate,
                                        {{"workload", workload.dump()}});
  if (!model.ok()) return model.status();
  model->dtype = "bf16";
  model->sequence_length = s.seq;
  const double h = s.hidden, f = s.Ffn(), sq = s.seq;
  // Forward FLOPs per sample: the four weight products 2s(4h^2 + 2hf) plus
  // the attention products 4s^2h (full s x s, as Narayanan et al. count).
  const double flops = 2 * sq * (4 * h * h + 2 * h * f) + 4 * sq * sq * h;
  for (Layer& layer : model->layers) layer.forward_flops = flops;
  return model;
}

}  // namespace pipecast
