// Megatron-LM's training log, read as a coarse measurement: iteration time,
// TFLOP/s per GPU and each rank's memory report. The line formats are
// Megatron-LM's (NVIDIA/Megatron-LM at d98e8a64, megatron/training/training.py
// training_log and megatron/training/utils/common_utils.py report_memory):
//
//    [2025-04-13 23:41:20] iteration       20/    1000 | consumed samples: ... |
//      elapsed time per iteration (ms): 820.7 | throughput per GPU (TFLOP/s/GPU): 123.4 |
//      ... | global batch size:    16 | ...
//   [Rank 0] (after 10 iterations) memory (MB) | allocated: 1464.33 | max allocated: 1464.34 |
//      reserved: 1576.0 | max reserved: 1576.0
//
// Fields are found by their labels between the '|' separators, so lines with
// more or fewer fields (loss, grad norm, learning rate) read the same. MB are
// Megatron's: bytes / 2^20.
//
// Pure functions; thread-safe.
#ifndef PIPECAST_MEASURED_MEGATRON_LOG_H_
#define PIPECAST_MEASURED_MEGATRON_LOG_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast::measured {

// One "iteration N/M |" line: the average over the log interval ending at N.
struct MegatronIteration {
  int64_t iteration = 0;
  double elapsed_ms = 0;         // elapsed time per iteration (ms)
  std::optional<double> tflops;  // throughput per GPU (TFLOP/s/GPU)
  std::optional<int64_t> global_batch;
  int line = 0;  // 1-based line in the log
};

// One rank's memory report line.
struct MegatronMemory {
  int rank = 0;  // the global rank printed in "[Rank N]"
  double allocated_mb = 0, max_allocated_mb = 0, reserved_mb = 0, max_reserved_mb = 0;
  int line = 0;
};

struct MegatronLog {
  std::string origin;
  std::vector<MegatronIteration> iterations;  // in log order
  std::vector<MegatronMemory> memory;         // in log order
  // The largest "max allocated" per global rank over the log, in bytes.
  std::map<int, Bytes> MaxAllocatedBytes() const;
};

// Parses log text; `origin` names it in errors. InvalidArgument naming the
// line when a recognised line has a malformed number; when no iteration line
// is found at all (says what a Megatron-LM log line looks like).
Result<MegatronLog> ParseMegatronLog(const std::string& text, const std::string& origin);
// Reads and parses a file (NotFound when it cannot be read).
Result<MegatronLog> ReadMegatronLog(const std::string& path);

// Megatron-LM's rank order (megatron/core/parallel_state.py, RankGenerator):
// the default "tp-cp-ep-dp-pp" puts the pipeline outermost; --use-tp-pp-dp-
// mapping puts it between tensor and data parallelism.
enum class MegatronRankOrder { kTpDpPp, kTpPpDp };
// "tp-dp-pp" (the default) or "tp-pp-dp"; InvalidArgument otherwise.
Result<MegatronRankOrder> ParseMegatronRankOrder(const std::string& text);
// The pipeline rank of global rank `rank` with t tensor, p pipeline and d
// data-parallel ranks (context and expert parallelism 1).
int MegatronPipelineRank(int rank, int t, int p, int d, MegatronRankOrder order);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_MEGATRON_LOG_H_
