// Reads a HuggingFace `config.json` into the analytic profiler's architecture
// (TransformerSpec), for `profiler analytic --hf-config FILE`.
//
// Known model_types (KnownHfModelTypes): llama, mistral, mixtral, qwen2,
// qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3 (its text_config) and
// gemma3_text, gpt2, gpt_neox, falcon, phi3, deepseek_v2, deepseek_v3. Each
// family's keys, its defaults where transformers' config class has one that
// published files rely on, and what each changes are in docs/profiler.md
// ("--hf-config"). Keys that do not change the estimate (rope_scaling,
// logit soft-capping, dropout, token ids) are not needed; those recorded
// are listed in HfConfig::notes.
//
// The reader fills only the architecture: name, sequence length, micro-batch
// sizes and global batch are the caller's (a training choice, not the
// model's). Stateless; safe from several threads.
#ifndef PIPECAST_PROFILER_HF_CONFIG_H_
#define PIPECAST_PROFILER_HF_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "profiler/analytic.h"

namespace pipecast {

// Tokens per sample `profiler analytic --hf-config` uses when --seq is not
// given: 4096 (Llama 2's and Llama 3's first pre-training stages used 4096
// and 8192; 4096 fits every known family), or the model's own context when
// that is shorter (GPT-2 1024, GPT-NeoX-20B and Falcon-7B 2048). The tool
// says so on stderr, and the file records it.
inline constexpr int kDefaultHfSequenceLength = 4096;

struct HfConfig {
  std::string model_type;  // as the file names it; for gemma3, "gemma3 (text_config: gemma3_text)"
  // The architecture fields of TransformerSpec; name, sequence_length,
  // microbatch_sizes and global_batch are left empty.
  TransformerSpec architecture;
  // What was read and kept though it does not change the estimate, and what
  // the estimate leaves out (a vision tower, DeepSeek-V3's multi-token
  // prediction module), one sentence each.
  std::vector<std::string> notes;
};

// The model_types the reader knows, sorted.
const std::vector<std::string>& KnownHfModelTypes();

// Parses the text of a config.json; `file` names it in errors.
// Fails with InvalidArgument naming the file and the key: malformed JSON (with
// the byte where it breaks), a missing required key, a value of the wrong type
// or out of range, an unknown model_type (listing the known ones), or values
// that contradict each other (hidden_size not divisible by num_attention_heads
// where head_dim is absent, num_key_value_heads not dividing the heads, more
// experts per token than experts).
[[nodiscard]] Result<HfConfig> ParseHfConfig(std::string_view text, const std::string& file);

// ParseHfConfig of the file at `path`; NotFound when it cannot be read.
[[nodiscard]] Result<HfConfig> LoadHfConfig(const std::string& path);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_HF_CONFIG_H_
