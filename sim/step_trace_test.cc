// The step trace's bookkeeping on a tiny model worked by hand: what stays
// live after the steps is the sharded state, Adam's moments and the sharded
// gradients, and nothing else; the settings it does not model are refused.
#include "sim/step_trace.h"

#include <gtest/gtest.h>

namespace pipecast {
namespace {

constexpr Bytes kMiB_ = Bytes{1} << 20;

// Three layers (embedding, one block, head) of 1 Mi parameters each; each
// layer keeps 64 MiB and outputs 16 MiB at micro-batch 1.
Model TinyModel() {
  Model model;
  for (const char* name : {"embedding", "block", "head"}) {
    Layer layer;
    layer.name = name;
    layer.parameters = int64_t{1} << 20;
    LayerProfile p;
    p.microbatch_size = 1;
    p.activation_bytes = 64 * kMiB_;
    p.output_bytes = 16 * kMiB_;
    p.workspace_bytes = 0;
    layer.profiles.push_back(p);
    model.layers.push_back(layer);
  }
  return model;
}

StepTraceOptions Fsdp() {
  StepTraceOptions options;
  options.memory.zero = 3;  // 2 + 4 + 12 B per parameter, d = 1
  options.op_recompute = false;
  return options;
}

TEST(StepTrace, WhatStaysIsTheShardedStateMomentsAndGradients) {
  Result<std::vector<TraceEvent>> trace = BuildStepTrace(TinyModel(), Fsdp());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  Result<ReplayResult> replay = ReplayTrace(*trace);
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  // Per layer: (2 + 12 - 8) B = 6 MiB resident, 8 MiB of moments, 4 MiB of
  // gradients, each a 2 MiB multiple (no rounding, split from 20 MiB or
  // larger segments only when over 1 MiB is left).
  EXPECT_EQ(replay->run.allocated, 3 * (6 + 8 + 4) * kMiB_);
  // The forward holds three layers' 64 MiB: the peak is at least that.
  EXPECT_GE(replay->run.peak_allocated, 3 * 64 * kMiB_);
  EXPECT_GE(replay->run.peak_reserved, replay->run.peak_allocated);
}

TEST(StepTrace, RefusesAnythingButZeroThree) {
  StepTraceOptions options = Fsdp();
  options.memory.zero = 1;
  Result<std::vector<TraceEvent>> trace = BuildStepTrace(TinyModel(), options);
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("--zero"), std::string::npos);
}

TEST(StepTrace, RefusesAHeadWithoutThePytorchLossTerms) {
  StepTraceOptions options = Fsdp();
  options.pytorch_loss = true;  // the head's workspace holds no fp32 logits
  EXPECT_FALSE(BuildStepTrace(TinyModel(), options).ok());
}

}  // namespace
}  // namespace pipecast
