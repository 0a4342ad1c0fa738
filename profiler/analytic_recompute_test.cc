// The analytic profiler's recomputation fields (profiler/analytic.h): what each granularity
// keeps and reruns, per-op policy (torchtitan's op save list) and Megatron-LM's recompute
// modules, each worked by hand on GPT-3 6.7B, the tiny spec or a small MoE or MLA block.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/formats.h"
#include "profiler/analytic.h"
#include "testing/analytic_test_util.h"

namespace pipecast {
namespace {

using test_util::Eager;
using test_util::Estimate;
using test_util::Flat;
using test_util::Gpt3_6_7B;
using test_util::TinySpec;
using test_util::UnitOptions;
using ::testing::HasSubstr;

TEST(AnalyticTest, RecomputeAndWeightGradientFieldsHandWorked) {
  // Given GPT-3 6.7B at b = 1 with eager attention (s 2048, h 4096, a 32).
  const Model model = Estimate(Gpt3_6_7B(), Eager());
  const LayerProfile& p = model.layers[1].profiles.at(0);
  const Bytes sbh = Bytes{2048} * 4096;
  // Then the core is 5as^2b = 5 * 32 * 2048^2, the rest is 34sbh, a
  // checkpoint is the 2sbh block input and W keeps 32sbh (Qi et al. Table 1).
  EXPECT_EQ(p.attention_core_bytes, Bytes{5} * 32 * 2048 * 2048);
  EXPECT_EQ(p.activation_bytes - *p.attention_core_bytes, 34 * sbh);
  EXPECT_EQ(p.checkpoint_bytes, 2 * sbh);
  EXPECT_EQ(p.weight_grad_bytes, 32 * sbh);
  EXPECT_GT(*p.attention_core_ns, 0);
  EXPECT_LT(*p.attention_core_ns, p.forward_ns);
  // The embedding and the head are not recomputed.
  EXPECT_EQ(model.layers[0].profiles[0].checkpoint_bytes,
            model.layers[0].profiles[0].activation_bytes);
  EXPECT_EQ(model.layers.back().profiles[0].checkpoint_bytes,
            model.layers.back().profiles[0].activation_bytes);
}

TEST(AnalyticTest, PerOpPolicyFieldsHandWorked) {
  // Given GPT-3 6.7B blocks (s 2048, h 4096, a 32, a plain MLP) at b = 1.
  // torchtitan's op policy counts the mms as the model calls them, one per
  // projection: q, k, v, o, fc1, fc2. It keeps the block input (2sbh), the
  // outputs of the 1st, 3rd and 5th mm (q 2sbh, v 2sbh, fc1 8sbh) and the
  // attention's output (2sbh): 16sbh, plus what the attention kernel returns
  // besides (flash: the 4asb logsumexp; eager: the 5as^2b s x s tensors).
  const double s = 2048, h = 4096;
  const Bytes sbh = Bytes{2048} * 4096;
  const Model flash = Estimate(Gpt3_6_7B());
  const LayerProfile& f = flash.layers[1].profiles.at(0);
  EXPECT_EQ(f.op_saved_bytes, 16 * sbh + 4 * 32 * 2048);
  // So the backward rebuilds 18sbh (and the 16-byte RNG state) per block.
  EXPECT_EQ(f.activation_bytes - *f.op_saved_bytes, 18 * sbh + 16);
  EXPECT_GT(*f.op_recompute_ns, 0);
  EXPECT_LT(*f.op_recompute_ns, f.forward_ns);
  // The flat time model: the rerun is the 2nd, 4th and 6th mm (k: 2sh^2,
  // o: 2sh^2, fc2: 8sh^2 FLOPs) and the element-wise traffic but the core's,
  // 2 x 34sbh.
  const Model eager = Estimate(Gpt3_6_7B(), Flat(Eager()));
  const LayerProfile& e = eager.layers[1].profiles.at(0);
  EXPECT_EQ(e.op_saved_bytes, 16 * sbh + Bytes{5} * 32 * 2048 * 2048);
  const double rerun_s = 12 * s * h * h / (989e12 * 0.5) + 2 * 34 * s * h / (3350e9 * 0.7);
  EXPECT_NEAR(static_cast<double>(*e.op_recompute_ns), rerun_s * 1e9, 1);
  // The embedding and the head are not wrapped: all kept, nothing rerun.
  for (const Layer* layer : {&eager.layers.front(), &eager.layers.back()}) {
    EXPECT_EQ(layer->profiles[0].op_saved_bytes, layer->profiles[0].activation_bytes);
    EXPECT_EQ(layer->profiles[0].op_recompute_ns, 0);
  }
  EXPECT_THAT(eager.source.details.at("op_formula"), HasSubstr("every second matmul"));
}

TEST(AnalyticTest, PerOpPolicyCountsGatedAndGroupedProjectionsApart) {
  // Llama 3.1 8B's block (h 4096, 32 query and 8 key/value heads of 128, f
  // 14336) as torchtitan calls it (torchtitan/models/llama/model.py @
  // 9dec370): wq, wk, wv, wo, w1, w3, w2. Kept: the input, wq (4096), wv
  // (1024), w1 (14336) and w2 (4096) outputs and the attention output (4096):
  // 31,744 bf16 elements per token, plus the fp32 logsumexp of 32 heads.
  TransformerSpec spec{.name = "llama-3.1-8b-block",
                       .layers = 1,
                       .hidden = 4096,
                       .heads = 32,
                       .ffn_hidden = 14336,
                       .sequence_length = 1024,
                       .vocab = 128256,
                       .tied_embeddings = false,
                       .learned_positions = false,
                       .gated_mlp = true,
                       .kv_heads = 8,
                       .microbatch_sizes = {1}};
  const Model model = Estimate(spec);
  const LayerProfile& p = model.layers[1].profiles.at(0);
  EXPECT_EQ(p.op_saved_bytes, Bytes{1024} * (31744 * 2 + 32 * 4));
}

TEST(AnalyticTest, PerOpPolicyReRunsTheGroupedExpertsOfAnMoeBlock) {
  // The tiny world (s 8, h 4, 2 heads of 2, flash) with a SwiGLU MoE MLP: 4
  // routed experts of f_e 8, top-2, one shared expert of 8, imbalance 1.
  // torchtitan's MoE block (torchtitan/models/moe.py @ 8a2686c4a) calls, in
  // order, the aten.mms wq, wk, wv, wo, the router's gate, then the shared
  // expert's w1, w3, w2; the routed experts run as torch._grouped_mm, which
  // the op policy neither counts nor saves. Kept per token, bf16 elements:
  // the input (4), wq (4), wv (4), the gate's 4 scores, the shared w3 (8),
  // the attention output (4): 28, x 8 tokens x 2 B = 448 B, plus the fp32
  // logsumexp of 2 heads (8 x 2 x 4 = 64 B): 512 B. The all-to-alls' outputs,
  // which the DeepSeek-V3 list also keeps, exist only at ep > 1: the
  // simulator adds them (OpSavedAllToAllBytes).
  TransformerSpec spec = TinySpec();
  spec.gated_mlp = true;
  spec.moe.experts = 4;
  spec.moe.experts_per_token = 2;
  spec.moe.expert_ffn = 8;
  spec.moe.shared_experts = 1;
  AnalyticOptions options = UnitOptions();
  options.moe_imbalance = 1.0;
  const LayerProfile block = Estimate(spec, options).layers[1].profiles.at(0);
  EXPECT_EQ(block.op_saved_bytes, 512);
  // The flat model on the unit GPU (1 FLOP and 1 byte per us): the rerun is
  // the forward less what is kept, so forward - rerun = the kept mms' FLOPs
  // (wq, wv: 2 x 8 x 4 x 4 = 256 each; the gate 256; the shared w3 2 x 8 x 4
  // x 8 = 512) + the attention core's, which is saved (2 x s x s x heads x
  // (qk + v) = 2 x 8 x 8 x 2 x 4 = 1024): 2304 us. The routed experts'
  // 3072 FLOPs (2 x k x s x 3 x h x f_e) are in the rerun.
  EXPECT_EQ(block.forward_ns - *block.op_recompute_ns, UsToNs(2304));
}

// Megatron-LM's selective recomputation by module (--recompute-modules,
// NVIDIA/Megatron-LM @ d98e8a64): layernorm frees the input and pre-MLP
// norms' outputs (the QKV and MLP inputs) and reruns the two norm kernels;
// moe_act frees the routed experts' activation output (fc2's input) and
// reruns the activation kernel. The tiny world, flat model on the unit GPU
// (1 us per byte): s 8, h 4, bf16.
TEST(AnalyticTest, RecomputeModulesHandWorkedForADenseBlock) {
  const Model model = Estimate(TinySpec(), Eager(UnitOptions()));
  const LayerProfile& block = model.layers[1].profiles.at(0);
  // layernorm: 2 norm outputs x s x h x 2 bytes = 2 x 8 x 4 x 2 = 128 bytes
  // (Korthikanti's 4sbh of the 34sbh, sbh = 32); each norm kernel reads x and
  // writes y, 2 x 64 bytes, so the rerun is 2 x 128 bytes = 256 us.
  EXPECT_EQ(block.layernorm_bytes, 128);
  EXPECT_EQ(block.layernorm_ns, UsToNs(256));
  // A dense block has no routed experts: moe_act drops and reruns nothing.
  EXPECT_EQ(block.moe_act_bytes, 0);
  EXPECT_EQ(block.moe_act_ns, 0);
  // The embedding and the head are not in either module.
  for (const Layer* layer : {&model.layers.front(), &model.layers.back()}) {
    EXPECT_EQ(layer->profiles[0].layernorm_bytes, 0);
    EXPECT_EQ(layer->profiles[0].layernorm_ns, 0);
  }
  EXPECT_THAT(model.source.details.at("recompute_modules_formula"), HasSubstr("output-discarding"));
}

TEST(AnalyticTest, RecomputeModulesHandWorkedForAnMoeBlock) {
  // The tiny world with a SwiGLU MoE MLP: 4 routed experts of f_e 8, top-2,
  // one shared expert of 8, every expert at the mean load (imbalance 1).
  TransformerSpec spec = TinySpec();
  spec.gated_mlp = true;
  spec.moe.experts = 4;
  spec.moe.experts_per_token = 2;
  spec.moe.expert_ffn = 8;
  spec.moe.shared_experts = 1;
  AnalyticOptions options = UnitOptions();
  options.moe_imbalance = 1.0;
  const Model model = Estimate(spec, options);
  const LayerProfile& block = model.layers[1].profiles.at(0);
  // layernorm as in the dense block: 128 bytes, 256 us.
  EXPECT_EQ(block.layernorm_bytes, 128);
  EXPECT_EQ(block.layernorm_ns, UsToNs(256));
  // moe_act: each token's k = 2 copies of an 8-wide activation output, s = 8
  // tokens, 2 bytes: 2 x 8 x 8 x 2 = 256 bytes (the shared expert's 8 columns
  // are not in the module). Its SwiGLU kernel reads gate and up and writes
  // the output: 3 x 256 = 768 bytes, 768 us.
  EXPECT_EQ(block.moe_act_bytes, 256);
  EXPECT_EQ(block.moe_act_ns, UsToNs(768));
  // Tensor parallelism over 2 GPUs with sequence parallelism: the norms'
  // outputs are 1/t of the tokens (64 bytes), the experts' activations 1/t
  // of the columns (128 bytes).
  Result<Model> split =
      EstimateTransformerAt(spec, options, {.degree = 2, .sequence_parallel = true});
  ASSERT_TRUE(split.ok()) << split.status().message();
  EXPECT_EQ(split->layers[1].profiles.at(0).layernorm_bytes, 64);
  EXPECT_EQ(split->layers[1].profiles.at(0).moe_act_bytes, 128);
}

// Megatron-LM's mlp (a plain checkpoint of a dense block's MLP; nothing in an
// MoE block) and mla_up_proj (an output-discarding checkpoint of MLA's
// up-projections and rotary) modules, NVIDIA/Megatron-LM @ d98e8a64
// transformer_layer.py lines 537-539 and multi_latent_attention.py lines
// 983-988. The tiny world (s 8, h 4, 2 heads, a plain MLP of 4h = 16, bf16),
// flat model on the unit GPU (1 FLOP and 1 byte per us), with latent
// attention of q_lora 2, kv_lora 2, nope 2, rope 2, v 2 per head.
TEST(AnalyticTest, RecomputeModulesMlaUpProjAndMlpHandWorked) {
  TransformerSpec spec = TinySpec();
  spec.learned_positions = false;  // rotary, as MLA runs
  spec.mla = {.q_lora_rank = 2,
              .kv_lora_rank = 2,
              .qk_nope_head_dim = 2,
              .qk_rope_head_dim = 2,
              .v_head_dim = 2};
  const Model model = Estimate(spec, UnitOptions());
  const LayerProfile& block = model.layers[1].profiles.at(0);
  // mla_up_proj frees the attention's query (2 heads x (2 + 2)), key (the
  // same) and value (2 x 2): 20 columns x 8 tokens x 2 bytes = 320 bytes. It
  // reruns q_b (8 x 2 -> 8: 2 x 8 x 8 x 2 = 256 FLOPs) and kv_b (8 x 2 -> 2 x
  // (2 + 2): 256 FLOPs) and the rotary kernel on the query's and the key's
  // rotary channels, read and written: 2 x (2 x 2 + 2) x 8 x 2 = 192 bytes.
  EXPECT_EQ(block.mla_up_proj_bytes, 320);
  EXPECT_EQ(block.mla_up_proj_ns, UsToNs(512 + 192));
  // mlp frees fc1's input (8 x 4 x 2 = 64 bytes), fc1's output and fc2's
  // input (16 columns each: 2 x 8 x 16 x 2 = 512): 576 bytes. It reruns fc1
  // and fc2 (2 x 8 x 4 x 16 FLOPs each, 2048), the pre-MLP norm fused into
  // fc1 (read and write 8 x 4 x 2: 128 bytes) and the GeLU (read and write 8
  // x 16 x 2: 512 bytes): 2688 us.
  EXPECT_EQ(block.mlp_bytes, 576);
  EXPECT_EQ(block.mlp_ns, UsToNs(2048 + 128 + 512));
  // Without latent attention mla_up_proj is nothing; an MoE block's mlp is
  // nothing (Megatron's `if not self.is_moe_layer`).
  const LayerProfile plain = Estimate(TinySpec(), UnitOptions()).layers[1].profiles.at(0);
  EXPECT_EQ(plain.mla_up_proj_bytes, 0);
  EXPECT_EQ(plain.mla_up_proj_ns, 0);
  EXPECT_EQ(plain.mlp_bytes, 576);
  TransformerSpec moe = spec;
  moe.gated_mlp = true;
  moe.moe.experts = 4;
  moe.moe.experts_per_token = 2;
  moe.moe.expert_ffn = 8;
  AnalyticOptions balanced = UnitOptions();
  balanced.moe_imbalance = 1.0;
  const LayerProfile routed = Estimate(moe, balanced).layers[1].profiles.at(0);
  EXPECT_EQ(routed.mlp_bytes, 0);
  EXPECT_EQ(routed.mlp_ns, 0);
  EXPECT_EQ(routed.mla_up_proj_bytes, 320);
  // Tensor parallelism over 2 GPUs with sequence parallelism: the query, key
  // and value are split by heads (160 bytes); fc1's input is 1/t of the
  // tokens and the MLP's inside 1/t of its columns (32 + 256 = 288 bytes).
  Result<Model> split =
      EstimateTransformerAt(spec, UnitOptions(), {.degree = 2, .sequence_parallel = true});
  ASSERT_TRUE(split.ok()) << split.status().message();
  EXPECT_EQ(split->layers[1].profiles.at(0).mla_up_proj_bytes, 160);
  EXPECT_EQ(split->layers[1].profiles.at(0).mlp_bytes, 288);
}

}  // namespace
}  // namespace pipecast
