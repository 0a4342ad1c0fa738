// The CPU workload's mixture-of-experts block (workload.h): the hash
// router's balance, its gradients, and an expert-parallel group of two
// equal to the whole block.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "profiler/cpu/workload.h"

namespace pipecast::cpu {
namespace {

using ::testing::HasSubstr;

std::vector<float> Pattern(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 1.3 * salt));
  }
  return v;
}

// E = 4 experts, top-2: C(4, 2) = 6 routes, so tokens_per_sample 12 balances.
BlockShape MoeShape() {
  return BlockShape{.hidden = 8, .ffn = 12, .tokens_per_sample = 12, .experts = 4, .top_k = 2};
}

// n threads' (2 unless given) all-to-all: each member posts what it sends,
// all meet, each copies its part of every member's send into its receive
// buffer, all meet again. Counts the floats sent, for the byte checks.
class PairExchange {
 public:
  explicit PairExchange(int n = 2)
      : n_(n),
        meet_(n),
        send_(n),
        counts_(n),
        sent_floats_(n),
        gathered_floats_(n),
        scattered_floats_(n) {}
  class Member final : public ExpertExchange {
   public:
    Member(PairExchange* group, int index) : group_(group), index_(index) {}
    Status AllToAll(std::span<const float> send, std::span<const std::size_t> send_counts,
                    std::span<float> recv, std::span<const std::size_t> recv_counts) override {
      PairExchange& g = *group_;
      g.send_[index_] = send;
      g.counts_[index_].assign(send_counts.begin(), send_counts.end());
      g.sent_floats_[index_] += send.size();
      g.meet_.arrive_and_wait();
      std::size_t at = 0;
      for (int src = 0; src < g.n_; ++src) {
        std::size_t offset = 0;
        for (int r = 0; r < index_; ++r) offset += g.counts_[src][r];
        EXPECT_EQ(g.counts_[src][index_], recv_counts[src]);
        std::copy_n(g.send_[src].begin() + static_cast<std::ptrdiff_t>(offset), recv_counts[src],
                    recv.begin() + static_cast<std::ptrdiff_t>(at));
        at += recv_counts[src];
      }
      g.meet_.arrive_and_wait();
      return Status::Ok();
    }
    Status AllGather(std::span<const float> send, std::span<float> recv) override {
      PairExchange& g = *group_;
      g.send_[index_] = send;
      g.gathered_floats_[index_] += send.size();
      g.meet_.arrive_and_wait();
      EXPECT_EQ(recv.size(), g.n_ * send.size());
      for (int src = 0; src < g.n_; ++src) {
        std::copy(g.send_[src].begin(), g.send_[src].end(),
                  recv.begin() + static_cast<std::ptrdiff_t>(src * send.size()));
      }
      g.meet_.arrive_and_wait();
      return Status::Ok();
    }
    Status ReduceScatter(std::span<const float> send, std::span<float> recv) override {
      PairExchange& g = *group_;
      g.send_[index_] = send;
      g.scattered_floats_[index_] += send.size();
      g.meet_.arrive_and_wait();
      EXPECT_EQ(send.size(), g.n_ * recv.size());
      const std::size_t at = index_ * recv.size();
      for (std::size_t i = 0; i < recv.size(); ++i) {
        float sum = 0;
        for (int src = 0; src < g.n_; ++src) sum += g.send_[src][at + i];
        recv[i] = sum;
      }
      g.meet_.arrive_and_wait();
      return Status::Ok();
    }

   private:
    PairExchange* group_;
    int index_;
  };
  std::size_t sent_floats(int member) const { return sent_floats_[member]; }
  std::size_t gathered_floats(int member) const { return gathered_floats_[member]; }
  std::size_t scattered_floats(int member) const { return scattered_floats_[member]; }

 private:
  int n_;
  std::barrier<> meet_;
  std::vector<std::span<const float>> send_;
  std::vector<std::vector<std::size_t>> counts_;
  std::vector<std::size_t> sent_floats_;
  std::vector<std::size_t> gathered_floats_;
  std::vector<std::size_t> scattered_floats_;
};

TEST(MoeBlockTest, ValidateWantsBalancedHashRouting) {
  EXPECT_TRUE(MoeShape().Validate().ok());
  BlockShape s = MoeShape();
  s.tokens_per_sample = 8;  // not a multiple of C(4, 2) = 6
  EXPECT_THAT(s.Validate().message(), HasSubstr("not a multiple of C(4, 2) = 6"));
  s = MoeShape();
  s.top_k = 5;
  EXPECT_THAT(s.Validate().message(), HasSubstr("top_k in [1, experts]"));
  s = BlockShape{.top_k = 2};
  EXPECT_THAT(s.Validate().message(), HasSubstr("both 0 for a dense one"));
  EXPECT_EQ(ExpertRoutes(MoeShape()), 6);
  EXPECT_EQ(ExpertRoutes(BlockShape{}), 1);
}

TEST(MoeBlockTest, SizesCountEveryTokensTopKRows) {
  const Block block(MoeShape(), 3);
  // 4 experts x 2 x 8 x 12 weights; a micro-batch of 2 keeps 2 x 12 x 2 = 48
  // rows of x (8), a and g (12 each): 4 x 48 x 32 = 6144 bytes.
  EXPECT_EQ(block.Parameters(), 4 * 2 * 8 * 12);
  EXPECT_EQ(block.ActivationBytes(2), 4 * 48 * (8 + 2 * 12));
  EXPECT_EQ(block.WeightGradientBytes(2), 4 * 48 * (2 * 8 + 2 * 12));
  EXPECT_EQ(block.OutputBytes(2), 4 * 24 * 8);
  EXPECT_EQ(block.MultiplyAdds(1), 2 * 24 * 8 * 12);
  const std::vector<float> x = Pattern(24 * 8, 1);
  std::vector<float> y(x.size());
  const std::int64_t before = LiveWorkloadBytes();
  Saved saved = block.Forward(x, y, 2);
  EXPECT_EQ(saved.Bytes(), block.ActivationBytes(2));
  EXPECT_EQ(LiveWorkloadBytes() - before, block.ActivationBytes(2));
}

// Hand-worked: with E = 4, k = 1 the hash router sends token i to expert
// i mod 4 alone, and top-1 of a gate 1/k = 1 makes y_i = x_i + expert(x_i):
// the block equals a dense block holding that expert's weights.
TEST(MoeBlockTest, TopOneEqualsTheDenseBlockOfEachTokensExpert) {
  const BlockShape moe{.hidden = 4, .ffn = 6, .tokens_per_sample = 4, .experts = 4, .top_k = 1};
  Block block(moe, 7);
  const std::vector<float> x = Pattern(4 * 4, 2);
  std::vector<float> y(x.size());
  Saved saved = block.Forward(x, y, 1);
  for (int token = 0; token < 4; ++token) {
    Block dense(BlockShape{.hidden = 4, .ffn = 6, .tokens_per_sample = 1}, 1);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 6; ++c) dense.SetWeight(1, r, c, block.Weight(1, token * 4 + r, c));
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 4; ++c) dense.SetWeight(2, r, c, block.Weight(2, token * 6 + r, c));
    std::vector<float> xi(x.begin() + token * 4, x.begin() + token * 4 + 4), yi(4);
    Saved s = dense.Forward(xi, yi, 1);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(y[token * 4 + j], yi[j], 1e-6) << token;
  }
}

TEST(MoeBlockTest, GradientsMatchFiniteDifferences) {
  const BlockShape shape{.hidden = 4, .ffn = 5, .tokens_per_sample = 6, .experts = 4, .top_k = 2};
  Block block(shape, 11);
  const std::vector<float> x = Pattern(6 * 4, 3);
  const std::vector<float> r = Pattern(6 * 4, 4);  // L = sum r_i y_i
  auto loss = [&](const Block& b, const std::vector<float>& in) {
    std::vector<float> y(in.size());
    Saved s = b.Forward(in, y, 1);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(r[i]) * y[i];
    return l;
  };
  std::vector<float> y(x.size()), dx(x.size());
  Saved saved = block.Forward(x, y, 1);
  block.Backward(saved, r, dx);
  const double h = 1e-2;
  for (std::size_t i = 0; i < x.size(); i += 5) {
    std::vector<float> plus = x, minus = x;
    plus[i] += static_cast<float>(h);
    minus[i] -= static_cast<float>(h);
    const double numeric = (loss(block, plus) - loss(block, minus)) / (2 * h);
    EXPECT_NEAR(dx[i], numeric, 2e-3 + 1e-2 * std::abs(numeric)) << "dx " << i;
  }
  // dW1 of expert 2 (rows 8..11 of the stacked W1) and dW2 of expert 3.
  for (auto [which, row, col] :
       std::vector<std::tuple<int, int, int>>{{1, 9, 2}, {1, 11, 4}, {2, 3 * 5 + 1, 3}}) {
    const float w = block.Weight(which, row, col);
    Block probe = block;
    probe.SetWeight(which, row, col, w + static_cast<float>(h));
    const double up = loss(probe, x);
    probe.SetWeight(which, row, col, w - static_cast<float>(h));
    const double numeric = (up - loss(probe, x)) / (2 * h);
    const std::span<const float> grad = which == 1 ? block.GradientW1() : block.GradientW2();
    const int cols = which == 1 ? 5 : 4;
    EXPECT_NEAR(grad[static_cast<std::size_t>(row) * cols + col], numeric,
                2e-3 + 1e-2 * std::abs(numeric))
        << "W" << which << " " << row << "," << col;
  }
}

// Two members of an ep = 2 group, each with its own micro-batch, against the
// whole block run on each micro-batch in turn: the same outputs, input
// gradients and (each member's slice of) weight gradients, within float
// rounding (a token's two expert outputs are summed on their members first,
// then across, another order of one float sum); the same bytes kept; and
// the dispatched rows DeepEP's count: a token reaches R = n (1 - C(E - E/n,
// k) / C(E, k)) = 2 (1 - C(2, 2) / C(4, 2)) = 5/3 of the 2 members
// (sim/collectives.h, DistinctGroupsPerToken).
void ExpectPairEqualsTheWholeBlock(ExpertDispatcher dispatcher, PairExchange& group) {
  const BlockShape shape = MoeShape();
  const int mbs = 2, tokens = 24, h = shape.hidden;
  Block whole(shape, 5);
  std::vector<float> x[2] = {Pattern(tokens * h, 6), Pattern(tokens * h, 7)};
  std::vector<float> dy[2] = {Pattern(tokens * h, 8), Pattern(tokens * h, 9)};
  std::vector<float> y_ref[2], dx_ref[2];
  for (int m = 0; m < 2; ++m) {
    y_ref[m].resize(x[m].size());
    dx_ref[m].resize(x[m].size());
    Saved s = whole.Forward(x[m], y_ref[m], mbs);
    whole.Backward(s, dy[m], dx_ref[m]);
  }
  std::vector<Block> shards;
  for (int j = 0; j < 2; ++j) {
    Result<Block> shard = whole.ExpertShard(2, j, dispatcher);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    shards.push_back(std::move(*shard));
  }
  EXPECT_EQ(shards[0].Parameters(), whole.Parameters() / 2);
  std::vector<float> y[2], dx[2];
  std::int64_t kept[2] = {0, 0};
  auto member = [&](int j) {
    PairExchange::Member ex(&group, j);
    y[j].resize(x[j].size());
    dx[j].resize(x[j].size());
    Saved s;
    ASSERT_TRUE(shards[j].Forward(x[j], y[j], mbs, ex, &s).ok());
    kept[j] = s.Bytes();
    ASSERT_TRUE(shards[j].BackwardInput(s, dy[j], dx[j], ex).ok());
    shards[j].BackwardWeight(s);
  };
  std::thread other(member, 1);
  member(0);
  other.join();
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(kept[j], whole.ActivationBytes(mbs)) << "member " << j;
    for (std::size_t i = 0; i < y[j].size(); ++i) {
      ASSERT_NEAR(y[j][i], y_ref[j][i], 1e-5) << "y of member " << j << " at " << i;
      ASSERT_NEAR(dx[j][i], dx_ref[j][i], 1e-5) << "dx of member " << j << " at " << i;
    }
    const std::size_t per = whole.GradientW1().size() / 2;
    for (std::size_t i = 0; i < per; ++i) {
      ASSERT_NEAR(shards[j].GradientW1()[i], whole.GradientW1()[j * per + i], 1e-5) << i;
      ASSERT_NEAR(shards[j].GradientW2()[i], whole.GradientW2()[j * per + i], 1e-5) << i;
    }
  }
}

TEST(MoeBlockTest, AnExpertParallelPairEqualsTheWholeBlock) {
  PairExchange group;
  ExpectPairEqualsTheWholeBlock(ExpertDispatcher::kDeepEp, group);
  // Forward and backward each dispatch and combine: 4 all-to-alls of
  // tokens x 5/3 rows of h floats.
  const std::size_t tokens = 24, h = MoeShape().hidden;
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(group.sent_floats(j), tokens * 5 / 3 * h * 4) << "member " << j;
    EXPECT_EQ(group.gathered_floats(j), 0u);
    EXPECT_EQ(group.scattered_floats(j), 0u);
  }
}

// Megatron-LM's all-gather dispatcher (workload.h): the same results within
// float rounding and the same rows kept, from other collectives. Each member
// of the 2 sends, per forward, its routing map and probs (24 tokens x 4
// experts = 96 floats each) and its x (24 x 8 = 192) to the all-gathers and
// the 2 x 192 = 384 floats of the group's summed outputs to the
// reduce-scatter; per backward dy (192) and dx's 384: 576 floats gathered
// and 768 scattered, no all-to-all.
TEST(MoeBlockTest, AnAllGatherDispatcherPairEqualsTheWholeBlock) {
  PairExchange group;
  ExpectPairEqualsTheWholeBlock(ExpertDispatcher::kAllGather, group);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(group.sent_floats(j), 0u) << "member " << j;
    EXPECT_EQ(group.gathered_floats(j), 96u + 96u + 192u + 192u);
    EXPECT_EQ(group.scattered_floats(j), 384u + 384u);
  }
}

// Expert tensor parallelism (workload.h): an etp x ep group of members
// (j, r), each with its own micro-batch, against the whole block run on each
// micro-batch in turn. With the all-to-alls, ep groups of the same r
// exchange tokens and etp groups of the same j gather and reduce-scatter;
// with the all-gather dispatcher one group of ep x etp does all. Member
// (j, r)'s weight gradients are columns r·F/etp.. of expert j·E/ep..'s dW1
// and those rows of its dW2; outputs and input gradients the whole block's,
// within float rounding; kept bytes etp·T·k rows of x (H) and of a, g (F/etp).
struct EtpRun {
  std::vector<std::size_t> sent, gathered, scattered;  // per member, ep then etp exchanges
};
EtpRun ExpectEtpGroupEqualsTheWholeBlock(int ep, int etp, ExpertDispatcher dispatcher) {
  const BlockShape shape = MoeShape();
  const int mbs = 2, tokens = 24, h = shape.hidden, f = shape.ffn / etp;
  const int n = ep * etp;
  Block whole(shape, 5);
  std::vector<std::vector<float>> x(n), dy(n), y_ref(n), dx_ref(n), y(n), dx(n);
  for (int m = 0; m < n; ++m) {
    x[m] = Pattern(tokens * h, 6 + m);
    dy[m] = Pattern(tokens * h, 16 + m);
    y_ref[m].resize(x[m].size());
    dx_ref[m].resize(x[m].size());
    Saved s = whole.Forward(x[m], y_ref[m], mbs);
    whole.Backward(s, dy[m], dx_ref[m]);
  }
  std::vector<Block> shards;
  for (int m = 0; m < n; ++m) {
    Result<Block> shard = whole.ExpertShard(ep, m / etp, dispatcher, etp, m % etp);
    EXPECT_TRUE(shard.ok()) << shard.status().message();
    if (!shard.ok()) return {};
    shards.push_back(std::move(*shard));
  }
  EXPECT_EQ(shards[0].Parameters(), whole.Parameters() / n);
  EXPECT_EQ(shards[0].expert_group_size(), n);
  const bool gather = dispatcher == ExpertDispatcher::kAllGather;
  // The all-to-alls: ep groups by etp rank and etp groups by ep rank; the
  // all-gather dispatcher: one group of n.
  std::vector<std::unique_ptr<PairExchange>> ep_groups, etp_groups;
  for (int r = 0; r < (gather ? 1 : etp); ++r) {
    ep_groups.push_back(std::make_unique<PairExchange>(gather ? n : ep));
  }
  for (int j = 0; j < ep; ++j) etp_groups.push_back(std::make_unique<PairExchange>(etp));
  std::vector<std::int64_t> kept(n);
  auto member = [&](int m) {
    const int j = m / etp, r = m % etp;
    PairExchange::Member ex(ep_groups[gather ? 0 : r].get(), gather ? m : j);
    PairExchange::Member tensor(etp_groups[j].get(), r);
    y[m].resize(x[m].size());
    dx[m].resize(x[m].size());
    Saved s;
    ASSERT_TRUE(shards[m].Forward(x[m], y[m], mbs, ex, &s, &tensor).ok());
    kept[m] = s.Bytes();
    ASSERT_TRUE(shards[m].BackwardInput(s, dy[m], dx[m], ex, &tensor).ok());
    shards[m].BackwardWeight(s);
  };
  std::vector<std::thread> others;
  for (int m = 1; m < n; ++m) others.emplace_back(member, m);
  member(0);
  for (std::thread& t : others) t.join();
  const int local = shape.experts / ep;
  EtpRun run;
  for (int m = 0; m < n; ++m) {
    const int j = m / etp, r = m % etp;
    EXPECT_EQ(kept[m], 4 * etp * mbs * shape.RowsPerSample() * (h + 2 * f)) << "member " << m;
    EXPECT_EQ(kept[m], shards[m].ActivationBytes(mbs));
    for (std::size_t i = 0; i < y[m].size(); ++i) {
      EXPECT_NEAR(y[m][i], y_ref[m][i], 1e-5) << "y of member " << m << " at " << i;
      EXPECT_NEAR(dx[m][i], dx_ref[m][i], 1e-5) << "dx of member " << m << " at " << i;
    }
    for (int e = 0; e < local; ++e) {
      const std::size_t we = static_cast<std::size_t>(j * local + e);
      for (int row = 0; row < h; ++row) {
        for (int c = 0; c < f; ++c) {
          EXPECT_NEAR(shards[m].GradientW1()[(e * h + row) * f + c],
                      whole.GradientW1()[(we * h + row) * shape.ffn + r * f + c], 1e-5);
        }
      }
      for (int row = 0; row < f; ++row) {
        for (int c = 0; c < h; ++c) {
          EXPECT_NEAR(shards[m].GradientW2()[(e * f + row) * h + c],
                      whole.GradientW2()[(we * shape.ffn + r * f + row) * h + c], 1e-5);
        }
      }
    }
    const PairExchange& e1 = *ep_groups[gather ? 0 : r];
    const PairExchange& e2 = *etp_groups[j];
    const int i1 = gather ? m : j;
    run.sent.push_back(e1.sent_floats(i1) + e2.sent_floats(r));
    run.gathered.push_back(e1.gathered_floats(i1) + e2.gathered_floats(r));
    run.scattered.push_back(e1.scattered_floats(i1) + e2.scattered_floats(r));
  }
  return run;
}

// ep 2 x etp 2 with the all-to-alls: each member dispatches DeepEP's count,
// 24 x 5/3 rows of 8 floats, 4 times (320 floats each), as at etp 1; its etp
// group gathers the 2 x 20 = 40 rows it received (320 floats) in the forward
// and dy's 320 in the backward, and reduce-scatters 2 x 320 partial sums
// each way.
TEST(MoeBlockTest, AnEtpTwoEpTwoGroupEqualsTheWholeBlock) {
  const EtpRun run = ExpectEtpGroupEqualsTheWholeBlock(2, 2, ExpertDispatcher::kAllToAll);
  ASSERT_EQ(run.sent.size(), 4u);
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(run.sent[m], 4u * 320u) << "member " << m;
    EXPECT_EQ(run.gathered[m], 320u + 320u);
    EXPECT_EQ(run.scattered[m], 640u + 640u);
  }
}

// ep 1 x etp 2: the all-to-all of one member moves its own 24 rows (192
// floats) 4 times; the etp collectives gather 192 and scatter 384 each way.
TEST(MoeBlockTest, AnEtpTwoEpOneGroupEqualsTheWholeBlock) {
  const EtpRun run = ExpectEtpGroupEqualsTheWholeBlock(1, 2, ExpertDispatcher::kAllToAll);
  ASSERT_EQ(run.sent.size(), 2u);
  for (int m = 0; m < 2; ++m) {
    EXPECT_EQ(run.sent[m], 4u * 192u) << "member " << m;
    EXPECT_EQ(run.gathered[m], 192u + 192u);
    EXPECT_EQ(run.scattered[m], 384u + 384u);
  }
}

// The all-gather dispatcher at ep 2 x etp 2: its group is the 4 members
// (tp_ep_group): per forward the routing map and probs (96 floats each) and x
// (192) gathered and 4 x 192 scattered; per backward dy's 192 and dx's 768.
TEST(MoeBlockTest, AnAllGatherDispatcherEtpGroupEqualsTheWholeBlock) {
  const EtpRun run = ExpectEtpGroupEqualsTheWholeBlock(2, 2, ExpertDispatcher::kAllGather);
  ASSERT_EQ(run.sent.size(), 4u);
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(run.sent[m], 0u) << "member " << m;
    EXPECT_EQ(run.gathered[m], 96u + 96u + 192u + 192u);
    EXPECT_EQ(run.scattered[m], 768u + 768u);
  }
}

TEST(MoeBlockTest, ShardsNameWhatIsWrong) {
  const Block whole(MoeShape(), 1);
  EXPECT_THAT(whole.ExpertShard(3, 0).status().message(),
              HasSubstr("does not divide the 4 experts"));
  EXPECT_THAT(whole.Shard(2, 0).status().message(), HasSubstr("does not split tensor-parallel"));
  EXPECT_TRUE(whole.Shard(1, 0).ok());
  const Block dense(BlockShape{}, 1);
  EXPECT_THAT(dense.ExpertShard(2, 0).status().message(), HasSubstr("dense block"));
  EXPECT_THAT(whole.ExpertShard(2, 0, ExpertDispatcher::kAllToAll, 5, 0).status().message(),
              HasSubstr("give etp >= 1 dividing ffn"));  // ffn 12
  EXPECT_THAT(whole.ExpertShard(2, 0, ExpertDispatcher::kAllToAll, 2, 2).status().message(),
              HasSubstr("a tensor rank in [0, etp)"));
}

TEST(MoeBlockTest, WorkloadSourceKeepsTheExperts) {
  WorkloadSpec spec;
  spec.shape = MoeShape();
  spec.layers = 2;
  Result<WorkloadSpec> back = WorkloadFromJson(WorkloadToSourceJson(spec));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->shape, spec.shape);
  EXPECT_THAT(WorkloadToSourceJson(spec), HasSubstr("moe_formula"));
  WorkloadSpec dense;
  EXPECT_THAT(WorkloadToSourceJson(dense), ::testing::Not(HasSubstr("experts")));
}

}  // namespace
}  // namespace pipecast::cpu
