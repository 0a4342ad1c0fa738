// Held-out: the other mixture-of-experts rows of NVIDIA NeMo AutoModel's performance summary
// (docs/calibration-moe.md "NeMo AutoModel's MoE rows, held out"). Never tuned on; nothing in
// the model changed for them. Source: NVIDIA-NeMo/Automodel docs/performance-summary.md @
// 89e3a9fdd (2025-10-06), "System: DGX-H100, Precision: BF16", columns GPUs, GBS, MBS, LBS, GA,
// seq, TP, PP, CP, EP, VP, FSDP, kernels, s/step, TFLOP/s/GPU, tokens/s/GPU:
//   Qwen3 MoE 30B | 8 | 512 | 4 | 4 | 16 | 4096 | 1 | 1 | 1 | 8 | - | 8 | TE + DeepEP | 22.14 |
//     212 | 11,842
//   GPT-OSS 20B | 8 | 256 | 2 | 2 | 16 | 4096 | 1 | 1 | 1 | - | - | 8 | TE + DeepEP + FlexAttn |
//     10.04 | 279 | 13,058
//   GPT-OSS 120B | 64 | 512 | 2 | 2 | 4 | 4096 | 1 | 1 | 1 | - | - | 64 | TE + DeepEP + FlexAttn
//     | 4.30 | 231 | 7,626
// Each row's settings come from its examples/benchmark/configs/*_te_deepep.yaml: at 79d0ccfdb
// (the version the table's commit holds) for Qwen3 (ep 8, activation_checkpointing true) and
// GPT-OSS 20B (ep 8, checkpointing true, attn flex); at 2c236e081 (2025-10-08, two days after
// the table) for GPT-OSS 120B, whose 79d0ccfdb file (pp 2, ep 16, GBS 256) is not the table's
// row and whose 2c236e081 file is (pp 1, ep 64, GBS 512, reshard_after_forward true,
// checkpointing false). The table prints EP "-" for GPT-OSS; the files set ep 8 and 64. Qwen3's
// file says global_batch_size 256 where the table says 512: the table's tokens/s/GPU (512 x
// 4096 / 8 / 22.14 = 11,840) is the 512 one, so its GBS and GA 16 are replayed.
// Common to the three (no pipeline): FSDP2 over all d GPUs with ep = d, so edp = 1 and each
// block's FSDP unit leaves its routed experts out (ignored_params, nemo_automodel/components/
// moe/parallelizer.py @ 79d0ccfdb, apply_fsdp): --zero 3, reshard_after_forward = not
// pp_enabled = on. The recipe's gradient accumulation calls get_sync_ctx (nemo_automodel/
// components/distributed/utils.py @ 79d0ccfdb lines 216-235), which turns the sync off only on
// an FSDPModule or a DDP model; apply_fsdp shards model.model, not the ForCausalLM wrapper the
// recipe hands it (parallelizer.py line 171), so the sync stays on: each micro-batch's backward
// reduce-scatters (--reduce-every-microbatch on) and FSDP2's sharded state applies
// (--sharded-state fsdp2);
// fake_balanced_gate (--moe-imbalance 1.0), DeepEP; bf16 parameters, fp32 reduction, Adam.
// TE attention runs at FlashAttention-3's published speed (as in the DeepSeek-V3 row);
// FlexAttention (GPT-OSS) at FlashAttention-2's, pipecast having no FlexAttention rate.
// Each prediction is held within kGuard of what it was when this test was written (a change
// detector, not an acceptance of the error); its parts are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/training_config.h"
#include "testing/published_models.h"

namespace pipecast {
namespace {

constexpr double kGuard = 0.03;

enum class Arch { kQwen3_30b, kGptOss20b, kGptOss120b };

// GPT-OSS typed from its config.json (test_util::GptOssSpec); Qwen3-30B-A3B from examples/hf.
TransformerSpec SpecFor(Arch arch) {
  if (arch == Arch::kGptOss20b) return test_util::GptOssSpec(24, 32);
  if (arch == Arch::kGptOss120b) return test_util::GptOssSpec(36, 128);
  TransformerSpec spec = test_util::HfExampleSpec("qwen3-30b-a3b.json");
  spec.name = "qwen3-30b-a3b";
  return spec;
}

struct Row {
  const char* label;
  Arch arch;
  int gpus, global_batch, mbs, ep;
  Recompute recompute;
  Attention attention;
  double published_s, published_tokens;
  double present_s, present_peak_gib;  // the prediction when this test was written
};

constexpr Row kRows[] = {
    {"Qwen3-30B-A3B, 8 H100, ep 8, FSDP 8", Arch::kQwen3_30b, 8, 512, 4, 8, Recompute::kFull,
     Attention::kFlash3, 22.14, 11842, 22.83, 89.16},
    {"GPT-OSS 20B, 8 H100, ep 8, FSDP 8", Arch::kGptOss20b, 8, 256, 2, 8, Recompute::kFull,
     Attention::kFlash2, 10.04, 13058, 9.10, 60.81},
    {"GPT-OSS 120B, 64 H100, ep 64, FSDP 64", Arch::kGptOss120b, 64, 512, 2, 64, Recompute::kOff,
     Attention::kFlash2, 4.30, 7626, 4.00, 77.20},
};

void Replay(const Row& row) {
  Result<Model> model = test_util::BalancedDeepEpProfile(SpecFor(row.arch), row.mbs, row.attention);
  ASSERT_TRUE(model.ok()) << row.label << ": " << model.status().message();
  Result<Cluster> cluster = ClusterPreset("h100-sxm");
  const int d = row.gpus, m = row.global_batch / (d * row.mbs);
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, m, 1);
  ASSERT_TRUE(cluster.ok() && schedule.ok()) << row.label;
  SimOptions sim;
  TrainingConfig& c = sim.config;
  c.schedule = ScheduleKind::k1F1B;
  c.microbatch_size = row.mbs;
  c.layout.data_parallel = d;
  c.layout.expert_parallel = row.ep;
  c.layout.expert_dispatcher = ExpertDispatcher::kDeepEp;
  c.recompute = row.recompute;
  Result<MemoryConfig> memory = MemoryConfigFor("bf16", "adam", "fp32");
  ASSERT_TRUE(memory.ok()) << memory.status().message();
  c.memory = *memory;
  c.memory.zero = 3;
  c.memory.sharding.reshard_after_forward = true;
  c.memory.sharding.reduce_every_microbatch = true;
  c.memory.sharded_state = ShardedState::kFsdp2;
  sim.record_timeline = false;
  Result<SimResult> r = Simulate(*model, *cluster, *schedule, sim);
  ASSERT_TRUE(r.ok()) << row.label << ": " << r.status().message();

  const double step_s = static_cast<double>(r->iteration_ns) * 1e-9;
  const double tokens = row.global_batch * 4096.0 / step_s / row.gpus;
  const StageResult& k = r->per_rank[0];
  const MemoryBreakdown& mem = k.memory;
  const auto s = [](TimeNs t) { return static_cast<double>(t) * 1e-9; };
  const auto gib = [](Bytes b) { return static_cast<double>(b) / (1 << 30); };
  std::printf(
      "NeMo AutoModel %s, %d micro-batches of %d: published %.2f s/step (%.0f tokens/s/GPU), "
      "predicted %.2f s (%.0f), error %+.1f%% (tokens/s %+.1f%%)\n"
      "  parts, s: pipeline %.2f = busy %.2f (compute about %.2f + TP %.2f + EP all-to-all %.2f "
      "+ exposed sharding %.2f), bubble %.1f%%; after the pipeline %.2f (gradient reduce %.2f, "
      "optimizer %.2f%s)\n"
      "  memory: peak %.2f GiB (an H100 holds %.2f beside the runtime reserve; the limit with the "
      "allocator margin %.2f) = weights %.2f + gathered %.2f + "
      "gradients %.2f + optimizer %.2f + activations %.2f + workspace %.2f\n",
      row.label, m, row.mbs, row.published_s, row.published_tokens, step_s, tokens,
      (step_s / row.published_s - 1) * 100, (tokens / row.published_tokens - 1) * 100,
      s(r->pipeline_ns), s(k.busy_ns),
      s(k.busy_ns - r->ep_comm_ns - k.sharding_exposed_ns - k.tp_comm_ns), s(k.tp_comm_ns),
      s(r->ep_comm_ns), s(k.sharding_exposed_ns), r->bubble_ratio * 100,
      s(r->iteration_ns - r->pipeline_ns), s(r->allreduce_ns), s(r->optimizer_ns),
      r->optimizer_estimated ? ", estimated" : "", gib(k.peak_memory_bytes),
      gib(cluster->gpu.memory_bytes - cluster->gpu.memory_reserve_bytes),
      gib(MemoryLimitBytes(cluster->gpu)), gib(mem.weights), gib(mem.gathered_weights),
      gib(mem.gradients), gib(mem.optimizer), gib(mem.activations_peak), gib(mem.workspace_peak));
  EXPECT_NEAR(step_s, row.present_s, kGuard * row.present_s) << row.label;
  EXPECT_NEAR(gib(k.peak_memory_bytes), row.present_peak_gib, kGuard * row.present_peak_gib)
      << row.label;
}

TEST(AutoModelMoeRows, Qwen3_30bOn8H100sHeldOut) { Replay(kRows[0]); }
TEST(AutoModelMoeRows, GptOss20bOn8H100sHeldOut) { Replay(kRows[1]); }
TEST(AutoModelMoeRows, GptOss120bOn64H100sHeldOut) { Replay(kRows[2]); }

}  // namespace
}  // namespace pipecast
