// Model: the per-layer costs of one model, as read from model.json
// (`pipecast-model/1`, see docs/formats.md).
//
// A layer carries one profile per measured micro-batch size, tensor-parallel
// degree t and sequence parallelism. CostAt() answers for any micro-batch
// size: measured sizes exactly, others interpolated piecewise-linearly
// between the two nearest measured sizes, or scaled in proportion to the
// nearest measured size outside the measured range; the result says which,
// so tools can tell the user the number is not measured. A (t, sequence
// parallelism) with no profiles of its own is scaled from the t = 1
// profiles (ScaleToTensorParallel(), docs/simulator.md "Tensor parallelism")
// and marked as such.
//
// Units: time in ns, sizes in bytes. Plain value types; not synchronised.
#ifndef PIPECAST_SIM_MODEL_H_
#define PIPECAST_SIM_MODEL_H_

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"

namespace pipecast {

// A mixture-of-experts layer's routed experts (their grouped fc1 and fc2
// products, with FP8's casts of their inputs and output gradients) timed at
// one expert-tensor-parallel degree etp on one GPU of the profile's t-way
// group: (etp / t) x the rows of etp = t, 1/etp of each expert's width
// (docs/formats.md `routed_experts`). The entry at etp = t is the part of the
// profile's own times the others replace (CostAt()).
struct RoutedExpertsCost {
  int expert_tensor_parallel = 1;  // etp, >= 1
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;         // input and weight gradients
  TimeNs backward_weight_ns = 0;  // the weight-gradient part of backward_ns
};

// One measurement of one layer at one micro-batch size, on one GPU of a
// t-way tensor-parallel group (t = 1: the whole layer on one GPU). Times and
// bytes are per GPU, tensor-parallel communication excluded.
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
  // Per-op selective recomputation (torchtitan's op policy, docs/formats.md):
  // what the forward keeps (the layer's input and the outputs of the ops the
  // policy saves: every other matrix product, the attention kernel) and the
  // forward time of the ops it reruns in the backward. Absent: --recompute op
  // leaves the layer as off.
  std::optional<Bytes> op_saved_bytes;
  std::optional<TimeNs> op_recompute_ns;
  // Tensor parallelism (docs/formats.md): the bytes of the whole (unsharded)
  // activation one tensor-parallel collective moves (b*s*h*bytes per element
  // for a transformer block), and how many all-reduces of it the layer runs
  // per micro-batch in the forward and in the backward (a Megatron block 2
  // and 2; with sequence parallelism each is an all-gather plus a
  // reduce-scatter of the same tensor).
  std::optional<Bytes> tp_comm_bytes;
  std::optional<int> tp_forward_collectives;
  std::optional<int> tp_backward_collectives;
  // The group this profile was measured on (last, so that older aggregate
  // initialisers keep their meaning).
  int tensor_parallel = 1;         // t, >= 1
  bool sequence_parallel = false;  // only with t > 1
  // Megatron-LM's selective recomputation by module (--recompute-modules,
  // docs/formats.md): what each module's output-discarding checkpoint drops
  // from activation_bytes, and the forward time it reruns in the backward.
  // layernorm: the outputs of the block's input and pre-MLP norms; moe_act:
  // the routed experts' activation output (fc2's input); mla_up_proj: MLA's
  // query, key and value (the up-projections' and rotary's outputs); mlp: a
  // dense block's MLP inside (fc1's input and output, fc2's input). 0 in a
  // layer without the module; absent when the profiler did not give them.
  std::optional<Bytes> layernorm_bytes;
  std::optional<TimeNs> layernorm_ns;
  std::optional<Bytes> moe_act_bytes;
  std::optional<TimeNs> moe_act_ns;
  std::optional<Bytes> mla_up_proj_bytes;
  std::optional<TimeNs> mla_up_proj_ns;
  std::optional<Bytes> mlp_bytes;
  std::optional<TimeNs> mlp_ns;
  // An MoE layer's routed experts at each expert-tensor-parallel degree the
  // profiler timed, sorted by etp, one of them at etp = tensor_parallel; empty
  // when not given (older files: the profile's own shapes, those of etp = t,
  // whatever the run's etp).
  std::vector<RoutedExpertsCost> routed_experts = {};
};

// Tensor-parallel communication a reader derived for a layer whose profiles
// do not give it (formats/: from an analytic model's source.architecture);
// the simulator uses it only where a profile lacks tp_comm_bytes, and says so.
struct TpCommEstimate {
  Bytes bytes_per_sample = 0;  // s*h*bytes per element
  int forward_collectives = 0;
  int backward_collectives = 0;
  std::string from;  // where it came from, for the note
};

// What context parallelism needs of an attention layer (docs/simulator.md,
// "Context parallelism"), derived by the model reader from an analytic
// model's source (source.architecture and source.attention_kernel), not
// written back: the keys and values of the whole sequence one sample
// exchanges (K and V of every key-value head, all s tokens), and the
// attention kernel's forward and backward time for one sample over the whole
// sequence on one GPU (t = 1, cp = 1), at the kernel's published speed.
struct CpAttentionEstimate {
  Bytes kv_bytes_per_sample = 0;  // 2 x s x kv_heads x head_dim x bytes per element
  int64_t kv_heads = 0;           // split over t (replicated past kv_heads)
  double forward_ns_per_sample = 0;
  double backward_ns_per_sample = 0;
  // What the partial-output merges move (ContextParallelMergeBytes): the
  // attention output's, the queries' and K and V's elements of one sample
  // over the whole sequence (s x heads x head_dim; 2 x s x kv_heads x
  // head_dim), and the share of HBM bandwidth memory-bound kernels reach
  // (source.memory_efficiency).
  double out_elements_per_sample = 0;
  double query_elements_per_sample = 0;
  double kv_elements_per_sample = 0;
  double memory_efficiency = 0;
  std::string from;  // where it came from, for the note
};

// A mixture-of-experts layer's routing, as model.json's layer key `moe`
// gives it (docs/formats.md; the analytic profiler writes it for each MoE
// block): what expert parallelism needs to charge the dispatch and combine
// all-to-alls (sim/collectives.h, ExpertAllToAllOf) and to spread the
// experts' weights over ep x etp GPUs (docs/simulator.md "Expert
// parallelism"). The layer's profiles hold the expert compute as one GPU
// with every expert runs it; parameters includes expert_parameters.
struct MoeRouting {
  int experts = 0;  // routed experts E, >= 1
  int top_k = 0;    // routed experts each token goes to, in [1, E]
  // Node-limited routing (DeepSeek-V3): the experts fall in `expert_groups`
  // groups and a token's top-k lie in at most `topk_groups` of them; 0 and 0:
  // no limit.
  int expert_groups = 0;
  int topk_groups = 0;
  int64_t hidden = 0;             // features of one dispatched token
  int64_t expert_parameters = 0;  // every routed expert's weights (t = 1), <= parameters
  int bytes_per_element = 2;      // of the dispatched and combined tokens (bf16)
  // Megatron-LM's --moe-expert-capacity-factor C (0: dropless) and
  // --moe-pad-expert-input-to-capacity: what the all-to-all dispatcher sends
  // (ExpertRowsPerRoute).
  double capacity_factor = 0;
  bool pad_to_capacity = false;
  // The fixed cost of one group (one local expert) in one grouped GEMM call
  // (`group_gemm_us`, the profiler's kGroupedGemmGroupSeconds); absent in
  // older files: no per-group cost is charged. The simulator charges it for
  // the experts / ep local experts in each of the layer's six grouped calls
  // per micro-batch (fc1 and fc2: forward, input and weight gradient).
  std::optional<TimeNs> group_gemm_ns = std::nullopt;
};

// The all-to-all dispatcher's rows per (token, expert) route
// (sim/collectives.h, "Capacity"): C padded to capacity, min(1, C) dropping
// past it, 1 dropless.
inline double ExpertRowsPerRoute(const MoeRouting& m) {
  if (m.capacity_factor <= 0) return 1;
  return m.pad_to_capacity ? m.capacity_factor : std::min(1.0, m.capacity_factor);
}

struct Layer {
  std::string name;
  int64_t parameters = 0;
  std::optional<double> forward_flops;  // per sample
  // Sorted by (tensor_parallel, sequence_parallel, microbatch_size), unique.
  std::vector<LayerProfile> profiles;
  std::optional<TpCommEstimate> tp_comm_estimate;   // not written back
  std::optional<CpAttentionEstimate> cp_attention;  // not written back
  std::optional<MoeRouting> moe;                    // mixture-of-experts layers only
};

// Where the numbers came from: `source` in model.json. `method` is one of
// cupti, cpu, analytic, manual; `details` keeps every other key verbatim
// (as JSON text) so writers can round-trip it.
// source.architecture, typed: the transformer shape a profile was made for
// (the analytic profiler writes it). Read from the JSON once, by the model
// reader (formats/formats.h); a field the file does not give as an integer
// is 0.
struct ModelArchitecture {
  int64_t hidden = 0;
  int64_t sequence_length = 0;
  int64_t heads = 0;     // attention heads: a tensor-parallel degree must divide them
  int64_t kv_heads = 0;  // key-value heads (grouped-query attention), likewise
  // The rest of the shape, for what a step allocates tensor by tensor (the
  // memory replay, sim/memory_replay.h). The analytic profiler has written
  // these keys since its architecture record began; files without them still
  // read (0, "" or nullopt: not stated).
  int64_t layers = 0;      // transformer blocks
  int64_t ffn_hidden = 0;  // the MLP's width (dense blocks)
  int64_t vocab = 0;
  int64_t head_dim = 0;
  int64_t block_norms = 0;     // h-wide norms per block
  int64_t sliding_window = 0;  // 0: every key
  std::string norm;            // "rmsnorm", "layernorm"
  std::optional<bool> gated_mlp;
  std::optional<bool> tied_embeddings;
  std::optional<bool> learned_positions;
  std::optional<bool> qk_norm;
  std::optional<bool> qkv_bias;
  std::optional<bool> output_bias;
  std::optional<bool> mlp_bias;
  std::optional<bool> parallel_block;
  bool moe = false;  // a "moe" object: routed experts
  bool mla = false;  // an "mla" object: DeepSeek's latent attention
};

struct ModelSource {
  std::string method = "manual";
  std::string device;
  std::map<std::string, std::string> details;  // key -> JSON text of value
  // details["architecture"] typed, when it is a JSON object.
  std::optional<ModelArchitecture> architecture;
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
  std::optional<Bytes> op_saved_bytes;
  std::optional<TimeNs> op_recompute_ns;
  std::optional<Bytes> layernorm_bytes;
  std::optional<TimeNs> layernorm_ns;
  std::optional<Bytes> moe_act_bytes;
  std::optional<TimeNs> moe_act_ns;
  std::optional<Bytes> mla_up_proj_bytes;
  std::optional<TimeNs> mla_up_proj_ns;
  std::optional<Bytes> mlp_bytes;
  std::optional<TimeNs> mlp_ns;
  CostOrigin origin = CostOrigin::kMeasured;
  // Tensor parallelism: the collective's bytes (absent: unknown) and counts,
  // whether they came from Layer::tp_comm_estimate, and whether the costs
  // were scaled from t = 1 rather than measured at this (t, sp).
  std::optional<Bytes> tp_comm_bytes;
  int tp_forward_collectives = 0;
  int tp_backward_collectives = 0;
  bool tp_comm_estimated = false;
  bool tp_scaled = false;
  // Set by StageCostTable, not CostAt(): the tensor-parallel communication
  // exposed in forward_ns and backward_ns (0 at t = 1).
  TimeNs tp_forward_ns = 0;
  TimeNs tp_backward_ns = 0;
  // Set by StageCostTable: the context-parallel K/V exchange exposed in
  // forward_ns and backward_ns (0 at cp = 1).
  TimeNs cp_forward_ns = 0;
  TimeNs cp_backward_ns = 0;
  // Set by StageCostTable: the expert-parallel dispatch and combine
  // all-to-alls in forward_ns and backward_ns (0 at ep = 1 or in a dense
  // layer).
  TimeNs ep_forward_ns = 0;
  TimeNs ep_backward_ns = 0;
  // Set by StageCostTable for an MoE layer at ep > 1: its dispatch and combine
  // all-to-alls (ep_forward_ns = ep_backward_ns = their sum), and the share
  // of its compute the routed experts take (the layered pair's "mlp" node,
  // docs/simulator.md "Expert all-to-all overlap"): their forward FLOPs over
  // the layer's, or -1 when the layer gives no forward_flops.
  TimeNs ep_dispatch_ns = 0;
  TimeNs ep_combine_ns = 0;
  double expert_compute_share = -1;
  // Set by StageCostTable for an MoE layer at etp > 1 with the all-to-all
  // dispatcher: the etp all-gathers and reduce-scatter in forward_ns and
  // backward_ns (the input-gradient part), which run on the compute stream
  // inside the routed experts' node, so no overlap hides them.
  TimeNs etp_forward_ns = 0;
  TimeNs etp_backward_ns = 0;
  // CostAt() at an expert-tensor-parallel degree (etp > 0): the routed
  // experts re-costed from the profile's `routed_experts` at etp (the time
  // added to forward_ns and backward_ns over the profile's own, those of
  // etp = t: negative when etp's shapes run faster), or `experts_etp_kept`
  // when a profile used gives no entry at etp (kept at its own shapes).
  TimeNs experts_etp_forward_ns = 0;
  TimeNs experts_etp_backward_ns = 0;
  bool experts_etp_recosted = false;
  bool experts_etp_kept = false;
  // Set by StageCostTable for an MoE layer whose `moe` gives group_gemm_us:
  // the grouped GEMMs' fixed cost per local expert in forward_ns (two calls),
  // in the input-gradient part of backward_ns (two) and in backward_weight_ns
  // (two).
  TimeNs expert_groups_forward_ns = 0;
  TimeNs expert_groups_input_ns = 0;
  TimeNs expert_groups_weight_ns = 0;
};

// The costs at (microbatch_size, tensor_parallel, sequence_parallel): from
// the layer's profiles at that (t, sp) when it has any, else the t = 1
// profiles scaled by ScaleToTensorParallel(). With expert_tensor_parallel >
// 0, each profile used first has its routed experts re-costed at that etp
// (its `routed_experts` entry at etp in place of the one at its own t), so
// interpolation, extrapolation and the t = 1 scaling carry the re-costed
// times; 0 keeps every profile's own (those of etp = t).
// REQUIRES: HasTensorParallelCosts(layer, tensor_parallel, sequence_parallel);
// microbatch_size >= 1.
LayerCost CostAt(const Layer& layer, int microbatch_size, int tensor_parallel = 1,
                 bool sequence_parallel = false, int expert_tensor_parallel = 0);

// Whether CostAt() can answer: profiles at (t, sp) or at t = 1.
bool HasTensorParallelCosts(const Layer& layer, int tensor_parallel, bool sequence_parallel);

// Replicated part of a layer's activations per forward collective, in units
// of tp_comm_bytes, without sequence parallelism: Korthikanti et al. 2022
// (sec. 4.2.1) count 10sbh bytes of a transformer block that tensor
// parallelism does not split (two layernorm inputs 4sbh, the inputs of the
// QKV and first MLP products 2sbh each, two dropout masks sbh each), i.e.
// 5 x the block's b*s*h*2 bytes over its 2 forward all-reduces.
inline constexpr double kReplicatedActivationPerCollective = 2.5;

// The t = 1 cost `c` (with its tp fields) as one GPU of a t-way group would
// see it, when no profile at t exists: times / t; activations by Korthikanti
// et al. 2022: with sequence parallelism all of them / t (sbh(34/t +
// 5as/(ht))), without it only what is not replicated divides (replicated =
// min(activation, 2.5 x tp_comm_bytes x forward collectives), giving
// sbh(10 + 24/t + 5as/(ht)) for a block); checkpoint and output bytes (the
// layer's input and output) / t with sequence parallelism, else unchanged;
// attention core, weight-gradient and workspace bytes / t; the per-op
// policy's saved bytes like the activations (its replicated part the
// checkpoint, the layer's input, when given) and its rerun time / t.
LayerCost ScaleToTensorParallel(const LayerCost& c, int tensor_parallel, bool sequence_parallel);

// The cost `c` (at t, with its tp fields) on one GPU of a cp-way
// context-parallel group, which holds s / cp of each sample's tokens
// (docs/simulator.md, "Context parallelism"): times / cp (every product and
// memory-bound kernel is linear in the tokens; causal attention balanced over
// 2cp chunks gives each rank 1/cp of the s^2 work), and every
// per-token byte count / cp (activations, output, checkpoint, attention
// core, weight-gradient and per-op saved bytes, the tensor-parallel
// collectives' bytes); the workspace (the matmul library's, per call) stays.
// Identity at cp = 1.
LayerCost ScaleToContextParallel(const LayerCost& c, int context_parallel);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MODEL_H_
