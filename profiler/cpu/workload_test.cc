#include "profiler/cpu/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace pipecast::cpu {
namespace {

using ::testing::HasSubstr;

// Deterministic test inputs in [-1, 1].
std::vector<float> Pattern(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 1.3 * salt));
  }
  return v;
}

std::size_t Floats(const Block& block, int microbatch_size) {
  return static_cast<std::size_t>(block.Tokens(microbatch_size)) * block.shape().hidden;
}

// L = sum_i r_i * y_i, in double, so that dL/dy = r.
double Loss(const Block& block, const std::vector<float>& x, const std::vector<float>& r,
            int microbatch_size) {
  std::vector<float> y(x.size());
  Saved saved = block.Forward(x, y, microbatch_size);
  double loss = 0;
  for (std::size_t i = 0; i < y.size(); ++i) loss += static_cast<double>(r[i]) * y[i];
  return loss;
}

// Central difference with step 1e-2 on float32: truncation ~1e-4 and rounding
// ~1e-4 of the loss's scale, hence an absolute 2e-3 plus 1% tolerance.
constexpr double kStep = 1e-2;
void ExpectClose(double analytic, double numeric, const std::string& what) {
  EXPECT_NEAR(analytic, numeric, 2e-3 + 1e-2 * std::abs(numeric)) << what;
}

TEST(BlockShapeTest, ValidateNamesTheField) {
  EXPECT_TRUE(BlockShape{}.Validate().ok());
  Status st = BlockShape{.hidden = 0}.Validate();
  EXPECT_THAT(st.message(), HasSubstr("hidden is 0"));
  st = BlockShape{.hidden = 8, .ffn = kMaxWidth + 1}.Validate();
  EXPECT_THAT(st.message(), HasSubstr("ffn is"));
  st = BlockShape{.hidden = 8, .ffn = 8, .tokens_per_sample = -3}.Validate();
  EXPECT_THAT(st.message(), HasSubstr("tokens_per_sample is -3"));
  // 4 * 65536 * (2 * 64 + 2 * 64) bytes per sample is 64 MiB: fine; with
  // 65536 tokens and widths of 2048 it is 4 * 65536 * 8192 = 2 GiB, over 1 GiB.
  EXPECT_TRUE(
      (BlockShape{.hidden = 64, .ffn = 64, .tokens_per_sample = kMaxWidth}.Validate().ok()));
  st = BlockShape{.hidden = 2048, .ffn = 2048, .tokens_per_sample = kMaxWidth}.Validate();
  EXPECT_THAT(st.message(), HasSubstr("activations"));
  // 65536 x 4096 = 2^28 weights, over 2^27.
  st = BlockShape{.hidden = kMaxWidth, .ffn = 4096, .tokens_per_sample = 1}.Validate();
  EXPECT_THAT(st.message(), HasSubstr("hidden x ffn"));
}

TEST(BlockTest, SizesFollowTheShape) {
  // Default shape: H = 256, F = 1024, 32 tokens a sample.
  const Block block(BlockShape{}, 1);
  EXPECT_EQ(block.Parameters(), 2 * 256 * 1024);
  EXPECT_EQ(block.Tokens(4), 128);
  EXPECT_EQ(block.OutputBytes(1), 4 * 32 * 256);                   // 32768
  EXPECT_EQ(block.ActivationBytes(1), 4 * 32 * (256 + 2 * 1024));  // 294912
  EXPECT_EQ(block.ActivationBytes(4), 4 * block.ActivationBytes(1));
  EXPECT_EQ(block.WeightGradientBytes(2), 4 * 64 * (2 * 256 + 2 * 1024));
  EXPECT_EQ(block.TransientBytes(1), 4 * 32 * 1024);
  EXPECT_EQ(block.MultiplyAdds(1), 2 * 32 * 256 * 1024);
}

TEST(BlockTest, OneByOneBlockMatchesHandWorkedValue) {
  // Given H = F = T = 1, W1 = 2, W2 = 3 and x = 0.5: a = 1,
  // gelu(1) = 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411920,
  // y = 0.5 + 3 * 0.8411920 = 3.0235760.
  Block block(BlockShape{.hidden = 1, .ffn = 1, .tokens_per_sample = 1}, 7);
  block.SetWeight(1, 0, 0, 2.0f);
  block.SetWeight(2, 0, 0, 3.0f);
  std::vector<float> x = {0.5f}, y(1);
  Saved saved = block.Forward(x, y, 1);
  EXPECT_NEAR(y[0], 3.0235760, 1e-5);
  // dy = 1: dx = 1 + W1 * gelu'(1) * W2 with gelu'(1) = 1.0829640 (tanh form),
  // dW2 = gelu(1) * dy, dW1 = x * W2 * gelu'(1) * dy.
  std::vector<float> dy = {1.0f}, dx(1);
  block.Backward(saved, dy, dx);
  EXPECT_NEAR(dx[0], 1.0 + 2.0 * 1.0829640 * 3.0, 1e-4);
  EXPECT_NEAR(block.GradientW2()[0], 0.8411920, 1e-5);
  EXPECT_NEAR(block.GradientW1()[0], 0.5 * 3.0 * 1.0829640, 1e-4);
}

// Megatron's split of the block over t workers (workload.h): the t partial
// outputs summed, as the all-reduce sums them, give the unsplit block's y and
// dx. Only the order of one float sum changes (F products added in halves),
// which by Higham's bound moves a value by at most about F x eps x the sum of
// the |terms| (64 x 6e-8 x ~10 here, 4e-5): hence 1e-4. The weight
// gradients of a shard are computed in the same order as the unsplit ones,
// so they are its slices bit for bit.
TEST(BlockTest, TensorParallelShardsSumToTheUnsplitBlock) {
  const BlockShape shape{.hidden = 32, .ffn = 64, .tokens_per_sample = 4};
  const int mbs = 2;
  for (int t : {2, 4}) {
    Block full(shape, 5);
    const std::vector<float> x = Pattern(Floats(full, mbs), 1);
    const std::vector<float> dy = Pattern(x.size(), 2);
    std::vector<float> y(x.size()), dx(x.size());
    Saved saved = full.Forward(x, y, mbs);
    full.Backward(saved, dy, dx);

    std::vector<float> y_sum(x.size(), 0.0f), dx_sum(x.size(), 0.0f);
    for (int j = 0; j < t; ++j) {
      Result<Block> shard = full.Shard(t, j);
      ASSERT_TRUE(shard.ok()) << shard.status().message();
      EXPECT_EQ(shard->shape().ffn, 64 / t);
      EXPECT_EQ(shard->adds_residual(), j == 0);
      // Each worker keeps x whole and its 1/t of a and g: 4T(H + 2F/t).
      EXPECT_EQ(shard->ActivationBytes(mbs), 4 * 8 * (32 + 2 * 64 / t));
      std::vector<float> yj(x.size()), dxj(x.size());
      Saved sj = shard->Forward(x, yj, mbs);
      EXPECT_EQ(sj.Bytes(), shard->ActivationBytes(mbs));
      shard->Backward(sj, dy, dxj);
      for (std::size_t i = 0; i < x.size(); ++i) {
        y_sum[i] += yj[i];
        dx_sum[i] += dxj[i];
      }
      const int f = 64 / t;
      for (int r = 0; r < 32; ++r) {
        for (int c = 0; c < f; ++c) {
          ASSERT_EQ(shard->GradientW1()[static_cast<std::size_t>(r) * f + c],
                    full.GradientW1()[static_cast<std::size_t>(r) * 64 + j * f + c]);
        }
      }
      for (int r = 0; r < f; ++r) {
        for (int c = 0; c < 32; ++c) {
          ASSERT_EQ(shard->GradientW2()[static_cast<std::size_t>(r) * 32 + c],
                    full.GradientW2()[static_cast<std::size_t>(j * f + r) * 32 + c]);
        }
      }
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y_sum[i], y[i], 1e-4) << "t " << t << " y[" << i << "]";
      ASSERT_NEAR(dx_sum[i], dx[i], 1e-4) << "t " << t << " dx[" << i << "]";
    }
  }
}

TEST(BlockTest, AShardNeedsADegreeThatDividesFfn) {
  const Block block(BlockShape{.hidden = 4, .ffn = 6, .tokens_per_sample = 1}, 1);
  EXPECT_THAT(block.Shard(4, 0).status().message(), HasSubstr("ffn 6 does not divide into 4"));
  EXPECT_FALSE(block.Shard(2, 2).ok());
  EXPECT_TRUE(block.Shard(3, 2).ok());
}

TEST(BlockTest, SameSeedSameWeightsAndOutputs) {
  const BlockShape shape{.hidden = 8, .ffn = 16, .tokens_per_sample = 3};
  const Block a(shape, 42), b(shape, 42), c(shape, 43);
  EXPECT_EQ(a.Weight(1, 3, 5), b.Weight(1, 3, 5));
  EXPECT_NE(a.Weight(1, 3, 5), c.Weight(1, 3, 5));
  // Weights within +-1/sqrt(fan_in).
  EXPECT_LE(std::abs(a.Weight(1, 7, 15)), 1.0f / std::sqrt(8.0f));
  EXPECT_LE(std::abs(a.Weight(2, 15, 7)), 1.0f / std::sqrt(16.0f));
  const std::vector<float> x = Pattern(Floats(a, 2), 1);
  std::vector<float> ya(x.size()), yb(x.size());
  Saved sa = a.Forward(x, ya, 2);
  Saved sb = b.Forward(x, yb, 2);
  EXPECT_EQ(ya, yb);
}

TEST(BlockTest, GradientsMatchFiniteDifferences) {
  // Given a tiny block (H = 3, F = 5, 2 tokens a sample, micro-batch 2) and
  // L = sum r * y, the analytic dL/dx, dL/dW1 and dL/dW2 match central
  // differences of L.
  Block block(BlockShape{.hidden = 3, .ffn = 5, .tokens_per_sample = 2}, 11);
  const int mbs = 2;
  std::vector<float> x = Pattern(Floats(block, mbs), 2);
  const std::vector<float> r = Pattern(x.size(), 3);
  std::vector<float> y(x.size()), dx(x.size());
  Saved saved = block.Forward(x, y, mbs);
  block.Backward(saved, r, dx);

  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + static_cast<float>(kStep);
    const double plus = Loss(block, x, r, mbs);
    x[i] = keep - static_cast<float>(kStep);
    const double minus = Loss(block, x, r, mbs);
    x[i] = keep;
    ExpectClose(dx[i], (plus - minus) / (2 * kStep), "dx[" + std::to_string(i) + "]");
  }
  for (int which : {1, 2}) {
    const int rows = which == 1 ? 3 : 5;
    const int cols = which == 1 ? 5 : 3;
    const std::span<const float> grad = which == 1 ? block.GradientW1() : block.GradientW2();
    for (int row = 0; row < rows; ++row) {
      for (int col = 0; col < cols; ++col) {
        const float keep = block.Weight(which, row, col);
        block.SetWeight(which, row, col, keep + static_cast<float>(kStep));
        const double plus = Loss(block, x, r, mbs);
        block.SetWeight(which, row, col, keep - static_cast<float>(kStep));
        const double minus = Loss(block, x, r, mbs);
        block.SetWeight(which, row, col, keep);
        ExpectClose(grad[static_cast<std::size_t>(row) * cols + col], (plus - minus) / (2 * kStep),
                    "dW" + std::to_string(which) + "[" + std::to_string(row) + "," +
                        std::to_string(col) + "]");
      }
    }
  }
}

TEST(BlockTest, WeightGradientsAccumulateOverMicrobatches) {
  // Two micro-batches of 1 sample give the same gradient as one of 2 samples
  // holding both (rows are independent), up to float rounding.
  const BlockShape shape{.hidden = 4, .ffn = 6, .tokens_per_sample = 2};
  Block one(shape, 5), both(shape, 5);
  const std::vector<float> x = Pattern(16, 4), dy = Pattern(16, 5);
  std::vector<float> y(16), dx(16);
  for (int half : {0, 1}) {
    std::span<const float> xs(x.data() + 8 * half, 8), dys(dy.data() + 8 * half, 8);
    Saved saved = one.Forward(xs, std::span<float>(y.data() + 8 * half, 8), 1);
    one.Backward(saved, dys, std::span<float>(dx.data() + 8 * half, 8));
  }
  std::vector<float> y2(16), dx2(16);
  Saved saved = both.Forward(x, y2, 2);
  both.Backward(saved, dy, dx2);
  EXPECT_EQ(y, y2);
  EXPECT_EQ(dx, dx2);
  for (std::size_t i = 0; i < one.GradientW1().size(); ++i)
    EXPECT_NEAR(one.GradientW1()[i], both.GradientW1()[i], 1e-6);
  for (std::size_t i = 0; i < one.GradientW2().size(); ++i)
    EXPECT_NEAR(one.GradientW2()[i], both.GradientW2()[i], 1e-6);
  one.ZeroGradients();
  EXPECT_EQ(one.GradientW1()[0], 0.0f);
}

TEST(BlockTest, SplitBackwardEqualsWholeBackwardAndAllowsAliasing) {
  const BlockShape shape{.hidden = 5, .ffn = 7, .tokens_per_sample = 3};
  Block whole(shape, 9), split(shape, 9);
  const std::vector<float> x = Pattern(15, 6), dy = Pattern(15, 7);
  std::vector<float> y(15), dx(15);
  Saved s1 = whole.Forward(x, y, 1);
  whole.Backward(s1, dy, dx);
  // In place: y overwrites x, dx overwrites dy.
  std::vector<float> buf = x;
  Saved s2 = split.Forward(buf, buf, 1);
  EXPECT_EQ(buf, y);
  EXPECT_TRUE(s2.ready_for_input_gradient());
  buf = dy;
  split.BackwardInput(s2, buf, buf);
  EXPECT_TRUE(s2.ready_for_weight_gradient());
  EXPECT_EQ(buf, dx);
  split.BackwardWeight(s2);
  EXPECT_EQ(s2.Bytes(), 0);
  EXPECT_FALSE(s2.ready_for_input_gradient());
  for (std::size_t i = 0; i < whole.GradientW1().size(); ++i)
    EXPECT_EQ(whole.GradientW1()[i], split.GradientW1()[i]);
}

TEST(BlockTest, CountedBytesAreTheStatedSizes) {
  // The allocator sees exactly ActivationBytes after Forward,
  // WeightGradientBytes after BackwardInput (with TransientBytes more at its
  // peak), and nothing after BackwardWeight.
  Block block(BlockShape{.hidden = 16, .ffn = 48, .tokens_per_sample = 4}, 3);
  const int mbs = 3;
  const std::vector<float> x = Pattern(Floats(block, mbs), 8);
  std::vector<float> y(x.size()), dx(x.size());
  const std::int64_t before = LiveWorkloadBytes();
  ResetPeakWorkloadBytes();
  Saved saved = block.Forward(x, y, mbs);
  EXPECT_EQ(LiveWorkloadBytes() - before, block.ActivationBytes(mbs));
  EXPECT_EQ(saved.Bytes(), block.ActivationBytes(mbs));
  EXPECT_EQ(PeakWorkloadBytes() - before, block.ActivationBytes(mbs));  // no transient
  EXPECT_EQ(block.ActivationBytes(mbs), 4 * 12 * (16 + 2 * 48));
  block.BackwardInput(saved, y, dx);
  EXPECT_EQ(LiveWorkloadBytes() - before, block.WeightGradientBytes(mbs));
  EXPECT_EQ(PeakWorkloadBytes() - before,
            block.WeightGradientBytes(mbs) + block.TransientBytes(mbs));
  block.BackwardWeight(saved);
  EXPECT_EQ(LiveWorkloadBytes(), before);
  {
    Saved dropped = block.Forward(x, y, mbs);  // freed when dropped, unused
  }
  EXPECT_EQ(LiveWorkloadBytes(), before);
}

TEST(BlockTest, CountersAreThreadSafe) {
  const std::int64_t before = LiveWorkloadBytes();
  ResetPeakWorkloadBytes();
  auto work = [] {
    for (int i = 0; i < 2000; ++i) Buffer b(256);
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(LiveWorkloadBytes(), before);
  EXPECT_GE(PeakWorkloadBytes() - before, 1024);
  EXPECT_LE(PeakWorkloadBytes() - before, 2048);
}

TEST(MemoryAccountTest, ChargesTheAccountCurrentAtAllocation) {
  // Given two stages on two threads, each with its own account, each
  // account sees exactly its own stage's forward; a Saved freed on another
  // thread still comes off the account it was charged to.
  const Block block(BlockShape{.hidden = 8, .ffn = 16, .tokens_per_sample = 2}, 1);
  MemoryAccount stage0, stage1;
  Saved from_stage1;
  auto run = [&](MemoryAccount* account, int mbs, Saved* keep) {
    ScopedMemoryAccount scope(account);
    std::vector<float> x(static_cast<std::size_t>(block.Tokens(mbs)) * 8, 0.5f), y(x.size());
    Saved saved = block.Forward(x, y, mbs);
    if (keep != nullptr) *keep = std::move(saved);
  };
  std::thread t0(run, &stage0, 1, nullptr), t1(run, &stage1, 3, &from_stage1);
  t0.join();
  t1.join();
  EXPECT_EQ(stage0.live_bytes(), 0);
  EXPECT_EQ(stage0.peak_bytes(), block.ActivationBytes(1));
  EXPECT_EQ(stage1.live_bytes(), block.ActivationBytes(3));
  from_stage1 = Saved();  // freed here, on the main thread
  EXPECT_EQ(stage1.live_bytes(), 0);
  EXPECT_EQ(stage1.peak_bytes(), block.ActivationBytes(3));
  stage1.ResetPeak();
  EXPECT_EQ(stage1.peak_bytes(), 0);
  {
    // Scopes nest; outside every scope nothing is charged.
    ScopedMemoryAccount outer(&stage0);
    {
      ScopedMemoryAccount inner(&stage1);
      Buffer b(10);
      EXPECT_EQ(stage1.live_bytes(), 40);
    }
    Buffer b(5);
    EXPECT_EQ(stage0.live_bytes(), 20);
  }
  Buffer uncharged(7);
  EXPECT_EQ(stage0.live_bytes(), 0);
  EXPECT_EQ(stage1.live_bytes(), 0);
}

TEST(WorkloadSpecTest, LayersAndSeeds) {
  WorkloadSpec spec;
  spec.shape = {.hidden = 4, .ffn = 8, .tokens_per_sample = 2};
  spec.layers = 3;
  spec.seed = 10;
  ASSERT_TRUE(spec.Validate().ok());
  EXPECT_EQ(spec.LayerCount(), 3);
  EXPECT_EQ(spec.LayerSeed(2), 12u);
  std::vector<Block> blocks = spec.Build();
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[2].Weight(1, 1, 1), Block(spec.shape, 12).Weight(1, 1, 1));
  spec.layers = 0;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("layers is 0"));
  spec.per_layer = {spec.shape, {.hidden = 4, .ffn = 0, .tokens_per_sample = 2}};
  spec.layers = 2;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("layer 1: ffn is 0"));
  spec.per_layer[1] = {.hidden = 8, .ffn = 8, .tokens_per_sample = 2};
  EXPECT_THAT(spec.Validate().message(), HasSubstr("only ffn may differ"));
}

TEST(WorkloadSpecTest, RoundTripsThroughModelSource) {
  WorkloadSpec spec;
  spec.shape = {.hidden = 32, .ffn = 64, .tokens_per_sample = 8};
  spec.layers = 3;
  spec.per_layer = {spec.shape, {.hidden = 32, .ffn = 256, .tokens_per_sample = 8}, spec.shape};
  spec.seed = 99;
  ModelSource source;
  source.method = "cpu";
  source.details[kWorkloadSourceKey] = WorkloadToSourceJson(spec);
  Result<WorkloadSpec> back = WorkloadFromSource(source);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->LayerCount(), 3);
  EXPECT_EQ(back->seed, 99u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back->LayerShape(i), spec.LayerShape(i)) << i;

  // Equal layers come back as shape x layers.
  spec.per_layer.clear();
  source.details[kWorkloadSourceKey] = WorkloadToSourceJson(spec);
  back = WorkloadFromSource(source);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->per_layer.empty());
  EXPECT_EQ(back->layers, 3);
  EXPECT_EQ(back->shape, spec.shape);
}

TEST(WorkloadSpecTest, BadSourcesNameWhatIsWrong) {
  ModelSource source;
  source.method = "analytic";
  EXPECT_THAT(WorkloadFromSource(source).status().message(), HasSubstr("source.method"));
  source.method = "cpu";
  EXPECT_THAT(WorkloadFromSource(source).status().message(),
              HasSubstr("source.workload is missing"));
  source.details[kWorkloadSourceKey] = "{not json";
  EXPECT_THAT(WorkloadFromSource(source).status().message(), HasSubstr("not valid JSON"));
  source.details[kWorkloadSourceKey] =
      R"({"kind":"mlp-block","layers":[{"hidden":4,"ffn":8,"tokens_per_sample":2},)"
      R"({"hidden":4,"ffn":"wide","tokens_per_sample":2}]})";
  EXPECT_THAT(WorkloadFromSource(source).status().message(),
              HasSubstr("source.workload.layers[1].ffn"));
  source.details[kWorkloadSourceKey] = R"({"kind":"attention","layers":[]})";
  EXPECT_THAT(WorkloadFromSource(source).status().message(), HasSubstr("source.workload.kind"));
  source.details[kWorkloadSourceKey] = R"({"kind":"mlp-block","layers":[]})";
  EXPECT_THAT(WorkloadFromSource(source).status().message(), HasSubstr("non-empty"));
}

}  // namespace
}  // namespace pipecast::cpu
