// The layered expert all-to-all overlap of an F&B pair (docs/simulator.md "Expert all-to-all
// overlap"): Megatron-LM's combined 1F1B replayed node by node on a compute and a communication
// stream (NVIDIA/Megatron-LM at d98e8a64, megatron/core/models/common/model_chunk_schedule_plan.py
// TransformerLayerSchedulePlan.run, lines 236-304).
#include <algorithm>
#include <vector>

#include "sim/stage_costs.h"

namespace pipecast {

namespace {

// The two streams and each micro-batch's last recorded event.
struct PairStreams {
  TimeNs compute = 0, comm = 0;      // when each stream is free
  TimeNs forward = 0, backward = 0;  // each micro-batch's event: its last node's end

  // A node of `ns` on `stream` that waits for `event` and records it at its end
  // (ScheduleNode.stream_acquire_context: event.wait(stream), ..., event.record(stream)).
  static void Node(TimeNs* stream, TimeNs* event, TimeNs ns) {
    *stream = *event = std::max(*stream, *event) + ns;
  }
};

// One call of TransformerLayerSchedulePlan.run(f_layer, b_layer) in its issue order; a layer
// without all-to-all (dense) has no-op dispatch and combine nodes (NoopScheduleNode).
void RunLayer(const PairLayerCost* f, const PairLayerCost* b, bool b_weight, PairStreams* s) {
  if (b != nullptr && b->dispatch + b->combine > 0) {
    // moe_combine.backward: the combine's gradient goes back the dispatch's way.
    PairStreams::Node(&s->comm, &s->backward, b->dispatch);
  }
  if (f != nullptr) PairStreams::Node(&s->compute, &s->forward, f->pre_forward);
  if (b != nullptr) PairStreams::Node(&s->compute, &s->backward, b->expert_backward);
  if (f != nullptr && f->dispatch + f->combine > 0) {
    PairStreams::Node(&s->comm, &s->forward, f->dispatch);
  }
  if (b != nullptr) {
    if (b_weight) s->compute += b->expert_backward_weight;  // mlp.backward_dw(): no event
    // moe_dispatch.backward: the dispatch's gradient goes back the combine's way.
    if (b->dispatch + b->combine > 0) PairStreams::Node(&s->comm, &s->backward, b->combine);
  }
  if (f != nullptr) {
    PairStreams::Node(&s->compute, &s->forward, f->expert_forward);
    if (f->dispatch + f->combine > 0) PairStreams::Node(&s->comm, &s->forward, f->combine);
  }
  if (b != nullptr) {
    PairStreams::Node(&s->compute, &s->backward, b->pre_backward);
    if (b_weight) s->compute += b->pre_backward_weight;  // backward_dw(): no event
  }
}

}  // namespace

TimeNs LayeredPairNs(const std::vector<PairLayerCost>& f, const std::vector<PairLayerCost>& b,
                     bool b_weight) {
  PairStreams s;
  const size_t nf = f.size(), nb = b.size(), both = std::min(nf, nb);
  // TransformerModelChunkSchedulePlan.run (lines 554-594): forward layer i beside backward layer
  // nb - 1 - i, then the backward's remaining layers, then the forward's.
  for (size_t i = 0; i < both; ++i) RunLayer(&f[i], &b[nb - 1 - i], b_weight, &s);
  for (size_t i = both; i < nb; ++i) RunLayer(nullptr, &b[nb - 1 - i], b_weight, &s);
  for (size_t i = both; i < nf; ++i) RunLayer(&f[i], nullptr, b_weight, &s);
  return std::max({s.compute, s.comm, s.forward, s.backward});
}

}  // namespace pipecast
