#include "sim/memory_replay.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "sim/memory.h"
#include "sim/runtime_memory.h"
#include "sim/step_trace.h"

namespace pipecast {
namespace {

constexpr char kFlag[] = "--memory-replay torchtitan-fsdp2";

Status NotDescribed(const std::string& what, const std::string& fix) {
  return Status::InvalidArgument(
      fmt::format("{} describes torchtitan's FSDP2 step only, but {}: {}, or leave "
                  "--memory-replay out for the flat allocator margin",
                  kFlag, what, fix));
}

Status Missing(const char* field) {
  return Status::InvalidArgument(fmt::format(
      "{} needs the model's shape, but source.architecture.{} is missing (a model file written "
      "before it was recorded, or by hand): make the model again with `profiler analytic` "
      "(it writes layers, hidden, ffn_hidden, heads, kv_heads and vocab there), or add the key",
      kFlag, field));
}

Status NotLlama(const char* field, const std::string& value, const char* llama) {
  return NotDescribed(fmt::format("the model's source.architecture.{} is {}", field, value),
                      fmt::format("the trace writes a Llama block ({})", llama));
}

}  // namespace

const char* MemoryReplayName(MemoryReplay replay) {
  return replay == MemoryReplay::kTorchtitanFsdp2 ? "torchtitan-fsdp2" : "off";
}

std::optional<MemoryReplay> ParseMemoryReplay(std::string_view name) {
  if (name == "off") return MemoryReplay::kOff;
  if (name == "torchtitan-fsdp2") return MemoryReplay::kTorchtitanFsdp2;
  return std::nullopt;
}

Result<LlamaShape> TorchtitanLlamaShape(const Model& model) {
  if (!model.source.architecture) {
    return Status::InvalidArgument(fmt::format(
        "{} needs the model's shape, but the model has no source.architecture: make it with "
        "`profiler analytic` (it writes layers, hidden, ffn_hidden, heads, kv_heads and vocab "
        "there)",
        kFlag));
  }
  const ModelArchitecture& a = *model.source.architecture;
  const std::pair<const char*, int64_t> sizes[] = {
      {"layers", a.layers}, {"hidden", a.hidden},     {"ffn_hidden", a.ffn_hidden},
      {"heads", a.heads},   {"kv_heads", a.kv_heads}, {"vocab", a.vocab}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0) return Missing(field);
  }
  // Each departure from torchtitan's Llama (model.py) changes the tensors a
  // block makes; unstated ones (nullopt, "") are refused too.
  auto flag = [](const std::optional<bool>& v) -> std::string {
    return v ? (*v ? "true" : "false") : "not given";
  };
  if (a.moe) return NotLlama("moe", "given (routed experts)", "a dense SwiGLU MLP");
  if (a.mla) return NotLlama("mla", "given (latent attention)", "grouped-query attention");
  if (a.gated_mlp != true) return NotLlama("gated_mlp", flag(a.gated_mlp), "SwiGLU: w1, w3, w2");
  if (a.norm != "rmsnorm") {
    return NotLlama("norm", a.norm.empty() ? "not given" : "\"" + a.norm + "\"", "RMSNorm");
  }
  if (a.tied_embeddings != false) {
    return NotLlama("tied_embeddings", flag(a.tied_embeddings), "an output head of its own");
  }
  if (a.learned_positions != false) {
    return NotLlama("learned_positions", flag(a.learned_positions), "rotary positions");
  }
  const std::pair<const char*, const std::optional<bool>*> absent[] = {
      {"qkv_bias", &a.qkv_bias},
      {"output_bias", &a.output_bias},
      {"mlp_bias", &a.mlp_bias},
      {"qk_norm", &a.qk_norm},
      {"parallel_block", &a.parallel_block}};
  for (const auto& [field, value] : absent) {
    if (*value != false) {
      return NotLlama(field, flag(*value), "no biases, no q/k norms, attention then MLP");
    }
  }
  if (a.block_norms != 2) {
    return NotLlama("block_norms", fmt::format("{}", a.block_norms), "two norms per block");
  }
  if (a.sliding_window != 0) {
    return NotLlama("sliding_window", fmt::format("{}", a.sliding_window), "every key attended");
  }
  if (a.hidden % a.heads != 0 || (a.head_dim != 0 && a.head_dim != a.hidden / a.heads)) {
    return NotLlama("head_dim", fmt::format("{}", a.head_dim), "head_dim = hidden / heads");
  }
  return LlamaShape{.layers = a.layers,
                    .hidden = a.hidden,
                    .ffn = a.ffn_hidden,
                    .heads = a.heads,
                    .kv_heads = a.kv_heads,
                    .vocab = a.vocab};
}

Status CheckTorchtitanFsdp2Config(const TrainingConfig& config) {
  const ParallelLayout& l = config.layout;
  if (l.pipeline_stages != 1) {
    return NotDescribed(fmt::format("--stages is {}", l.pipeline_stages),
                        "the trace is one stage holding every layer; give --stages 1");
  }
  if (l.chunks > 1) {
    return NotDescribed(fmt::format("--chunks is {}", l.chunks), "give --chunks 1");
  }
  if (config.microbatches != 1) {
    return NotDescribed(
        fmt::format("--microbatches is {}", config.microbatches),
        "the trace is one micro-batch per step (no gradient accumulation); give --microbatches 1 "
        "and the local batch as --microbatch-size");
  }
  const std::pair<const char*, int> degrees[] = {
      {"--tensor-parallel", l.tensor_parallel},
      {"--context-parallel", l.context_parallel},
      {"--expert-parallel", l.expert_parallel},
      {"--expert-tensor-parallel", l.expert_tensor_parallel}};
  for (const auto& [flag, value] : degrees) {
    if (value != 1) {
      return NotDescribed(
          fmt::format("{} is {}", flag, value),
          fmt::format("the trace shards over data parallelism alone; give {} 1", flag));
    }
  }
  const MemoryConfig& m = config.memory;
  if (m.zero != 3) {
    return NotDescribed(fmt::format("--zero is {}", m.zero),
                        "FSDP2 shards parameters, gradients and optimizer state; give --zero 3");
  }
  if (m.sharding.shard_group > 0 && m.sharding.shard_group != l.data_parallel) {
    return NotDescribed(fmt::format("--shard-group is {} of {} replicas (hybrid sharding)",
                                    m.sharding.shard_group, l.data_parallel),
                        "the trace shards over every replica; give --shard-group 0");
  }
  if (!m.sharding.reshard_after_forward) {
    return NotDescribed("--reshard-after-forward is off",
                        "torchtitan reshards every block but the last after its forward; give "
                        "--reshard-after-forward on");
  }
  if (config.recompute != Recompute::kOp) {
    return NotDescribed(fmt::format("--recompute is {}", RecomputeName(config.recompute)),
                        "the trace is torchtitan's op-level selective checkpointing; give "
                        "--recompute op");
  }
  if (m.fp8_recipe != Fp8Recipe::kNone) {
    return NotDescribed("--precision is fp8",
                        "the trace is the eager bf16 step (torchao's Float8 tensors and "
                        "torch.compile are not traced); give --precision bf16");
  }
  if (m.weight_bytes_per_param != 2 || m.gradient_bytes_per_param != 4 ||
      m.optimizer_bytes_per_param != 12) {
    return NotDescribed(
        fmt::format("the bytes per parameter are {:g} + {:g} + {:g}", m.weight_bytes_per_param,
                    m.gradient_bytes_per_param, m.optimizer_bytes_per_param),
        "the trace gathers bf16 parameters from fp32 shards, reduces in fp32 and runs AdamW; "
        "give --precision bf16 --optimizer adam --grad-dtype fp32");
  }
  if (config.microbatch_size < 1) {
    return NotDescribed(fmt::format("--microbatch-size is {}", config.microbatch_size),
                        "give the local batch as --microbatch-size");
  }
  return Status::Ok();
}

Result<ReplayedMemory> ReplayTorchtitanFsdp2(const Model& model, const Cluster& cluster,
                                             const TrainingConfig& config) {
  PIPECAST_RETURN_IF_ERROR(CheckTorchtitanFsdp2Config(config));
  PIPECAST_ASSIGN_OR_RETURN(LlamaShape shape, TorchtitanLlamaShape(model));
  if (auto loss = model.source.details.find("loss");
      loss != model.source.details.end() && loss->second.rfind("\"compiled", 0) == 0) {
    return NotDescribed("the model's source.loss is compiled",
                        "the trace is the eager loss (cross_entropy on the fp32 logits); make "
                        "the model with `profiler analytic --loss pytorch`");
  }
  int64_t seq = model.sequence_length.value_or(0);
  if (seq <= 0) seq = model.source.architecture->sequence_length;
  if (seq <= 0) return Missing("sequence_length");
  if (cluster.gpu.memory_bytes <= 0) {
    return Status::InvalidArgument(fmt::format(
        "{} replays the allocator on a GPU's memory, but cluster '{}' has unlimited memory: "
        "choose a GPU with --cluster (or give --memory-gb)",
        kFlag, cluster.name));
  }
  ReplayedMemory out;
  out.replay = MemoryReplay::kTorchtitanFsdp2;
  out.shape = shape;
  out.batch = config.microbatch_size;
  out.seq = seq;
  PIPECAST_ASSIGN_OR_RETURN(
      std::vector<TraceEvent> trace,
      BuildTorchtitanFsdpTrace(shape, FsdpTraceOptions{.batch = out.batch,
                                                       .seq = seq,
                                                       .data_parallel = config.layout.data_parallel,
                                                       .steps = 2}));
  for (const TraceEvent& e : trace) out.requests += e.kind == TraceEvent::Kind::kMalloc ? 1 : 0;
  const DeviceMemory runtime = DeviceMemoryFor(cluster, config, 0, 0);
  out.capacity = cluster.gpu.memory_bytes - runtime.RuntimeBytes();
  Result<ReplayResult> replay = ReplayTrace(trace, out.capacity);
  if (!replay.ok()) {
    return Status::FailedPrecondition(fmt::format(
        "{}: the step does not fit the GPU: {} (the allocator's capacity is {:.2f} GiB, the GPU's "
        "memory less the CUDA context, cuBLAS and NCCL)",
        kFlag, replay.status().message(), ToGiB(out.capacity)));
  }
  out.allocated_peak = replay->run.peak_allocated;
  out.reserved_peak = replay->run.peak_reserved;
  out.retries = replay->run.retries;
  return out;
}

std::string ReplayedMemoryNote(const ReplayedMemory& replay, Bytes cublas_bytes) {
  const LlamaShape& s = replay.shape;
  return fmt::format(
      "memory as the GPU reports it from --memory-replay {}: torchtitan's FSDP2 Llama step "
      "({} layers, hidden {}, ffn {}, {}/{} heads, vocab {}; local batch {}, sequence {}), {} "
      "requests over two steps replayed tensor by tensor through PyTorch's caching allocator "
      "(sim/fsdp_trace.h): reserved peak {:.2f} GiB + cuBLAS {:.2f} = {:.2f} GiB per GPU "
      "(max_memory_reserved), allocated peak {:.2f} GiB{}; the flat {} is not used for it, and "
      "the fit check keeps the simulated peak",
      MemoryReplayName(replay.replay), s.layers, s.hidden, s.ffn, s.heads, s.kv_heads, s.vocab,
      replay.batch, replay.seq, replay.requests, ToGiB(replay.reserved_peak), ToGiB(cublas_bytes),
      ToGiB(replay.reserved_peak + cublas_bytes), ToGiB(replay.allocated_peak),
      replay.retries > 0
          ? fmt::format(" ({} cudaMalloc retries after releasing the cache)", replay.retries)
          : "",
      "allocator margin");
}

}  // namespace pipecast
