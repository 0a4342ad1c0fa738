// The per-tensor FSDP2 trace (sim/fsdp_trace.h) on a one-block Llama worked
// by hand: h 1024, 8 heads of 128 with 2 kv heads (kv 256), ffn 4096,
// vocabulary 16,384, b 1, s 4096 (T = 4096 tokens), d = 2. Shards (dim 0
// halved): the root group (tok_embeddings, norm, output) 8,388,608 + 512 +
// 8,388,608 = 16,777,728 elements; the block (wq, wk, wv, wo, w1, w2, w3,
// two norms) 15,206,400 / 2 = 7,603,200.
#include "sim/fsdp_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>

namespace pipecast {
namespace {

constexpr Bytes kMiB_ = Bytes{1} << 20;
constexpr Bytes kRootShard = 16'777'728;
constexpr Bytes kBlockShard = 7'603'200;

LlamaShape Tiny() {
  return LlamaShape{
      .layers = 1, .hidden = 1024, .ffn = 4096, .heads = 8, .kv_heads = 2, .vocab = 16'384};
}

FsdpTraceOptions TinyRun() {
  return FsdpTraceOptions{.batch = 1, .seq = 4096, .data_parallel = 2, .steps = 2};
}

// The requested bytes live after each event, walked without the allocator:
// what is live at the end, and the largest over the last step.
Bytes LiveAtEnd(const std::vector<TraceEvent>& trace) {
  std::unordered_map<int64_t, Bytes> live;
  Bytes now = 0;
  for (const TraceEvent& e : trace) {
    if (e.kind == TraceEvent::Kind::kMalloc) {
      live[e.tensor] = e.bytes;
      now += e.bytes;
    } else if (e.kind == TraceEvent::Kind::kFree) {
      now -= live.at(e.tensor);
      live.erase(e.tensor);
    }
  }
  return now;
}

Bytes LastStepPeak(const std::vector<TraceEvent>& trace) {
  std::unordered_map<int64_t, Bytes> live;
  Bytes now = 0, peak = 0, last = 0;
  for (const TraceEvent& e : trace) {
    if (e.kind == TraceEvent::Kind::kMalloc) {
      live[e.tensor] = e.bytes;
      now += e.bytes;
      peak = std::max(peak, now);
    } else if (e.kind == TraceEvent::Kind::kFree) {
      now -= live.at(e.tensor);
      live.erase(e.tensor);
    } else {
      last = peak;
      peak = now;
    }
  }
  return last;
}

// After two steps what is live is the state: fp32 shards 4 B, AdamW's moments
// 8 B, the sharded fp32 gradients 4 B per shard element (16 B x 24,380,928),
// and the rotary table (2 x 4096 positions x 64 complex64: 4 MiB).
TEST(FsdpTrace, WhatStaysIsTheShardedState) {
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(Tiny(), TinyRun());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(LiveAtEnd(*trace), 16 * (kRootShard + kBlockShard) + 4 * kMiB_);
  EXPECT_EQ(16 * (kRootShard + kBlockShard) + 4 * kMiB_, 394'289'152);
}

// The second step's peak is the loss's backward (log_softmax's gradient
// made beside nll_loss's and log_softmax's output, 3 x 4 B x T x V), with
// the state (12 B per shard element; zero_grad freed the gradients), the
// rotary table, the batch (2 x 8 B x T), the root's and the last block's
// unsharded bf16 parameters, the block's cached tensors (input, wq, wv,
// attention, logsumexp, w1, w2) and the final norm's saved tensors
// (x.float(), rsqrt, the bf16 cast, its output).
TEST(FsdpTrace, TheSecondStepPeaksAtTheLossBackward) {
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(Tiny(), TinyRun());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const Bytes t = 4096, h = 1024, kv = 256, f = 4096, v = 16'384;
  const Bytes state = 12 * (kRootShard + kBlockShard) + 4 * kMiB_ + 2 * 8 * t;
  const Bytes unsharded = 2 * 2 * kRootShard + 2 * 2 * kBlockShard;
  const Bytes cached = 2 * t * h * 4 + 2 * t * kv + 4 * t * 8 + 2 * t * f;
  const Bytes final_norm = 4 * t * h + 4 * t + 2 * t * h * 2;
  const Bytes loss = 3 * 4 * t * v;
  EXPECT_EQ(LastStepPeak(*trace), state + unsharded + cached + final_norm + loss);
  EXPECT_EQ(state + unsharded + cached + final_norm + loss, 1'302'568'960);
}

// Replayed through the allocator, each side stream's pool is its own. The
// copy-in stream: the root's flat bf16 input (33,555,456 B: a 34 MiB
// segment) and output (67,110,912 B: 66 MiB), then the block's input, split
// from the first, and output (30,412,800 B: its own 30 MiB segment, the
// remaining 20 MiB of the first too small); in step 2 every request fits a
// cached block: 130 MiB. The reduce-scatter stream: the sharded gradients,
// 30,412,800 B (30 MiB) and 67,110,912 B (66 MiB), freed by zero_grad and
// reused exactly in step 2: 96 MiB.
TEST(FsdpTrace, SideStreamsKeepTheirOwnPools) {
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(Tiny(), TinyRun());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  Result<ReplayResult> replay = ReplayTrace(*trace);
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  EXPECT_EQ(replay->reserved_by_stream_end.at(1), (34 + 66 + 30) * kMiB_);
  EXPECT_EQ(replay->reserved_by_stream_end.at(2), (30 + 66) * kMiB_);
  EXPECT_GE(replay->run.peak_reserved, replay->run.peak_allocated);
}

TEST(FsdpTrace, RefusesBadShapesNamingTheField) {
  LlamaShape shape = Tiny();
  shape.kv_heads = 3;
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(shape, TinyRun());
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("kv_heads"), std::string::npos);
  FsdpTraceOptions run = TinyRun();
  run.batch = 0;
  trace = BuildTorchtitanFsdpTrace(Tiny(), run);
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("batch"), std::string::npos);
}

}  // namespace
}  // namespace pipecast
