#include "sim/fsdp_trace.h"

#include <fmt/format.h>

#include <string>
#include <utility>

// Assumptions where the code was not read at a commit here (each is an
// autograd or kernel detail; docs/calibration-memory.md lists them too):
//   - autograd formulas (derivatives.yaml): mul saves both inputs when both
//     need a gradient and computes self's gradient first; mm's weight
//     gradient comes out contiguous (mm_mat2_backward) and AccumulateGrad
//     steals it; pow's backward makes self.pow(1), its double and the
//     product; mean's backward one full-size tensor; the engine adds a
//     second gradient into a buffer in place (the first is no longer shared
//     by then) and runs ready nodes latest-created first;
//   - the flash attention's backward allocates dq, dk, dv, then softmax_d and
//     an fp32 dq accumulator of the query's size, freed at its return;
//   - non-reentrant checkpoint with early stop (the default) stops the
//     recompute once the last saved tensor (the product fed to w2) is made;
//     SAC's cache pops a tensor when the recompute uses it, and the block's
//     input and its cached w2 output live until the block's backward ends;
//   - embedding_dense_backward's index and segment temporaries (data
//     dependent, at most b*s*h fp32) and cuBLAS's workspace are left out
//     (the workspace is added apart, as DeviceMemory does); scalars of the
//     loss, the clip and the optimizer are one 512 B request each.

namespace pipecast {
namespace {

constexpr int kCompute = 0;
constexpr int kCopyIn = 1;
constexpr int kReduceScatter = 2;
constexpr Bytes kScalar = 4;

struct Param {
  int64_t dim0 = 0;
  int64_t rest = 1;
};

// One fully_shard group and its live tensors (trace ids, -1: none).
struct Group {
  std::vector<Param> params;
  bool reshard_after_forward = true;
  std::vector<int64_t> unsharded;  // per parameter, bf16
  std::vector<int64_t> grads;      // the unsharded bf16 gradients
  int64_t gathered = -1;           // all-gather output awaiting its copy-out
  int64_t sharded_grad = -1;       // reduce-scatter output until zero_grad
};

// An RMSNorm's tensors: x.float(), rsqrt, the bf16 cast, the output.
struct Norm {
  int64_t a1 = -1, a5 = -1, a7 = -1, out = -1;
};

// What one block holds for its backward.
struct Block {
  int64_t x = -1;                                                 // its input (the frame's)
  int64_t xq = -1, xv = -1, attn = -1, lse = -1, g = -1, d = -1;  // SAC's cache
  Norm n1, n2;                                                    // rebuilt by the recompute
  int64_t qr = -1, keys = -1, values = -1, s = -1, u = -1, p = -1;
};

class Writer {
 public:
  Writer(const LlamaShape& shape, const FsdpTraceOptions& options)
      : m_(shape), o_(options), t_(options.batch * options.seq), d_(options.data_parallel) {
    kv_ = m_.hidden / m_.heads * m_.kv_heads;
    const int64_t h = m_.hidden;
    blocks_.resize(static_cast<size_t>(m_.layers));
    groups_.resize(static_cast<size_t>(m_.layers) + 1);
    for (int64_t i = 0; i < m_.layers; ++i) {
      Group& g = groups_[static_cast<size_t>(i)];
      g.params = {{h, h},      {kv_, h},    {kv_, h}, {h, h}, {m_.ffn, h},
                  {h, m_.ffn}, {m_.ffn, h}, {h, 1},   {h, 1}};
      g.reshard_after_forward = i < m_.layers - 1;  // parallelize_llama.py, apply_fsdp
    }
    root().params = {{m_.vocab, h}, {h, 1}, {m_.vocab, h}};
    root().reshard_after_forward = false;  // the root is kept unsharded to the backward
  }

  std::vector<TraceEvent> Write() {
    Init();
    for (int step = 0; step < o_.steps; ++step) Step(step);
    return std::move(trace_);
  }

 private:
  Group& root() { return groups_.back(); }
  Group& group(int64_t i) { return groups_[static_cast<size_t>(i)]; }
  Block& block(int64_t i) { return blocks_[static_cast<size_t>(i)]; }
  int64_t Shard(const Param& p) const { return (p.dim0 + d_ - 1) / d_ * p.rest; }
  int64_t ShardSum(const Group& g) const {
    int64_t n = 0;
    for (const Param& p : g.params) n += Shard(p);
    return n;
  }

  int64_t New(Bytes bytes, int stream, std::string what) {
    const int64_t id = next_++;
    trace_.push_back(TraceEvent{TraceEvent::Kind::kMalloc, id, bytes, stream, std::move(what)});
    return id;
  }
  void Drop(int64_t& id) {
    if (id < 0) return;
    trace_.push_back(TraceEvent{TraceEvent::Kind::kFree, id, 0, 0, ""});
    id = -1;
  }
  // A temporary made and freed at once (or dropped later by the caller).
  int64_t Tmp(Bytes bytes, const char* what) { return New(bytes, kCompute, what); }

  void Init();
  void Step(int step);
  void Unshard(Group& g);
  void WaitForUnshard(Group& g, bool forward);
  void PostBackward(Group& g);
  Norm NormForward(bool keep);
  int64_t NormBackward(Norm& n, int64_t grad, Group& g);
  int64_t Attention(Block& b, bool recompute);
  int64_t BlockForward(int64_t i, int64_t x);
  void Recompute(Block& b);
  int64_t BlockBackward(int64_t i, int64_t grad);
  int64_t AttentionBackward(Block& b, Group& g);
  int64_t Forward();
  void Backward(int64_t logits_grad_source);
  void ClipAndOptimizer(bool first);

  LlamaShape m_;
  FsdpTraceOptions o_;
  int64_t t_;  // tokens, b*s
  int64_t d_;
  int64_t kv_ = 0;
  std::vector<Group> groups_;  // the blocks', then the root's
  std::vector<Block> blocks_;
  std::vector<int64_t> sharded_params_, moments_;
  int64_t ag_state_ = -1;  // FSDPCommContext.all_gather_state (forward)
  int64_t rs_state_ = -1;  // FSDPCommContext.reduce_scatter_state
  int64_t ls_out_ = -1;    // log_softmax's fp32 output
  Norm final_norm_;
  std::vector<TraceEvent> trace_;
  int64_t next_ = 0;
};

// model.to_empty(): each sharded fp32 parameter in module order
// (tok_embeddings, the blocks, norm, output), then the rotary table buffer
// (complex64, 2 * seq positions x head_dim / 2).
void Writer::Init() {
  auto shard = [&](const Param& p) {
    sharded_params_.push_back(New(4 * Shard(p), kCompute, "param"));
  };
  shard(root().params[0]);
  for (int64_t i = 0; i < m_.layers; ++i) {
    for (const Param& p : group(i).params) shard(p);
  }
  shard(root().params[1]);
  shard(root().params[2]);
  New(8 * 2 * o_.seq * (m_.hidden / m_.heads / 2), kCompute, "freqs_cis");
}

// foreach_all_gather: the flat bf16 copy of the shards and the flat output,
// both on the copy-in stream; the copy freed once copied in.
void Writer::Unshard(Group& g) {
  if (!g.unsharded.empty() || g.gathered >= 0) return;
  int64_t input = New(2 * ShardSum(g), kCopyIn, "all-gather input");
  g.gathered = New(2 * ShardSum(g) * d_, kCopyIn, "all-gather output");
  Drop(input);
}

// wait_for_unshard: in the forward the previous group's output is freed
// first and this one's kept (all_gather_state); in the backward it is freed
// after the copy-out. The copy-out allocates each unsharded parameter.
void Writer::WaitForUnshard(Group& g, bool forward) {
  if (g.gathered < 0) return;
  if (forward) Drop(ag_state_);
  for (const Param& p : g.params)
    g.unsharded.push_back(New(2 * Shard(p) * d_, kCompute, "unsharded"));
  if (forward) {
    ag_state_ = g.gathered;
    g.gathered = -1;
  } else {
    Drop(g.gathered);
  }
}

// post_backward: reshard, free the previous reduce-scatter input, copy the
// gradients into a new fp32 one, free them, the sharded output on the
// reduce-scatter stream.
void Writer::PostBackward(Group& g) {
  for (int64_t& id : g.unsharded) Drop(id);
  g.unsharded.clear();
  Drop(rs_state_);
  rs_state_ = New(4 * ShardSum(g) * d_, kCompute, "reduce-scatter input");
  for (int64_t& id : g.grads) Drop(id);
  g.grads.clear();
  g.sharded_grad = New(4 * ShardSum(g), kReduceScatter, "sharded gradients");
}

// RMSNorm.forward: self._norm(x.float()).type_as(x) * self.weight. `keep`:
// autograd keeps x.float(), rsqrt and the bf16 cast (the recompute, and the
// root's norm outside checkpointing); else each goes with its last use.
Norm Writer::NormForward(bool keep) {
  const Bytes th4 = 4 * t_ * m_.hidden, t4 = 4 * t_;
  Norm n;
  n.a1 = Tmp(th4, "x.float()");
  int64_t a2 = Tmp(th4, "pow");
  int64_t a3 = Tmp(t4, "mean");
  Drop(a2);
  int64_t a4 = Tmp(t4, "+eps");
  Drop(a3);
  n.a5 = Tmp(t4, "rsqrt");
  Drop(a4);
  int64_t a6 = Tmp(th4, "x*rsqrt");
  if (!keep) {
    Drop(n.a1);
    Drop(n.a5);
  }
  n.a7 = Tmp(2 * t_ * m_.hidden, "type_as");
  Drop(a6);
  n.out = Tmp(2 * t_ * m_.hidden, "norm out");
  if (!keep) Drop(n.a7);
  return n;
}

// The norm's backward from its output's gradient to its input's (bf16);
// the weight's gradient joins the group's.
int64_t Writer::NormBackward(Norm& n, int64_t grad, Group& g) {
  const Bytes th4 = 4 * t_ * m_.hidden, th2 = 2 * t_ * m_.hidden, t4 = 4 * t_;
  int64_t ga7 = Tmp(th2, "grad*w");
  int64_t gw = Tmp(th2, "grad*a7");
  g.grads.push_back(Tmp(2 * m_.hidden, "norm weight grad"));
  Drop(gw);
  Drop(n.a7);
  Drop(grad);
  int64_t ga6 = Tmp(th4, "to fp32");
  Drop(ga7);
  int64_t ga1 = Tmp(th4, "grad*rsqrt");
  int64_t tmp = Tmp(th4, "grad*x");
  int64_t ga5 = Tmp(t4, "sum");
  Drop(tmp);
  Drop(ga6);
  tmp = Tmp(t4, "rsqrt^3");
  int64_t ga4 = Tmp(t4, "rsqrt grad");
  Drop(tmp);
  Drop(ga5);
  Drop(n.a5);
  int64_t ga2 = Tmp(th4, "mean grad");
  Drop(ga4);
  int64_t p1 = Tmp(th4, "x.pow(1)");
  int64_t p2 = Tmp(th4, "2*x");
  Drop(p1);
  int64_t ga1b = Tmp(th4, "pow grad");
  Drop(p2);
  Drop(ga2);
  Drop(n.a1);
  Drop(ga1b);  // added into ga1 in place
  int64_t gx = Tmp(th2, "to bf16");
  Drop(ga1);
  return gx;
}

// Attention.forward from the norm's output b.n1.out: wq, wk, wv, the rotary
// embedding in fp32, repeat_kv, flash attention, wo.
// Returns wo's output. In the forward the mm outputs wq and wv and the
// attention's are SAC's cache; in the recompute they come from it.
int64_t Writer::Attention(Block& b, bool recompute) {
  const Bytes th2 = 2 * t_ * m_.hidden, th4 = 2 * th2, tk2 = 2 * t_ * kv_, tk4 = 2 * tk2;
  if (!recompute) b.xq = Tmp(th2, "wq");
  int64_t xk = Tmp(tk2, "wk");
  if (!recompute) b.xv = Tmp(tk2, "wv");
  int64_t xqf = Tmp(th4, "xq.float()"), xkf = Tmp(tk4, "xk.float()");
  int64_t pq = Tmp(th4, "xq*freqs"), pk = Tmp(tk4, "xk*freqs");
  int64_t qr = Tmp(th2, "xq type_as"), kr = Tmp(tk2, "xk type_as");
  Drop(xqf);
  Drop(xkf);
  Drop(pq);
  Drop(pk);
  Drop(xk);
  if (recompute) Drop(b.xq);  // popped from SAC's cache; nothing saves it
  int64_t keys = Tmp(th2, "repeat_kv k"), values = Tmp(th2, "repeat_kv v");
  if (!recompute) {
    b.attn = Tmp(th2, "flash out");
    b.lse = Tmp(4 * t_ * m_.heads, "logsumexp");
  }
  // output.transpose(1, 2).contiguous() copies nothing: the flash kernel's
  // output is a transposed view of a (b, s, heads, head_dim) tensor.
  int64_t wo = Tmp(th2, "wo");
  if (recompute) {
    b.qr = qr, b.keys = keys, b.values = values;
    Drop(b.xv);
  } else {
    Drop(qr), Drop(keys), Drop(values);
  }
  Drop(kr);
  return wo;
}

// TransformerBlock.forward under op-level SAC; returns its output.
int64_t Writer::BlockForward(int64_t i, int64_t x) {
  Block& b = block(i);
  const Bytes th2 = 2 * t_ * m_.hidden, tf2 = 2 * t_ * m_.ffn;
  b.x = x;
  Norm n1 = NormForward(false);
  b.n1.out = n1.out;
  int64_t wo = Attention(b, false);
  Drop(b.n1.out);
  int64_t h = Tmp(th2, "x+attn");
  Drop(wo);
  Norm n2 = NormForward(false);
  b.g = Tmp(tf2, "w1");
  int64_t s = Tmp(tf2, "silu"), u = Tmp(tf2, "w3"), p = Tmp(tf2, "silu*w3");
  Drop(s);
  Drop(u);
  b.d = Tmp(th2, "w2");
  Drop(p);
  Drop(n2.out);
  int64_t out = Tmp(th2, "h+ffn");
  Drop(h);
  return out;
}

// The checkpoint's recompute at the block's backward: what autograd saves
// is kept, the rest freed; it stops after silu(w1) * w3 (early stop).
void Writer::Recompute(Block& b) {
  const Bytes th2 = 2 * t_ * m_.hidden, tf2 = 2 * t_ * m_.ffn;
  b.n1 = NormForward(true);
  int64_t wo = Attention(b, true);
  int64_t h = Tmp(th2, "x+attn");
  Drop(wo);
  b.n2 = NormForward(true);
  b.s = Tmp(tf2, "silu");
  b.u = Tmp(tf2, "w3");
  b.p = Tmp(tf2, "silu*w3");
  Drop(h);
}

// Attention's backward from wo's output's gradient to the norm's output's.
int64_t Writer::AttentionBackward(Block& b, Group& g) {
  const int64_t h = m_.hidden;
  const Bytes th2 = 2 * t_ * h, th4 = 2 * th2, tk2 = 2 * t_ * kv_, tk4 = 2 * tk2;
  int64_t ga = Tmp(th2, "wo grad_in");
  g.grads.push_back(Tmp(2 * h * h, "wo grad"));
  int64_t dq = Tmp(th2, "dq"), dk = Tmp(th2, "dk"), dv = Tmp(th2, "dv");
  int64_t sd = Tmp(4 * t_ * m_.heads, "softmax_d"), acc = Tmp(th4, "dq_accum");
  Drop(acc), Drop(sd), Drop(ga);
  Drop(b.qr), Drop(b.keys), Drop(b.values), Drop(b.attn), Drop(b.lse);
  int64_t gv = Tmp(tk2, "repeat_kv v grad");
  Drop(dv);
  int64_t gk = Tmp(tk2, "repeat_kv k grad");
  Drop(dk);
  int64_t k1 = Tmp(tk4, "k to fp32");
  Drop(gk);
  int64_t q1 = Tmp(th4, "q to fp32");
  Drop(dq);
  int64_t k2 = Tmp(tk4, "k*conj");
  Drop(k1);
  int64_t q2 = Tmp(th4, "q*conj");
  Drop(q1);
  int64_t gxk = Tmp(tk2, "k to bf16");
  Drop(k2);
  int64_t gxq = Tmp(th2, "q to bf16");
  Drop(q2);
  int64_t gn = Tmp(th2, "wv grad_in");
  g.grads.push_back(Tmp(2 * kv_ * h, "wv grad"));
  Drop(gv);
  for (int64_t* src : {&gxk, &gxq}) {
    int64_t more = Tmp(th2, "wk/wq grad_in");
    g.grads.push_back(Tmp(2 * (src == &gxk ? kv_ : h) * h, "wk/wq grad"));
    Drop(*src);
    Drop(more);  // added into gn in place
  }
  return gn;
}

// The block's backward from its output's gradient; returns its input's.
int64_t Writer::BlockBackward(int64_t i, int64_t grad) {
  Block& b = block(i);
  Group& g = group(i);
  const int64_t h = m_.hidden, f = m_.ffn;
  const Bytes th2 = 2 * t_ * h, tf2 = 2 * t_ * f;
  Recompute(b);
  int64_t gp = Tmp(tf2, "w2 grad_in");
  g.grads.push_back(Tmp(2 * h * f, "w2 grad"));
  Drop(b.p);
  int64_t gs = Tmp(tf2, "mul grad s"), gu = Tmp(tf2, "mul grad u");
  Drop(gp), Drop(b.s), Drop(b.u);
  int64_t gn2 = Tmp(th2, "w3 grad_in");
  g.grads.push_back(Tmp(2 * f * h, "w3 grad"));
  Drop(gu);
  int64_t gg = Tmp(tf2, "silu grad");
  Drop(gs), Drop(b.g);
  int64_t more = Tmp(th2, "w1 grad_in");
  g.grads.push_back(Tmp(2 * f * h, "w1 grad"));
  Drop(gg), Drop(more);
  Drop(b.n2.out);
  int64_t gh = NormBackward(b.n2, gn2, g);
  Drop(gh);  // added into grad (the residual's) in place
  int64_t gn = AttentionBackward(b, g);
  Drop(b.n1.out);
  int64_t gx = NormBackward(b.n1, gn, g);
  Drop(gx);  // added into grad in place: grad is now the input's
  Drop(b.d), Drop(b.x);
  return grad;
}

// Root pre-forward, the embedding, the blocks, the final norm, the output
// projection, the root's post-forward and the loss; returns the loss.
int64_t Writer::Forward() {
  Unshard(root());
  WaitForUnshard(root(), true);
  int64_t x = Tmp(2 * t_ * m_.hidden, "embedding");
  for (int64_t i = 0; i < m_.layers; ++i) {
    Unshard(group(i));
    WaitForUnshard(group(i), true);
    x = BlockForward(i, x);
    if (group(i).reshard_after_forward) {
      for (int64_t& id : group(i).unsharded) Drop(id);
      group(i).unsharded.clear();
    }
  }
  final_norm_ = NormForward(true);
  Drop(x);  // `h = self.norm(h)`: nothing saves the last block's output
  const Bytes tv = t_ * m_.vocab;
  int64_t logits = Tmp(2 * tv, "logits");
  Drop(ag_state_);  // the root's post-forward frees the last all-gather output
  int64_t copy = Tmp(4 * tv, "logits.float()");
  ls_out_ = Tmp(4 * tv, "log_softmax");
  int64_t loss = Tmp(kScalar, "loss");
  Drop(copy);
  Drop(logits);  // del pred
  return loss;
}

// loss.backward(): the loss's three fp32 logit tensors, the output
// projection, the final norm, the blocks last first (each pre-backward
// prefetching the next), the embedding, the root's post-backward from the
// final callback, which then frees the last reduce-scatter input.
void Writer::Backward(int64_t loss) {
  const Bytes tv = t_ * m_.vocab, th2 = 2 * t_ * m_.hidden;
  int64_t nll = Tmp(4 * tv, "nll_loss grad");
  Drop(loss);
  int64_t ls = Tmp(4 * tv, "log_softmax grad");
  Drop(ls_out_), Drop(nll);
  int64_t g16 = Tmp(2 * tv, "logits grad");
  Drop(ls);
  int64_t gn = Tmp(th2, "output grad_in");
  root().grads.push_back(Tmp(2 * m_.vocab * m_.hidden, "output grad"));
  Drop(g16), Drop(final_norm_.out);
  int64_t grad = NormBackward(final_norm_, gn, root());
  for (int64_t i = m_.layers - 1; i >= 0; --i) {
    WaitForUnshard(group(i), false);
    if (i > 0) Unshard(group(i - 1));
    grad = BlockBackward(i, grad);
    PostBackward(group(i));
  }
  root().grads.push_back(Tmp(2 * m_.vocab * m_.hidden, "embedding grad"));
  Drop(grad);
  PostBackward(root());
  Drop(rs_state_);
}

// clip_grad_norm_ (foreach norms, their stack, the total, the clip factor;
// the multiply in place) and AdamW foreach: the moments made at the first
// step (zeros_like per parameter: exp_avg, exp_avg_sq), _foreach_sqrt's
// outputs made and freed; the rest in place.
void Writer::ClipAndOptimizer(bool first) {
  const size_t n = sharded_params_.size();
  std::vector<int64_t> scalars;
  for (size_t i = 0; i < n; ++i) scalars.push_back(Tmp(kScalar, "grad norm"));
  scalars.push_back(Tmp(kScalar * static_cast<Bytes>(n), "stack"));
  for (const char* what : {"total norm", "clip coef", "clamped"})
    scalars.push_back(Tmp(kScalar, what));
  for (int64_t& id : scalars) Drop(id);
  std::vector<Param> order;  // model.parameters(): tok_embeddings, blocks, norm, output
  order.push_back(root().params[0]);
  for (int64_t i = 0; i < m_.layers; ++i) {
    for (const Param& p : group(i).params) order.push_back(p);
  }
  order.push_back(root().params[1]);
  order.push_back(root().params[2]);
  if (first) {
    for (const Param& p : order) {
      moments_.push_back(New(4 * Shard(p), kCompute, "exp_avg"));
      moments_.push_back(New(4 * Shard(p), kCompute, "exp_avg_sq"));
    }
  }
  std::vector<int64_t> sqrt;
  for (const Param& p : order) sqrt.push_back(Tmp(4 * Shard(p), "exp_avg_sq.sqrt()"));
  for (int64_t& id : sqrt) Drop(id);
}

// One train.py iteration: the batch to the device, zero_grad, forward,
// backward, clip and step.
void Writer::Step(int step) {
  int64_t inputs = Tmp(8 * t_, "input_ids"), labels = Tmp(8 * t_, "labels");
  for (Group& g : groups_) Drop(g.sharded_grad);  // zero_grad(set_to_none)
  int64_t loss = Forward();
  Backward(loss);
  ClipAndOptimizer(step == 0);
  Drop(inputs), Drop(labels);
  trace_.push_back(TraceEvent{TraceEvent::Kind::kStepEnd, -1, 0, 0, "step end"});
}

}  // namespace

Result<std::vector<TraceEvent>> BuildTorchtitanFsdpTrace(const LlamaShape& shape,
                                                         const FsdpTraceOptions& options) {
  const std::pair<const char*, int64_t> sizes[] = {{"layers", shape.layers},
                                                   {"hidden", shape.hidden},
                                                   {"ffn", shape.ffn},
                                                   {"heads", shape.heads},
                                                   {"kv_heads", shape.kv_heads},
                                                   {"vocab", shape.vocab},
                                                   {"batch", options.batch},
                                                   {"seq", options.seq},
                                                   {"data_parallel", options.data_parallel},
                                                   {"steps", options.steps}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return Status::InvalidArgument(
          fmt::format("fsdp trace: {} must be positive, got {}", name, value));
    }
  }
  if (shape.hidden % shape.heads != 0 || shape.heads % shape.kv_heads != 0) {
    return Status::InvalidArgument(
        fmt::format("fsdp trace: heads ({}) must divide hidden ({}) and kv_heads ({}) heads",
                    shape.heads, shape.hidden, shape.kv_heads));
  }
  return Writer(shape, options).Write();
}

}  // namespace pipecast
