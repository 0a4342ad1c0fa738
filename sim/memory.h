// Memory model: the bytes a training run keeps per parameter on each GPU, by
// precision, main-gradient precision, optimizer and how far the
// data-parallel replicas shard that state (ZeRO level). Units: bytes per
// parameter (doubles: shards divide by d).
//
// The unsharded figures (MemoryConfig) follow Megatron-LM's mixed-precision
// optimizer: model parameters in the training precision, main gradients in
// --grad-dtype (fp32 by default, Megatron's default for bf16 training), fp32
// main parameters and Adam's two fp32 moments; with half-precision main
// gradients the optimizer step also keeps a 4-byte fp32 copy of them. The
// default is bf16 parameters, fp32 main gradients, Adam, ZeRO level 0:
// 2 + 4 + 12 = 18 bytes per parameter, Megatron's figure without the
// distributed optimizer (docs/simulator.md, "Memory", lists every figure
// and its source).
//
// Sharding over d data-parallel replicas (ShardedBytesPerParam):
//   level 0  nothing sharded                         (Megatron, plain DDP)
//   level 1  optimizer state, fp32 main parameters   (Megatron's distributed
//            and the fp32 gradient copy               optimizer, ZeRO-1)
//   level 2  also the main gradients                 (ZeRO-2)
//   level 3  also the model parameters               (ZeRO-3, FSDP)
// Levels 0 and 1 equal Megatron-LM's table (docs/source/distrib_optimizer.md):
// fp16/fp16 20 and 4 + 16/d, bf16/fp32 18 and 6 + 12/d, fp32/fp32 16 and
// 8 + 8/d. Levels 2 and 3 follow Rajbhandari et al. 2020 (ZeRO, §5), whose
// K = 12 of mixed-precision Adam has no fp32 gradient copy: fp16/fp16
// 2 + 14/d and 16/d, and per dtype W + (G + K)/d and (W + G + K)/d.
#ifndef PIPECAST_SIM_MEMORY_H_
#define PIPECAST_SIM_MEMORY_H_

#include <string>

#include "base/status.h"
#include "sim/cluster.h"

namespace pipecast {

// The highest ZeRO level: 3 shards parameters, gradients and optimizer state.
inline constexpr int kMaxZeroLevel = 3;

// How a framework runs sharded data parallelism at ZeRO levels 2 and 3
// (docs/simulator.md, "Sharded data parallelism as frameworks run it"). The
// defaults are PyTorch FSDP's FULL_SHARD and DeepSpeed ZeRO-3 as they run out
// of the box, which is what pipecast modelled before these settings existed.
// One small struct so that it moves into the training configuration in one
// edit (issue 23).
struct ShardingConfig {
  // Level 3: free the gathered parameters after each layer's forward and
  // gather them again for its backward (FSDP reshard_after_forward=True,
  // FULL_SHARD; DeepSpeed ZeRO-3). Off: keep the stage's gathered parameters
  // from the forward to the backward, no gather before the backward (FSDP
  // SHARD_GRAD_OP / reshard_after_forward=False, "ZeRO-2-like FSDP").
  bool reshard_after_forward = true;
  // Gathers and reduce-scatters run beside the compute, the next layer's
  // gathered while this one computes (FSDP forward_prefetch and
  // backward_prefetch=BACKWARD_PRE, DeepSpeed's prefetch bucket): an op lasts
  // the longer of the two. Off: each layer waits for its own gather, and its
  // reduce-scatter follows it: compute plus communication.
  bool prefetch = true;
  // Levels 2 and 3 under gradient accumulation: reduce-scatter each
  // micro-batch's gradients (FSDP without no_sync, DeepSpeed ZeRO-2/3). Off:
  // accumulate unsharded gradients and reduce-scatter once, after the last
  // micro-batch (FSDP's no_sync()), so every GPU keeps the stage's whole
  // gradients.
  bool reduce_every_microbatch = true;
  // Hybrid sharding: shard over groups of this many data-parallel replicas
  // and replicate across the groups, all-reducing the gradient shards
  // across them (FSDP HYBRID_SHARD with one group per node, DeepSpeed ZeRO++
  // hpZ and MiCS). 0 = shard over all d replicas. Must divide d.
  int shard_group = 0;

  auto operator<=>(const ShardingConfig&) const = default;
};

// The settings that differ from the defaults, as the planner's labels and the
// text reports write them: "" for the defaults, else space-separated words of
// "reshard=off", "prefetch=off", "reduce=once" (no_sync) and "shard-group=N"
// (HSDP), in that order.
std::string ShardingLabel(const ShardingConfig& sharding);

// FP8 training recipes (--fp8-recipe): how the FP8 tensors of the weight
// products are scaled, which decides the FP8 copies kept beside the bf16
// weights and the quantisation kernels run (docs/simulator.md "Memory",
// docs/profiler.md "FP8").
enum class Fp8Recipe {
  kNone,       // no FP8: bf16, fp16 or fp32 training
  kDelayed,    // per-tensor scales from an amax history (Transformer Engine DelayedScaling)
  kCurrent,    // per-tensor scales from this tensor's amax (TE Float8CurrentScaling, torchao
               // tensorwise)
  kBlockwise,  // 1x128 activation and 128x128 weight blocks (DeepSeek-V3, TE Float8BlockScaling)
  kMxfp8,      // 1x32 blocks with E8M0 scales in hardware (OCP MX, Blackwell)
};
// "none", "delayed", "current", "blockwise" or "mxfp8".
const char* Fp8RecipeName(Fp8Recipe recipe);
// The recipe --fp8-recipe names, or InvalidArgument naming the flag.
[[nodiscard]] Result<Fp8Recipe> ParseFp8Recipe(const std::string& name);
// FP8 bytes kept per parameter of a weight product beside its bf16 weight:
// the FP8 weight and the transposed FP8 copy the backward's input-gradient
// product reads (Hopper's FP8 tensor cores take only the TN layout; TE keeps
// both, TransformerEngine#1429), each with its scales: delayed and current
// 2 x 1 B (one scale per tensor), blockwise 2 x (1 + 4/128^2) B (an fp32
// scale per 128 x 128 block), mxfp8 2 x (1 + 1/32) B (an E8M0 scale per 32
// elements, rowwise and columnwise copies). kNone: 0.
double Fp8WeightCopyBytes(Fp8Recipe recipe);
// OK when `gpu` runs `recipe`: InvalidArgument naming --precision fp8 when
// the GPU has a known bf16 peak and no FP8 peak (A100: no FP8 tensor cores),
// and naming --fp8-recipe mxfp8 when it lacks MXFP8 tensor cores (every
// preset: Hopper scales FP8 in software). A GPU of unknown peak (`ideal`)
// is taken to run any recipe. kNone is always OK.
[[nodiscard]] Status CheckFp8Support(Fp8Recipe recipe, const GpuSpec& gpu);

// How ZeRO level 3 keeps the sharded state (--sharded-state; docs/simulator.md,
// "FSDP2's sharded state"). kZero: the accounting of the levels above (a
// half-precision shard beside the fp32 main copy, the optimizer state and
// the main gradients, all held for the whole step). kFsdp2: PyTorch FSDP2 as
// torchtitan runs it: the sharded parameters are fp32 (they are also the
// optimizer's main copy), the sharded gradients are made in their dtype
// during the backward and set to None by zero_grad, so a GPU keeps 12 B per
// parameter / d (fp32 shard + Adam's moments) until the rank's first
// backward ends and 16 B from there on. Only at level 3.
enum class ShardedState { kZero, kFsdp2 };
// "zero" or "fsdp2".
const char* ShardedStateName(ShardedState state);
// The state --sharded-state names, or InvalidArgument naming the flag.
[[nodiscard]] Result<ShardedState> ParseShardedState(const std::string& name);

struct MemoryConfig {
  double weight_bytes_per_param = 2;      // bf16 model parameters
  double gradient_bytes_per_param = 4;    // fp32 main gradients (--grad-dtype)
  double optimizer_bytes_per_param = 12;  // fp32 main parameters + Adam m + v
  // The fp32 copy of half-precision main gradients that the optimizer step
  // reads (Megatron's 20 bytes for fp16/fp16): 4 with --grad-dtype bf16 or
  // fp16 under mixed precision, else 0. Counted at ZeRO levels 0 and 1 only.
  double gradient_copy_bytes_per_param = 0;
  int zero = 0;             // ZeRO level, 0-3 (see above)
  ShardingConfig sharding;  // how levels 2 and 3 run
  // FP8 training (--precision fp8): the recipe, the FP8 weight copies kept
  // per parameter (Fp8WeightCopyBytes; sharded like the parameters), and
  // whether parameters are gathered in FP8 (--fp8-param-gather: Megatron-LM
  // --fp8-param-gather keeps FP8 primary weights, no bf16 copy, and gathers
  // 1 B per parameter; torchao's enable_fsdp_float8_all_gather, as torchtitan
  // runs FSDP2, gathers 1 B too). kNone: all three unused.
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;
  double fp8_weight_bytes_per_param = 0;
  bool fp8_param_gather = false;
  // How level 3 keeps its shards (ShardedState above).
  ShardedState sharded_state = ShardedState::kZero;
  bool Fsdp2() const { return sharded_state == ShardedState::kFsdp2; }

  // Bytes per parameter a ZeRO-3 all-gather moves and the gathered copy
  // holds: 1 (FP8) with fp8_param_gather, else weight_bytes_per_param.
  double GatherBytesPerParam() const;
  // The same for a layer FP8 training keeps in bf16 (KeptInBf16UnderFp8):
  // 2 B with fp8_param_gather, else GatherBytesPerParam().
  double KeptBf16GatherBytesPerParam() const;
  // The one of the two that the layer named `layer_name` gathers.
  double GatherBytesPerParam(const std::string& layer_name) const;

  // InvalidArgument naming the setting for a negative byte count or a level
  // outside 0-3, and naming the flags that --sharded-state fsdp2 cannot run
  // with: a level below 3 (--zero), gradients accumulated unsharded
  // (--reduce-every-microbatch off) and half-precision main gradients
  // (--grad-dtype bf16/fp16; FSDP2 makes its sharded gradients in the fp32
  // parameters' dtype).
  Status Validate() const;
};

// Whether FP8 training keeps a layer's weights in bf16: the embedding and the
// output head, named as pipecast's profilers name them ("embedding",
// "lm_head"). torchao's convert_to_float8_training swaps only nn.Linear
// modules and torchtitan filters the output out (filter_fqns = ["output"],
// llama3_8b.toml @ e7c0cae), so FSDP2 gathers both in bf16; Megatron-LM's
// FP8 modules are the blocks' Transformer Engine linears.
bool KeptInBf16UnderFp8(const std::string& layer_name);

// What one GPU keeps per parameter of its stages, after sharding.
struct ShardedBytes {
  double weights = 0;  // the parameters, FP8 copies included
  double gradients = 0;
  double optimizer = 0;    // optimizer state, fp32 main parameters, gradient copy
  double fp8_weights = 0;  // of `weights`: the FP8 copies (0 without FP8)
  double Total() const { return weights + gradients + optimizer; }
};

// What one GPU of a t-way tensor-parallel group keeps per parameter of its
// stage: every byte count / t (the layers split t ways; ZeRO over d applies
// on top). The one rule for the simulator, its default partition and the
// planner's estimate. REQUIRES: t >= 1.
MemoryConfig TensorParallelShare(const MemoryConfig& memory, int t);

// The bytes per parameter one of `data_parallel` replicas keeps at
// `memory.zero`: divided by the shard group (memory.sharding.shard_group,
// else d); at levels 2 and 3 without reduce_every_microbatch the gradients
// are kept whole (accumulated unsharded). Under ShardedState::kFsdp2:
// weights the fp32 shard (gradient_bytes_per_param: FSDP2's sharded
// gradients have the parameters' dtype), optimizer the optimizer state
// without the main copy the shard already is (the main copy is
// gradient_bytes_per_param of optimizer_bytes_per_param in mixed precision,
// when weight_bytes_per_param differs from it; none in fp32 training),
// gradients the fp32 sharded gradients, no FP8 copies (torchao casts the
// shard at each gather), all / d: 4 + 8 + 4 = 16 B / d for bf16 and Adam,
// of which the gradients are live only from the backward on (the simulator
// charges them at the end of each rank's first backward op).
// REQUIRES: memory.Validate() is OK and data_parallel >= 1.
ShardedBytes ShardedBytesPerParam(const MemoryConfig& memory, int data_parallel);

// The bytes one GPU keeps per routed-expert parameter (docs/simulator.md
// "Expert parallelism"), from `dense`, ShardedBytesPerParam of the t-way
// share (TensorParallelShare) at `memory.zero`: what ZeRO shards (the
// optimizer state from level 1, gradients from 2 when reduced every
// micro-batch, weights at 3) as dense, since a stage's experts are spread
// over its t x cp x d GPUs either way (etp x ep x edp = t x cp x d); what
// it keeps whole x t / (ep x etp), since each GPU holds experts / ep of the
// experts, each split etp ways, instead of 1 / t of the layer. Equal to
// `dense` when ep x etp = t. REQUIRES: tensor_parallel, expert_shards >= 1.
ShardedBytes ExpertBytesPerParam(const ShardedBytes& dense, const MemoryConfig& memory,
                                 int tensor_parallel, int expert_shards);

// One GPU's bytes of `parameters` parameters of which `expert_parameters`
// are routed experts: each part rounded (as ParameterBytes) per kind.
struct ParameterMemory {
  Bytes weights = 0, gradients = 0, optimizer = 0, fp8_weights = 0;
};
ParameterMemory ParameterMemoryOf(int64_t parameters, int64_t expert_parameters,
                                  const ShardedBytes& dense, const ShardedBytes& expert);

// Bytes per parameter for a training precision, a main-gradient precision
// and an optimizer, at ZeRO level 0:
//   precision bf16 or fp16 (mixed): 2 B parameters and a 4 B fp32 main copy;
//     fp32: 4 B parameters, no main copy;
//   grad_dtype fp32: 4 B main gradients; bf16 or fp16: 2 B, plus the 4 B
//     fp32 copy the optimizer step reads; fp32 precision needs fp32;
//   optimizer adam: 8 B state (fp32 m and v); sgd: 4 B (fp32 momentum);
//     sgd-nomomentum: none.
//   precision fp8: bf16's bytes plus the recipe's FP8 weight copies
//     (Fp8WeightCopyBytes; `fp8_recipe` must name one, "delayed" when
//     empty); with fp8_param_gather the FP8 copies are the primary weights
//     and the 2 B bf16 parameters go.
// So bf16 + fp32 + adam = 2 + 4 + 12 = 18 B (the default), fp16 + fp16 +
// adam = 2 + 2 + 16 = 20 B, fp32 + fp32 + adam = 4 + 4 + 8 = 16 B, fp8
// (delayed) + fp32 + adam = 2 + 2 + 4 + 12 = 20 B (18 B with
// fp8_param_gather). InvalidArgument names the flag otherwise (an FP8
// recipe or FP8 gathers without --precision fp8).
Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer,
                                     const std::string& grad_dtype = "fp32",
                                     const std::string& fp8_recipe = "",
                                     bool fp8_param_gather = false);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_H_
