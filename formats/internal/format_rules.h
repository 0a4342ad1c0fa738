// The limits past which a number in model.json or a cluster file is a unit
// mistake, and the field rules built on them, in one table for both readers
// (formats/formats.cc, formats/cluster_io.cc); and their one parse entry.
#ifndef PIPECAST_FORMATS_INTERNAL_FORMAT_RULES_H_
#define PIPECAST_FORMATS_INTERNAL_FORMAT_RULES_H_

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/units.h"
#include "formats/internal/json_reader.h"

namespace pipecast::internal {

// Limits past which a number is a unit mistake, not a measurement. They also
// keep every conversion to integer ns or bytes far from int64 overflow.
inline constexpr double kMaxTimeUs = 1e12;                   // 11.6 days for one op
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;       // 1 PiB
inline constexpr int64_t kMaxParameters = int64_t{1} << 50;  // ~1.1e15 in a layer
inline constexpr int64_t kMaxMicrobatchSize = 1 << 20;       // samples in a micro-batch
inline constexpr int64_t kMaxSequenceLength = 1 << 30;       // tokens in a sample
inline constexpr int64_t kMaxGlobalBatch = 1 << 30;          // samples in an iteration
inline constexpr int64_t kMaxGpusPerNode = 1 << 16;          // GPUs behind one fast link
inline constexpr double kMaxFlops = 1e24;                    // FLOPs for one sample
inline constexpr double kMaxBandwidthGbps = 1e6;             // 1 PB/s
inline constexpr double kMaxTflops = 1e6;                    // 1 EFLOP/s per GPU
inline constexpr Bytes kMinGpuMemoryBytes = kMiB;            // less is GB written as bytes

inline constexpr std::string_view kSourceMethods[] = {"cupti", "cpu", "analytic", "manual",
                                                      "trace"};

inline constexpr IntRule kParameterCount = {0, kMaxParameters, "2^50", "a parameter count"};
// A layer's `moe`: routed experts (kMaxSpecExperts of the analytic profiler)
// and the dispatched token's width (its kMaxSpecWidth).
inline constexpr int kMaxExperts = 1 << 16;
inline constexpr int64_t kMaxMoeHidden = 1 << 20;
// A layer's `moe.capacity_factor`: Megatron-LM's --moe-expert-capacity-factor
// (the analytic profiler's kMaxMoeImbalance bounds it).
inline constexpr NumberRule kCapacityFactor = {
    0, true, 64, "64", "each expert's token capacity over the mean, e.g. 1.25"};
inline constexpr IntRule kMicrobatchSize = {1, kMaxMicrobatchSize, "2^20",
                                            "a micro-batch size in samples"};
inline constexpr int64_t kMaxTensorParallel = 1
                                              << 16;  // GPUs splitting one layer, as gpus_per_node
inline constexpr IntRule kTensorParallel = {
    1, kMaxTensorParallel, "2^16", "a tensor-parallel degree t (GPUs splitting the layer)"};
inline constexpr IntRule kCollectives = {0, 1 << 10, "1024",
                                         "a number of collectives per micro-batch"};
inline constexpr IntRule kSizeBytes = {0, kMaxBytes, "2^50 bytes (1 PiB)", "a size in bytes"};
inline constexpr IntRule kMemoryBytes = {0, kMaxBytes, "2^50 bytes (1 PiB)",
                                         "a size in bytes, 0 = unlimited"};
inline constexpr IntRule kReserveBytes = {0, kMaxBytes, "2^50 bytes (1 PiB)",
                                          "a size in bytes taken by the runtime before training"};
inline constexpr NumberRule kHeadroom = {0, false, 1, "1",
                                         "a fraction of memory_bytes kept free, e.g. 0.05 for 5%"};
inline constexpr IntRule kSequenceLength = {1, kMaxSequenceLength, "2^30",
                                            "a number of tokens per sample"};
inline constexpr IntRule kGlobalBatch = {1, kMaxGlobalBatch, "2^30",
                                         "a number of samples per iteration"};
inline constexpr IntRule kGpusPerNode = {1, kMaxGpusPerNode, "2^16", "a number of GPUs"};
inline constexpr NumberRule kTimeUs = {0, false, kMaxTimeUs, "1e12 us (11.6 days)",
                                       "a time in microseconds"};
inline constexpr NumberRule kLayerFlops = {0, false, kMaxFlops, "1e24",
                                           "forward FLOPs of one sample"};
inline constexpr NumberRule kSampleFlops = {0, true, kMaxFlops, "1e24",
                                            "forward FLOPs of one sample"};
inline constexpr NumberRule kBandwidth = {
    0, false, kMaxBandwidthGbps, "1e6 GB/s",
    "gigabytes (10^9 bytes) per second per direction, 0 = infinite"};
inline constexpr NumberRule kEfficiency = {
    0, true, 1, "1", "the share of the bandwidth a collective reaches, e.g. 0.8"};
inline constexpr IntRule kNicsPerNode = {1, kMaxGpusPerNode, "2^16", "a number of NICs per node"};
inline constexpr NumberRule kHbmBandwidth = {0, false, kMaxBandwidthGbps, "1e6 GB/s",
                                             "gigabytes (10^9 bytes) per second, 0 = unknown"};
inline constexpr NumberRule kTflops = {0, false, kMaxTflops, "1e6 TFLOP/s",
                                       "dense bf16 TFLOP/s, 0 = unknown"};

// Runs `read` on the parsed text; no exception gets past this function.
template <typename T, typename ReadFn>
Result<T> ParseWith(const std::string& text, const std::string& origin, ReadFn read) {
  const JsonReader reader(origin, internal::kModelWording);
  try {
    Json root;
    PIPECAST_RETURN_IF_ERROR(reader.Parse(text, &root));
    T value;
    PIPECAST_RETURN_IF_ERROR(read(reader, root, &value));
    return value;
  } catch (const std::exception& e) {
    return Status::Internal(origin +
                            ": unexpected error while reading: " + WithoutExceptionId(e.what()));
  }
}

}  // namespace pipecast::internal

#endif  // PIPECAST_FORMATS_INTERNAL_FORMAT_RULES_H_
