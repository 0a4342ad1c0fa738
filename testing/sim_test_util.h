// Tiny worlds for tests: uniform models, the ideal cluster, hand-made
// schedules. Test-only; not part of the library.
#ifndef PIPECAST_TESTING_SIM_TEST_UTIL_H_
#define PIPECAST_TESTING_SIM_TEST_UTIL_H_

#include <stdexcept>
#include <string>
#include <vector>

#include "base/units.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"

namespace pipecast::test_util {

// `n` identical layers measured at micro-batch size 1.
inline Model UniformModel(int n, TimeNs forward_ns, TimeNs backward_ns, Bytes activation_bytes = 0,
                          Bytes output_bytes = 0, int64_t parameters = 0) {
  Model m;
  m.name = "uniform";
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.name = "layer" + std::to_string(i);
    l.parameters = parameters;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = forward_ns;
    p.backward_ns = backward_ns;
    p.activation_bytes = activation_bytes;
    p.output_bytes = output_bytes;
    l.profiles.push_back(p);
    m.layers.push_back(l);
  }
  return m;
}

// No communication cost, unlimited memory.
// Two layers of 1 ms forward and 2 ms backward, the second an MoE layer with Mixtral's routing
// (8 experts, top-2, h 4096) and 70% of its 1e9 parameters in the experts; 4096 tokens per sample.
inline Model MoeTwoLayers() {
  Model m;
  m.name = "moe-two";
  m.sequence_length = 4096;
  for (int i = 0; i < 2; ++i) {
    Layer l;
    l.name = "block." + std::to_string(i);
    l.parameters = 1'000'000'000;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = 1'000'000;
    p.backward_ns = 2'000'000;
    p.activation_bytes = 1000;
    l.profiles.push_back(p);
    if (i == 1) {
      l.moe =
          MoeRouting{.experts = 8, .top_k = 2, .hidden = 4096, .expert_parameters = 700'000'000};
    }
    m.layers.push_back(l);
  }
  return m;
}

// A cluster preset by name (sim/cluster.h); a name the presets lack throws, failing the test.
inline Cluster PresetCluster(const std::string& name) {
  Result<Cluster> c = ClusterPreset(name);
  if (!c.ok()) throw std::runtime_error("no cluster preset " + name);
  return *c;
}

// Stage-cost options from the first three fields, the rest at their defaults (a positional
// aggregate would leave the others unnamed: -Wmissing-field-initializers).
inline StageCostOptions CostOptions(int microbatch_size, Recompute recompute = Recompute::kOff,
                                    bool split_backward = false) {
  StageCostOptions o;
  o.microbatch_size = microbatch_size;
  o.recompute = recompute;
  o.split_backward = split_backward;
  return o;
}

inline Cluster IdealCluster() {
  Cluster c;
  c.name = "ideal";
  return c;
}

// The zero-bubble paper's p = 8, m = 24 row (Qi et al. ICLR'24 Table 5, with Table 6's profiled
// times of the 1.5B model): per stage F 18.522, B (input gradient) 18.086, W 9.337 ms, and
// 0.601 ms per hop.
namespace zb_paper {
inline constexpr TimeNs kF = 18'522'000, kB = 18'086'000, kW = 9'337'000;
inline constexpr double kCommUs = 601;

// p stages of one layer each with the row's times and `activation_bytes` each.
inline Model StagesModel(int p, Bytes activation_bytes = 0) {
  Model model = UniformModel(p, kF, kB + kW, activation_bytes);
  for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = kW;
  return model;
}

// Links that cost 0.601 ms per hop and nothing per byte.
inline Cluster HopCluster() {
  Cluster c = IdealCluster();
  c.intra_node.latency_us = kCommUs;
  c.inter_node.latency_us = kCommUs;
  return c;
}
}  // namespace zb_paper

// A one-stage-per-rank schedule from explicit action lists.
inline Schedule CustomSchedule(int microbatches, std::vector<std::vector<Action>> actions) {
  Schedule s;
  s.name = "custom";
  s.num_ranks = static_cast<int>(actions.size());
  s.num_stages = s.num_ranks;
  s.num_microbatches = microbatches;
  for (int r = 0; r < s.num_ranks; ++r) s.stage_rank.push_back(r);
  s.actions = std::move(actions);
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (a.kind == OpKind::kBackwardInput || a.kind == OpKind::kBackwardWeight)
        s.split_backward = true;
  return s;
}

inline Action F(int s, int m) { return Action{s, OpKind::kForward, m}; }
inline Action B(int s, int m) { return Action{s, OpKind::kBackward, m}; }

}  // namespace pipecast::test_util

#endif  // PIPECAST_TESTING_SIM_TEST_UTIL_H_
