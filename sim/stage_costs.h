// Stage costs: the one model of what a pipeline stage costs to compute and
// how much activation memory it holds, at one micro-batch size. The
// simulator, the reference engine, the planner's partition and prune passes
// and the validator's plan execution all read it, so prediction and
// measurement count time and memory by the same rule.
//
// A stage holds a contiguous run of layers. Its times are the sums of its
// layers' times at the micro-batch size (CostAt(): measured, interpolated or
// extrapolated, in integer ns). Its activations follow the recomputation
// granularity (docs/simulator.md, "Activation memory"):
//   - off: the forward (F) keeps the stage's activations (the sum over its
//     layers) until the backward (B) or the weight-gradient op (W) ends;
//   - full (Megatron-LM --recompute-granularity full, one layer per
//     checkpoint): F keeps each layer's checkpoint_bytes (its input), and B
//     (or I) reruns the layers one at a time, so on top of the checkpoints it
//     holds one layer's full activations (the largest of the stage's) until
//     it ends; it costs one more forward of the stage. A model without
//     checkpoint_bytes keeps the older whole-stage rule: F keeps only the
//     stage input (0 bytes for the first stage, whose input is token ids) and
//     B rebuilds every layer's activations at once (Chen et al. 2016);
//   - selective (Korthikanti et al. 2022, --recompute-granularity selective):
//     F keeps the activations less each layer's attention_core_bytes, and B
//     (or I) rebuilds one layer's attention core at a time, at the cost of the
//     layers' attention_core_us; with FlashAttention the core is 0 bytes and
//     selective recomputation changes nothing. Without attention_core_bytes
//     it is treated as off.
//   - op (per-op selective, torchtitan's SelectiveAC "op" policy): F keeps
//     each layer's op_saved_bytes (its input and the outputs of the ops the
//     policy saves), and B (or I) rebuilds one layer's activations less those
//     at a time, at the cost of the layers' op_recompute_ns. A layer without
//     the two fields is left as off (with a note).
//   - every:K (torchtitan's layer policy, selective_ac_option = K): the
//     stage's K-th, 2K-th, ... block (counted from 1 within the stage) is
//     checkpointed as under full (its input kept, the block rerun in the
//     backward); the others keep their activations.
//   - full with a Megatron-LM method (--recompute-method uniform|block
//     --recompute-num-layers N, megatron/core/recompute.py
//     checkpointed_forward): uniform groups the stage's blocks in chunks of N
//     (the last one shorter), F keeps each chunk's input and B reruns a chunk
//     at a time, holding all its blocks' activations; block checkpoints the
//     stage's first N blocks one at a time and the rest keep their
//     activations.
//   A block, for every:K and the Megatron methods, is a layer whose
//   checkpoint is smaller than its activations (a transformer block; the
//   embedding and the head give checkpoint_bytes = activation_bytes and, as
//   in Megatron-LM and torchtitan, are never rerun). A layer without
//   checkpoint_bytes takes its input (the previous layer's output_bytes) as
//   its checkpoint, with a note. Each rerun adds the layers' forward times,
//   tensor-parallel collectives included, to B (or I).
// With a split backward (I then W) and every layer's weight_grad_bytes
// given, I ends holding only what W needs (the layers' weight_grad_bytes,
// Qi et al. 2024, Table 1), allocating at its start whatever of that exceeds
// what F kept, and W frees the rest; without the field I frees nothing and W
// frees everything.
// Every op holds the stage's workspace (the largest of its layers') while it
// runs; the stage sends its last layer's output to the next stage.
//
// Tensor parallelism of degree t (docs/simulator.md, "Tensor parallelism"):
// each layer's costs are one GPU's of its t-way group (CostAt() at t: measured
// per-t profiles, else the t = 1 ones scaled), and each layer adds its
// tensor-parallel collectives on the intra-node link to its ops: F the
// forward's, B (or I) the backward's, a full recomputation's rerun the
// forward's again. A collective is a ring all-reduce of tp_comm_bytes over t
// GPUs, 2(t-1) latencies + 2(t-1)/t x bytes / bandwidth; with sequence
// parallelism an all-gather plus a reduce-scatter, (t-1) latencies + (t-1)/t x
// bytes / bandwidth each. With tp_comm_overlap (Megatron-LM --tp-comm-overlap)
// a layer's collectives run beside its matmuls, split in t chunks with the
// first exposed: what an op shows is max(comm / t, comm - the layer's compute
// of that op).
//
// Context parallelism of degree cp (docs/simulator.md, "Context
// parallelism"; Megatron-LM --context-parallel-size, Transformer Engine's
// attention with context parallelism): every GPU of a cp group holds s / cp
// of each sample's tokens (two chunks of s / 2cp, i and 2cp - 1 - i, so that
// causal attention's work is even), so a layer's times and activations are
// its cp = 1 ones / cp (ScaleToContextParallel); each attention layer adds
// the exchange of keys and values (ContextParallelAttention), with the ring
// (p2p) or all-gather algorithm.
//
// Units: ns and bytes. Plain values; StageCostTable is immutable after
// construction and safe to share between threads.
#ifndef PIPECAST_SIM_STAGE_COSTS_H_
#define PIPECAST_SIM_STAGE_COSTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"

namespace pipecast {

struct MemoryConfig;  // sim/memory.h

// Activation recomputation granularity (see above).
enum class Recompute { kOff, kSelective, kFull, kOp, kEvery };
// "off", "selective", "full", "op", "every".
const char* RecomputeName(Recompute recompute);
// The mode named "off", "selective", "full" or "op"; nullopt for anything
// else ("every" needs its K: ParseRecomputeSpec).
std::optional<Recompute> ParseRecompute(std::string_view name);

// Which layers of a stage full recomputation checkpoints (Megatron-LM
// --recompute-method): kEachLayer is pipecast's full rule (every layer its
// own checkpoint, no method given); kUniform and kBlock as above.
enum class RecomputeMethod { kEachLayer, kUniform, kBlock };
// "", "uniform", "block".
const char* RecomputeMethodName(RecomputeMethod method);
// "uniform" or "block"; nullopt for anything else.
std::optional<RecomputeMethod> ParseRecomputeMethod(std::string_view name);

// Megatron-LM's modules of selective recomputation (--recompute-modules,
// megatron/core/transformer/transformer_config.py @ d98e8a64), as bits of
// RecomputeLayers::modules. Modelled: core_attn (the attention core, Megatron's
// default and pipecast's selective), layernorm (the outputs of each block's
// input and pre-MLP norms), moe_act (the routed experts' activation output),
// mla_up_proj (MLA's query, key and value, rebuilt from the latents by the
// up-projections and rotary) and mlp (a dense block's whole MLP; nothing in an
// MoE block); docs/simulator.md "Activation memory". Megatron's other choices
// (moe, shared_experts, ...) are named so that a flag giving one gets a clear
// error.
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1u << 0,
  kRecomputeLayernorm = 1u << 1,
  kRecomputeMoeAct = 1u << 2,
  kRecomputeMlaUpProj = 1u << 3,
  kRecomputeMlp = 1u << 4,
};
// The modules as Megatron-LM names them, comma-separated, in the order above
// ("layernorm,moe_act", "mla_up_proj,mlp"); "" for 0.
std::string RecomputeModulesName(unsigned modules);
// Parses a comma list of Megatron-LM module names into bits; InvalidArgument
// naming --recompute-modules for an empty list, an unknown name, or one of
// Megatron's modules pipecast does not model.
Result<unsigned> ParseRecomputeModules(std::string_view text);

// Selective recomputation of `modules` (RecomputeModule bits, 0: the
// default core_attn, c unchanged): sets c's attention_core_bytes and
// attention_core_ns, which selective recomputation drops and reruns, to the
// sums of the modules' figures (absent when one of them is).
void ApplyRecomputeModules(unsigned modules, LayerCost* c);

// The numbers a recomputation mode takes: K of every:K, Megatron-LM's method
// and N of full, the modules of selective. Defaults: none (the modes off,
// selective of the attention core, full, op).
struct RecomputeLayers {
  int every = 0;                                         // K >= 1 with Recompute::kEvery, else 0
  RecomputeMethod method = RecomputeMethod::kEachLayer;  // only with kFull
  int num_layers = 0;                                    // N >= 1 with kUniform or kBlock, else 0
  // RecomputeModule bits, only with kSelective; 0: Megatron-LM's default,
  // core_attn alone (pipecast's selective before the modules were named).
  unsigned modules = 0;
  auto operator<=>(const RecomputeLayers&) const = default;
};

// The recomputation as the flags and plan.json spell it: "off", "selective",
// "full", "op", "every:K", and with a Megatron-LM method "full-uniform:N" or
// "full-block:N" (the planner's candidate lines); selective with modules other
// than the default "selective:layernorm+moe_act" (a label only: the flags and
// plan.json give the modules apart, --recompute-modules and
// "recompute_modules").
std::string RecomputeSpec(Recompute recompute, const RecomputeLayers& layers);
// Parses "off", "selective", "full", "op" or "every:K" (K an integer >= 1)
// into *recompute and layers->every; false for anything else.
bool ParseRecomputeSpec(std::string_view text, Recompute* recompute, RecomputeLayers* layers);
// InvalidArgument naming the flag when the numbers do not fit the mode:
// every:K with K < 1, --recompute-method without full or without
// --recompute-num-layers N >= 1, N without a method.
Status CheckRecompute(Recompute recompute, const RecomputeLayers& layers);

// How context parallelism exchanges keys and values (Megatron-LM
// --cp-comm-type): kRing passes each rank's K/V block around the ring with
// point-to-point sends beside the attention compute (Transformer Engine's
// AttnFuncWithCPAndKVP2P, "p2p"); kAllGather gathers the whole sequence's K/V
// before attention, as Llama 3 was trained ("all_gather").
enum class CpAlgorithm { kRing, kAllGather };
// "ring" or "allgather".
const char* CpAlgorithmName(CpAlgorithm algorithm);
// "ring" (also "p2p") or "allgather" (also "all_gather"); nullopt otherwise.
std::optional<CpAlgorithm> ParseCpAlgorithm(std::string_view name);

// One attention layer's context-parallel exchange on one GPU for one
// micro-batch (docs/simulator.md, "Context parallelism"). Ring, cp steps per
// pass, step i computing the local queries against the i-th K/V block while
// the next block travels (each step's attention work is the same, 1/cp of
// the rank's, thanks to the 2cp-chunk balancing):
//   forward: steps 0 .. cp-2 each send one K/V block (kv_block_bytes) beside
//     the step's attention forward; exposed = (cp-1) x max(0, hop(block) -
//     attention forward / cp);
//   backward: step 0 sends the K/V block, steps 1 .. cp-2 the K/V block and
//     the accumulated dK/dV block together, step cp-1 the dK/dV block home,
//     each beside the step's attention backward: 2(cp-1) blocks in all;
//     exposed = sum over steps of max(0, hop(bytes of the step) - attention
//     backward / cp);
//   hop(bytes) = the link's latency + bytes / its bandwidth (as pipeline
//   sends).
// All-gather: the forward all-gathers K and V (cp x kv_block_bytes gathered)
// before the attention, the backward gathers them again and reduce-scatters
// dK and dV; nothing overlaps (Llama 3's choice: K/V are small beside Q with
// grouped-query attention). buffer_bytes: the transient buffers the exchange
// adds to the op's workspace (ring: the backward's two send/receive buffers
// of K/V and dK/dV, 4 blocks; all-gather: the gathered K/V and dK/dV).
struct CpAttentionComm {
  Bytes kv_block_bytes = 0;  // this GPU's K and V: s / cp tokens, its key-value heads
  TimeNs forward_comm_ns = 0, backward_comm_ns = 0;  // the link's busy time
  TimeNs forward_exposed_ns = 0, backward_exposed_ns = 0;
  Bytes buffer_bytes = 0;
};
// REQUIRES: cp >= 1; kv_block_bytes, attention times >= 0. All zero at cp = 1.
CpAttentionComm ContextParallelAttention(Bytes kv_block_bytes, TimeNs attention_forward_ns,
                                         TimeNs attention_backward_ns, int context_parallel,
                                         CpAlgorithm algorithm, const Link& link);

// The HBM bytes one GPU's context-parallel attention moves beyond the
// kernel's own for one layer and micro-batch (docs/calibration.md "Context
// parallelism"): the kernel runs once per K/V block (cp calls, where cp = 1
// makes one) and the partial outputs are merged by their log-sum-exp.
// `out`, `query` and `kv` are this GPU's elements of the attention output,
// the queries and K and V together (s / cp tokens, its heads). Bytes read
// plus written, counted from each implementation's code:
// - kAllGather, PyTorch's context-parallel SDPA (what torchtitan runs;
//   torch/distributed/tensor/experimental/_attention.py, late 2024:
//   _templated_ring_attention, _SDPAMerger, _templated_ring_attention_backward),
//   eager ops:
//     forward = out x (12 + 38 (cp-1)) + kv x 4 (cp-1): each partial output
//       cast to fp32 (6 per element), cp-1 merges out - sigmoid(lse' - lse) x
//       (out - out') (32), the result cast back (6), K and V concatenated for
//       the exchange at steps 0 .. cp-2 (4);
//     backward = query x (10 cp + 10) + kv x (25 cp + 3): fp32 gradient
//       buffers zeroed (4) and accumulated at every step (10: read fp32 and
//       bf16, write fp32), dK/dV's half-chunk update and concatenation (13 at
//       steps 1 .. cp-1), the fp32 dK/dV concatenated for the ring (8 per
//       step), K and V concatenated (4 at steps 0 .. cp-2), the results cast
//       to bf16 (6).
// - kRing, Transformer Engine's AttnFuncWithCPAndKVP2P (what Megatron-LM runs),
//   fused corrections:
//     forward = out x (12 + 10 (cp-1)): the first step's output into the fp32
//       result (6), each later step's out += out' x exp(lse' - lse) in one
//       kernel (read 2 + 4, write 4), the result cast back (6);
//     backward = (query + kv) x (4 + 6 (cp-1)): dQ and dK/dV copied (4) and
//       added in bf16 at the later steps (6).
// Both add, for the backward, the fixed passes of the cp - 1 kernel calls
// beyond one, (cp-1) x (4 out + 10 query): FlashAttention-2's dO.O row sums
// (read 2 + 2 per output element) and its fp32 dQ accumulator cleared,
// read and converted (4 + 4 + 2 per query element). The slowest rank (all
// of its merges full) is counted; the log-sum-exp rows (1 / head_dim of the
// output) and the half-chunk copies of the queries are left out. All zero at
// cp = 1.
struct CpMergeBytes {
  double forward = 0;
  double backward = 0;
};
CpMergeBytes ContextParallelMergeBytes(double out, double query, double kv, int context_parallel,
                                       CpAlgorithm algorithm);

struct StageCostOptions {
  int microbatch_size = 1;
  Recompute recompute = Recompute::kOff;
  // The schedule splits the backward into I and W: only for Notes().
  bool split_backward = false;
  int tensor_parallel = 1;  // t: GPUs that split each layer of a stage
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // see above
  Link tp_link;                  // the intra-node link the t GPUs share
  // every:K, Megatron-LM's method (last, so that older aggregate
  // initialisers keep their meaning).
  RecomputeLayers recompute_layers;
  // cp, its algorithm and the link one ring hop crosses (the intra-node link
  // when the t x cp GPUs share a node, else the network's per-GPU share).
  int context_parallel = 1;
  CpAlgorithm cp_algorithm = CpAlgorithm::kRing;
  Link cp_link;
  // The GPU's HBM bandwidth (bytes/s; 0 = unknown): context parallelism's
  // merges run over it (ContextParallelMergeBytes); none are charged when 0.
  double hbm_bytes_per_s = 0;
  // Expert parallelism (docs/simulator.md "Expert parallelism"): ep, etp,
  // and what the dispatch and combine all-to-alls cross (the cluster's
  // intra-node link, its NIC and one GPU's share of the node's NICs, the
  // GPUs of a node). At ep = 1 no layer changes.
  int expert_parallel = 1;
  int expert_tensor_parallel = 1;
  // DeepEP's deduplicated sends or Megatron-LM's NCCL all-to-all of one row
  // per (token, expert) (sim/collectives.h, ExpertDispatcher).
  ExpertDispatcher ep_dispatcher = ExpertDispatcher::kDeepEp;
  Link ep_intra_node;
  Link ep_inter_node;
  double ep_network_gbps_per_gpu = 0;
  int gpus_per_node = 8;
  // The GPU's SMs (GpuSpec::sms; 0 = unknown): the layered expert overlap's compute beside a
  // dispatch or combine runs on the SMs the communication kernels leave (ExpertCommSmShare).
  int gpu_sms = 0;
};

// InvalidArgument naming --expert-parallel and the fix when ep > 1 and the
// model has no mixture-of-experts layer (a layer's `moe`), ep does not
// divide some MoE layer's experts, or the sequence (model.sequence_length,
// else source.architecture) is unknown; naming --expert-tensor-parallel
// when etp > 1 on a model without MoE layers.
Status CheckExpertParallelCosts(const Model& model, int expert_parallel,
                                int expert_tensor_parallel);

// The tokens one GPU dispatches per micro-batch in each MoE layer:
// b x s / (t x cp) (Megatron-LM runs MoE with sequence parallelism, each of
// the t GPUs dispatching its s / t tokens). 0 when the sequence is unknown.
double ExpertTokensPerGpu(const Model& model, const StageCostOptions& options);

// What the per-op policy keeps of one mixture-of-experts layer at ep > 1
// beyond its profile's op_saved_bytes (docs/simulator.md "Recomputation"):
// torchtitan saves the outputs of `_c10d_functional.all_to_all_single`, so
// the dispatched tokens and the combined ones stay, k x hidden elements per
// token each, at `tokens` per GPU (ExpertTokensPerGpu; the dispatch side at
// the mean, as the all-to-all's bytes are): 2 x tokens x k x hidden x
// bytes_per_element. There is no all-to-all at ep = 1, so a profile (made
// for one GPU holding every expert) cannot hold them.
Bytes OpSavedAllToAllBytes(const MoeRouting& routing, double tokens);

// InvalidArgument naming --context-parallel and the fix when cp > 1 and the
// sequence (model.sequence_length, else source.architecture) is unknown or
// not a multiple of 2 x cp (the chunks of the causal balancing), or no layer
// gives the attention shape context parallelism needs (Layer::cp_attention:
// an analytic model with a FlashAttention kernel).
Status CheckContextParallelCosts(const Model& model, int context_parallel);

// One tensor-parallel collective of `bytes` (the unsharded tensor) over t
// GPUs on `link`, as above. 0 for t = 1.
TimeNs TpCollectiveNs(Bytes bytes, int tensor_parallel, bool sequence_parallel, const Link& link);

// InvalidArgument naming the layer and the fix when some layer has no costs
// at (t, sp) (no profiles there nor at t = 1) or, for t > 1, no tp_comm_bytes
// (none in its profiles and none derived from the model's source).
Status CheckTensorParallelCosts(const Model& model, int tensor_parallel, bool sequence_parallel);

// InvalidArgument when the tensor-parallel degree does not divide the
// attention heads or the key-value heads of the model's architecture
// (source.architecture; not checked where the model does not say): each GPU
// of the group holds whole heads. The simulator and the planner (pinned t,
// and the degrees it searches) apply this one rule.
Status CheckTensorParallelHeads(const Model& model, int tensor_parallel);

// InvalidArgument when the model's costs imply more FLOP/s per GPU than the
// GPU can do: a layer's forward_flops x micro-batch size / t over its
// profile's forward time (else the model's forward FLOPs per sample over its
// layers' summed forward time at t = 1), above the GPU's highest dense peak
// (FP8 where it has one, else bf16). An MFU above 100% is no prediction:
// the costs were made for a faster GPU or are wrong (issue 28). Not checked
// where the GPU's peak is unknown (0: ideal, local) or the model gives no
// FLOPs. The message names the layer, the rate, the GPU and its peak, and
// the GPU the model says it was made for when that is another preset
// (`model_gpu`, empty when unknown or the same).
Status CheckCostsWithinPeak(const Model& model, const GpuSpec& gpu, const std::string& gpu_label,
                            const std::string& model_gpu);

// One layer of a stage as the layered expert overlap sees it (docs/simulator.md "Expert
// all-to-all overlap"; Megatron-LM's fine_grained_callables.py at d98e8a64): the compute before
// the dispatch ("pre_dispatch": attention, the pre-MLP norm, shared experts, router and
// permutation; a dense layer's whole compute), the routed experts ("mlp"), each backward split
// into its input-gradient part and its weight-gradient part (run after it without a sync point),
// and the layer's dispatch and combine all-to-alls (0 in a dense layer). Tensor- and
// context-parallel communication stays inside the compute it belongs to.
struct PairLayerCost {
  TimeNs pre_forward = 0, expert_forward = 0;
  TimeNs pre_backward = 0, pre_backward_weight = 0;
  TimeNs expert_backward = 0, expert_backward_weight = 0;
  TimeNs dispatch = 0, combine = 0;
  // The share of the GPU's SMs the dispatch and combine kernels hold while they run
  // (ExpertCommSmShare): a compute node beside one of them runs at 1 - this share of its rate.
  double comm_sm_share = 0;
};

// The SMs DeepEP's normal (high-throughput) dispatch and combine kernels take by default: 20,
// DeepEP's `Buffer.num_sms` (deepseek-ai/DeepEP deep_ep/buffer.py line 30, from the initial
// commit ebfe47e to 92fe2dea; one block per SM, num_sms / 2 channels), which Megatron-LM keeps
// (moe_deepep_num_sms = 20 in transformer_config.py from 8333bd5b; at d98e8a64
// token_dispatcher.py lines 1287-1292 set None -> 20). DeepSeek-V3's report (arXiv
// 2412.19437, section 3.2.2) runs its all-to-alls on 20 SMs as well.
inline constexpr int kDeepEpNormalKernelSms = 20;

// Megatron-LM's combined 1F1B with DeepEP (--overlap-moe-expert-parallel-comm, flex dispatcher):
// the share of a compute node's rate lost while a dispatch or combine of the other micro-batch
// runs beside it, in place of the SM share alone (kDeepEpNormalKernelSms / SMs, 0.152 on an
// H100). FITTED, the one fitted figure of the overlap (docs/calibration-moe.md "Megatron-MoE-
// ModelZoo, Qwen3-235B-A22B on 256 H100s"): the table the issue names (yanring/Megatron-MoE-
// ModelZoo examples/qwen3/readme.md @ 8017e11, now best_practice/qwen3/readme.md) gives the same
// t2 ep32 p8 v4 run without and with the overlap, 19.7 and 17.6 s, so the overlap hid 2.1 s. Both
// ran with forced balance (examples/qwen3/run_235b.sh @ 8017e11 lines 28 and 31), replayed at
// imbalance 1; the layered replay then hides that much at 0.60 (2.10 s; 1.98 s at 0.62, 2.37 s
// at 0.55, 4.58 s at the SM share alone). Megatron's node order, streams and
// events leave nearly every all-to-all beside a longer compute node (docs/simulator.md "Expert
// all-to-all overlap"), so what the run did not hide is in the rate, not the structure: the SMs
// (0.152), the compute's published slowdown beside communication (0.16-0.29) and what no
// component figure isolates (the node-by-node Python launch with a host wait at every forward
// dispatch, skew between the 32 EP ranks at each all-to-all, the norms' SM margin if the run
// set it: 20 in the config's note for the overlap at 8017e11, 24 in the later launcher).
// DualPipe's pairs keep the SM share: the figure is Megatron's implementation's.
inline constexpr double kCombined1F1BComputeLossBesideDeepEp = 0.60;

// The share of a GPU of `gpu_sms` SMs that the expert all-to-all kernels of `dispatcher` hold
// while they run: DeepEP's kDeepEpNormalKernelSms / gpu_sms. 0 where no SM count is sourced
// or known: NCCL's all-to-all (its CTAs, one per channel, depend on the topology NCCL finds:
// no fixed default to cite) and a GPU of unknown SMs (gpu_sms <= 0).
double ExpertCommSmShare(ExpertDispatcher dispatcher, int gpu_sms);

// The two-stream replay of an overlapped pair of a forward over `f`'s layers (in order) and a
// backward over `b`'s layers (last first), Megatron-LM's TransformerLayerSchedulePlan.run and
// TransformerModelChunkSchedulePlan.run (model_chunk_schedule_plan.py at d98e8a64, lines 236-304
// and 554-594): forward layer i beside backward layer nb-1-i, the layers one of them has beyond
// the other's count alone after (the backward's first). Per layer, in issue order, each node
// waiting for its own micro-batch's previous node (the shared CUDA event, pipeline_parallel/
// utils.py lines 336 and 345) and for its stream (FIFO):
//   comm:    combine_bwd  | dispatch_fwd, dispatch_bwd               | combine_fwd
//   compute: pre_fwd      | expert_bwd, expert_bwd_weight, expert_fwd | pre_bwd, pre_bwd_weight
// the weight-gradient parts waiting for nothing but their stream (backward_dw records no event,
// models/common/utils.py line 323). While a dispatch or combine runs, the compute node beside
// it does its work at 1 - that node's comm_sm_share of its rate (the SMs the communication
// kernels leave; a fluid rate, not the matmuls' waves recomputed); the communication nodes keep
// their times. Returns the end of the last node (rounded to the nearest ns), both inputs ready
// at 0 and both streams free. `b_weight`: false for a backward without its weight gradient (I).
// `comm_share_override` >= 0 replaces the share of every node whose comm_sm_share is above 0
// (DeepEP's): kCombined1F1BComputeLossBesideDeepEp for Megatron-LM's combined 1F1B.
TimeNs LayeredPairNs(const std::vector<PairLayerCost>& f, const std::vector<PairLayerCost>& b,
                     bool b_weight, double comm_share_override = -1);

// Costs of one stage at one micro-batch size.
struct StageCost {
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;          // whole backward, including recompute_ns
  TimeNs backward_weight_ns = 0;   // W part of backward_ns
  TimeNs recompute_ns = 0;         // the rerun inside backward_ns (0 without recompute)
  bool has_backward_split = true;  // every layer has backward_weight_us
  Bytes activation_bytes = 0;      // sum over the stage's layers
  Bytes held_bytes = 0;            // kept from F start until B (or I, or W) ends
  Bytes recomputed_bytes = 0;      // rebuilt at B (or I) start, freed when it ends
  // What W keeps from I's end until it ends: the layers' weight_grad_bytes,
  // when every layer gives them (weight_grad_known).
  Bytes weight_grad_bytes = 0;
  bool weight_grad_known = false;
  Bytes input_bytes = 0;      // the previous layer's output (0 for the first stage)
  Bytes output_bytes = 0;     // the last layer's output, sent to the next stage
  Bytes workspace_bytes = 0;  // largest over the stage's layers, held while an op runs
  int64_t parameters = 0;     // unsharded (all t GPUs together)
  // Tensor-parallel communication exposed inside forward_ns and backward_ns
  // (the latter with a full recomputation's rerun of the forward's); 0 at t = 1.
  TimeNs tp_forward_ns = 0;
  TimeNs tp_backward_ns = 0;
  // Context-parallel K/V exchange exposed inside forward_ns and backward_ns
  // (the latter with a full recomputation's rerun); 0 at cp = 1.
  TimeNs cp_forward_ns = 0;
  TimeNs cp_backward_ns = 0;
  // Expert-parallel all-to-alls inside forward_ns and backward_ns (the
  // latter with a full recomputation's rerun); 0 at ep = 1.
  TimeNs ep_forward_ns = 0;
  TimeNs ep_backward_ns = 0;
  // Expert-tensor-parallel all-gathers and reduce-scatters inside
  // forward_ns and backward_ns (the latter with a full recomputation's
  // rerun), on the compute stream: never in PairCommNs. 0 at etp = 1 and
  // for the deepep and allgather dispatchers (their etp is in the above).
  TimeNs etp_forward_ns = 0;
  TimeNs etp_backward_ns = 0;
  // Routed-expert parameters among `parameters` (unsharded, t = 1 counts),
  // which ep x etp GPUs share rather than t (StageParameterBytes).
  int64_t expert_parameters = 0;
  // The stage's layers for the layered expert overlap (PairLayerCost), filled at ep > 1 when
  // the stage has an MoE layer and each of its MoE layers gives its experts' share of the
  // compute; empty otherwise (OverlappedPairNs then uses the whole-compute rule).
  std::vector<PairLayerCost> pair_layers;

  // The tensor-parallel communication inside DurationNs(kind): F forward's,
  // B and I backward's, W none.
  TimeNs TpCommNs(OpKind kind) const;
  // What an op of `kind` may hide behind its overlapped partner's compute:
  // TpCommNs(kind), plus with `expert_comm` its expert all-to-alls (F the
  // forward's, B and I the backward's, W none).
  TimeNs PairCommNs(OpKind kind, bool expert_comm) const;
  // How long an op of `kind` runs: F forward, B the whole backward, I the
  // backward less its W part, W the weight-gradient part.
  TimeNs DurationNs(OpKind kind) const;
  // Activation bytes an op of `kind` allocates at its start: F held, B
  // recomputed, I recomputed plus what W keeps beyond held (when known), W
  // none.
  Bytes ActivationsAtStart(OpKind kind) const;
  // Activation bytes an op of `kind` frees at its end: B everything F and its
  // own start allocated; I (when W's bytes are known) all of it but
  // weight_grad_bytes, W the rest (everything when they are not known); F
  // nothing.
  Bytes ActivationsFreedAtEnd(OpKind kind) const;
  // True for the ops whose end frees the (stage, micro-batch)'s activations
  // (all of them but KeptAfter(kind), which the next op frees): B and W, and
  // I when W's bytes are known.
  bool FreesActivations(OpKind kind) const;
  // What stays allocated after an op that FreesActivations(): W's bytes after
  // I, 0 otherwise.
  Bytes KeptAfter(OpKind kind) const;
};

// What an overlapped F&B pair hides and how it is scaled (TrainingConfig::Pairs).
struct PairOverlap {
  double factor = 1.0;       // OverlapSettings::overlap_factor
  bool expert_comm = false;  // the expert all-to-alls hide too (--ep-overlap)
  // The pairs are Megatron-LM's combined 1F1B (TrainingConfig::CombinesForwardBackward): in the
  // layered rule a compute node beside a DeepEP dispatch or combine runs at
  // 1 - kCombined1F1BComputeLossBesideDeepEp of its rate instead of the SM share alone.
  bool combined_1f1b = false;
};

// How long action `i` of a rank's list runs: DurationNs(kind), or for a half of an overlapped
// F&B pair (Action::overlapped; its partner is list[i + 1] for the forward, list[i - 1] for
// the backward) its share of the pair (docs/simulator.md, "Overlapped F&B" and "Expert
// all-to-all overlap"). Each half's communication (PairCommNs: tensor-parallel, and the expert
// all-to-alls with overlap.expert_comm) hides behind the other half's compute, as far as that
// compute lasts:
//   forward half  = F - min(F_comm, B - B_comm),  backward half = B - min(B_comm, F - F_comm),
// each then scaled by overlap.factor and rounded to the nearest ns. Without such
// communication the pair lasts factor x (F + B). With overlap.expert_comm and both stages'
// pair_layers known, the layered rule instead (docs/simulator.md "Expert all-to-all overlap"):
// the pair hides H = (its layers' F and B in turn) - LayeredPairNs(...), shared between the
// halves in proportion to their all-to-alls; tensor-parallel collectives stay in the compute.
// REQUIRES: the pairs are well formed (ValidateSchedule).
TimeNs ActionDurationNs(const std::vector<StageCost>& costs, const std::vector<Action>& list,
                        size_t i, const PairOverlap& overlap);
// The pair's two halves from their stages' costs (ActionDurationNs' model): the forward of
// `f`, the backward of kind `b_kind` (B or I) of `b`.
struct PairHalvesNs {
  TimeNs forward = 0, backward = 0;
};
PairHalvesNs OverlappedPairNs(const StageCost& f, const StageCost& b, OpKind b_kind,
                              const PairOverlap& overlap);

// Bytes of `parameters` parameters at `bytes_per_param`, rounded to nearest.
Bytes ParameterBytes(int64_t parameters, double bytes_per_param);

// The copy reduce of a bidirectional schedule (DualPipe, docs/simulator.md): per rank, each
// partner rank it shares model stages with (stage k on rank k's holder and on stage k + p's)
// and the gradient bytes of those stages at `gradient_bytes_per_param` (the sharded bytes per
// parameter, ShardedBytesPerParam). Copies on one rank sum locally and are left out. Empty
// maps for other schedules. The simulator times these bytes and the validator exchanges them.
std::vector<std::map<int, Bytes>> CopyReduceBytes(const Schedule& schedule,
                                                  const std::vector<StageCost>& costs,
                                                  double gradient_bytes_per_param);

// Maxima over runs of a fixed list: O(1) per query after O(n log n) (a
// sparse table), or a plain scan for short lists.
class RangeMax {
 public:
  RangeMax() = default;
  explicit RangeMax(std::vector<int64_t> values);
  // The largest of values[first..last]. REQUIRES: 0 <= first <= last < size.
  int64_t Max(int first, int last) const;

 private:
  std::vector<std::vector<int64_t>> levels_;  // levels_[k][i]: max of [i, i + 2^k)
};

// Every layer of one model costed once at one micro-batch size, with prefix
// sums and range maxima, so that the costs of any run of layers follow:
// O(layers log layers) to build, O(1) for a stage's costs.
class StageCostTable {
 public:
  // REQUIRES: every layer has profiles (sorted); options.microbatch_size >= 1;
  // CheckTensorParallelCosts(model, t, sp) is OK.
  StageCostTable(const Model& model, const StageCostOptions& options);

  int NumLayers() const { return static_cast<int>(layers_.size()); }
  const LayerCost& Layer(int layer) const { return layers_[layer]; }
  const StageCostOptions& options() const { return options_; }

  // Costs of the stage holding `stage`, whose input is the output of layer
  // stage.first_layer - 1.
  // REQUIRES: 0 <= first_layer <= last_layer < NumLayers().
  StageCost Stage(StageLayers stage) const;
  // Stage() with pair_layers left empty: for callers that read its bytes, parameters and times
  // but no overlapped pair (the memory estimates), without copying the layers.
  StageCost StageWithoutPairLayers(StageLayers stage) const;
  // Stage()'s bytes and parameters alone (activation, held, recomputed, weight-gradient, input,
  // output and workspace bytes, weight_grad_known, parameters, expert parameters), its times 0
  // and pair_layers empty: for the memory estimates, which read nothing else and ask for many
  // ranges (the memory-aware partition).
  StageCost StageBytes(StageLayers stage) const;
  // forward + backward (with recompute's extra forward) of the stage: the
  // time a partition balances. Equals Stage(stage).forward_ns + .backward_ns.
  TimeNs TrainingTimeNs(StageLayers stage) const;
  // The bytes a ZeRO-3 all-gather of layer `layer` moves and its gathered
  // copy holds (ZeRO-3 gathers whole layers): its parameters at
  // memory.GatherBytesPerParam(its name), so bf16 for the embedding and the
  // head under FP8 gathers (KeptInBf16UnderFp8).
  Bytes GatheredBytes(int layer, const MemoryConfig& memory) const;
  // Stage() of every stage of `partition`, in order.
  std::vector<StageCost> Stages(const std::vector<StageLayers>& partition) const;

  // What to tell the user about costs that were not measured at this size
  // (one note for interpolated layers, one for extrapolated ones), and about
  // memory the model does not give for the chosen recomputation or split
  // backward (the figure is then estimated by the older rule), or a
  // recomputation that changes nothing.
  std::vector<std::string> Notes() const;
  // One attention layer's context-parallel exchange (cp > 1 and a layer with
  // Layer::cp_attention), as the first such layer gives it.
  const std::optional<CpAttentionComm>& ContextParallelComm() const { return cp_comm_; }
  // That layer's partial-output merges (ContextParallelMergeBytes) in its
  // forward and backward, ns; 0 when cp = 1 or the HBM bandwidth is unknown.
  std::pair<TimeNs, TimeNs> ContextParallelMergeNs() const { return cp_merge_ns_; }
  // True when every layer's costs were measured at this size (none
  // interpolated or extrapolated).
  bool CostsMeasured() const;

 private:
  // Sums over layers [0, l) at index l.
  struct Prefix {
    TimeNs forward_ns = 0, backward_ns = 0, backward_weight_ns = 0;
    Bytes activation_bytes = 0;
    int64_t parameters = 0;
    int unsplit_layers = 0;  // layers without a measured weight-gradient part
    // MoE layers with all-to-alls (ep > 1), and those without their experts' share.
    int moe_layers = 0, moe_unshared = 0;
    Bytes checkpoint_bytes = 0, attention_core_bytes = 0, weight_grad_bytes = 0;
    TimeNs attention_core_ns = 0;
    TimeNs tp_forward_ns = 0, tp_backward_ns = 0;
    TimeNs cp_forward_ns = 0, cp_backward_ns = 0;
    TimeNs ep_forward_ns = 0, ep_backward_ns = 0;
    TimeNs etp_forward_ns = 0, etp_backward_ns = 0;
    int64_t expert_parameters = 0;
    int tp_scaled = 0, tp_comm_estimated = 0;  // layers
    // Layers without checkpoint_bytes, attention_core_bytes, weight_grad_bytes.
    int no_checkpoint = 0, no_attention_core = 0, no_weight_grad = 0;
    // The per-op policy: what F keeps (activation_bytes where a layer lacks
    // the fields), its rerun, and the layers without the fields.
    Bytes op_held_bytes = 0;
    TimeNs op_recompute_ns = 0;
    int no_op = 0;
  };

  // Adds the layer's tensor-parallel collectives to its times (t > 1).
  void AddTensorParallelComm(LayerCost* c) const;
  // Adds an attention layer's context-parallel K/V exchange (cp > 1).
  void AddContextParallelComm(const pipecast::Layer& layer, LayerCost* c);
  // Adds an MoE layer's dispatch and combine all-to-alls and etp's
  // collectives (ep > 1 or etp > 1).
  void AddExpertParallelComm(const pipecast::Layer& layer, double tokens, LayerCost* c);
  // Adds an MoE layer's grouped GEMMs' fixed cost per local expert (moe.group_gemm_us).
  void AddExpertGroupCost(const pipecast::Layer& layer, LayerCost* c) const;
  // What the checkpointing modes (every:K, full with a Megatron-LM method)
  // give a stage: what F keeps, the largest chunk B rebuilds, the rerun and
  // its tensor-parallel collectives.
  struct Checkpointed {
    Bytes held = 0, rebuilt = 0;
    TimeNs rerun_ns = 0, rerun_tp_ns = 0;
  };
  bool ChunkedMode() const;
  // O(layers of the stage).
  Checkpointed CheckpointedStage(StageLayers stage) const;
  // The rerun B (or I) adds under options_.recompute, for `stage`.
  TimeNs RecomputeNs(StageLayers stage, const Prefix& lo, const Prefix& hi) const;
  // The steps of Notes(), in order: unmeasured micro-batch sizes,
  // tensor-parallel estimates, context parallelism's exchange, the all-to-all
  // dispatcher (when not DeepEP), expert tensor parallelism (etp > 1),
  // memory the recomputation lacks figures for, memory the split backward
  // lacks.
  void AddCostOriginNotes(std::vector<std::string>* notes) const;
  void AddTensorParallelNotes(std::vector<std::string>* notes) const;
  void AddContextParallelNote(std::vector<std::string>* notes) const;
  void AddExpertDispatcherNote(std::vector<std::string>* notes) const;
  void AddExpertTensorParallelNote(std::vector<std::string>* notes) const;
  void AddRoutedExpertsNote(std::vector<std::string>* notes) const;
  void AddRecomputeNotes(std::vector<std::string>* notes) const;
  void AddSplitBackwardNote(std::vector<std::string>* notes) const;

  StageCostOptions options_;
  std::vector<LayerCost> layers_;
  std::vector<Prefix> prefix_;    // NumLayers() + 1 entries
  std::string tp_estimate_from_;  // a layer's TpCommEstimate::from, for Notes()
  // One attention layer's exchange and where its shape came from, for Notes().
  std::optional<CpAttentionComm> cp_comm_;
  std::string cp_from_;
  std::pair<TimeNs, TimeNs> cp_merge_ns_{0, 0};
  // The first MoE layer's all-to-alls (ep > 1), for Notes().
  std::optional<ExpertAllToAll> ep_comm_;
  // The model's sequence (0 when unknown): an expert's tokens per sample.
  double model_sequence_ = 0;
  // MoE layers (a `moe` key), and the first one's local experts, for Notes().
  int moe_layer_count_ = 0;
  int64_t first_local_experts_ = 0;
  // Stage(), with or without pair_layers; with `bytes_only`, StageBytes().
  StageCost StageCosts(StageLayers stage, bool pair_layers, bool bytes_only = false) const;
  // Every layer as the layered expert overlap sees it (PairLayers), made once; empty for a model
  // without MoE layers.
  std::vector<PairLayerCost> pair_layers_;
  // Per-layer maxima: workspace, activation, attention core bytes,
  // what the per-op policy rebuilds (activation less op_saved_bytes).
  RangeMax workspace_max_, activation_max_, attention_core_max_, op_rebuilt_max_;
  // Per layer: its parameter count and whether FP8 training keeps it in bf16.
  std::vector<int64_t> parameters_;
  std::vector<bool> kept_in_bf16_under_fp8_;
  // Per layer, for the checkpointing modes: its checkpoint (checkpoint_bytes,
  // else its input) and whether it is a block (checkpoint < activations).
  std::vector<Bytes> checkpoint_;
  std::vector<bool> block_;
};

}  // namespace pipecast

#endif  // PIPECAST_SIM_STAGE_COSTS_H_
