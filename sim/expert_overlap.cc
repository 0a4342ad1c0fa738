// The layered expert all-to-all overlap of an F&B pair (docs/simulator.md "Expert all-to-all
// overlap"): Megatron-LM's combined 1F1B replayed node by node on a compute and a communication
// stream (NVIDIA/Megatron-LM at d98e8a64, megatron/core/models/common/model_chunk_schedule_plan.py
// TransformerLayerSchedulePlan.run, lines 236-304), the compute running on the SMs the
// communication kernels leave while one runs beside it (for Megatron's combined 1F1B at the
// fitted kCombined1F1BComputeLossBesideDeepEp instead, sim/stage_costs.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "sim/stage_costs.h"

namespace pipecast {

double ExpertCommSmShare(ExpertDispatcher dispatcher, int gpu_sms) {
  if (dispatcher != ExpertDispatcher::kDeepEp || gpu_sms <= kDeepEpNormalKernelSms) return 0;
  return static_cast<double>(kDeepEpNormalKernelSms) / gpu_sms;
}

namespace {

// One node of the pair: its stream, its time alone on the GPU, the node it waits for (the
// micro-batch's previous node, its CUDA event; -1 for none) and, on the communication stream,
// the share of the SMs it holds.
struct PairNode {
  bool comm = false;
  TimeNs ns = 0;
  int wait = -1;
  double sm_share = 0;
};

// The nodes in issue order, each micro-batch's last recorded event.
struct PairNodes {
  std::vector<PairNode>& nodes;
  int forward = -1, backward = -1;

  // A node of `ns` that waits for `*event` and records it at its end
  // (ScheduleNode.stream_acquire_context: event.wait(stream), ..., event.record(stream)).
  void Node(bool comm, int* event, TimeNs ns, double sm_share = 0) {
    nodes.push_back(PairNode{.comm = comm, .ns = ns, .wait = *event, .sm_share = sm_share});
    *event = static_cast<int>(nodes.size()) - 1;
  }
  // A weight-gradient node (backward_dw): its stream only, no event.
  void Weight(TimeNs ns) { nodes.push_back(PairNode{.comm = false, .ns = ns}); }
};

// One call of TransformerLayerSchedulePlan.run(f_layer, b_layer) in its issue order; a layer
// without all-to-all (dense) has no-op dispatch and combine nodes (NoopScheduleNode).
void RunLayer(const PairLayerCost* f, const PairLayerCost* b, bool b_weight, PairNodes* s) {
  const bool f_a2a = f != nullptr && f->dispatch + f->combine > 0;
  const bool b_a2a = b != nullptr && b->dispatch + b->combine > 0;
  // moe_combine.backward: the combine's gradient goes back the dispatch's way.
  if (b_a2a) s->Node(true, &s->backward, b->dispatch, b->comm_sm_share);
  if (f != nullptr) s->Node(false, &s->forward, f->pre_forward);
  if (b != nullptr) s->Node(false, &s->backward, b->expert_backward);
  if (f_a2a) s->Node(true, &s->forward, f->dispatch, f->comm_sm_share);
  if (b != nullptr) {
    if (b_weight) s->Weight(b->expert_backward_weight);  // mlp.backward_dw()
    // moe_dispatch.backward: the dispatch's gradient goes back the combine's way.
    if (b_a2a) s->Node(true, &s->backward, b->combine, b->comm_sm_share);
  }
  if (f != nullptr) {
    s->Node(false, &s->forward, f->expert_forward);
    if (f_a2a) s->Node(true, &s->forward, f->combine, f->comm_sm_share);
  }
  if (b != nullptr) {
    s->Node(false, &s->backward, b->pre_backward);
    if (b_weight) s->Weight(b->pre_backward_weight);  // backward_dw()
  }
}

// The buffers of one replay, kept per thread: the planner replays pairs by the million.
struct ReplayScratch {
  std::vector<PairNode> nodes;
  std::array<std::vector<int>, 2> order;  // [0] compute, [1] communication
  std::vector<double> end;
};

// Runs the nodes on their two FIFO streams, each node starting when its stream is free and the
// node it waits for has ended. A communication node lasts its ns; a compute node does its ns of
// work at rate 1, or 1 - sm_share while a communication node runs (the SMs it leaves: the
// fluid limit of the compute's waves on fewer SMs). Returns when the last node ends.
TimeNs ReplayNs(ReplayScratch* scratch) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  const std::vector<PairNode>& nodes = scratch->nodes;
  std::array<std::vector<int>, 2>& order = scratch->order;
  order[0].clear();
  order[1].clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    order[nodes[i].comm ? 1 : 0].push_back(static_cast<int>(i));
  }
  std::vector<double>& end = scratch->end;
  end.assign(nodes.size(), -1);
  std::array<size_t, 2> next{0, 0};
  std::array<bool, 2> running{false, false};
  std::array<double, 2> left{0, 0}, free_at{0, 0};
  double now = 0, last = 0;
  while (true) {
    std::array<double, 2> ready{kNever, kNever};
    for (int s = 0; s < 2; ++s) {
      if (running[s] || next[s] == order[s].size()) continue;
      const PairNode& n = nodes[order[s][next[s]]];
      if (n.wait >= 0 && end[n.wait] < 0) continue;  // its event is not recorded yet
      ready[s] = std::max(free_at[s], n.wait >= 0 ? end[n.wait] : 0.0);
      if (ready[s] <= now) {
        running[s] = true;
        left[s] = static_cast<double>(n.ns);
      }
    }
    if (!running[0] && !running[1] && ready[0] == kNever && ready[1] == kNever) break;
    const double share = running[1] ? nodes[order[1][next[1]]].sm_share : 0;
    const std::array<double, 2> rate{1 - std::clamp(share, 0.0, 0.9), 1};
    std::array<double, 2> done{kNever, kNever};
    double t = kNever;
    for (int s = 0; s < 2; ++s) {
      if (running[s]) done[s] = now + left[s] / rate[s];
      t = std::min(t, running[s] ? done[s] : ready[s]);
    }
    for (int s = 0; s < 2; ++s) {
      if (!running[s]) continue;
      left[s] -= rate[s] * (t - now);
      if (done[s] > t) continue;
      end[order[s][next[s]]] = free_at[s] = last = t;
      running[s] = false;
      ++next[s];
    }
    now = t;
  }
  return static_cast<TimeNs>(std::llround(last));
}

}  // namespace

TimeNs LayeredPairNs(const std::vector<PairLayerCost>& f, const std::vector<PairLayerCost>& b,
                     bool b_weight, double comm_share_override) {
  thread_local ReplayScratch scratch;
  scratch.nodes.clear();
  PairNodes s{.nodes = scratch.nodes};
  const size_t nf = f.size(), nb = b.size(), both = std::min(nf, nb);
  // TransformerModelChunkSchedulePlan.run (lines 554-594): forward layer i beside backward layer
  // nb - 1 - i, then the backward's remaining layers, then the forward's.
  for (size_t i = 0; i < both; ++i) RunLayer(&f[i], &b[nb - 1 - i], b_weight, &s);
  for (size_t i = both; i < nb; ++i) RunLayer(nullptr, &b[nb - 1 - i], b_weight, &s);
  for (size_t i = both; i < nf; ++i) RunLayer(&f[i], nullptr, b_weight, &s);
  if (comm_share_override >= 0) {
    for (PairNode& n : scratch.nodes) {
      if (n.comm && n.sm_share > 0) n.sm_share = comm_share_override;
    }
  }
  return ReplayNs(&scratch);
}

}  // namespace pipecast
