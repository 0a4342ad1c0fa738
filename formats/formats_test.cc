#include "formats/formats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/file_util.h"
#include "testing/formats_test_util.h"

namespace pipecast {
namespace {

using nlohmann::json;
using test_util::ErrorCase;
using test_util::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// --- tiny worlds -------------------------------------------------------------

json Profile(int microbatch_size, double forward_us = 10) {
  return {{"microbatch_size", microbatch_size},
          {"forward_us", forward_us},
          {"backward_us", 2 * forward_us},
          {"activation_bytes", 1000 * microbatch_size},
          {"output_bytes", 100 * microbatch_size}};
}

json LayerJson(const std::string& name, std::vector<json> profiles = {Profile(1)}) {
  return {{"name", name}, {"parameters", 1000}, {"profiles", profiles}};
}

// The smallest valid model.json: two layers, one profile each.
json MinimalModel() {
  return {{"format", "pipecast-model/1"},
          {"name", "tiny"},
          {"layers", {LayerJson("l0"), LayerJson("l1")}}};
}

Result<Model> Parse(const json& j) { return ParseModel(j.dump(), "m.json"); }

// --- model.json: valid input ---------------------------------------------------

TEST(FormatsModel, ParsesMinimalModelWithDefaults) {
  Result<Model> model = Parse(MinimalModel());

  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->name, "tiny");
  ASSERT_EQ(model->layers.size(), 2u);
  EXPECT_EQ(model->layers[1].name, "l1");
  EXPECT_EQ(model->layers[0].parameters, 1000);
  EXPECT_EQ(model->source.method, "manual");
  EXPECT_EQ(model->dtype, "");
  EXPECT_FALSE(model->sequence_length.has_value());
  EXPECT_FALSE(model->flops_per_sample.has_value());
  EXPECT_FALSE(model->global_batch.has_value());
  const LayerProfile& p = model->layers[0].profiles.at(0);
  EXPECT_EQ(p.microbatch_size, 1);
  EXPECT_EQ(p.forward_ns, 10'000);
  EXPECT_EQ(p.backward_ns, 20'000);
  EXPECT_FALSE(p.backward_weight_ns.has_value());
  EXPECT_EQ(p.activation_bytes, 1000);
  EXPECT_EQ(p.output_bytes, 100);
  EXPECT_EQ(p.workspace_bytes, 0);
}

TEST(FormatsModel, ReadsEveryOptionalField) {
  json j = MinimalModel();
  j["source"] = {
      {"method", "analytic"}, {"device", "h100-sxm"}, {"assumptions", {"mfu 0.5"}}, {"mfu", 0.5}};
  j["dtype"] = "bf16";
  j["sequence_length"] = 2048;
  j["flops_per_sample"] = 1.5e12;
  j["global_batch"] = 64;
  j["layers"][0]["forward_flops"] = 3e9;
  j["layers"][0]["profiles"][0]["backward_weight_us"] = 7.5;
  j["layers"][0]["profiles"][0]["workspace_bytes"] = 4096;
  j["layers"][0]["profiles"][0]["checkpoint_bytes"] = 200;
  j["layers"][0]["profiles"][0]["attention_core_bytes"] = 300;
  j["layers"][0]["profiles"][0]["attention_core_us"] = 2.5;
  j["layers"][0]["profiles"][0]["weight_grad_bytes"] = 1500;  // may exceed activation_bytes

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.method, "analytic");
  EXPECT_EQ(model->source.device, "h100-sxm");
  EXPECT_EQ(model->source.details.size(), 2u);
  EXPECT_EQ(model->source.details.at("assumptions"), R"(["mfu 0.5"])");
  EXPECT_EQ(model->source.details.at("mfu"), "0.5");
  EXPECT_EQ(model->dtype, "bf16");
  EXPECT_EQ(model->sequence_length, 2048);
  EXPECT_EQ(model->flops_per_sample, 1.5e12);
  EXPECT_EQ(model->global_batch, 64);
  EXPECT_EQ(model->layers[0].forward_flops, 3e9);
  EXPECT_FALSE(model->layers[1].forward_flops.has_value());
  EXPECT_EQ(model->layers[0].profiles[0].backward_weight_ns, 7'500);
  EXPECT_EQ(model->layers[0].profiles[0].workspace_bytes, 4096);
  EXPECT_EQ(model->layers[0].profiles[0].checkpoint_bytes, 200);
  EXPECT_EQ(model->layers[0].profiles[0].attention_core_bytes, 300);
  EXPECT_EQ(model->layers[0].profiles[0].attention_core_ns, 2'500);
  EXPECT_EQ(model->layers[0].profiles[0].weight_grad_bytes, 1500);
  EXPECT_FALSE(model->layers[1].profiles[0].checkpoint_bytes.has_value());
  // And they are written back.
  const std::string text = ModelToJson(*model);
  EXPECT_THAT(text, HasSubstr("\"checkpoint_bytes\": 200"));
  EXPECT_THAT(text, HasSubstr("\"attention_core_us\": 2.5"));
  EXPECT_THAT(text, HasSubstr("\"weight_grad_bytes\": 1500"));
}

// source.architecture typed: every key the analytic profiler writes that the
// memory replay needs (docs/formats.md), and an older file with only the
// first four still reads, the rest unstated.
TEST(FormatsModel, ReadsTheArchitecturesShape) {
  json j = MinimalModel();
  j["source"] = {{"method", "analytic"},
                 {"architecture",
                  {{"layers", 32},
                   {"hidden", 4096},
                   {"heads", 32},
                   {"kv_heads", 8},
                   {"ffn_hidden", 14336},
                   {"gated_mlp", true},
                   {"sequence_length", 8192},
                   {"vocab", 128256},
                   {"tied_embeddings", false},
                   {"learned_positions", false},
                   {"head_dim", 128},
                   {"norm", "rmsnorm"},
                   {"block_norms", 2},
                   {"qk_norm", false},
                   {"qkv_bias", false},
                   {"output_bias", false},
                   {"mlp_bias", true},
                   {"parallel_block", false},
                   {"sliding_window", 0},
                   {"moe", {{"experts", 8}}}}}};

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(model->source.architecture.has_value());
  const ModelArchitecture& a = *model->source.architecture;
  EXPECT_EQ(a.layers, 32);
  EXPECT_EQ(a.hidden, 4096);
  EXPECT_EQ(a.heads, 32);
  EXPECT_EQ(a.kv_heads, 8);
  EXPECT_EQ(a.ffn_hidden, 14336);
  EXPECT_EQ(a.sequence_length, 8192);
  EXPECT_EQ(a.vocab, 128256);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.block_norms, 2);
  EXPECT_EQ(a.norm, "rmsnorm");
  EXPECT_EQ(a.gated_mlp, true);
  EXPECT_EQ(a.tied_embeddings, false);
  EXPECT_EQ(a.mlp_bias, true);
  EXPECT_EQ(a.qkv_bias, false);
  EXPECT_TRUE(a.moe);
  EXPECT_FALSE(a.mla);
  // Kept verbatim and written back as it was.
  EXPECT_THAT(ModelToJson(*model), HasSubstr("\"ffn_hidden\": 14336"));

  json old = MinimalModel();
  old["source"] = {
      {"method", "analytic"},
      {"architecture", {{"hidden", 256}, {"sequence_length", 128}, {"heads", 4}, {"kv_heads", 4}}}};
  Result<Model> older = Parse(old);
  ASSERT_TRUE(older.ok()) << older.status().message();
  ASSERT_TRUE(older->source.architecture.has_value());
  EXPECT_EQ(older->source.architecture->hidden, 256);
  EXPECT_EQ(older->source.architecture->heads, 4);
  EXPECT_EQ(older->source.architecture->layers, 0);
  EXPECT_EQ(older->source.architecture->vocab, 0);
  EXPECT_EQ(older->source.architecture->norm, "");
  EXPECT_FALSE(older->source.architecture->gated_mlp.has_value());
  EXPECT_FALSE(older->source.architecture->moe);
}

TEST(FormatsModel, SortsProfilesByMicrobatchSize) {
  json j = MinimalModel();
  j["layers"][0]["profiles"] = {Profile(4), Profile(1), Profile(2)};

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  const auto& profiles = model->layers[0].profiles;
  ASSERT_EQ(profiles.size(), 3u);
  EXPECT_EQ(profiles[0].microbatch_size, 1);
  EXPECT_EQ(profiles[1].microbatch_size, 2);
  EXPECT_EQ(profiles[2].microbatch_size, 4);
  EXPECT_EQ(profiles[2].activation_bytes, 4000);  // moved with its size
}

TEST(FormatsModel, RoundsFractionalMicrosecondsToNanoseconds) {
  json j = MinimalModel();
  j["layers"][0]["profiles"][0]["forward_us"] = 1.2345;
  j["layers"][0]["profiles"][0]["backward_us"] = 0.0004;

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->layers[0].profiles[0].forward_ns, 1'235);  // nearest ns
  EXPECT_EQ(model->layers[0].profiles[0].backward_ns, 0);
}

TEST(FormatsModel, AcceptsWholeNumbersWrittenAsFloats) {
  json j = MinimalModel();
  j["layers"][0]["parameters"] = 5e7;
  j["layers"][0]["profiles"][0]["microbatch_size"] = 2.0;

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->layers[0].parameters, 50'000'000);
  EXPECT_EQ(model->layers[0].profiles[0].microbatch_size, 2);
}

TEST(FormatsModel, AcceptsTheLimitsThemselves) {
  json j = MinimalModel();
  j["layers"][0]["profiles"][0]["forward_us"] = 1e12;
  j["layers"][0]["profiles"][0]["backward_us"] = 1e12;
  j["layers"][0]["profiles"][0]["activation_bytes"] = int64_t{1} << 50;

  Result<Model> model = Parse(j);

  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->layers[0].profiles[0].forward_ns, 1'000'000'000'000'000);
}

// --- model.json: round trip -----------------------------------------------------

Model RichModel() {
  Model m;
  m.name = "rich";
  m.source.method = "cupti";
  m.source.device = "NVIDIA H100 80GB HBM3";
  m.source.details["cuda"] = R"("13.0")";
  m.source.details["runs"] = R"({"warmup":3,"measured":[1,2]})";
  m.dtype = "bf16";
  m.sequence_length = 4096;
  m.flops_per_sample = 1.25e13;
  m.global_batch = 512;
  Layer a;
  a.name = "embed";
  a.parameters = 123456789;
  a.forward_flops = 0.5;
  LayerProfile p;
  p.microbatch_size = 1;
  p.forward_ns = 1;
  p.backward_ns = 1'234'567;
  p.backward_weight_ns = 999'999;
  p.activation_bytes = int64_t{1} << 40;
  p.output_bytes = 7;
  p.workspace_bytes = 3;
  a.profiles.push_back(p);
  LayerProfile q;  // no workspace
  q.microbatch_size = 8;
  q.forward_ns = 987'654'321'123;
  q.backward_ns = 987'654'321'125;
  q.backward_weight_ns = 0;
  a.profiles.push_back(q);
  Layer b;
  b.name = "head \"quoted\" \u00e9";
  LayerProfile r;
  r.microbatch_size = 3;
  r.forward_ns = 333;
  b.profiles.push_back(r);
  m.layers = {a, b};
  return m;
}

void ExpectSameModel(const Model& x, const Model& y) {
  EXPECT_EQ(x.name, y.name);
  EXPECT_EQ(x.source.method, y.source.method);
  EXPECT_EQ(x.source.device, y.source.device);
  EXPECT_EQ(x.source.details, y.source.details);
  EXPECT_EQ(x.dtype, y.dtype);
  EXPECT_EQ(x.sequence_length, y.sequence_length);
  EXPECT_EQ(x.flops_per_sample, y.flops_per_sample);
  EXPECT_EQ(x.global_batch, y.global_batch);
  ASSERT_EQ(x.layers.size(), y.layers.size());
  for (size_t i = 0; i < x.layers.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const Layer& l = x.layers[i];
    const Layer& r = y.layers[i];
    EXPECT_EQ(l.name, r.name);
    EXPECT_EQ(l.parameters, r.parameters);
    EXPECT_EQ(l.forward_flops, r.forward_flops);
    ASSERT_EQ(l.profiles.size(), r.profiles.size());
    for (size_t k = 0; k < l.profiles.size(); ++k) {
      const LayerProfile& p = l.profiles[k];
      const LayerProfile& q = r.profiles[k];
      EXPECT_EQ(p.microbatch_size, q.microbatch_size);
      EXPECT_EQ(p.forward_ns, q.forward_ns);
      EXPECT_EQ(p.backward_ns, q.backward_ns);
      EXPECT_EQ(p.backward_weight_ns, q.backward_weight_ns);
      EXPECT_EQ(p.activation_bytes, q.activation_bytes);
      EXPECT_EQ(p.output_bytes, q.output_bytes);
      EXPECT_EQ(p.workspace_bytes, q.workspace_bytes);
    }
  }
}

TEST(FormatsModel, RoundTripsThroughJson) {
  const Model original = RichModel();

  std::string text = ModelToJson(original);
  Result<Model> parsed = ParseModel(text, "roundtrip.json");

  ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << text;
  ExpectSameModel(original, *parsed);
  EXPECT_EQ(ModelToJson(*parsed), text);  // and the text is stable
}

TEST(FormatsModel, WritesFormatFirstTwoSpaceIndentAndTrailingNewline) {
  std::string text = ModelToJson(RichModel());

  EXPECT_EQ(text.rfind("{\n  \"format\": \"pipecast-model/1\",\n", 0), 0u) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_THAT(text, HasSubstr("\"forward_us\": 987654321.123"));
  EXPECT_THAT(text, Not(HasSubstr("\"dtype\": \"\"")));
}

TEST(FormatsModel, OmitsAbsentOptionalFields) {
  Model m = *Parse(MinimalModel());

  json j = json::parse(ModelToJson(m));

  EXPECT_FALSE(j.contains("dtype"));
  EXPECT_FALSE(j.contains("sequence_length"));
  EXPECT_FALSE(j.contains("global_batch"));
  EXPECT_FALSE(j["layers"][0].contains("forward_flops"));
  EXPECT_FALSE(j["layers"][0]["profiles"][0].contains("backward_weight_us"));
  EXPECT_FALSE(j["layers"][0]["profiles"][0].contains("workspace_bytes"));
  EXPECT_EQ(j["source"], json({{"method", "manual"}}));
}

// --- model.json: every kind of error, with its JSON path -------------------------

json& P0(json& j) { return j["layers"][1]["profiles"][0]; }

const ErrorCase kModelErrors[] = {
    {"FormatMissing", [](json& j) { j.erase("format"); }, "format: missing",
     "\"format\": \"pipecast-model/1\""},
    {"FormatNewerVersion", [](json& j) { j["format"] = "pipecast-model/2"; },
     "format: \"pipecast-model/2\" is not supported", "this build reads \"pipecast-model/1\""},
    {"FormatOfAClusterFile", [](json& j) { j["format"] = "pipecast-cluster/1"; },
     "format:", "another kind of pipecast file"},
    {"FormatNotAString", [](json& j) { j["format"] = 1; }, "format:", "must be a string, got 1"},
    {"NameMissing", [](json& j) { j.erase("name"); }, "m.json: name: missing", "the model's name"},
    {"NameEmpty", [](json& j) { j["name"] = ""; }, "name:", "must not be empty"},
    {"UnknownTopLevelKey", [](json& j) { j["layer"] = 1; },
     "layer:", "unknown key (did you mean 'layers'?)"},
    {"LayersMissing", [](json& j) { j.erase("layers"); }, "layers: missing", "the list of layers"},
    {"LayersEmpty", [](json& j) { j["layers"] = json::array(); }, "layers:", "is empty"},
    {"LayersNotAList",
     [](json& j) {
       j["layers"] = {{"a", 1}};
     },
     "layers:", "must be a list of layers, got an object"},
    {"LayerNotAnObject", [](json& j) { j["layers"][1] = 3; },
     "layers[1]:", "must be a JSON object {...}, got 3"},
    {"LayerNameMissing", [](json& j) { j["layers"][1].erase("name"); }, "layers[1].name: missing",
     "the layer's name"},
    {"LayerNameNotAString", [](json& j) { j["layers"][1]["name"] = 7; },
     "layers[1].name:", "must be a string, got 7"},
    {"ParametersNegative", [](json& j) { j["layers"][1]["parameters"] = -1; },
     "layers[1].parameters:", "must be an integer >= 0, got -1"},
    {"ParametersFractional", [](json& j) { j["layers"][1]["parameters"] = 1.5; },
     "layers[1].parameters:", "must be an integer >= 0, got 1.5"},
    {"ParametersAString", [](json& j) { j["layers"][1]["parameters"] = "12"; },
     "layers[1].parameters:", "must be an integer >= 0, got string \"12\""},
    {"ParametersAbsurd", [](json& j) { j["layers"][1]["parameters"] = 1e17; },
     "layers[1].parameters:", "over the limit of 2^50"},
    {"ParametersBeyondInt64", [](json& j) { j["layers"][1]["parameters"] = UINT64_MAX; },
     "layers[1].parameters:", "over the limit"},
    {"ForwardFlopsNegative", [](json& j) { j["layers"][1]["forward_flops"] = -1; },
     "layers[1].forward_flops:", "must be a finite number >= 0, got -1"},
    {"ProfilesMissing", [](json& j) { j["layers"][1].erase("profiles"); },
     "layers[1].profiles: missing", ""},
    {"ProfilesEmpty", [](json& j) { j["layers"][1]["profiles"] = json::array(); },
     "layers[1].profiles:", "is empty"},
    {"ProfilesNotAList", [](json& j) { j["layers"][1]["profiles"] = 1; },
     "layers[1].profiles:", "must be a list of profiles, got 1"},
    {"UnknownProfileKey",
     [](json& j) {
       P0(j)["foward_us"] = P0(j)["forward_us"];
     },
     "layers[1].profiles[0].foward_us:", "unknown key (did you mean 'forward_us'?)"},
    {"MicrobatchSizeZero",
     [](json& j) {
       P0(j)["microbatch_size"] = 0;
     },
     "layers[1].profiles[0].microbatch_size:", "must be an integer >= 1, got 0"},
    {"MicrobatchSizeMissing", [](json& j) { P0(j).erase("microbatch_size"); },
     "layers[1].profiles[0].microbatch_size: missing", "micro-batch size"},
    {"MicrobatchSizeDuplicate",
     [](json& j) {
       j["layers"][1]["profiles"] = {Profile(2), Profile(1), Profile(2)};
     },
     "layers[1].profiles[2].microbatch_size:", "2 was already measured in layers[1].profiles[0]"},
    {"ForwardNegative",
     [](json& j) {
       P0(j)["forward_us"] = -2;
     },
     "m.json: layers[1].profiles[0].forward_us: ", "must be a finite number >= 0, got -2"},
    {"ForwardMissing", [](json& j) { P0(j).erase("forward_us"); },
     "layers[1].profiles[0].forward_us: missing", "a time in microseconds"},
    {"ForwardAbsurd",
     [](json& j) {
       P0(j)["forward_us"] = 2e12;
     },
     "layers[1].profiles[0].forward_us:", "2000000000000.0 is over the limit of 1e12 us"},
    {"ForwardNull",
     [](json& j) {
       P0(j)["forward_us"] = nullptr;
     },
     "layers[1].profiles[0].forward_us:", "got null"},
    {"BackwardAString",
     [](json& j) {
       P0(j)["backward_us"] = "20";
     },
     "layers[1].profiles[0].backward_us:", "must be a finite number >= 0, got string \"20\""},
    {"BackwardABool",
     [](json& j) {
       P0(j)["backward_us"] = true;
     },
     "layers[1].profiles[0].backward_us:", "got true"},
    {"BackwardWeightOverBackward",
     [](json& j) {
       P0(j)["backward_weight_us"] = 21;
     },
     "layers[1].profiles[0].backward_weight_us:", "21 is more than backward_us (20.0)"},
    {"BackwardWeightInSomeProfilesOnly",
     [](json& j) {
       j["layers"][1]["profiles"] = {Profile(1), Profile(2)};
       j["layers"][1]["profiles"][1]["backward_weight_us"] = 5;
     },
     "layers[1].profiles[1]: has backward_weight_us but layers[1].profiles[0] does not",
     "in every profile of a layer or in none"},
    {"BackwardWeightNegative",
     [](json& j) {
       P0(j)["backward_weight_us"] = -1;
     },
     "layers[1].profiles[0].backward_weight_us:", "must be a finite number >= 0"},
    {"ActivationNegative",
     [](json& j) {
       P0(j)["activation_bytes"] = -5;
     },
     "layers[1].profiles[0].activation_bytes:", "must be an integer >= 0, got -5"},
    {"ActivationAbsurd",
     [](json& j) {
       P0(j)["activation_bytes"] = (int64_t{1} << 50) + 1;
     },
     "layers[1].profiles[0].activation_bytes:", "over the limit of 2^50 bytes (1 PiB)"},
    {"OutputMissing", [](json& j) { P0(j).erase("output_bytes"); },
     "layers[1].profiles[0].output_bytes: missing", "a size in bytes"},
    {"WorkspaceFractional",
     [](json& j) {
       P0(j)["workspace_bytes"] = 0.5;
     },
     "layers[1].profiles[0].workspace_bytes:", "must be an integer >= 0"},
    {"CheckpointOverActivations",
     [](json& j) {
       P0(j)["checkpoint_bytes"] = 1001;
     },
     "layers[1].profiles[0].checkpoint_bytes:", "1001 is more than activation_bytes (1000)"},
    {"AttentionCoreOverActivations",
     [](json& j) {
       P0(j)["attention_core_bytes"] = 2000;
     },
     "layers[1].profiles[0].attention_core_bytes:", "is more than activation_bytes"},
    {"AttentionCoreTimeOverForward",
     [](json& j) {
       P0(j)["attention_core_us"] = 11;
     },
     "layers[1].profiles[0].attention_core_us:", "11 is more than forward_us"},
    {"WeightGradNegative",
     [](json& j) {
       P0(j)["weight_grad_bytes"] = -1;
     },
     "layers[1].profiles[0].weight_grad_bytes:", "must be an integer >= 0"},
    {"SourceNotAnObject", [](json& j) { j["source"] = "cupti"; },
     "source:", "must be a JSON object"},
    {"SourceMethodMissing", [](json& j) { j["source"] = json::object(); }, "source.method: missing",
     "cupti, cpu, analytic, manual"},
    {"SourceMethodUnknown",
     [](json& j) {
       j["source"] = {{"method", "guess"}};
     },
     "source.method:", "\"guess\" is not a method; use one of cupti, cpu, analytic, manual"},
    {"SourceDeviceNotAString",
     [](json& j) {
       j["source"] = {{"method", "cpu"}, {"device", 0}};
     },
     "source.device:", "must be a string"},
    {"DtypeNotAString", [](json& j) { j["dtype"] = 16; }, "dtype:", "must be a string"},
    {"SequenceLengthZero", [](json& j) { j["sequence_length"] = 0; },
     "sequence_length:", "must be an integer >= 1, got 0"},
    {"FlopsPerSampleZero", [](json& j) { j["flops_per_sample"] = 0; },
     "flops_per_sample:", "must be a finite number > 0, got 0"},
    {"GlobalBatchFractional", [](json& j) { j["global_batch"] = 1.5; },
     "global_batch:", "must be an integer >= 1, got 1.5"},
    {"GlobalBatchBeyondInt", [](json& j) { j["global_batch"] = 1e10; },
     "global_batch:", "over the limit of 2^30"},
};

class FormatsModelError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(FormatsModelError, NamesFileAndJsonPath) {
  json j = MinimalModel();
  GetParam().change(j);

  Result<Model> model = Parse(j);

  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("m.json: "), HasSubstr(GetParam().path), HasSubstr(GetParam().what)));
}

INSTANTIATE_TEST_SUITE_P(Formats, FormatsModelError, ::testing::ValuesIn(kModelErrors),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(FormatsModel, ExampleMessageReadsAsDocumented) {
  json j = MinimalModel();
  j["layers"].push_back(LayerJson("l2"));
  j["layers"].push_back(LayerJson("l3"));
  j["layers"][3]["profiles"][0]["forward_us"] = -2;

  Result<Model> model = ParseModel(j.dump(), "examples/x.json");

  EXPECT_EQ(model.status().message(),
            "examples/x.json: layers[3].profiles[0].forward_us: must be a "
            "finite number >= 0, got -2");
}

TEST(FormatsModel, MalformedJsonGivesBytePosition) {
  Result<Model> model = ParseModel("{\"format\": \"pipecast-model/1\",}", "bad.json");

  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("bad.json: not valid JSON at byte 31"),
                                              HasSubstr("line 1, column 31")));
  EXPECT_THAT(model.status().message(), Not(HasSubstr("[json.exception")));
}

TEST(FormatsModel, EmptyTextIsMalformed) {
  Result<Model> model = ParseModel("", "empty.json");

  EXPECT_THAT(model.status().message(), HasSubstr("empty.json: not valid JSON at byte 1"));
}

TEST(FormatsModel, NumberTooLargeForADoubleIsMalformed) {
  Result<Model> model = ParseModel("{\"x\": 1e400}", "big.json");

  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("big.json: not valid JSON: number overflow"));
}

TEST(FormatsModel, TopLevelMustBeAnObject) {
  Result<Model> model = ParseModel("[1, 2]", "list.json");

  EXPECT_EQ(model.status().message(), "list.json: must be a JSON object {...}, got an array");
}

TEST(FormatsModel, RepeatedKeyIsAnErrorNamingItsPath) {
  std::string text = MinimalModel().dump();
  // Given "forward_us" written twice in layers[1].profiles[0].
  std::string key = "\"forward_us\":10.0";
  size_t second = text.find(key, text.find(key) + 1);
  ASSERT_NE(second, std::string::npos) << text;
  text.insert(second, key + ",");

  Result<Model> model = ParseModel(text, "dup.json");

  EXPECT_THAT(model.status().message(), HasSubstr("dup.json: layers[1].profiles[0].forward_us: key "
                                                  "appears twice"));
}

TEST(FormatsModel, LoadModelOfMissingFileIsNotFoundNamingThePath) {
  Result<Model> model = LoadModel("/nonexistent/pipecast/model.json");

  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("/nonexistent/pipecast/model.json"));
}

TEST(FormatsModel, LoadModelNamesTheFileInParseErrors) {
  TempDir dir;
  json j = MinimalModel();
  j["layers"][0]["parameters"] = -3;
  ASSERT_TRUE(WriteFileAtomic(dir.File("m.json"), j.dump()).ok());

  Result<Model> model = LoadModel(dir.File("m.json"));

  EXPECT_THAT(model.status().message(), HasSubstr(dir.File("m.json") + ": layers[0].parameters:"));
}

// --- examples/ ----------------------------------------------------------------

std::filesystem::path ExamplesDir() {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::filesystem::path(root != nullptr ? root : ".") / "examples";
}

TEST(Examples, EveryModelAndClusterFileLoads) {
  const std::filesystem::path dir = ExamplesDir();
  ASSERT_TRUE(std::filesystem::is_directory(dir))
      << dir << " not found: run from the source root or set "
      << "PIPECAST_SOURCE_DIR (ctest sets it)";
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const std::string path = entry.path().string();
    SCOPED_TRACE(path);
    Result<std::string> text = ReadFile(path);
    ASSERT_TRUE(text.ok()) << text.status().message();
    json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not valid JSON";
    const std::string format = j.value("format", "");
    if (format == kModelFormat) {
      Result<Model> model = LoadModel(path);
      EXPECT_TRUE(model.ok()) << model.status().message();
      ++models;
    } else if (format == kClusterFormat) {
      Result<Cluster> cluster = LoadCluster(path);
      EXPECT_TRUE(cluster.ok()) << cluster.status().message();
    }
  }
  EXPECT_GE(models, 2);
}

TEST(Examples, ToyUniformIsEightIdenticalLayers) {
  Result<Model> m = LoadModel((ExamplesDir() / "toy-uniform.json").string());

  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->layers.size(), 8u);
  for (const Layer& layer : m->layers) {
    EXPECT_EQ(layer.parameters, 50'000'000);
    ASSERT_EQ(layer.profiles.size(), 2u);
    for (const LayerProfile& p : layer.profiles) {
      const int b = p.microbatch_size;
      EXPECT_EQ(p.forward_ns, b * 1'000'000);
      EXPECT_EQ(p.backward_ns, b * 2'000'000);
      EXPECT_EQ(p.backward_weight_ns, b * 1'000'000);
      EXPECT_EQ(p.activation_bytes, b * 100 * kMiB);
      EXPECT_EQ(p.output_bytes, b * 16 * kMiB);
    }
  }
  EXPECT_EQ(m->source.method, "manual");
}

TEST(Examples, GptSmallHasEmbeddingBlocksAndHead) {
  Result<Model> m = LoadModel((ExamplesDir() / "gpt-small.json").string());

  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->layers.size(), 26u);
  EXPECT_EQ(m->layers.front().name, "embedding");
  EXPECT_EQ(m->layers.front().parameters, 50257 * 2048);
  EXPECT_EQ(m->layers[1].parameters, 12 * 2048 * 2048);
  EXPECT_EQ(m->layers.back().name, "lm_head");
  EXPECT_EQ(m->source.method, "analytic");
  EXPECT_EQ(m->source.device, "h100-sxm");
  EXPECT_TRUE(m->source.details.count("assumptions"));
  EXPECT_EQ(m->dtype, "bf16");
  EXPECT_EQ(m->sequence_length, 2048);
  EXPECT_EQ(m->global_batch, 64);
  for (const Layer& layer : m->layers) {
    ASSERT_EQ(layer.profiles.size(), 3u) << layer.name;
    EXPECT_EQ(layer.profiles[2].microbatch_size, 4);
  }
  // Korthikanti et al. 2022, no recompute: s*b*h*(34 + 5*a*s/h), b = 1.
  EXPECT_EQ(m->layers[1].profiles[0].activation_bytes, int64_t{2048} * 2048 * (34 + 5 * 16));
  // 2 * 12h^2 * s FLOPs at half of 989 TFLOP/s.
  EXPECT_NEAR(NsToUs(m->layers[1].profiles[0].forward_ns),
              2.0 * 12 * 2048 * 2048 * 2048 / (989e12 * 0.5) * 1e6, 1e-3);
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

TEST(FormatsModel, TensorParallelProfilesRoundTripSortedByTAndSize) {
  json p1 = Profile(1);
  p1["tp_comm_bytes"] = 4096;
  p1["tp_forward_collectives"] = 2;
  p1["tp_backward_collectives"] = 2;
  json p4 = p1;
  p4["tensor_parallel"] = 4;
  p4["sequence_parallel"] = true;
  p4["forward_us"] = 3;
  json model = MinimalModel();
  model["layers"][0] = LayerJson("l0", {p4, p1});
  Result<Model> m = Parse(model);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Layer& l = m->layers[0];
  ASSERT_EQ(l.profiles.size(), 2u);
  EXPECT_EQ(l.profiles[0].tensor_parallel, 1);  // sorted: t = 1 first
  EXPECT_EQ(l.profiles[1].tensor_parallel, 4);
  EXPECT_TRUE(l.profiles[1].sequence_parallel);
  EXPECT_EQ(l.profiles[1].tp_comm_bytes, 4096);
  EXPECT_EQ(l.profiles[1].tp_forward_collectives, 2);
  // The measured t = 4 profile is what CostAt answers there.
  EXPECT_EQ(CostAt(l, 1, 4, true).forward_ns, 3000);
  EXPECT_FALSE(CostAt(l, 1, 4, true).tp_scaled);
  const std::string text = ModelToJson(*m);
  EXPECT_EQ(ModelToJson(*ParseModel(text, "again.json")), text);
  // One profile per (t, sp, size): the same triple twice is refused.
  model["layers"][0] = LayerJson("l0", {p4, p1, p4});
  Result<Model> twice = Parse(model);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("keep one profile per micro-batch size and "
                                          "(tensor_parallel, sequence_parallel)"),
            std::string::npos)
      << twice.status().message();
}

TEST(FormatsModel, AnalyticModelsGetAStatedTpCommEstimate) {
  // Given the shipped analytic gpt-1.3b, profiled at t = 1 only (hidden 2048, sequence 2048,
  // 2 bytes)
  Result<Model> m = LoadModel((ExamplesDir() / "gpt-1.3b.json").string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  // then its layers carry b*s*h*2 bytes per sample and Megatron's counts
  const Layer& embedding = m->layers.front();
  const Layer& block = m->layers[1];
  const Layer& head = m->layers.back();
  ASSERT_TRUE(block.tp_comm_estimate.has_value());
  EXPECT_EQ(block.tp_comm_estimate->bytes_per_sample, 2048 * 2048 * 2);
  EXPECT_EQ(block.tp_comm_estimate->forward_collectives, 2);
  EXPECT_EQ(block.tp_comm_estimate->backward_collectives, 2);
  EXPECT_EQ(embedding.tp_comm_estimate->forward_collectives, 1);
  EXPECT_EQ(embedding.tp_comm_estimate->backward_collectives, 0);
  EXPECT_EQ(head.tp_comm_estimate->forward_collectives, 0);
  EXPECT_EQ(head.tp_comm_estimate->backward_collectives, 1);
  const LayerCost at4 = CostAt(block, 2, 4, false);
  EXPECT_EQ(at4.tp_comm_bytes, 2 * 2048 * 2048 * 2);
  EXPECT_TRUE(at4.tp_comm_estimated);
  // and the estimate is never written back
  EXPECT_EQ(ModelToJson(*m).find("tp_comm_bytes"), std::string::npos);
}

TEST(FormatsModel, ProfilesAtTCarryTheirOwnCollectiveBytes) {
  // Given the shipped llama-70b, written with --tensor-parallel 1,2,4,8 (hidden 8192,
  // sequence 2048, 2 bytes)
  Result<Model> m = LoadModel((ExamplesDir() / "llama-70b.json").string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  // then its t = 4 profile gives Megatron's 2 forward all-reduces of b*s*h*2 bytes each, as
  // profiled, not estimated
  const LayerCost at4 = CostAt(m->layers[1], 2, 4, false);
  EXPECT_EQ(at4.tp_comm_bytes, 2 * 2048 * 8192 * 2);
  EXPECT_FALSE(at4.tp_comm_estimated);
}

}  // namespace
}  // namespace pipecast
