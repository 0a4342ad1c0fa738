// The stage-cost table (sim/stage_costs.h): each layer's cost at the layout with its tensor- and
// context-parallel collectives, recomputation, and the stage sums the engine replays. The
// expert-parallel parts and the overlapped pair's halves are in stage_costs_moe.cc.
#include "sim/stage_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "sim/collectives.h"
#include "sim/memory.h"

namespace pipecast {

namespace {

// One layer as the layered expert overlap sees it (PairLayerCost).
PairLayerCost PairLayerOf(const LayerCost& c, double comm_sm_share) {
  const auto share_of = [](TimeNs ns, double share) {
    return static_cast<TimeNs>(std::llround(static_cast<double>(ns) * share));
  };
  const double share = std::max(0.0, c.expert_compute_share);  // dense: all before the dispatch
  // etp's collectives run inside the routed experts' node (routed_experts_compute), whole.
  // So do the grouped GEMMs' per-expert costs: whole in the experts' node, beside the share.
  const TimeNs forward_whole = c.etp_forward_ns + c.expert_groups_forward_ns;
  const TimeNs input_whole = c.etp_backward_ns + c.expert_groups_input_ns;
  const TimeNs forward = c.forward_ns - c.ep_forward_ns - forward_whole;
  const TimeNs weight = c.has_backward_split ? c.backward_weight_ns - c.expert_groups_weight_ns : 0;
  const TimeNs weight_whole = c.has_backward_split ? c.expert_groups_weight_ns : 0;
  const TimeNs input = c.backward_ns - c.ep_backward_ns - input_whole - weight - weight_whole;
  PairLayerCost l;
  l.expert_forward = share_of(forward, share) + forward_whole;
  l.pre_forward = forward - (l.expert_forward - forward_whole);
  l.expert_backward = share_of(input, share) + input_whole;
  l.pre_backward = input - (l.expert_backward - input_whole);
  l.expert_backward_weight = share_of(weight, share) + weight_whole;
  l.pre_backward_weight = weight - (l.expert_backward_weight - weight_whole);
  l.dispatch = c.ep_dispatch_ns;
  l.combine = c.ep_combine_ns;
  l.comm_sm_share = comm_sm_share;
  return l;
}

}  // namespace

TimeNs StageCost::DurationNs(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return forward_ns;
    case OpKind::kBackward:
      return backward_ns;
    case OpKind::kBackwardInput:
      return backward_ns - backward_weight_ns;
    case OpKind::kBackwardWeight:
      return backward_weight_ns;
  }
  return 0;
}

TimeNs StageCost::TpCommNs(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return tp_forward_ns;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return tp_backward_ns;
    case OpKind::kBackwardWeight:
      return 0;
  }
  return 0;
}

TimeNs StageCost::PairCommNs(OpKind kind, bool expert_comm) const {
  if (!expert_comm || kind == OpKind::kBackwardWeight) return TpCommNs(kind);
  return TpCommNs(kind) + (kind == OpKind::kForward ? ep_forward_ns : ep_backward_ns);
}

TimeNs TpCollectiveNs(Bytes bytes, int tensor_parallel, bool sequence_parallel, const Link& link) {
  if (tensor_parallel <= 1) return 0;
  if (sequence_parallel) {
    return IntraNodeCollectiveNs(link, Collective::kAllGather, bytes, tensor_parallel) +
           IntraNodeCollectiveNs(link, Collective::kReduceScatter, bytes, tensor_parallel);
  }
  return IntraNodeCollectiveNs(link, Collective::kAllReduce, bytes, tensor_parallel);
}

const char* CpAlgorithmName(CpAlgorithm algorithm) {
  return algorithm == CpAlgorithm::kAllGather ? "allgather" : "ring";
}

std::optional<CpAlgorithm> ParseCpAlgorithm(std::string_view name) {
  if (name == "ring" || name == "p2p") return CpAlgorithm::kRing;
  if (name == "allgather" || name == "all_gather") return CpAlgorithm::kAllGather;
  return std::nullopt;
}

CpAttentionComm ContextParallelAttention(Bytes kv_block_bytes, TimeNs attention_forward_ns,
                                         TimeNs attention_backward_ns, int context_parallel,
                                         CpAlgorithm algorithm, const Link& link) {
  CpAttentionComm c;
  const int cp = context_parallel;
  if (cp <= 1) return c;
  c.kv_block_bytes = kv_block_bytes;
  if (algorithm == CpAlgorithm::kAllGather) {
    const Bytes whole = kv_block_bytes * cp;
    const TimeNs gather = IntraNodeCollectiveNs(link, Collective::kAllGather, whole, cp);
    const TimeNs scatter = IntraNodeCollectiveNs(link, Collective::kReduceScatter, whole, cp);
    c.forward_comm_ns = c.forward_exposed_ns = gather;
    c.backward_comm_ns = c.backward_exposed_ns = gather + scatter;
    c.buffer_bytes = 2 * whole;
    return c;
  }
  const auto hop = [&](Bytes bytes) {
    return link.LatencyNs() + TransferNs(bytes, link.bandwidth_gbps);
  };
  const TimeNs forward_step = attention_forward_ns / cp, backward_step = attention_backward_ns / cp;
  // Forward: steps 0 .. cp-2 each send one block beside their compute.
  const TimeNs one = hop(kv_block_bytes), two = hop(2 * kv_block_bytes);
  c.forward_comm_ns = (cp - 1) * one;
  c.forward_exposed_ns = (cp - 1) * std::max<TimeNs>(0, one - forward_step);
  // Backward: step 0 the K/V block, steps 1 .. cp-2 K/V and dK/dV, step cp-1
  // dK/dV (cp = 2: one block at each of the two steps).
  c.backward_comm_ns = 2 * one + (cp - 2) * two;
  c.backward_exposed_ns = 2 * std::max<TimeNs>(0, one - backward_step) +
                          (cp - 2) * std::max<TimeNs>(0, two - backward_step);
  c.buffer_bytes = 4 * kv_block_bytes;
  return c;
}

CpMergeBytes ContextParallelMergeBytes(double out, double query, double kv, int context_parallel,
                                       CpAlgorithm algorithm) {
  const double cp = context_parallel;
  if (cp <= 1) return {};
  const double calls = (cp - 1) * (4 * out + 10 * query);  // the kernel calls beyond one
  if (algorithm == CpAlgorithm::kAllGather) {
    return {.forward = out * (12 + 38 * (cp - 1)) + kv * 4 * (cp - 1),
            .backward = query * (10 * cp + 10) + kv * (25 * cp + 3) + calls};
  }
  return {.forward = out * (12 + 10 * (cp - 1)),
          .backward = (query + kv) * (4 + 6 * (cp - 1)) + calls};
}

namespace {
int64_t SequenceOf(const Model& model) {
  int64_t s = model.sequence_length.value_or(0);
  if (s <= 0 && model.source.architecture) s = model.source.architecture->sequence_length;
  return s;
}
}  // namespace

double ExpertTokensPerGpu(const Model& model, const StageCostOptions& options) {
  const double s = static_cast<double>(SequenceOf(model));
  return s * options.microbatch_size /
         (static_cast<double>(options.tensor_parallel) * options.context_parallel);
}

namespace {
// The names of the granularities, in Recompute order: one table for both directions.
constexpr const char* kRecomputeNames[] = {"off", "selective", "full", "op", "every"};
// The Megatron-LM methods, in RecomputeMethod order.
constexpr const char* kRecomputeMethodNames[] = {"", "uniform", "block"};
// every:K as the flag spells it.
constexpr std::string_view kEveryPrefix = "every:";
// The largest K or N accepted: more layers than any model holds.
constexpr int kMaxRecomputeLayers = 1 << 20;
}  // namespace

const char* RecomputeName(Recompute recompute) {
  return kRecomputeNames[static_cast<int>(recompute)];
}

std::optional<Recompute> ParseRecompute(std::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kRecomputeNames)); ++i) {
    if (name == kRecomputeNames[i] && static_cast<Recompute>(i) != Recompute::kEvery) {
      return static_cast<Recompute>(i);
    }
  }
  return std::nullopt;
}

const char* RecomputeMethodName(RecomputeMethod method) {
  return kRecomputeMethodNames[static_cast<int>(method)];
}

std::optional<RecomputeMethod> ParseRecomputeMethod(std::string_view name) {
  if (name == "uniform") return RecomputeMethod::kUniform;
  if (name == "block") return RecomputeMethod::kBlock;
  return std::nullopt;
}

std::string RecomputeSpec(Recompute recompute, const RecomputeLayers& layers) {
  if (recompute == Recompute::kEvery) return fmt::format("every:{}", layers.every);
  if (recompute == Recompute::kFull && layers.method != RecomputeMethod::kEachLayer) {
    return fmt::format("full-{}:{}", RecomputeMethodName(layers.method), layers.num_layers);
  }
  if (recompute == Recompute::kSelective && layers.modules != 0) {
    std::string modules = RecomputeModulesName(layers.modules);
    std::replace(modules.begin(), modules.end(), ',', '+');
    return fmt::format("selective:{}", modules);
  }
  return RecomputeName(recompute);
}

bool ParseRecomputeSpec(std::string_view text, Recompute* recompute, RecomputeLayers* layers) {
  if (std::optional<Recompute> mode = ParseRecompute(text)) {
    *recompute = *mode;
    layers->every = 0;
    return true;
  }
  if (!text.starts_with(kEveryPrefix)) return false;
  const std::string_view digits = text.substr(kEveryPrefix.size());
  if (digits.empty() || digits.size() > 7 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const int k = std::stoi(std::string(digits));
  if (k < 1 || k > kMaxRecomputeLayers) return false;
  *recompute = Recompute::kEvery;
  layers->every = k;
  return true;
}

Status CheckRecompute(Recompute recompute, const RecomputeLayers& layers) {
  if (recompute == Recompute::kEvery && (layers.every < 1 || layers.every > kMaxRecomputeLayers)) {
    return Status::InvalidArgument(fmt::format(
        "--recompute every:{}: K must be an integer from 1 to {} (every:1 checkpoints every "
        "block, like full)",
        layers.every, kMaxRecomputeLayers));
  }
  if (recompute != Recompute::kEvery && layers.every != 0) {
    return Status::InvalidArgument("the every-K layer count is only for --recompute every:K");
  }
  const bool method = layers.method != RecomputeMethod::kEachLayer;
  if (method && recompute != Recompute::kFull) {
    return Status::InvalidArgument(fmt::format(
        "--recompute-method {} is Megatron-LM's choice of which layers full recomputation "
        "checkpoints: use it with --recompute full (not {})",
        RecomputeMethodName(layers.method), RecomputeSpec(recompute, RecomputeLayers{})));
  }
  if (method && (layers.num_layers < 1 || layers.num_layers > kMaxRecomputeLayers)) {
    return Status::InvalidArgument(fmt::format(
        "--recompute-method {} needs --recompute-num-layers N, N from 1 to {} (uniform: layers "
        "per checkpointed chunk; block: layers checkpointed per stage)",
        RecomputeMethodName(layers.method), kMaxRecomputeLayers));
  }
  if (layers.modules != 0 && recompute != Recompute::kSelective) {
    return Status::InvalidArgument(fmt::format(
        "--recompute-modules {} is Megatron-LM's choice of what selective recomputation "
        "reruns: use it with --recompute selective (not {})",
        RecomputeModulesName(layers.modules), RecomputeSpec(recompute, RecomputeLayers{})));
  }
  if (!method && layers.num_layers != 0) {
    return Status::InvalidArgument(
        "--recompute-num-layers needs --recompute-method uniform or block (and --recompute "
        "full), as in Megatron-LM");
  }
  return Status::Ok();
}

Bytes StageCost::ActivationsAtStart(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return held_bytes;
    case OpKind::kBackward:
      return recomputed_bytes;
    case OpKind::kBackwardInput:
      // I builds W's inputs and output gradients: what of them F did not keep.
      return recomputed_bytes +
             (weight_grad_known ? std::max<Bytes>(0, weight_grad_bytes - held_bytes) : 0);
    case OpKind::kBackwardWeight:
      return 0;
  }
  return 0;
}

Bytes StageCost::ActivationsFreedAtEnd(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return 0;
    case OpKind::kBackward:
      return held_bytes + recomputed_bytes;
    case OpKind::kBackwardInput:
      return weight_grad_known ? ActivationsAtStart(kind) + held_bytes - weight_grad_bytes : 0;
    case OpKind::kBackwardWeight:
      return weight_grad_known ? weight_grad_bytes : held_bytes + recomputed_bytes;
  }
  return 0;
}

bool StageCost::FreesActivations(OpKind kind) const {
  return kind == OpKind::kBackward || kind == OpKind::kBackwardWeight ||
         (kind == OpKind::kBackwardInput && weight_grad_known);
}

Bytes StageCost::KeptAfter(OpKind kind) const {
  return kind == OpKind::kBackwardInput && weight_grad_known ? weight_grad_bytes : 0;
}

Bytes ParameterBytes(int64_t parameters, double bytes_per_param) {
  return std::llround(static_cast<double>(parameters) * bytes_per_param);
}

std::vector<std::map<int, Bytes>> CopyReduceBytes(const Schedule& schedule,
                                                  const std::vector<StageCost>& costs,
                                                  double gradient_bytes_per_param) {
  const int p = schedule.num_ranks;
  std::vector<std::map<int, Bytes>> shared(p);  // per rank: partner -> gradient bytes
  if (!schedule.bidirectional) return shared;
  for (int k = 0; k < schedule.NumModelStages(); ++k) {
    const int a = schedule.stage_rank[k], b = schedule.stage_rank[k + p];
    if (a == b) continue;
    const Bytes bytes = ParameterBytes(costs[k].parameters, gradient_bytes_per_param);
    shared[a][b] += bytes;
    shared[b][a] += bytes;
  }
  return shared;
}

namespace {
// Lists shorter than this are scanned: the table would cost more than it saves. At 64 a
// model of 63 layers (DeepSeek-V3's with its embedding and head) was scanned, and the
// memory-aware partition's searches asked for millions of its maxima (9% of the planner's
// 2048-GPU search); its six levels cost a few hundred bytes per table.
constexpr size_t kRangeMaxTableFrom = 16;
}  // namespace

RangeMax::RangeMax(std::vector<int64_t> values) {
  const size_t n = values.size();
  levels_.push_back(std::move(values));
  if (n < kRangeMaxTableFrom) return;
  for (size_t width = 2; width <= n; width *= 2) {
    const std::vector<int64_t>& below = levels_.back();
    std::vector<int64_t> level(n - width + 1);
    for (size_t i = 0; i + width <= n; ++i) {
      level[i] = std::max(below[i], below[i + width / 2]);
    }
    levels_.push_back(std::move(level));
  }
}

int64_t RangeMax::Max(int first, int last) const {
  const std::vector<int64_t>& base = levels_.front();
  if (levels_.size() == 1) {
    // A plain running maximum (no position kept, no branch): max_element's branch on each
    // element was mispredicted about half the time, 8% of the planner's search on DeepSeek-V3.
    int64_t m = base[first];
    for (int i = first + 1; i <= last; ++i) m = std::max(m, base[i]);
    return m;
  }
  const int k = std::bit_width(static_cast<unsigned>(last - first + 1)) - 1;  // 2^k <= width
  const std::vector<int64_t>& level = levels_[k];
  return std::max(level[first], level[last + 1 - (1 << k)]);
}

StageCostTable::StageCostTable(const Model& model, const StageCostOptions& options)
    : options_(options) {
  const size_t n = model.layers.size();
  layers_.reserve(n);
  prefix_.resize(n + 1);
  const bool experts_split = options.expert_parallel > 1 || options.expert_tensor_parallel > 1;
  const double expert_tokens = experts_split ? ExpertTokensPerGpu(model, options) : 0;
  model_sequence_ = static_cast<double>(SequenceOf(model));
  for (size_t l = 0; l < n; ++l) {
    // An MoE layer's routed experts at the run's etp (CostAt re-costs them from the profile's
    // routed_experts where it gives them).
    const pipecast::Layer& layer = model.layers[l];
    LayerCost& c = layers_.emplace_back(
        CostAt(layer, options.microbatch_size, options.tensor_parallel, options.sequence_parallel,
               layer.moe ? std::max(1, options.expert_tensor_parallel) : 0));
    if (options.context_parallel > 1) c = ScaleToContextParallel(c, options.context_parallel);
    AddExpertGroupCost(layer, &c);
    if (layer.moe) {
      if (moe_layer_count_++ == 0) {
        first_local_experts_ = layer.moe->experts / std::max(1, options.expert_parallel);
      }
    }
    if (options.recompute == Recompute::kSelective) {
      ApplyRecomputeModules(options.recompute_layers.modules, &c);
    }
    if (options.tensor_parallel > 1) AddTensorParallelComm(&c);
    if (options.context_parallel > 1) AddContextParallelComm(model.layers[l], &c);
    if (experts_split) AddExpertParallelComm(model.layers[l], expert_tokens, &c);
    if (options.expert_parallel > 1 && model.layers[l].moe && c.op_saved_bytes) {
      *c.op_saved_bytes += OpSavedAllToAllBytes(*model.layers[l].moe, expert_tokens);
    }
    if (c.tp_comm_estimated && tp_estimate_from_.empty()) {
      tp_estimate_from_ = model.layers[l].tp_comm_estimate->from;
    }
    const Prefix& before = prefix_[l];
    Prefix& after = prefix_[l + 1];
    after.forward_ns = before.forward_ns + c.forward_ns;
    after.backward_ns = before.backward_ns + c.backward_ns;
    after.backward_weight_ns = before.backward_weight_ns + c.backward_weight_ns;
    after.activation_bytes = before.activation_bytes + c.activation_bytes;
    after.parameters = before.parameters + model.layers[l].parameters;
    after.unsplit_layers = before.unsplit_layers + (c.has_backward_split ? 0 : 1);
    after.checkpoint_bytes = before.checkpoint_bytes + c.checkpoint_bytes.value_or(0);
    after.attention_core_bytes = before.attention_core_bytes + c.attention_core_bytes.value_or(0);
    after.weight_grad_bytes = before.weight_grad_bytes + c.weight_grad_bytes.value_or(0);
    after.attention_core_ns = before.attention_core_ns + c.attention_core_ns.value_or(0);
    after.tp_forward_ns = before.tp_forward_ns + c.tp_forward_ns;
    after.tp_backward_ns = before.tp_backward_ns + c.tp_backward_ns;
    after.cp_forward_ns = before.cp_forward_ns + c.cp_forward_ns;
    after.cp_backward_ns = before.cp_backward_ns + c.cp_backward_ns;
    after.ep_forward_ns = before.ep_forward_ns + c.ep_forward_ns;
    after.ep_backward_ns = before.ep_backward_ns + c.ep_backward_ns;
    after.etp_forward_ns = before.etp_forward_ns + c.etp_forward_ns;
    after.etp_backward_ns = before.etp_backward_ns + c.etp_backward_ns;
    const bool moe = c.ep_dispatch_ns + c.ep_combine_ns > 0;
    after.moe_layers = before.moe_layers + (moe ? 1 : 0);
    after.moe_unshared = before.moe_unshared + (moe && c.expert_compute_share < 0 ? 1 : 0);
    after.expert_parameters = before.expert_parameters +
                              (model.layers[l].moe ? model.layers[l].moe->expert_parameters : 0);
    after.tp_scaled = before.tp_scaled + c.tp_scaled;
    after.tp_comm_estimated = before.tp_comm_estimated + c.tp_comm_estimated;
    after.no_checkpoint = before.no_checkpoint + !c.checkpoint_bytes.has_value();
    after.no_attention_core = before.no_attention_core + !c.attention_core_bytes.has_value();
    after.no_weight_grad = before.no_weight_grad + !c.weight_grad_bytes.has_value();
    const bool op = c.op_saved_bytes.has_value() && c.op_recompute_ns.has_value();
    after.op_held_bytes =
        before.op_held_bytes +
        (op ? std::min(*c.op_saved_bytes, c.activation_bytes) : c.activation_bytes);
    after.op_recompute_ns = before.op_recompute_ns + (op ? *c.op_recompute_ns : 0);
    after.no_op = before.no_op + !op;
  }
  std::vector<int64_t> workspace(n), activation(n), attention_core(n), op_rebuilt(n);
  parameters_.resize(n);
  kept_in_bf16_under_fp8_.resize(n);
  checkpoint_.resize(n);
  block_.resize(n);
  for (size_t l = 0; l < n; ++l) {
    const LayerCost& c = layers_[l];
    workspace[l] = c.workspace_bytes;
    activation[l] = c.activation_bytes;
    attention_core[l] = c.attention_core_bytes.value_or(0);
    parameters_[l] = model.layers[l].parameters;
    kept_in_bf16_under_fp8_[l] = KeptInBf16UnderFp8(model.layers[l].name);
    const bool op = c.op_saved_bytes.has_value() && c.op_recompute_ns.has_value();
    op_rebuilt[l] = op ? std::max<Bytes>(0, c.activation_bytes - *c.op_saved_bytes) : 0;
    checkpoint_[l] = std::min(c.activation_bytes,
                              c.checkpoint_bytes.value_or(l > 0 ? layers_[l - 1].output_bytes : 0));
    block_[l] = checkpoint_[l] < c.activation_bytes;
  }
  workspace_max_ = RangeMax(std::move(workspace));
  activation_max_ = RangeMax(std::move(activation));
  attention_core_max_ = RangeMax(std::move(attention_core));
  op_rebuilt_max_ = RangeMax(std::move(op_rebuilt));
  if (prefix_[n].moe_layers > 0) {
    pair_layers_.reserve(n);
    const double comm_sm_share = ExpertCommSmShare(options_.ep_dispatcher, options_.gpu_sms);
    for (const LayerCost& c : layers_) pair_layers_.push_back(PairLayerOf(c, comm_sm_share));
  }
}

bool StageCostTable::ChunkedMode() const {
  return options_.recompute == Recompute::kEvery ||
         (options_.recompute == Recompute::kFull &&
          options_.recompute_layers.method != RecomputeMethod::kEachLayer);
}

StageCostTable::Checkpointed StageCostTable::CheckpointedStage(StageLayers stage) const {
  const RecomputeLayers& r = options_.recompute_layers;
  Checkpointed out;
  Bytes chunk_bytes = 0;  // the open chunk's activations (uniform)
  int block = 0;          // blocks of the stage before this one
  for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
    const LayerCost& c = layers_[l];
    if (!block_[l]) {  // never rerun
      out.held += c.activation_bytes;
      continue;
    }
    bool rerun = false, starts_chunk = true;
    if (options_.recompute == Recompute::kEvery) {
      rerun = (block + 1) % r.every == 0;  // torchtitan counts blocks from 1
    } else if (r.method == RecomputeMethod::kBlock) {
      rerun = block < r.num_layers;
    } else {  // uniform: chunks of N blocks, each keeps its first block's input
      rerun = true;
      starts_chunk = block % r.num_layers == 0;
    }
    ++block;
    if (!rerun) {
      out.held += c.activation_bytes;
      continue;
    }
    if (starts_chunk) {
      out.held += checkpoint_[l];
      chunk_bytes = 0;
    }
    chunk_bytes += c.activation_bytes;
    out.rebuilt = std::max(out.rebuilt, chunk_bytes);
    out.rerun_ns += c.forward_ns;
    out.rerun_tp_ns += c.tp_forward_ns;
  }
  return out;
}

Bytes StageCostTable::GatheredBytes(int layer, const MemoryConfig& memory) const {
  const size_t l = static_cast<size_t>(layer);
  return ParameterBytes(parameters_[l], kept_in_bf16_under_fp8_[l]
                                            ? memory.KeptBf16GatherBytesPerParam()
                                            : memory.GatherBytesPerParam());
}

void StageCostTable::AddTensorParallelComm(LayerCost* c) const {
  const StageCostOptions& o = options_;
  const TimeNs one = TpCollectiveNs(c->tp_comm_bytes.value_or(0), o.tensor_parallel,
                                    o.sequence_parallel, o.tp_link);
  auto exposed = [&](int collectives, TimeNs compute) -> TimeNs {
    const TimeNs comm = collectives * one;
    if (!o.tp_comm_overlap) return comm;
    // The first of t chunks cannot overlap; the rest hide behind the compute.
    return std::max(comm / o.tensor_parallel, comm - compute);
  };
  c->tp_forward_ns = exposed(c->tp_forward_collectives, c->forward_ns);
  c->tp_backward_ns = exposed(c->tp_backward_collectives, c->backward_ns);
  c->forward_ns += c->tp_forward_ns;
  c->backward_ns += c->tp_backward_ns;  // the input-gradient part: W is unchanged
}

void StageCostTable::AddContextParallelComm(const pipecast::Layer& layer, LayerCost* c) {
  if (!layer.cp_attention) return;
  const StageCostOptions& o = options_;
  const CpAttentionEstimate& e = *layer.cp_attention;
  const int t = o.tensor_parallel, cp = o.context_parallel;
  const double b = o.microbatch_size;
  // Key-value heads per GPU: kv_heads / t, one when t exceeds them (Megatron-LM
  // replicates them).
  const double kv_share =
      e.kv_heads >= t ? 1.0 / t : 1.0 / static_cast<double>(std::max<int64_t>(1, e.kv_heads));
  const Bytes block = std::llround(static_cast<double>(e.kv_bytes_per_sample) * b * kv_share / cp);
  const auto per_gpu = [&](double ns_per_sample) {
    return static_cast<TimeNs>(std::llround(ns_per_sample * b / t / cp));
  };
  const CpAttentionComm comm =
      ContextParallelAttention(block, per_gpu(e.forward_ns_per_sample),
                               per_gpu(e.backward_ns_per_sample), cp, o.cp_algorithm, o.cp_link);
  c->cp_forward_ns = comm.forward_exposed_ns;
  c->cp_backward_ns = comm.backward_exposed_ns;
  c->forward_ns += comm.forward_exposed_ns;
  c->backward_ns += comm.backward_exposed_ns;  // the input-gradient part: W is unchanged
  c->workspace_bytes += comm.buffer_bytes;
  // The partial-output merges: this GPU's s / cp tokens of its heads (the
  // query heads split over t, K/V as the exchange above), over HBM.
  std::pair<TimeNs, TimeNs> merge{0, 0};
  const double bytes_per_s = o.hbm_bytes_per_s * e.memory_efficiency;
  if (bytes_per_s > 0) {
    const double local = b / cp;
    const CpMergeBytes m = ContextParallelMergeBytes(
        e.out_elements_per_sample * local / t, e.query_elements_per_sample * local / t,
        e.kv_elements_per_sample * local * kv_share, cp, o.cp_algorithm);
    merge = {std::llround(m.forward / bytes_per_s * 1e9),
             std::llround(m.backward / bytes_per_s * 1e9)};
    c->forward_ns += merge.first;
    c->backward_ns += merge.second;
  }
  if (!cp_comm_) {
    cp_comm_ = comm;
    cp_from_ = e.from;
    cp_merge_ns_ = merge;
  }
}

TimeNs StageCostTable::RecomputeNs(StageLayers stage, const Prefix& lo, const Prefix& hi) const {
  if (ChunkedMode()) return CheckpointedStage(stage).rerun_ns;
  switch (options_.recompute) {
    case Recompute::kOff:
    case Recompute::kEvery:
      return 0;
    case Recompute::kOp:  // the ops the policy does not save, layer by layer
      return hi.op_recompute_ns - lo.op_recompute_ns;
    case Recompute::kFull:  // one more forward of the stage
      return hi.forward_ns - lo.forward_ns;
    case Recompute::kSelective:  // the attention cores' forwards, when the model gives them
      return hi.no_attention_core == lo.no_attention_core
                 ? hi.attention_core_ns - lo.attention_core_ns
                 : 0;
  }
  return 0;
}

TimeNs StageCostTable::TrainingTimeNs(StageLayers stage) const {
  const Prefix& lo = prefix_[stage.first_layer];
  const Prefix& hi = prefix_[stage.last_layer + 1];
  return (hi.forward_ns - lo.forward_ns) + (hi.backward_ns - lo.backward_ns) +
         RecomputeNs(stage, lo, hi);
}

StageCost StageCostTable::Stage(StageLayers stage) const { return StageCosts(stage, true); }

StageCost StageCostTable::StageWithoutPairLayers(StageLayers stage) const {
  return StageCosts(stage, false);
}

StageCost StageCostTable::StageBytes(StageLayers stage) const {
  return StageCosts(stage, false, true);
}

StageCost StageCostTable::StageCosts(StageLayers stage, bool pair_layers, bool bytes_only) const {
  const Prefix& lo = prefix_[stage.first_layer];
  const Prefix& hi = prefix_[stage.last_layer + 1];
  StageCost c;
  c.activation_bytes = hi.activation_bytes - lo.activation_bytes;
  c.parameters = hi.parameters - lo.parameters;
  c.workspace_bytes = std::max<Bytes>(0, workspace_max_.Max(stage.first_layer, stage.last_layer));
  c.output_bytes = layers_[stage.last_layer].output_bytes;
  c.input_bytes = stage.first_layer > 0 ? layers_[stage.first_layer - 1].output_bytes : 0;
  c.held_bytes = c.activation_bytes;
  c.weight_grad_known = hi.no_weight_grad == lo.no_weight_grad;
  if (c.weight_grad_known) c.weight_grad_bytes = hi.weight_grad_bytes - lo.weight_grad_bytes;
  switch (options_.recompute) {
    case Recompute::kOff:
      break;
    case Recompute::kOp:
      c.held_bytes = hi.op_held_bytes - lo.op_held_bytes;
      c.recomputed_bytes =
          std::max<Bytes>(0, op_rebuilt_max_.Max(stage.first_layer, stage.last_layer));
      break;
    case Recompute::kEvery:
      break;  // ChunkedMode(), below
    case Recompute::kFull:
      if (ChunkedMode()) break;
      if (hi.no_checkpoint == lo.no_checkpoint) {  // layer by layer
        c.held_bytes = hi.checkpoint_bytes - lo.checkpoint_bytes;
        c.recomputed_bytes =
            std::max<Bytes>(0, activation_max_.Max(stage.first_layer, stage.last_layer));
      } else {  // the older whole-stage rule
        c.held_bytes = c.input_bytes;
        c.recomputed_bytes = c.activation_bytes;
      }
      break;
    case Recompute::kSelective:
      if (hi.no_attention_core == lo.no_attention_core) {
        c.held_bytes = c.activation_bytes - (hi.attention_core_bytes - lo.attention_core_bytes);
        c.recomputed_bytes =
            std::max<Bytes>(0, attention_core_max_.Max(stage.first_layer, stage.last_layer));
      }
      break;
  }
  c.expert_parameters = hi.expert_parameters - lo.expert_parameters;
  std::optional<Checkpointed> chunked;
  if (ChunkedMode()) {
    chunked = CheckpointedStage(stage);
    c.held_bytes = chunked->held;
    c.recomputed_bytes = chunked->rebuilt;
  }
  if (bytes_only) return c;
  c.forward_ns = hi.forward_ns - lo.forward_ns;
  c.backward_ns = hi.backward_ns - lo.backward_ns;
  c.backward_weight_ns = hi.backward_weight_ns - lo.backward_weight_ns;
  c.has_backward_split = hi.unsplit_layers == lo.unsplit_layers;
  c.tp_forward_ns = hi.tp_forward_ns - lo.tp_forward_ns;
  c.tp_backward_ns = hi.tp_backward_ns - lo.tp_backward_ns;
  c.cp_forward_ns = hi.cp_forward_ns - lo.cp_forward_ns;
  c.cp_backward_ns = hi.cp_backward_ns - lo.cp_backward_ns;
  c.ep_forward_ns = hi.ep_forward_ns - lo.ep_forward_ns;
  c.ep_backward_ns = hi.ep_backward_ns - lo.ep_backward_ns;
  c.etp_forward_ns = hi.etp_forward_ns - lo.etp_forward_ns;
  c.etp_backward_ns = hi.etp_backward_ns - lo.etp_backward_ns;
  if (pair_layers && hi.moe_layers > lo.moe_layers && hi.moe_unshared == lo.moe_unshared) {
    c.pair_layers.assign(pair_layers_.begin() + stage.first_layer,
                         pair_layers_.begin() + stage.last_layer + 1);
  }
  if (chunked) {
    c.recompute_ns = chunked->rerun_ns;
    c.tp_backward_ns += chunked->rerun_tp_ns;  // the rerun blocks' forward collectives
  } else {
    c.recompute_ns = RecomputeNs(stage, lo, hi);
    // A full recomputation reruns the forward with its collectives.
    if (options_.recompute == Recompute::kFull) {
      c.tp_backward_ns += c.tp_forward_ns;
      c.cp_backward_ns += c.cp_forward_ns;
      c.ep_backward_ns += c.ep_forward_ns;
      c.etp_backward_ns += c.etp_forward_ns;
    }
  }
  c.backward_ns += c.recompute_ns;  // the rerun comes before the backward proper
  return c;
}

std::vector<StageCost> StageCostTable::Stages(const std::vector<StageLayers>& partition) const {
  std::vector<StageCost> costs;
  costs.reserve(partition.size());
  for (const StageLayers& stage : partition) costs.push_back(Stage(stage));
  return costs;
}

bool StageCostTable::CostsMeasured() const {
  return std::all_of(layers_.begin(), layers_.end(), [](const LayerCost& c) {
    return c.origin == CostOrigin::kMeasured && !c.tp_scaled && !c.tp_comm_estimated;
  });
}

}  // namespace pipecast
