#include "profiler/aggregate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace pipecast {
namespace {

using json = nlohmann::ordered_json;

double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// Per layer: values of each quantity over the samples used.
struct Collected {
  std::optional<int64_t> parameters;
  std::optional<int64_t> output_bytes;
  std::optional<int64_t> checkpoint_bytes;
  std::optional<int64_t> weight_grad_bytes;
  std::vector<double> forward, backward, weight_grad, kept;
  std::vector<double> transient[3];  // per pass: peak above kept
  uint64_t first_forward = UINT64_MAX;
  size_t first_seen = 0;
};

TimeNs RoundNs(double ns) { return static_cast<TimeNs>(std::llround(ns)); }

json SpreadUs(const Spread& s) {
  const auto us = [](double ns) { return std::round(ns) / 1000.0; };
  return json{{"median_us", us(s.median)},
              {"min_us", us(s.min)},
              {"max_us", us(s.max)},
              {"iqr_rel", std::round(s.RelativeIqr() * 1e4) / 1e4},
              {"samples", s.samples}};
}

}  // namespace

double Spread::RelativeIqr() const { return median > 0 ? (q3 - q1) / median : 0.0; }

Spread Summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  Spread s;
  s.samples = static_cast<int>(values.size());
  s.min = values.front();
  s.max = values.back();
  s.q1 = Quantile(values, 0.25);
  s.median = Quantile(values, 0.5);
  s.q3 = Quantile(values, 0.75);
  return s;
}

Status AggregateOptions::Validate() const {
  if (warmup < 0) {
    return Status::InvalidArgument(fmt::format("--warmup {} must be >= 0", warmup));
  }
  if (iterations < 1) {
    return Status::InvalidArgument(fmt::format("--iterations {} must be >= 1", iterations));
  }
  return Status::Ok();
}

namespace {

// One process's samples into `layers` (every sample for a layer's sizes and first forward, the
// used iterations' for its times and bytes) and its used steps' busy time into `step_busy`.
// `p` names the process in the error.
Status CollectProcess(const Attribution& a, size_t p, const AggregateOptions& options,
                      Aggregation* out, std::map<std::string, Collected>* layers,
                      std::vector<double>* step_busy) {
  std::set<int> seen;
  for (const LayerSample& s : a.samples) {
    if (s.step >= 0) seen.insert(s.step);
  }
  const std::vector<int> steps(seen.begin(), seen.end());
  if (out->iterations_seen == 0) out->iterations_seen = static_cast<int>(steps.size());
  const int needed = options.warmup + options.iterations;
  if (static_cast<int>(steps.size()) < needed) {
    return Status::FailedPrecondition(fmt::format(
        "process {}: the trace has {} iteration(s) ({}), fewer than --warmup {} + --iterations "
        "{}; run the program for more steps or lower --iterations",
        p, steps.size(),
        a.steps.empty() ? "occurrences of each layer's forward range; no pipecast:step ranges"
                        : "pipecast:step ranges with layer ranges inside",
        options.warmup, options.iterations));
  }
  const std::set<int> used(steps.begin() + options.warmup, steps.begin() + needed);
  for (const StepSample& st : a.steps) {
    if (used.count(st.index)) step_busy->push_back(static_cast<double>(st.busy_ns));
  }
  for (const LayerSample& s : a.samples) {
    Collected& c = (*layers)[s.layer];
    if (c.first_seen == 0) c.first_seen = layers->size();
    if (!c.parameters) c.parameters = s.parameters;
    if (!c.output_bytes) c.output_bytes = s.output_bytes;
    if (!c.checkpoint_bytes) c.checkpoint_bytes = s.checkpoint_bytes;
    if (!c.weight_grad_bytes) c.weight_grad_bytes = s.weight_grad_bytes;
    if (s.pass == Pass::kForward) c.first_forward = std::min(c.first_forward, s.start_ns);
    if (!used.count(s.step)) continue;
    const double busy = static_cast<double>(s.busy_ns);
    const double transient = static_cast<double>(std::max<int64_t>(0, s.peak_bytes - s.kept_bytes));
    switch (s.pass) {
      case Pass::kForward:
        c.forward.push_back(busy);
        c.kept.push_back(static_cast<double>(s.kept_bytes));
        break;
      case Pass::kBackward:
        c.backward.push_back(busy);
        break;
      case Pass::kWeightGrad:
        c.weight_grad.push_back(busy);
        break;
    }
    c.transient[static_cast<int>(s.pass)].push_back(transient);
  }
  return Status::Ok();
}

// One layer's summaries; what is missing is written as 0 with a warning.
LayerAggregate Summarized(const std::string& name, Collected& c,
                          std::vector<std::string>* warnings) {
  LayerAggregate l;
  l.name = name;
  l.parameters = c.parameters;
  l.output_bytes = c.output_bytes;
  l.checkpoint_bytes = c.checkpoint_bytes;
  l.weight_grad_bytes = c.weight_grad_bytes;
  if (c.forward.empty()) {
    warnings->push_back(
        fmt::format("layer {}: no forward range in the iterations used; "
                    "forward_us = 0",
                    name));
    c.forward.push_back(0);
    c.kept.push_back(0);
  }
  if (c.backward.empty() && c.weight_grad.empty()) {
    warnings->push_back(
        fmt::format("layer {}: no backward range in the iterations used; "
                    "backward_us = 0 (is its backward hook firing?)",
                    name));
  }
  if (c.backward.empty())
    c.backward = c.weight_grad.empty() ? std::vector<double>{0} : c.weight_grad;
  l.forward_ns = Summarize(c.forward);
  l.backward_ns = Summarize(c.backward);
  if (!c.weight_grad.empty()) l.weight_grad_ns = Summarize(c.weight_grad);
  l.activation_bytes = Summarize(c.kept);
  for (const std::vector<double>& t : c.transient) {
    if (!t.empty()) {
      l.workspace_bytes = std::max(l.workspace_bytes, static_cast<int64_t>(Summarize(t).median));
    }
  }
  if (!l.parameters) {
    warnings->push_back(
        fmt::format("layer {}: parameter count unknown (add :params=N to its forward range name); "
                    "written as 0",
                    name));
  }
  if (!l.output_bytes) {
    warnings->push_back(
        fmt::format("layer {}: output size unknown (add :out=BYTES to its forward range name); "
                    "written as 0",
                    name));
  }
  return l;
}

}  // namespace

// Collect every process's samples, then summarize each layer in the order of its first forward.
Result<Aggregation> Aggregate(const std::vector<Attribution>& processes,
                              const AggregateOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  Aggregation out;
  std::map<std::string, Collected> layers;
  std::vector<double> step_busy;
  for (size_t p = 0; p < processes.size(); ++p) {
    if (processes[p].samples.empty()) continue;
    PIPECAST_RETURN_IF_ERROR(CollectProcess(processes[p], p, options, &out, &layers, &step_busy));
  }
  if (layers.empty()) {
    return Status::FailedPrecondition(
        "no pipecast layer ranges in the trace: mark each layer with NVTX ranges named "
        "pipecast:<layer>:forward|backward|weight_grad (docs/profiler.md has a PyTorch snippet), "
        "and check that NVTX reached CUPTI (NVTX_INJECTION64_PATH)");
  }
  std::vector<std::pair<std::string, Collected*>> order;
  for (auto& [name, c] : layers) order.push_back({name, &c});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second->first_forward != b.second->first_forward) {
      return a.second->first_forward < b.second->first_forward;
    }
    return a.second->first_seen < b.second->first_seen;
  });
  for (auto& [name, cp] : order) out.layers.push_back(Summarized(name, *cp, &out.warnings));
  if (!step_busy.empty()) out.step_busy_ns = Summarize(step_busy);
  return out;
}

Status AddProfiles(const Aggregation& aggregation, int microbatch_size, Model* model) {
  const bool fresh = model->layers.empty();
  for (const LayerAggregate& l : aggregation.layers) {
    Layer* layer = nullptr;
    if (fresh) {
      Layer added;
      added.name = l.name;
      added.parameters = l.parameters.value_or(0);
      model->layers.push_back(std::move(added));
      layer = &model->layers.back();
    } else {
      for (Layer& m : model->layers) {
        if (m.name == l.name) layer = &m;
      }
      if (layer == nullptr) {
        return Status::InvalidArgument(
            fmt::format("micro-batch size {}: layer {} was not seen at the other sizes",
                        microbatch_size, l.name));
      }
    }
    LayerProfile p;
    p.microbatch_size = microbatch_size;
    p.forward_ns = RoundNs(l.forward_ns.median);
    p.backward_ns = RoundNs(l.backward_ns.median);
    if (l.weight_grad_ns) {
      p.backward_weight_ns = std::min(p.backward_ns, RoundNs(l.weight_grad_ns->median));
    }
    p.activation_bytes = static_cast<Bytes>(std::llround(l.activation_bytes.median));
    p.output_bytes = l.output_bytes.value_or(0);
    p.workspace_bytes = l.workspace_bytes;
    // Declared by the program in its range names (:ckpt=, :wgrad=), not
    // measured: a checkpoint larger than the measured activation is capped.
    if (l.checkpoint_bytes) p.checkpoint_bytes = std::min(p.activation_bytes, *l.checkpoint_bytes);
    p.weight_grad_bytes = l.weight_grad_bytes;
    auto pos =
        std::lower_bound(layer->profiles.begin(), layer->profiles.end(), microbatch_size,
                         [](const LayerProfile& a, int mb) { return a.microbatch_size < mb; });
    if (pos != layer->profiles.end() && pos->microbatch_size == microbatch_size) {
      return Status::InvalidArgument(
          fmt::format("layer {}: micro-batch size {} measured twice", l.name, microbatch_size));
    }
    layer->profiles.insert(pos, p);
  }
  return Status::Ok();
}

json SpreadJson(const Aggregation& aggregation) {
  json layers = json::object();
  double worst = 0;
  for (const LayerAggregate& l : aggregation.layers) {
    json j;
    j["forward"] = SpreadUs(l.forward_ns);
    j["backward"] = SpreadUs(l.backward_ns);
    if (l.weight_grad_ns) j["weight_grad"] = SpreadUs(*l.weight_grad_ns);
    worst = std::max({worst, l.forward_ns.RelativeIqr(), l.backward_ns.RelativeIqr()});
    layers[l.name] = std::move(j);
  }
  json out;
  out["statistic"] =
      "median over the iterations used; spread: min, max, and iqr_rel = "
      "(q3 - q1) / median";
  out["max_iqr_rel"] = std::round(worst * 1e4) / 1e4;
  if (aggregation.step_busy_ns) out["step_busy"] = SpreadUs(*aggregation.step_busy_ns);
  out["layers"] = std::move(layers);
  return out;
}

}  // namespace pipecast
