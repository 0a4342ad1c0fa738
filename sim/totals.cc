#include "sim/totals.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "base/text_table.h"

namespace pipecast {
namespace {

// Bounds are formed in long double: exact enough for a comparison with 2^62,
// and no sum of inputs within their own limits can overflow it.
using Wide = long double;

Wide Opt(const std::optional<int64_t>& v) { return v ? static_cast<Wide>(*v) : 0; }

// The largest factor CostAt scales a measured profile by at this size:
// proportional extrapolation beyond the measured sizes, 1 inside them.
Wide ExtrapolationFactor(const Layer& layer, int microbatch_size) {
  int smallest = layer.profiles.front().microbatch_size;
  for (const LayerProfile& p : layer.profiles) smallest = std::min(smallest, p.microbatch_size);
  return std::max<Wide>(1, static_cast<Wide>(microbatch_size) / std::max(1, smallest));
}

// The slowest finite link in bytes per ns (GB/s); 0 when every link is free.
double SlowestLinkGbps(const Cluster& cluster) {
  double slowest = 0;
  for (const Link* l : {&cluster.intra_node, &cluster.inter_node}) {
    // A collective's or transfer's rate: the line rate at the link's
    // efficiency, or one GPU's share of fewer NICs than GPUs.
    double gbps = l->bandwidth_gbps * l->efficiency;
    if (l == &cluster.inter_node)
      gbps = std::min(gbps, cluster.NetworkGbpsPerGpu() * l->efficiency);
    if (gbps > 0 && (slowest == 0 || gbps < slowest)) slowest = gbps;
  }
  return slowest;
}

Status TooLarge(const std::string& what, Wide value, const char* unit, const std::string& hint) {
  return Status::InvalidArgument(fmt::format(
      "{}, is {:.3g} {}, over the {:.3g} {} (2^62) that pipecast's 64-bit sums hold: {}", what,
      static_cast<double>(value), unit, static_cast<double>(kMaxTotal), unit, hint));
}

}  // namespace

Status CheckTotals(const Model& model, const Cluster& cluster, const TotalsInput& in) {
  Wide compute_ns = 0, output_bytes = 0, live_bytes = 0, parameters = 0;
  for (const Layer& layer : model.layers) {
    if (layer.profiles.empty()) continue;  // the model's own check names it
    const Wide f = ExtrapolationFactor(layer, in.microbatch_size);
    Wide t = 0, out = 0, live = 0;
    for (const LayerProfile& p : layer.profiles) {
      t = std::max(t, 2 * static_cast<Wide>(p.forward_ns) + static_cast<Wide>(p.backward_ns) +
                          Opt(p.attention_core_ns));
      out = std::max(out, static_cast<Wide>(p.output_bytes));
      live = std::max(live, static_cast<Wide>(p.activation_bytes) + p.output_bytes +
                                p.workspace_bytes + Opt(p.checkpoint_bytes) +
                                Opt(p.attention_core_bytes) + Opt(p.weight_grad_bytes));
    }
    compute_ns += t * f;
    output_bytes += out * f;
    live_bytes += live * f;
    parameters += static_cast<Wide>(layer.parameters);
  }
  const Wide m = static_cast<Wide>(std::max<int64_t>(1, in.microbatches));
  const std::string layers = Count(static_cast<int64_t>(model.layers.size()), "layer", "layers");
  const std::string at =
      fmt::format("{} at micro-batch size {}, times {}", layers, in.microbatch_size,
                  Count(in.microbatches, "micro-batch", "micro-batches"));

  const Wide time = compute_ns * m + static_cast<Wide>(in.optimizer_step_ns);
  if (time > kMaxTotal) {
    return TooLarge("forward_us + backward_us summed over the model's " + at, time, "ns",
                    "check that the profiles' times are microseconds, or simulate fewer "
                    "micro-batches (--microbatches)");
  }
  const double gbps = SlowestLinkGbps(cluster);
  const Wide latency_ns = std::max(cluster.intra_node.LatencyNs(), cluster.inter_node.LatencyNs());
  const Wide hops = 2 * m * static_cast<Wide>(model.layers.size());
  const Wide transfer_ns = (gbps > 0 ? 2 * m * output_bytes / gbps : 0) + hops * latency_ns;
  if (transfer_ns > kMaxTotal) {
    return TooLarge(fmt::format("output_bytes summed over the model's {}, sent over the {:g} GB/s "
                                "link, plus its latency_us",
                                at, gbps),
                    transfer_ns, "ns",
                    "check the cluster's bandwidth_gbps (gigabytes per second) and latency_us, "
                    "and the profiles' output_bytes");
  }
  const MemoryConfig& mem = in.memory;
  const Wide per_param = mem.weight_bytes_per_param + mem.gradient_bytes_per_param +
                         mem.optimizer_bytes_per_param + mem.gradient_copy_bytes_per_param;
  if (gbps > 0 && 2 * parameters * per_param / gbps > kMaxTotal) {
    return TooLarge(fmt::format("the gradient all-reduce of the model's {:.3g} parameters over "
                                "the {:g} GB/s link",
                                static_cast<double>(parameters), gbps),
                    2 * parameters * per_param / gbps, "ns",
                    "check the layers' parameters and the cluster's bandwidth_gbps");
  }
  if (live_bytes * m > kMaxTotal) {
    return TooLarge(
        "activation_bytes + output_bytes + workspace_bytes (and the other memory "
        "fields) summed over the model's " +
            at,
        live_bytes * m, "bytes",
        "check that the profiles' sizes are bytes, or simulate fewer micro-batches");
  }
  const Wide static_bytes = parameters * per_param * std::max(1, in.stages);
  if (static_bytes > kMaxTotal) {
    return TooLarge(
        fmt::format("parameters summed over the model's {} ({:.3g}) times {:g} bytes "
                    "per parameter, times {} (weight versions)",
                    layers, static_cast<double>(parameters), static_cast<double>(per_param),
                    Count(in.stages, "stage", "stages")),
        static_bytes, "bytes", "check the layers' parameters (a count, not bytes)");
  }
  return Status::Ok();
}

}  // namespace pipecast
