#include "profiler/cpu/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

namespace pipecast::cpu {
namespace {

using json = nlohmann::json;

constexpr int kMaxMicrobatchSize = 4096;
constexpr int kMaxWarmup = 10000;
constexpr int kMaxIterations = 100000;
// Largest tensor-parallel degree measured: a node's GPUs and more.
constexpr int kMaxTensorParallel = 64;
// Largest bytes one layer may hold while measured (activations, the kept
// output gradient and the transient): keeps a typo from swapping the machine.
constexpr Bytes kMaxLayerBytes = 8 * kGiB;

std::string JsonText(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status CheckRange(const char* flag, std::int64_t value, std::int64_t min, std::int64_t max,
                  const char* about) {
  if (value < min || value > max) {
    return Status::InvalidArgument(
        fmt::format("{} {} is out of range: use {} to {} ({})", flag, value, min, max, about));
  }
  return Status::Ok();
}

// Linear interpolation between order statistics of sorted values at q in [0, 1].
double Quantile(const std::vector<TimeNs>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<double>(sorted[lo]) * (1 - frac) + static_cast<double>(sorted[hi]) * frac;
}

// The measurements of one layer at one micro-batch size, gathered over the
// rounds, with the buffers its passes read and write.
struct Probe {
  int layer = 0;
  int microbatch_size = 0;
  int tensor_parallel = 1;
  std::size_t block = 0;  // index into the measured blocks (whole ones, then shards)
  std::vector<float> x, y, dy, dx;
  std::vector<TimeNs> forward, input, weight, total;
  Bytes activation = -1;
  Bytes weight_grad = -1;  // what the input gradient left for the weight gradient
  Bytes workspace = 0;
};

Probe MakeProbe(const Block& block, std::size_t index, int layer, int t, int microbatch_size) {
  Probe p;
  p.layer = layer;
  p.microbatch_size = microbatch_size;
  p.tensor_parallel = t;
  p.block = index;
  const std::size_t floats =
      static_cast<std::size_t>(block.Tokens(microbatch_size)) * block.shape().hidden;
  // Inputs are the same every iteration: a fixed pattern in [-1, 1].
  p.x.resize(floats);
  p.dy.resize(floats);
  p.y.resize(floats);
  p.dx.resize(floats);
  for (std::size_t i = 0; i < floats; ++i) {
    p.x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    p.dy[i] = static_cast<float>(std::cos(0.53 * static_cast<double>(i))) * 1e-2f;
  }
  return p;
}

// One forward, input gradient and weight gradient; their times are kept
// when `timed`. Internal when the counted bytes disagree with the workload.
Status MeasureOnce(Block& block, Probe& p, bool timed, const Clock& clock) {
  const Bytes before = LiveWorkloadBytes();
  ResetPeakWorkloadBytes();
  const TimeNs t0 = clock.NowNs();
  Saved saved = block.Forward(p.x, p.y, p.microbatch_size);
  const TimeNs t1 = clock.NowNs();
  const Bytes kept = LiveWorkloadBytes() - before;
  block.BackwardInput(saved, p.dy, p.dx);
  const TimeNs t2 = clock.NowNs();
  const Bytes for_weight = LiveWorkloadBytes() - before;
  block.BackwardWeight(saved);
  const TimeNs t3 = clock.NowNs();
  const Bytes peak = PeakWorkloadBytes() - before;
  if (kept != block.ActivationBytes(p.microbatch_size) ||
      (p.activation >= 0 && kept != p.activation)) {
    return Status::Internal(fmt::format(
        "block{} at micro-batch {}: the forward kept {} bytes, expected {} (a bug in the CPU "
        "workload's accounting)",
        p.layer, p.microbatch_size, kept, block.ActivationBytes(p.microbatch_size)));
  }
  p.activation = kept;
  p.weight_grad = std::max(p.weight_grad, for_weight);
  p.workspace = std::max(p.workspace, peak - kept);
  if (!timed) return Status::Ok();
  p.forward.push_back(t1 - t0);
  p.input.push_back(t2 - t1);
  p.weight.push_back(t3 - t2);
  p.total.push_back(t3 - t0);
  return Status::Ok();
}

LayerProfile Summarise(const Block& block, const Probe& p) {
  LayerProfile lp;
  lp.microbatch_size = p.microbatch_size;
  // A pass shorter than the clock's resolution still costs something: 1 ns.
  lp.forward_ns = std::max<TimeNs>(1, Median(p.forward));
  const TimeNs input_ns = std::max<TimeNs>(1, Median(p.input));
  lp.backward_weight_ns = std::max<TimeNs>(1, Median(p.weight));
  lp.backward_ns = input_ns + *lp.backward_weight_ns;
  lp.activation_bytes = p.activation;
  lp.output_bytes = block.OutputBytes(p.microbatch_size);
  lp.workspace_bytes = p.workspace;
  // The layer input x [T x H]: what a checkpoint of this layer would keep
  // (the workload does not recompute, so this is its size, not a measurement).
  lp.checkpoint_bytes = block.OutputBytes(p.microbatch_size);
  lp.attention_core_bytes = 0;  // an MLP: no attention
  lp.weight_grad_bytes = p.weight_grad;
  if (p.tensor_parallel > 1) {
    // One worker of the split: its all-reduces sum the whole output (x's
    // size), one after the forward's second product and one after the
    // input gradient's (workload.h).
    lp.tensor_parallel = p.tensor_parallel;
    lp.tp_comm_bytes = block.OutputBytes(p.microbatch_size);
    lp.tp_forward_collectives = 1;
    lp.tp_backward_collectives = 1;
  }
  return lp;
}

ModelSource MakeSource(const CpuProfileOptions& options, const Clock& clock, const json& spread) {
  ModelSource source;
  source.method = "cpu";
  source.device = options.device.empty() ? CpuModelName() : options.device;
  source.details["clock"] = JsonText(clock.Name());
  source.details["warmup"] = JsonText(options.warmup);
  source.details["iterations"] = JsonText(options.iterations);
  source.details["statistic"] = JsonText(
      "per layer and micro-batch size: median over the timed iterations of the forward, the "
      "input-gradient and the weight-gradient pass, each timed alone; backward_us = median "
      "input gradient + median weight gradient (backward_weight_us); each round measures every "
      "layer at every size once, so all see the same stretch of the machine's load");
  source.details["limitations"] = JsonText(json::array(
      {"wall-clock times of one thread on this machine: other processes and the hypervisor "
       "show up in them (see spread); rerun on a quiet machine for stable numbers",
       "no optimizer step and no communication in the per-layer times",
       "every pass allocates its buffers afresh (no caching allocator)"}));
  source.details["memory"] = JsonText(
      "activation_bytes: bytes the forward allocated and kept for the backward, as counted by "
      "the workload's allocator; workspace_bytes: the most a backward pass allocated beyond "
      "them while it ran (the input gradient's da and the kept copy of dy); weight_grad_bytes: "
      "bytes still allocated after the input-gradient pass, which the weight-gradient pass "
      "needs (x, gelu(a), da and the copy of dy), as counted by the allocator; "
      "checkpoint_bytes: the size of the layer input x (4*T*H), not measured (the workload "
      "does not recompute); attention_core_bytes 0 (MLP blocks have no attention); weights "
      "and weight gradients are not counted");
  source.details["threads"] = JsonText("1 (every pass runs single-threaded on the caller)");
  source.details["cpu_cores"] = JsonText(std::thread::hardware_concurrency());
  if (options.tensor_parallel.size() > 1) {
    source.details["tensor_parallel"] = JsonText(
        {{"degrees", options.tensor_parallel},
         {"method",
          "profiles with tensor_parallel t > 1 time worker 0's shard of a t-way Megatron split "
          "(W1's columns and W2's rows F/t at a time), alone on one thread, without its "
          "all-reduces: tp_comm_bytes (4*T*H, the whole output) x 1 forward and 1 backward "
          "all-reduce give the communication"}});
  }
  source.details["spread"] = JsonText(spread);
  source.details[kWorkloadSourceKey] = WorkloadToSourceJson(options.workload);
  if (!options.note.empty()) source.details["note"] = JsonText(options.note);
  return source;
}

// --experts and --top-k: a dense workload, or E experts with top-k routing whose hash router
// gives every expert the same tokens.
Status CheckExperts(const BlockShape& shape) {
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--experts", shape.experts, 0, kMaxExperts, "experts a block, 0 = dense"));
  if (shape.experts > 0) {
    PIPECAST_RETURN_IF_ERROR(CheckRange("--top-k", shape.top_k, 1, shape.experts,
                                        "experts each token goes to, at most --experts"));
  } else if (shape.top_k != 0) {
    return Status::InvalidArgument(fmt::format(
        "--top-k {} without --experts: give --experts E for an MoE workload", shape.top_k));
  }
  if (shape.experts > 0 && shape.tokens_per_sample % ExpertRoutes(shape) != 0) {
    return Status::InvalidArgument(fmt::format(
        "--tokens-per-sample {} is not a multiple of C(--experts {}, --top-k {}) = {}: the hash "
        "router sends token i to the (i mod C)-th set of experts, so every expert gets the same "
        "tokens only when C divides the tokens; use a multiple of {}",
        shape.tokens_per_sample, shape.experts, shape.top_k, ExpertRoutes(shape),
        ExpertRoutes(shape)));
  }
  return Status::Ok();
}

}  // namespace

Status CpuProfileOptions::Validate() const {
  if (name.empty()) return Status::InvalidArgument("--name is empty: give the model a name");
  const WorkloadSpec& w = workload;
  PIPECAST_RETURN_IF_ERROR(CheckRange("--layers", w.LayerCount(), 1, 100000, "MLP blocks"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--hidden", w.shape.hidden, 1, kMaxWidth, "model width"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--ffn", w.shape.ffn, 1, kMaxWidth, "MLP width"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--tokens-per-sample", w.shape.tokens_per_sample, 1,
                                      kMaxWidth, "rows of x per sample"));
  PIPECAST_RETURN_IF_ERROR(CheckExperts(w.shape));
  for (int i = 0; i < static_cast<int>(w.per_layer.size()); ++i) {
    const BlockShape& s = w.per_layer[static_cast<std::size_t>(i)];
    if (s.ffn < 1 || s.ffn > kMaxWidth) {
      return Status::InvalidArgument(fmt::format(
          "--layer-ffn {}:{} is out of range: use an MLP width of 1 to {}", i, s.ffn, kMaxWidth));
    }
  }
  PIPECAST_RETURN_IF_ERROR(w.Validate());
  if (microbatch_sizes.empty()) {
    return Status::InvalidArgument("--microbatch-sizes is empty: give at least one size");
  }
  std::set<int> seen;
  for (int size : microbatch_sizes) {
    PIPECAST_RETURN_IF_ERROR(
        CheckRange("--microbatch-sizes", size, 1, kMaxMicrobatchSize, "samples per micro-batch"));
    if (!seen.insert(size).second) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes lists {} twice: give each size once", size));
    }
  }
  if (global_batch.has_value()) {
    PIPECAST_RETURN_IF_ERROR(
        CheckRange("--global-batch", *global_batch, 1, 1 << 24, "samples per iteration"));
  }
  PIPECAST_RETURN_IF_ERROR(CheckRange("--warmup", warmup, 0, kMaxWarmup, "untimed iterations"));
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--iterations", iterations, 1, kMaxIterations, "timed iterations"));
  std::set<int> degrees;
  for (int t : tensor_parallel) {
    if (t > 1 && w.shape.experts > 0) {
      return Status::InvalidArgument(fmt::format(
          "--tensor-parallel {} with --experts: MoE blocks are measured whole (t = 1); their "
          "experts split over an expert-parallel group instead (--expert-parallel in the planner)",
          t));
    }
    PIPECAST_RETURN_IF_ERROR(
        CheckRange("--tensor-parallel", t, 1, kMaxTensorParallel, "workers a block splits over"));
    if (!degrees.insert(t).second) {
      return Status::InvalidArgument(
          fmt::format("--tensor-parallel lists {} twice: give each degree once", t));
    }
    for (int i = 0; i < w.LayerCount(); ++i) {
      if (w.LayerShape(i).ffn % t != 0) {
        return Status::InvalidArgument(
            fmt::format("--tensor-parallel {}: layer {}'s ffn {} does not divide into {} shards; "
                        "give degrees that divide every layer's --ffn",
                        t, i, w.LayerShape(i).ffn, t));
      }
    }
  }
  if (degrees.count(1) == 0) {
    return Status::InvalidArgument(
        "--tensor-parallel must include 1: the whole block's profiles are the model's base");
  }
  const int largest = *seen.rbegin();
  for (int i = 0; i < w.LayerCount(); ++i) {
    const BlockShape s = w.LayerShape(i);
    const Bytes bytes = 4 * std::int64_t{largest} * s.RowsPerSample() *
                        (2 * std::int64_t{s.hidden} + 3 * std::int64_t{s.ffn});
    if (bytes > kMaxLayerBytes) {
      return Status::InvalidArgument(fmt::format(
          "layer {} at micro-batch {} would allocate {:.1f} GiB while measured, over the {} GiB "
          "allowed: use smaller --microbatch-sizes or widths",
          i, largest, ToGiB(bytes), kMaxLayerBytes / kGiB));
    }
  }
  return Status::Ok();
}

TimeNs Median(std::vector<TimeNs> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double RelativeSpread(std::vector<TimeNs> values) {
  if (values.size() < 2) return 0;
  std::sort(values.begin(), values.end());
  const double median = Quantile(values, 0.5);
  if (median <= 0) return 0;
  return (Quantile(values, 0.75) - Quantile(values, 0.25)) / median;
}

Result<CpuProfile> ProfileCpu(const CpuProfileOptions& options, const Clock& clock) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  std::vector<int> sizes = options.microbatch_sizes;
  std::sort(sizes.begin(), sizes.end());
  CpuProfile result;
  Model& model = result.model;
  model.name = options.name;
  model.dtype = "fp32";
  model.sequence_length = options.workload.shape.tokens_per_sample;
  model.global_batch = options.global_batch;
  std::vector<int> degrees = options.tensor_parallel;
  std::sort(degrees.begin(), degrees.end());
  const std::vector<Block> whole = options.workload.Build();
  // Every block measured: per layer, the whole block (t = 1) and worker 0's
  // shard at each t > 1, built before the probes refer to them by index.
  std::vector<Block> blocks;
  std::vector<std::pair<int, int>> layer_and_t;
  for (int i = 0; i < static_cast<int>(whole.size()); ++i) {
    for (int t : degrees) {
      Result<Block> b = whole[static_cast<std::size_t>(i)].Shard(t, 0);
      if (!b.ok()) return b.status().WithPrefix(fmt::format("layer {}", i));
      blocks.push_back(std::move(*b));
      layer_and_t.emplace_back(i, t);
    }
  }
  std::vector<Probe> probes;  // layer-major, then degree, then size
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    for (int size : sizes) {
      probes.push_back(MakeProbe(blocks[k], k, layer_and_t[k].first, layer_and_t[k].second, size));
    }
  }
  // Round-robin: each round runs every layer at every size once, so that all
  // of them sample the same stretch of a shared machine's load, instead of
  // one layer meeting a quiet minute and the next a busy one.
  for (int round = 0; round < options.warmup + options.iterations; ++round) {
    for (Probe& p : probes) {
      PIPECAST_RETURN_IF_ERROR(MeasureOnce(blocks[p.block], p, round >= options.warmup, clock));
    }
  }
  json per_layer = json::array();
  for (int i = 0; i < static_cast<int>(whole.size()); ++i) {
    const Block& block = whole[static_cast<std::size_t>(i)];
    Layer layer;
    layer.name = fmt::format("block{}", i);
    layer.parameters = block.Parameters();
    // Two products of 2*H*F FLOPs per token (per token and expert for MoE) in the forward.
    layer.forward_flops = 2.0 * static_cast<double>(block.MultiplyAdds(1));
    if (block.shape().moe()) {
      // What expert parallelism needs (sim/model.h): every parameter is an
      // expert's (the hash router has none); tokens travel as float32.
      layer.moe = MoeRouting{.experts = block.shape().experts,
                             .top_k = block.shape().top_k,
                             .hidden = block.shape().hidden,
                             .expert_parameters = block.Parameters(),
                             .bytes_per_element = 4};
    }
    json spreads = json::object();
    for (const Probe& p : probes) {
      if (p.layer != i) continue;
      layer.profiles.push_back(Summarise(blocks[p.block], p));
      if (p.tensor_parallel > 1) continue;  // the spread describes the whole blocks
      const double spread = RelativeSpread(p.total);
      spreads[std::to_string(p.microbatch_size)] = std::round(spread * 1e4) / 1e4;
      if (spread >= result.worst_spread) {
        result.worst_spread = spread;
        result.worst_spread_at = fmt::format("{} at micro-batch {}", layer.name, p.microbatch_size);
      }
    }
    per_layer.push_back({{"layer", layer.name}, {"by_microbatch_size", std::move(spreads)}});
    model.layers.push_back(std::move(layer));
  }
  const json spread = {
      {"definition",
       "(75th percentile - 25th percentile) / median of forward + backward per timed iteration"},
      {"worst", std::round(result.worst_spread * 1e4) / 1e4},
      {"worst_at", result.worst_spread_at},
      {"per_layer", std::move(per_layer)}};
  model.source = MakeSource(options, clock, spread);
  return result;
}

std::string CpuModelName(const std::string& cpuinfo_path) {
  std::ifstream in(cpuinfo_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    const std::size_t start = name.find_first_not_of(" \t");
    const std::size_t end = name.find_last_not_of(" \t\r");
    if (start == std::string::npos) continue;
    return name.substr(start, end - start + 1);
  }
  return "unknown CPU";
}

}  // namespace pipecast::cpu
