#include "sim/partition.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "sim/memory_partition.h"
#include "sim/stage_costs.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

TEST(PartitionParse, RangesAndSingles) {
  auto p = ParsePartition("0-3, 4 ,5-7", 8, 3);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, (std::vector<StageLayers>{{0, 3}, {4, 4}, {5, 7}}));
  EXPECT_EQ(PartitionToString(*p), "0-3,4-4,5-7");
}

TEST(PartitionParse, Errors) {
  EXPECT_THAT(ParsePartition("0-3,5-7", 8, 2).status().message(), HasSubstr("starts at layer 5"));
  EXPECT_THAT(ParsePartition("0-3,4-9", 8, 2).status().message(), HasSubstr("past the model"));
  EXPECT_THAT(ParsePartition("0-3", 8, 1).status().message(), HasSubstr("model has 8 layers"));
  EXPECT_THAT(ParsePartition("0-3,4-7", 8, 4).status().message(), HasSubstr("4 stages"));
  EXPECT_THAT(ParsePartition("0-x", 8, 1).status().message(), HasSubstr("'0-x'"));
  EXPECT_THAT(ParsePartition("", 8, 1).status().message(), HasSubstr("expected FIRST-LAST"));
  EXPECT_THAT(ParsePartition("3-1,2-7", 8, 2).status().message(), HasSubstr("starts at layer 3"));
}

// Smallest bottleneck over every split, by brute force.
TimeNs BruteForceBottleneck(const std::vector<TimeNs>& cost, int stages, size_t from = 0) {
  if (stages == 1) {
    TimeNs s = 0;
    for (size_t i = from; i < cost.size(); ++i) s += cost[i];
    return s;
  }
  TimeNs best = std::numeric_limits<TimeNs>::max();
  TimeNs head = 0;
  for (size_t end = from; end + stages <= cost.size(); ++end) {
    head += cost[end];
    best = std::min(best, std::max(head, BruteForceBottleneck(cost, stages - 1, end + 1)));
  }
  return best;
}

// A model whose layer l takes cost[l] ns forward (backward 0), for the time-balanced split.
StageCostTable TableOf(const std::vector<TimeNs>& cost, Model* model) {
  for (TimeNs c : cost) {
    Layer layer;
    layer.name = "l";
    LayerProfile prof;
    prof.microbatch_size = 1;
    prof.forward_ns = c;
    layer.profiles.push_back(prof);
    model->layers.push_back(layer);
  }
  return StageCostTable(*model, StageCostOptions{});
}

// The one balanced split (TimeBalancedSplit, sim/memory_partition.h): the
// smallest bottleneck of every contiguous split.
TEST(PartitionBalanced, MatchesBruteForce) {
  std::vector<std::vector<TimeNs>> cases = {
      {5, 1, 1, 1, 1, 1, 5}, {1, 2, 3, 4, 5, 6, 7, 8}, {10, 1, 1, 1, 1, 10, 3}, {3, 3, 3, 3}};
  for (const auto& cost : cases) {
    Model model;
    const StageCostTable table = TableOf(cost, &model);
    for (int p = 1; p <= static_cast<int>(cost.size()); ++p) {
      const std::vector<StageLayers> part = TimeBalancedSplit(table, p);
      ASSERT_EQ(static_cast<int>(part.size()), p);
      TimeNs worst = 0;
      int next = 0;
      for (const StageLayers& s : part) {
        EXPECT_EQ(s.first_layer, next);
        next = s.last_layer + 1;
        TimeNs sum = 0;
        for (int l = s.first_layer; l <= s.last_layer; ++l) sum += cost[l];
        worst = std::max(worst, sum);
      }
      EXPECT_EQ(next, static_cast<int>(cost.size()));
      EXPECT_EQ(worst, BruteForceBottleneck(cost, p)) << "p=" << p;
    }
  }
}

TEST(PartitionBalanced, UniformLayersSplitEvenly) {
  Model model;
  EXPECT_EQ(TimeBalancedSplit(TableOf(std::vector<TimeNs>(8, 3), &model), 4),
            (std::vector<StageLayers>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

TEST(PartitionBalanced, TooManyStages) {
  EXPECT_THAT(CheckStageCount(3, 2).message(),
              HasSubstr("3 stages but the model has only 2 layers: use at most 2 stages"));
  EXPECT_THAT(CheckStageCount(0, 2).message(), HasSubstr("need at least 1"));
  EXPECT_TRUE(CheckStageCount(2, 2).ok());
}

// Megatron-LM's even split. pipecast's models put the embedding first and the head last
// (examples/gpt-7b.json: "embedding", 32 blocks, "lm_head": 34 layers).
std::vector<StageLayers> Even(int layers, ModelEnds ends, int p, int v, EvenSplitOptions o = {}) {
  std::vector<int> stage_rank;
  for (int s = 0; s < p * v; ++s) stage_rank.push_back(s % p);  // Megatron's interleaving
  Result<std::vector<StageLayers>> got = EvenPartition(layers, ends, p, stage_rank, o);
  EXPECT_TRUE(got.ok()) << got.status().message();
  return got.ok() ? *got : std::vector<StageLayers>{};
}

constexpr ModelEnds kGpt{true, true};

TEST(PartitionEven, ThirtyTwoDecoderLayersOnFourStages) {
  // 32 / 4 = 8 decoder layers each; the embedding (layer 0) joins stage 0, the head (33) stage 3.
  EXPECT_EQ(PartitionToString(Even(34, kGpt, 4, 1)), "0-8,9-16,17-24,25-33");
  // A model without embedding and head: 8 layers on 4 stages, 2 each.
  EXPECT_EQ(PartitionToString(Even(8, ModelEnds{}, 4, 1)), "0-1,2-3,4-5,6-7");
}

TEST(PartitionEven, FirstAndLastStageCounts) {
  // --decoder-first/last-pipeline-num-layers 6: the two middle stages take (32 - 12) / 2 = 10.
  EXPECT_EQ(
      PartitionToString(Even(34, kGpt, 4, 1, {.first_stage_layers = 6, .last_stage_layers = 6})),
      "0-6,7-16,17-26,27-33");
  // Only the last stage given: the three others take (32 - 5) / 3 = 9.
  EXPECT_EQ(PartitionToString(Even(34, kGpt, 4, 1, {.last_stage_layers = 5})),
            "0-9,10-18,19-27,28-33");
}

TEST(PartitionEven, VirtualStages) {
  // p = 4, v = 2: 8 decoder layers per rank, 4 per virtual stage, in virtual-stage order
  // (stage s = chunk x p + rank).
  EXPECT_EQ(PartitionToString(Even(34, kGpt, 4, 2)), "0-4,5-8,9-12,13-16,17-20,21-24,25-28,29-33");
  // With first/last 4: first and last ranks 2 per chunk, middle ranks (32 - 8) / 2 / 2 = 6.
  EXPECT_EQ(
      PartitionToString(Even(34, kGpt, 4, 2, {.first_stage_layers = 4, .last_stage_layers = 4})),
      "0-2,3-8,9-14,15-16,17-18,19-24,25-30,31-33");
}

TEST(PartitionEven, AccountForEmbeddingAndLoss) {
  // 32 + 2 = 34 units over 2 stages: 17 each, the embedding and the head among them.
  EXPECT_EQ(PartitionToString(
                Even(34, kGpt, 2, 1, {.account_for_embedding = true, .account_for_loss = true})),
            "0-16,17-33");
  // 30 decoder layers + the embedding = 31 does not divide over 2; + the loss = 32 does.
  EXPECT_THAT(
      EvenPartition(32, kGpt, 2, {0, 1}, {.account_for_embedding = true}).status().message(),
      HasSubstr("30 decoder layers + the embedding (31 in the split)"));
}

TEST(PartitionEven, Errors) {
  auto error = [](int layers, ModelEnds ends, int p, std::vector<int> stage_rank,
                  EvenSplitOptions o) {
    return EvenPartition(layers, ends, p, stage_rank, o).status().message();
  };
  EXPECT_THAT(error(34, kGpt, 3, {0, 1, 2}, {}), HasSubstr("32 decoder layers do not divide"));
  EXPECT_THAT(error(34, kGpt, 4, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {}),
              HasSubstr("virtual stages"));
  EXPECT_THAT(error(34, kGpt, 4, {0, 1, 2, 3}, {.first_stage_layers = 20, .last_stage_layers = 20}),
              HasSubstr("but the model has only 32 decoder layers"));
  EXPECT_THAT(error(34, kGpt, 4, {0, 1, 2, 3}, {.first_stage_layers = 5, .last_stage_layers = 6}),
              HasSubstr("21 decoder layers left"));
  EXPECT_THAT(error(34, kGpt, 2, {0, 1}, {.first_stage_layers = 5, .last_stage_layers = 6}),
              HasSubstr("on 2 stages they must add up to 32"));
  EXPECT_THAT(error(34, kGpt, 3, {0, 1, 2}, {.first_stage_layers = 16, .last_stage_layers = 16}),
              HasSubstr("leaving none for the 1 middle stages"));
  EXPECT_THAT(error(34, kGpt, 1, {0}, {.first_stage_layers = 2}), HasSubstr("at least 2 pipeline"));
  EXPECT_THAT(error(8, ModelEnds{}, 2, {0, 1}, {.account_for_embedding = true}),
              HasSubstr("first layer is not 'embedding'"));
  EXPECT_THAT(error(34, kGpt, 2, {0, 1}, {.first_stage_layers = 2, .account_for_loss = true}),
              HasSubstr("cannot be given together"));
  EXPECT_THAT(error(34, kGpt, 40, std::vector<int>(40, 0), {}), HasSubstr("use at most 34"));
}

// Megatron-LM's own arithmetic, transliterated from get_transformer_layer_offset
// (megatron/core/transformer/transformer_layer.py) and get_num_layers_to_build
// (transformer_block.py) at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553, with
// TransformerConfig's checks (transformer_config.py): the decoder layers' offset and count of
// pipeline rank `pp`, virtual stage `vp` (v = 0: no virtual pipeline). 0 = not given for F, L.
struct Megatron {
  int D, P, V, F, L;
  bool ae, al;
  bool Valid() const {
    if ((F || L) && (ae || al)) return false;
    if (F || L) {
      if (V && (F % V || L % V)) return false;
      const int rest = D - F - L, mid = P - (F > 0) - (L > 0);
      if (rest < 0) return false;  // Megatron goes on with negative counts; pipecast refuses
      if ((rest != 0) != (mid != 0)) return false;
      if (mid && rest % mid) return false;
      if (mid && V && (rest / mid) % V) return false;
      return true;
    }
    const int n = D + ae + al;
    return n % P == 0 && (!V || (n / P) % V == 0);
  }
  int Offset(int pp, int vp) const {
    if (P == 1) return 0;
    if (F || L) {
      const int mid_stages = P - (F > 0) - (L > 0);
      const int mid_layers = D - F - L;
      const int mid_rank = F == 0 ? pp : pp - 1;
      if (V) {
        const int fc = F / V, lc = L / V, mc = mid_layers / V;
        const int total = fc + mc + lc;
        // With no middle stage Megatron-LM divides by zero here (p = 2 with both counts and
        // virtual stages); the middle term is 0 then.
        const int per_mid = mid_stages > 0 ? mc / mid_stages : 0;
        return pp == 0 ? vp * total : vp * total + fc + mid_rank * per_mid;
      }
      const int per = mid_stages > 0 ? mid_layers / mid_stages : 0;
      return pp == 0 ? 0 : mid_rank * per + F;
    }
    const int n = D + ae + al;
    const int per = n / P;
    int off;
    if (V) {
      off = vp * (n / V) + pp * (per / V);
      if (ae && !(vp == 0 && pp == 0)) off -= 1;
    } else {
      off = pp * per;
      if (ae && pp != 0) off -= 1;
    }
    return off;
  }
  int Build(int pp, int vp) const {
    int per;
    if (F || L) {
      const int left = P - (F > 0) - (L > 0);
      per = left > 0 ? (D - F - L) / left : 0;
      if (pp == 0 && F) per = F;
      if (pp == P - 1 && L) per = L;
    } else {
      per = (D + ae + al) / P;
    }
    int build = V && P > 1 ? per / V : per;
    const int chunks = V ? V : 1;
    if (ae && vp == 0 && pp == 0) build -= 1;
    if (al && vp == chunks - 1 && pp == P - 1) build -= 1;
    return build;
  }
};

TEST(PartitionEven, MatchesMegatronsOffsetsAndCounts) {
  int checked = 0, refused = 0;
  for (int D : {1, 2, 6, 8, 12, 30, 32}) {
    for (int P : {2, 3, 4, 8}) {
      for (int V : {0, 2, 4}) {
        for (int F : {0, 2, 4, 6}) {
          for (int L : {0, 2, 4, 6}) {
            for (int acc = 0; acc < 4; ++acc) {
              const Megatron m{D, P, V, F, L, (acc & 1) != 0, (acc & 2) != 0};
              const int v = V ? V : 1;
              std::vector<int> stage_rank;
              for (int s = 0; s < P * v; ++s) stage_rank.push_back(s % P);
              const EvenSplitOptions o{F, L, m.ae, m.al};
              // pipecast's stages must each hold a layer: D + 2 layers in all.
              const bool fits = P * v <= D + 2;
              Result<std::vector<StageLayers>> got = EvenPartition(D + 2, kGpt, P, stage_rank, o);
              const std::string what =
                  fmt::format("D={} P={} V={} F={} L={} ae={} al={}", D, P, V, F, L, m.ae, m.al);
              if (!m.Valid() || !fits) {
                EXPECT_FALSE(got.ok()) << what;
                ++refused;
                continue;
              }
              bool empty_stage = false;
              for (int s = 0; s < P * v; ++s) {
                // Its decoder layers, plus the embedding or the head (already counted
                // among Build's when accounted for).
                empty_stage |= m.Build(s % P, s / P) + (s == 0) + (s == P * v - 1) <= 0;
              }
              if (empty_stage) {
                EXPECT_FALSE(got.ok()) << what;
                continue;
              }
              ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
              for (int s = 0; s < P * v; ++s) {
                const int pp = s % P, vp = s / P;
                const bool last = s == P * v - 1;
                const int first_decoder = m.Offset(pp, vp) + 1;  // layer 0 is the embedding
                const int last_decoder = first_decoder + m.Build(pp, vp) - 1;
                EXPECT_EQ((*got)[s].first_layer, s == 0 ? 0 : first_decoder) << what << " s=" << s;
                EXPECT_EQ((*got)[s].last_layer, last ? D + 1 : last_decoder) << what << " s=" << s;
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  // Both branches ran on many cases.
  EXPECT_GT(checked, 200);
  EXPECT_GT(refused, 200);
}

}  // namespace
}  // namespace pipecast
