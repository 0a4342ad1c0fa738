// The routed experts' GEMMs at the run's layout (issue 26; docs/simulator.md "Expert
// parallelism"): the profile's routed_experts at each etp, re-costed by the simulator at the
// run's etp, and the grouped GEMMs' fixed cost per local expert (moe.group_gemm_us) at the run's
// ep, worked by hand from the tile model (profiler/matmul_model.h) and the constant; older
// model.json files without them read and give the figures they gave; malformed fields are
// refused naming the field.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/stage_costs.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

// H100 SXM's tile model, compute term (matmul_model.h): ceil(tiles / 132) waves of 128 x 256
// tiles, each 2 x 128 x 256 x (k + 128) FLOPs at 989 TFLOP/s / 132 SMs x 0.763; the orientation
// with fewer waves.
double TileSeconds(double m, double n, double k) {
  const double a = std::ceil(m / 128) * std::ceil(n / 256);
  const double b = std::ceil(m / 256) * std::ceil(n / 128);
  const double waves = std::min(std::ceil(a / 132), std::ceil(b / 132));
  return waves * 2 * 128 * 256 * (k + 128) / (989e12 / 132 * 0.763);
}

// One MoE model from its HuggingFace config, s 4096, micro-batch 1, no imbalance, at t = 1 and
// `t`, bf16 on H100.
Model MoeModel(const char* hf, int t = 1) {
  Result<HfConfig> config = LoadHfConfig(SourcePath(hf));
  EXPECT_TRUE(config.ok()) << config.status().message();
  TransformerSpec spec = config->architecture;
  spec.name = "moe";
  spec.sequence_length = 4096;
  spec.max_positions = std::max<int64_t>(4096, spec.MaxPositions());
  spec.microbatch_sizes = {1};
  spec.layers = 2;  // the blocks are alike: two keep the test fast
  AnalyticOptions analytic;
  analytic.gpu_preset = "h100-sxm";
  analytic.moe_imbalance = 1;
  std::vector<int> degrees = {1};
  if (t > 1) degrees.push_back(t);
  Result<std::string> text = EstimateTransformerJson(spec, analytic, degrees);
  EXPECT_TRUE(text.ok()) << text.status().message();
  Result<Model> model = ParseModel(*text, "moe");
  EXPECT_TRUE(model.ok()) << model.status().message();
  return *model;
}

const Layer& FirstMoe(const Model& m) {
  for (const Layer& l : m.layers) {
    if (l.moe) return l;
  }
  throw std::runtime_error("no MoE layer");
}

const RoutedExpertsCost* EntryAt(const LayerProfile& p, int etp) {
  for (const RoutedExpertsCost& e : p.routed_experts) {
    if (e.expert_tensor_parallel == etp) return &e;
  }
  return nullptr;
}

// kGroupedGemmGroupSeconds by least squares on TransformerEngine#2045's two TE 2.7 points (H100,
// bf16): 8 x 4096 x 768 x 2048 at 627.9 TFLOP/s and 16 x 2048 x 768 x 2048 at 553.9, each against
// the model's one product of all rows, 32,768 x 768 x 2048: 6 waves, 149.67 us. The excesses,
// 14.49 us over 8 groups and 36.42 over 16, give sum(n x d) / sum(n^2) = 2.1835 us; 2.19 us is the
// same fit on the figures rounded to 0.1 us (164.2, 186.1, 149.6), as the docs give it.
TEST(ExpertGemmShapesTest, GroupCostIsTheLeastSquaresFitOfTe2045) {
  const Cluster h100 = test_util::PresetCluster("h100-sxm");
  const GemmRates rates{.peak_flops_per_s = 989e12,
                        .hbm_bytes_per_s = 3350e9,
                        .element_bytes = 2,
                        .preset = GemmPresetFor(h100.gpu)};
  const double model = TimeGemm(rates, Gemm{32768, 768, 2048}).seconds;
  EXPECT_NEAR(model, TileSeconds(32768, 768, 2048), 1e-12);
  EXPECT_NEAR(model * 1e6, 149.67, 0.01);
  const double flops = 2.0 * 32768 * 768 * 2048;
  const double d8 = flops / 627.9e12 - model, d16 = flops / 553.9e12 - model;
  const double fit = (8 * d8 + 16 * d16) / (8 * 8 + 16 * 16);
  EXPECT_NEAR(fit * 1e6, 2.1835, 0.001);
  const double rounded = (8 * (164.2 - 149.6) + 16 * (186.1 - 149.6)) / (8 * 8 + 16 * 16);
  EXPECT_NEAR(rounded, 2.19, 0.005);
  EXPECT_DOUBLE_EQ(kGroupedGemmGroupSeconds, 2.19e-6);
  // It reads the two points back at -1.7% (8 groups: 167.2 us against 164.2... as time, the rate
  // +1.8% fast) and +0.8%.
  EXPECT_NEAR((model + 8 * kGroupedGemmGroupSeconds) / (flops / 627.9e12) - 1, 0.0185, 0.001);
  EXPECT_NEAR((model + 16 * kGroupedGemmGroupSeconds) / (flops / 553.9e12) - 1, -0.0074, 0.001);
}

// Mixtral 8x7B (h 4096, 8 experts of 14,336, top-2, gated) at t = 1: 8,192 token copies per
// micro-batch of 4096. At etp 1 fc1 is 8,192 x 28,672 x 4,096 (64 x 112 = 7,168 tiles, 55 waves)
// and fc2 8,192 x 4,096 x 14,336 (1,024 tiles, 8 waves); at etp 2 the rows double and the widths
// halve: fc1 16,384 x 14,336 x 4,096 (55 waves), fc2 16,384 x 4,096 x 7,168 (16 waves, half the
// k: each pays the tile's 128 extra k-columns twice as often). Forward 3,989.8 us at etp 1,
// 4,001.5 at etp 2: +11.7 us; the input gradient likewise (3,997.1 -> 4,008.9); the weight
// gradient keeps etp = t's time.
TEST(ExpertGemmShapesTest, MixtralAtEtp2AgainstEtp1ByHand) {
  const Model m = MoeModel("examples/hf/mixtral-8x7b.json");
  const Layer& block = FirstMoe(m);
  ASSERT_EQ(block.profiles.size(), 1u);
  const LayerProfile& p = block.profiles[0];
  std::vector<int> etps;
  for (const RoutedExpertsCost& e : p.routed_experts) etps.push_back(e.expert_tensor_parallel);
  EXPECT_EQ(etps, (std::vector<int>{1, 2, 4, 8}));
  const RoutedExpertsCost* one = EntryAt(p, 1);
  const RoutedExpertsCost* two = EntryAt(p, 2);
  ASSERT_TRUE(one != nullptr && two != nullptr);
  const double f1 = TileSeconds(8192, 28672, 4096) + TileSeconds(8192, 4096, 14336);
  const double f2 = TileSeconds(16384, 14336, 4096) + TileSeconds(16384, 4096, 7168);
  const double i1 = TileSeconds(8192, 4096, 28672) + TileSeconds(8192, 14336, 4096);
  const double i2 = TileSeconds(16384, 4096, 14336) + TileSeconds(16384, 7168, 4096);
  EXPECT_NEAR(f1 * 1e6, 3989.8, 0.1);
  EXPECT_NEAR(f2 * 1e6, 4001.5, 0.1);
  EXPECT_NEAR(one->forward_ns, f1 * 1e9, 2);
  EXPECT_NEAR(two->forward_ns, f2 * 1e9, 2);
  EXPECT_NEAR(one->backward_ns - one->backward_weight_ns, i1 * 1e9, 2);
  EXPECT_NEAR(two->backward_ns - two->backward_weight_ns, i2 * 1e9, 2);
  EXPECT_EQ(one->backward_weight_ns, two->backward_weight_ns);

  // The simulator at t 1: etp 2 adds the difference to the block, etp 1 nothing.
  const LayerCost own = CostAt(block, 1, 1, false);
  const LayerCost at1 = CostAt(block, 1, 1, false, 1);
  const LayerCost at2 = CostAt(block, 1, 1, false, 2);
  EXPECT_EQ(at1.forward_ns, own.forward_ns);
  EXPECT_TRUE(at2.experts_etp_recosted);
  EXPECT_EQ(at2.forward_ns - own.forward_ns, two->forward_ns - one->forward_ns);
  EXPECT_NEAR(at2.forward_ns - own.forward_ns, (f2 - f1) * 1e9, 3);
  EXPECT_NEAR(at2.backward_ns - own.backward_ns, (i2 - i1) * 1e9, 3);
  EXPECT_EQ(at2.backward_weight_ns, own.backward_weight_ns);
  // The dense layers have no routed experts: unchanged.
  EXPECT_EQ(CostAt(m.layers[0], 1, 1, false, 2).forward_ns, CostAt(m.layers[0], 1).forward_ns);
  // etp 16 is not timed (the profiler times 1, 2, 4, 8 and t): kept, and said so.
  const LayerCost at16 = CostAt(block, 1, 1, false, 16);
  EXPECT_TRUE(at16.experts_etp_kept);
  EXPECT_EQ(at16.forward_ns, own.forward_ns);
}

// A profile at t = 2 holds etp 2's shapes; at etp 1 (each GPU of the pair holds whole experts
// over its own 4,096 / 2 tokens) the rows halve and the widths double: 4,096 x 28,672 x 4,096
// (32 x 112 = 3,584 tiles, 28 waves) and 4,096 x 4,096 x 14,336 (4 waves).
TEST(ExpertGemmShapesTest, MixtralProfiledAtT2RecostedAtEtp1) {
  const Model m = MoeModel("examples/hf/mixtral-8x7b.json", 2);
  const Layer& block = FirstMoe(m);
  const LayerCost own = CostAt(block, 1, 2, true);
  const LayerCost at1 = CostAt(block, 1, 2, true, 1);
  const double f2 = TileSeconds(8192, 14336, 4096) + TileSeconds(8192, 4096, 7168);
  const double f1 = TileSeconds(4096, 28672, 4096) + TileSeconds(4096, 4096, 14336);
  EXPECT_TRUE(at1.experts_etp_recosted);
  EXPECT_NEAR(at1.forward_ns - own.forward_ns, (f1 - f2) * 1e9, 3);
  // A t it was not profiled at (t 4, scaled from t = 1): the t = 1 profile re-costed at etp 1
  // (nothing) and at etp 4, then / 4 with the rest of the layer.
  const LayerCost scaled = CostAt(block, 1, 4, true, 4);
  EXPECT_TRUE(scaled.tp_scaled);
  const LayerProfile& p1 = block.profiles[0];
  ASSERT_EQ(p1.tensor_parallel, 1);
  EXPECT_NEAR(scaled.forward_ns - CostAt(block, 1, 4, true).forward_ns,
              (EntryAt(p1, 4)->forward_ns - EntryAt(p1, 1)->forward_ns) / 4.0, 1);
}

// Qwen3-30B-A3B (128 experts) at ep 8 holds 16 local experts: 6 grouped calls x 16 x 2.19 us =
// 210.24 us per block and micro-batch (70.08 forward, 70.08 input gradient, 70.08 weight
// gradient); at ep 16, 8 local experts, 105.12 us.
TEST(ExpertGemmShapesTest, Qwen3GroupCostAtEp8AndEp16ByHand) {
  const Model m = MoeModel("examples/hf/qwen3-30b-a3b.json");
  Model without = m;
  for (Layer& l : without.layers) {
    if (l.moe) l.moe->group_gemm_ns.reset();
  }
  ASSERT_EQ(*FirstMoe(m).moe->group_gemm_ns, 2190);
  for (auto [ep, per_block] : {std::pair{8, 210'240}, std::pair{16, 105'120}}) {
    StageCostOptions o = test_util::CostOptions(1);
    o.expert_parallel = ep;
    const StageCostTable with(m, o), old(without, o);
    const int block = 1;
    const LayerCost& a = with.Layer(block);
    const LayerCost& b = old.Layer(block);
    EXPECT_EQ(a.forward_ns - b.forward_ns, per_block / 3) << "ep " << ep;
    EXPECT_EQ(a.backward_ns - b.backward_ns, 2 * per_block / 3) << "ep " << ep;
    EXPECT_EQ(a.backward_weight_ns - b.backward_weight_ns, per_block / 3) << "ep " << ep;
    // The dense embedding pays none.
    EXPECT_EQ(with.Layer(0).forward_ns, old.Layer(0).forward_ns);
    // A full recomputation's rerun reruns the forward's two calls.
    StageCostOptions full = o;
    full.recompute = Recompute::kFull;
    const StageLayers all{0, static_cast<int>(m.layers.size()) - 1};
    EXPECT_EQ(StageCostTable(m, full).Stage(all).backward_ns -
                  StageCostTable(without, full).Stage(all).backward_ns,
              2 * (per_block * 2 / 3 + per_block / 3))
        << "ep " << ep;
    EXPECT_THAT(::testing::PrintToString(with.Notes()),
                HasSubstr(fmt::format("x {} local experts (experts / ep {})", 128 / ep, ep)));
    EXPECT_THAT(::testing::PrintToString(old.Notes()), HasSubstr("give no moe.group_gemm_us"));
  }
}

// model.json from before the fields: no routed_experts, no group_gemm_us. It reads, and gives
// the figures it gave (the profile's own shapes at every etp, no per-expert cost), and the
// simulator's notes say so.
TEST(ExpertGemmShapesTest, OlderModelWithoutTheFieldsReadsAsBefore) {
  const Model m = MoeModel("examples/hf/mixtral-8x7b.json");
  json doc = json::parse(ModelToJson(m));
  for (json& layer : doc["layers"]) {
    if (layer.contains("moe")) layer["moe"].erase("group_gemm_us");
    for (json& p : layer["profiles"]) p.erase("routed_experts");
  }
  Result<Model> old = ParseModel(doc.dump(), "old.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  const Layer& block = FirstMoe(*old);
  EXPECT_TRUE(block.profiles[0].routed_experts.empty());
  EXPECT_FALSE(block.moe->group_gemm_ns.has_value());
  const LayerCost at2 = CostAt(block, 1, 1, false, 2);
  EXPECT_FALSE(at2.experts_etp_recosted);
  EXPECT_FALSE(at2.experts_etp_kept);
  EXPECT_EQ(at2.forward_ns, block.profiles[0].forward_ns);
  EXPECT_EQ(at2.backward_ns, block.profiles[0].backward_ns);
  StageCostOptions o = test_util::CostOptions(1);
  o.expert_parallel = 4;
  o.expert_tensor_parallel = 2;
  const StageCostTable table(*old, o);
  const std::string notes = ::testing::PrintToString(table.Notes());
  EXPECT_THAT(notes, HasSubstr("give no routed_experts"));
  EXPECT_THAT(notes, HasSubstr("give no moe.group_gemm_us"));
  // The same layers as the new file's own shapes: only the all-to-alls and etp's collectives
  // are added (ep 4 etp 2), whose size does not depend on the fields.
  StageCostOptions plain = o;
  const StageCostTable fresh(m, plain);
  EXPECT_EQ(table.Layer(1).ep_forward_ns, fresh.Layer(1).ep_forward_ns);
  EXPECT_EQ(
      table.Layer(1).forward_ns - table.Layer(1).ep_forward_ns - table.Layer(1).etp_forward_ns,
      block.profiles[0].forward_ns);
  // And it writes back without them.
  EXPECT_THAT(ModelToJson(*old), ::testing::Not(HasSubstr("\"routed_experts\": [")));
}

// Malformed fields: each refused, naming the field and what to do.
TEST(ExpertGemmShapesTest, MalformedFieldsAreRefusedNamingTheField) {
  const Model m = MoeModel("examples/hf/mixtral-8x7b.json");
  const json good = json::parse(ModelToJson(m));
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"not a list", [](json& p) { p["routed_experts"] = 3; },
       "layers[1].profiles[0].routed_experts: must be a non-empty list"},
      {"empty", [](json& p) { p["routed_experts"] = json::array(); },
       "layers[1].profiles[0].routed_experts: must be a non-empty list"},
      {"unknown key", [](json& p) { p["routed_experts"][0]["forward"] = 1; },
       "layers[1].profiles[0].routed_experts[0].forward: unknown key"},
      {"etp 0", [](json& p) { p["routed_experts"][1]["expert_tensor_parallel"] = 0; },
       "layers[1].profiles[0].routed_experts[1].expert_tensor_parallel"},
      {"twice", [](json& p) { p["routed_experts"][1]["expert_tensor_parallel"] = 1; },
       "routed_experts[1].expert_tensor_parallel: 1 is already given in "
       "layers[1].profiles[0].routed_experts[0]"},
      {"weight over backward", [](json& p) { p["routed_experts"][2]["backward_weight_us"] = 1e9; },
       "routed_experts[2].backward_weight_us: 1000000000.0 is more than backward_us"},
      {"no entry at t", [](json& p) { p["routed_experts"].erase(0); },
       "routed_experts: has no entry at expert_tensor_parallel 1"},
      {"own entry over the profile", [](json& p) { p["routed_experts"][0]["forward_us"] = 1e9; },
       "the entry at expert_tensor_parallel 1"},
      {"missing time", [](json& p) { p["routed_experts"][0].erase("forward_us"); },
       "routed_experts[0].forward_us"},
  };
  for (const Case& c : cases) {
    json doc = good;
    c.edit(doc["layers"][1]["profiles"][0]);
    Result<Model> r = ParseModel(doc.dump(), "m.json");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.what;
  }
  for (double bad : {-1.0, 5000.0}) {
    json doc = good;
    doc["layers"][1]["moe"]["group_gemm_us"] = bad;
    Result<Model> r = ParseModel(doc.dump(), "m.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("layers[1].moe.group_gemm_us")) << bad;
  }
}

}  // namespace
}  // namespace pipecast
