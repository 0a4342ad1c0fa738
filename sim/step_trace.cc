#include "sim/step_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace pipecast {
namespace {

constexpr int kComputeStream = 0;
constexpr int kAllGatherStream = 1;
constexpr int kReduceScatterStream = 2;

Bytes PerParam(int64_t parameters, double bytes_per_param) {
  return static_cast<Bytes>(std::llround(static_cast<double>(parameters) * bytes_per_param));
}

// One layer's terms at the micro-batch size.
struct LayerTerms {
  int64_t parameters = 0;
  Bytes kept = 0;       // kept from forward to backward, its input included
  Bytes rebuilt = 0;    // made in the forward and again in the backward, then freed
  Bytes output = 0;     // the input of the next layer
  Bytes workspace = 0;  // while its ops run
  Bytes logits = 0;     // --loss pytorch head: the fp32 logits' bytes, else 0
};

class TraceWriter {
 public:
  TraceWriter(const std::vector<LayerTerms>& layers, const StepTraceOptions& options)
      : layers_(layers), options_(options) {}

  std::vector<TraceEvent> Write() {
    const int n = static_cast<int>(layers_.size());
    const double d = options_.data_parallel;
    const MemoryConfig& m = options_.memory;
    const double resident = m.weight_bytes_per_param + m.optimizer_bytes_per_param -
                            options_.lazy_optimizer_bytes_per_param;
    for (int i = 0; i < n; ++i) {
      Malloc(PerParam(layers_[i].parameters, resident / d), kComputeStream,
             fmt::format("layer {} sharded state", i));
    }
    grads_.assign(n, -1);
    for (int step = 1; step <= options_.steps; ++step) {
      for (int64_t& g : grads_) {  // zero_grad(set_to_none=True)
        if (g >= 0) Free(g);
        g = -1;
      }
      Forward();
      Backward();
      if (step == 1) {
        for (int i = 0; i < n; ++i) {
          Malloc(PerParam(layers_[i].parameters, options_.lazy_optimizer_bytes_per_param / d),
                 kComputeStream, fmt::format("layer {} Adam moments", i));
        }
      }
      events_.push_back({.kind = TraceEvent::Kind::kStepEnd,
                         .tensor = -1,
                         .bytes = 0,
                         .stream = 0,
                         .what = "step end"});
    }
    return std::move(events_);
  }

 private:
  // FSDP2's units: the root (first and last layer) and each block.
  bool IsRoot(int i) const { return i == 0 || i + 1 == static_cast<int>(layers_.size()); }
  int64_t UnitParameters(int i) const {
    if (!IsRoot(i)) return layers_[i].parameters;
    return layers_.front().parameters + layers_.back().parameters;
  }

  int64_t Malloc(Bytes bytes, int stream, std::string what) {
    const int64_t id = next_++;
    events_.push_back({.kind = TraceEvent::Kind::kMalloc,
                       .tensor = id,
                       .bytes = bytes,
                       .stream = stream,
                       .what = std::move(what)});
    return id;
  }
  void Free(int64_t id) {
    if (id >= 0) {
      events_.push_back(
          {.kind = TraceEvent::Kind::kFree, .tensor = id, .bytes = 0, .stream = 0, .what = "free"});
    }
  }

  // all_gather_copy_in's input and output (stream 1), the output kept until
  // the next unit's gather; copy-out into the unsharded parameters.
  int64_t Gather(int unit) {
    const int64_t p = UnitParameters(unit);
    const double gather = options_.memory.GatherBytesPerParam();
    Free(gather_state_);
    const int64_t in =
        Malloc(PerParam(p, gather / options_.data_parallel), kAllGatherStream, "all-gather input");
    gather_state_ = Malloc(PerParam(p, gather), kAllGatherStream, "all-gather output");
    Free(in);
    return Malloc(PerParam(p, gather), kComputeStream, fmt::format("unit {} unsharded", unit));
  }

  void Forward() {
    const int n = static_cast<int>(layers_.size());
    unsharded_.assign(n, -1);
    kept_.assign(n, {});
    int64_t input = -1;
    unsharded_[0] = Gather(0);  // the root: embedding, final norm, output
    unsharded_[n - 1] = unsharded_[0];
    for (int i = 0; i < n; ++i) {
      const LayerTerms& l = layers_[i];
      if (!IsRoot(i)) unsharded_[i] = Gather(i);
      const Bytes input_bytes = i > 0 ? layers_[i - 1].output : 0;
      if (input >= 0) kept_[i].push_back(input);  // the layer keeps its input
      const int64_t work = Malloc(l.workspace, kComputeStream, "workspace");
      Bytes own = std::max<Bytes>(0, l.kept - input_bytes - (l.logits > 0 ? l.logits : 0));
      if (own > 0) kept_[i].push_back(Malloc(own, kComputeStream, fmt::format("layer {} kept", i)));
      if (l.logits > 0) HeadLossForward(i);
      if (l.rebuilt > 0) Free(Malloc(l.rebuilt, kComputeStream, "transient"));
      Free(work);
      input =
          l.output > 0 ? Malloc(l.output, kComputeStream, fmt::format("layer {} output", i)) : -1;
      // Reshard after forward: every block but the last (torchtitan's
      // apply_fsdp); the root stays gathered.
      if (!IsRoot(i) && i + 2 != n) {
        Free(unsharded_[i]);
        unsharded_[i] = -1;
      }
    }
    Free(input);
  }

  // train.py's loss: bf16 logits, pred.float() (fp32), log_softmax (fp32,
  // kept), then the copy and the logits freed (`del pred`).
  void HeadLossForward(int i) {
    const Bytes fp32 = layers_[i].logits;
    const int64_t bf16 = Malloc(fp32 / 2, kComputeStream, "logits bf16");
    const int64_t copy = Malloc(fp32, kComputeStream, "logits fp32");
    kept_[i].push_back(Malloc(fp32, kComputeStream, "log_softmax output"));
    head_softmax_ = kept_[i].back();
    Free(copy);
    Free(bf16);
  }

  // nll_loss's fp32 gradient, log_softmax's fp32 result, the output kept
  // freed, .float()'s bf16 gradient; returns the logits' gradient.
  int64_t HeadLossBackward(int i) {
    const Bytes fp32 = layers_[i].logits;
    const int64_t nll = Malloc(fp32, kComputeStream, "nll_loss gradient");
    const int64_t lsm = Malloc(fp32, kComputeStream, "log_softmax gradient");
    Free(nll);
    auto& kept = kept_[i];
    kept.erase(std::find(kept.begin(), kept.end(), head_softmax_));
    Free(head_softmax_);
    const int64_t grad = Malloc(fp32 / 2, kComputeStream, "logits gradient bf16");
    Free(lsm);
    return grad;
  }

  void Backward() {
    const int n = static_cast<int>(layers_.size());
    const double d = options_.data_parallel;
    const MemoryConfig& m = options_.memory;
    int64_t grad_out = -1;
    for (int i = n - 1; i >= 0; --i) {
      const LayerTerms& l = layers_[i];
      if (unsharded_[i] < 0) unsharded_[i] = Gather(i);
      const int64_t logits_grad = l.logits > 0 ? HeadLossBackward(i) : -1;
      const int64_t rebuilt =
          l.rebuilt > 0 ? Malloc(l.rebuilt, kComputeStream, "rebuilt") : int64_t{-1};
      const int64_t work = Malloc(l.workspace, kComputeStream, "workspace");
      const int64_t grad_in =
          i > 0 ? Malloc(layers_[i - 1].output, kComputeStream, "input grad") : int64_t{-1};
      const int64_t wgrad = Malloc(PerParam(l.parameters, m.GatherBytesPerParam()), kComputeStream,
                                   fmt::format("layer {} unsharded grad", i));
      Free(work);
      Free(rebuilt);
      Free(logits_grad);
      for (int64_t t : kept_[i]) Free(t);
      Free(grad_out);
      grad_out = grad_in;
      if (!IsRoot(i) || i == 0) Free(unsharded_[i]);  // post-backward reshard
      // Reduce-scatter in the reduce dtype: the input kept until the next
      // reduce-scatter, the sharded gradient until zero_grad.
      Free(reduce_state_);
      reduce_state_ = Malloc(PerParam(l.parameters, m.gradient_bytes_per_param),
                             kReduceScatterStream, "reduce-scatter input");
      Free(wgrad);
      grads_[i] = Malloc(PerParam(l.parameters, m.gradient_bytes_per_param / d),
                         kReduceScatterStream, fmt::format("layer {} sharded grad", i));
    }
    Free(grad_out);
    Free(reduce_state_);
    reduce_state_ = -1;
    Free(gather_state_);
    gather_state_ = -1;
  }

  const std::vector<LayerTerms>& layers_;
  const StepTraceOptions& options_;
  std::vector<TraceEvent> events_;
  int64_t next_ = 0;
  std::vector<int64_t> grads_, unsharded_;
  std::vector<std::vector<int64_t>> kept_;
  int64_t gather_state_ = -1, reduce_state_ = -1, head_softmax_ = -1;
};

}  // namespace

Result<std::vector<TraceEvent>> BuildStepTrace(const Model& model,
                                               const StepTraceOptions& options) {
  if (options.memory.zero != 3) {
    return Status::InvalidArgument(fmt::format(
        "step trace: ZeRO level {} (--zero); the trace is FSDP's, level 3", options.memory.zero));
  }
  if (model.layers.size() < 3) {
    return Status::InvalidArgument("step trace: the model needs an embedding, blocks and a head");
  }
  std::vector<LayerTerms> layers;
  for (const Layer& layer : model.layers) {
    if (layer.profiles.empty()) {
      return Status::InvalidArgument(
          fmt::format("step trace: layer '{}' has no profile", layer.name));
    }
    const LayerCost c = CostAt(layer, options.microbatch_size);
    LayerTerms t;
    t.parameters = layer.parameters;
    t.kept = options.op_recompute && c.op_saved_bytes
                 ? std::min(*c.op_saved_bytes, c.activation_bytes)
                 : c.activation_bytes;
    t.rebuilt = c.activation_bytes - t.kept;
    t.output = c.output_bytes;
    t.workspace = c.workspace_bytes;
    layers.push_back(t);
  }
  if (options.pytorch_loss) {
    // The head keeps its two inputs (s x h each, the last block's output)
    // and log_softmax's fp32 output; its workspace holds two more fp32
    // copies of the logits (profiler/analytic_layer_cost.cc, HeadCost).
    LayerTerms& head = layers.back();
    const Bytes input = layers[layers.size() - 2].output;
    head.logits = head.kept - 2 * input;
    if (head.logits <= 0 || head.workspace < 2 * head.logits) {
      return Status::InvalidArgument(
          "step trace: the last layer's terms do not hold --loss pytorch's fp32 logits "
          "(activation 2 inputs + logits, workspace 2 x logits)");
    }
    head.workspace -= 2 * head.logits;  // the loss's backward tensors are traced apart
  }
  TraceWriter writer(layers, options);
  return writer.Write();
}

Result<ReplayResult> ReplayTrace(const std::vector<TraceEvent>& trace, Bytes capacity) {
  CachingAllocator allocator(capacity);
  std::unordered_map<int64_t, int64_t> ids;  // trace tensor -> allocator id
  ReplayResult out;
  Bytes peak_reserved = 0;
  int step = 0;
  for (const TraceEvent& e : trace) {
    switch (e.kind) {
      case TraceEvent::Kind::kMalloc: {
        Result<int64_t> id = allocator.Malloc(e.bytes, e.stream);
        if (!id.ok()) return Status::FailedPrecondition(e.what + ": " + id.status().message());
        ids[e.tensor] = *id;
        if (allocator.stats().reserved > peak_reserved) {
          peak_reserved = allocator.stats().reserved;
          out.allocated_at_reserved_peak = allocator.stats().allocated;
          out.reserved_by_stream_at_peak = allocator.reserved_by_stream();
        }
        break;
      }
      case TraceEvent::Kind::kFree:
        allocator.Free(ids.at(e.tensor));
        ids.erase(e.tensor);
        break;
      case TraceEvent::Kind::kStepEnd:
        if (++step == 1) out.first_step = allocator.stats();
        out.last_step = allocator.stats();
        out.run.peak_allocated = std::max(out.run.peak_allocated, allocator.stats().peak_allocated);
        out.run.peak_reserved = std::max(out.run.peak_reserved, allocator.stats().peak_reserved);
        allocator.ResetPeaks();
        break;
    }
  }
  out.run.allocated = allocator.stats().allocated;
  out.run.reserved = allocator.stats().reserved;
  out.reserved_by_stream_end = allocator.reserved_by_stream();
  return out;
}

}  // namespace pipecast
