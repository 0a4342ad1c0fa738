// Model: the per-layer costs of one model, as read from model.json
// (`pipecast-model/1`, see docs/formats.md).
//
// A layer carries one profile per measured micro-batch size. CostAt() answers
// for any micro-batch size: measured sizes exactly, others interpolated
// piecewise-linearly between the two nearest measured sizes, or scaled in
// proportion to the nearest measured size outside the measured range; the
// result says which, so tools can tell the user the number is not measured.
//
// Units: time in ns, sizes in bytes. Plain value types; not synchronised.
#ifndef PIPECAST_SIM_MODEL_H_
#define PIPECAST_SIM_MODEL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"

namespace pipecast {

// One measurement of one layer at one micro-batch size.
struct LayerProfile {
  int microbatch_size = 0;
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;  // the whole backward (input + weight gradient)
  // Weight-gradient part of backward_ns; absent when not measured.
  std::optional<TimeNs> backward_weight_ns;
  Bytes activation_bytes = 0;  // kept alive from forward until backward
  Bytes output_bytes = 0;      // sent to the next stage
  Bytes workspace_bytes = 0;   // transient, only while an op runs
  // Memory by recomputation granularity and split backward (docs/formats.md);
  // each absent when the profiler did not give it.
  // What full recomputation keeps from forward to backward (the layer's
  // checkpoint: its input for a transformer block).
  std::optional<Bytes> checkpoint_bytes;
  // What selective recomputation drops from activation_bytes (eager
  // attention's s x s tensors, 5as^2b in Korthikanti et al.; 0 with flash).
  std::optional<Bytes> attention_core_bytes;
  // Forward time of that attention core: what selective recomputation reruns.
  std::optional<TimeNs> attention_core_ns;
  // What the weight-gradient op (W) keeps after the input-gradient op (I):
  // the inputs of the layer's weight products and their output gradients.
  std::optional<Bytes> weight_grad_bytes;
};

struct Layer {
  std::string name;
  int64_t parameters = 0;
  std::optional<double> forward_flops;  // per sample
  std::vector<LayerProfile> profiles;   // sorted by microbatch_size, unique
};

// Where the numbers came from: `source` in model.json. `method` is one of
// cupti, cpu, analytic, manual; `details` keeps every other key verbatim
// (as JSON text) so writers can round-trip it.
struct ModelSource {
  std::string method = "manual";
  std::string device;
  std::map<std::string, std::string> details;  // key -> JSON text of value
};

// Keys of `details` that tools read back (docs/formats.md):
// the cluster preset of the GPU a profile was measured on ("h200"), when
// `device` is the driver's name of it ("NVIDIA H200");
inline constexpr char kGpuPresetKey[] = "gpu_preset";
// the GPU memory measured when the CUDA context was created: an object
// {"device", "usable_bytes", "cuda_context_bytes", "method"}.
inline constexpr char kMeasuredMemoryKey[] = "measured_memory";

struct Model {
  std::string name;
  ModelSource source;
  std::string dtype;                       // optional, e.g. "bf16"
  std::optional<int> sequence_length;      // enables tokens/s
  std::optional<double> flops_per_sample;  // enables TFLOP/s and MFU
  std::optional<int> global_batch;         // default for the planner
  std::vector<Layer> layers;

  int64_t TotalParameters() const;
  // Forward FLOPs of one sample: flops_per_sample, else the sum of the
  // layers' forward_flops when every layer has one, else nullopt.
  std::optional<double> ForwardFlopsPerSample() const;
};

enum class CostOrigin {
  kMeasured,      // the size was measured
  kInterpolated,  // linear between two measured sizes
  kExtrapolated,  // proportional to the nearest measured size
};
const char* CostOriginName(CostOrigin origin);

// The cost of one layer at one micro-batch size.
struct LayerCost {
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;
  TimeNs backward_weight_ns = 0;  // 0 when the model has no split
  bool has_backward_split = false;
  Bytes activation_bytes = 0;
  Bytes output_bytes = 0;
  Bytes workspace_bytes = 0;
  // LayerProfile's optional memory fields at this size; absent when a
  // profile used lacks them.
  std::optional<Bytes> checkpoint_bytes;
  std::optional<Bytes> attention_core_bytes;
  std::optional<TimeNs> attention_core_ns;
  std::optional<Bytes> weight_grad_bytes;
  CostOrigin origin = CostOrigin::kMeasured;
};

// REQUIRES: layer.profiles non-empty and sorted; microbatch_size >= 1.
LayerCost CostAt(const Layer& layer, int microbatch_size);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MODEL_H_
