// Cluster presets and cluster files (`pipecast-cluster/1`), split from
// formats_test.cc: formats/formats.h and sim/cluster.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>

#include "formats/cluster_select.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "testing/formats_test_util.h"

namespace pipecast {
namespace {

using nlohmann::json;
using test_util::ErrorCase;
using test_util::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

json MinimalCluster() { return json::parse(ClusterToJson(*ClusterPreset("h100-sxm"))); }

Result<Cluster> ParseClusterJson(const json& j) { return ParseCluster(j.dump(), "c.json"); }

// --- cluster presets and files --------------------------------------------------

TEST(ClusterPresets, ListsThePresetsInStableOrder) {
  EXPECT_EQ(ClusterPresetNames(),
            (std::vector<std::string>{"ideal", "a100-80gb", "h100-sxm", "h200", "local"}));
}

// Each preset's figures, as published by the vendor (local: the nominal
// figures the validator replaces with its probe).
struct PresetFigures {
  std::string name;
  int gpus_per_node;
  Bytes memory_bytes;
  Bytes memory_reserve_bytes;
  double memory_headroom;
  double peak_tflops;
  double memory_bandwidth_gbps;
  Link intra_node;
  Link inter_node;
};

void PrintTo(const PresetFigures& p, std::ostream* os) { *os << p.name; }

class ClusterPresetFigures : public ::testing::TestWithParam<PresetFigures> {};

TEST_P(ClusterPresetFigures, MatchThePublishedFigures) {
  const PresetFigures& want = GetParam();
  Result<Cluster> c = ClusterPreset(want.name);

  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->name, want.name);
  EXPECT_EQ(c->gpus_per_node, want.gpus_per_node);
  EXPECT_EQ(c->gpu.memory_bytes, want.memory_bytes);
  EXPECT_EQ(c->gpu.memory_reserve_bytes, want.memory_reserve_bytes);
  EXPECT_EQ(c->gpu.memory_headroom, want.memory_headroom);
  EXPECT_EQ(c->gpu.peak_tflops, want.peak_tflops);
  EXPECT_EQ(c->gpu.memory_bandwidth_gbps, want.memory_bandwidth_gbps);
  EXPECT_EQ(c->intra_node.bandwidth_gbps, want.intra_node.bandwidth_gbps);
  EXPECT_EQ(c->intra_node.latency_us, want.intra_node.latency_us);
  EXPECT_EQ(c->inter_node.bandwidth_gbps, want.inter_node.bandwidth_gbps);
  EXPECT_EQ(c->inter_node.latency_us, want.inter_node.latency_us);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, ClusterPresetFigures,
    ::testing::Values(
        // ideal: no communication cost, unlimited memory (0 = unlimited).
        // Memory: cudaMemGetInfo's total (A100 79.15 GiB, H100 nvidia-smi's
        // 81559 MiB less 551 MiB reserved, H200 139.80 GiB); reserve: CUDA
        // context 512 MiB + 2 cuBLAS workspaces (8519680 B each on sm80, 32
        // MiB on sm90) + 2 NCCL communicators of 688 MB; margin 5%.
        PresetFigures{"ideal", 8, 0, 0, 0, 0, 0, Link{0, 0}, Link{0, 0}},
        PresetFigures{"a100-80gb", 8, 81049 * kMiB, 512 * kMiB + 2 * 8'519'680 + 1'376'000'000,
                      0.05, 312, 2039, Link{300, 2}, Link{25, 5}},
        PresetFigures{"h100-sxm", 8, 81008 * kMiB, 512 * kMiB + 64 * kMiB + 1'376'000'000, 0.05,
                      989, 3350, Link{450, 2}, Link{50, 5}},
        PresetFigures{"h200", 8, 143155 * kMiB, 512 * kMiB + 64 * kMiB + 1'376'000'000, 0.05, 989,
                      4800, Link{450, 2}, Link{50, 5}},
        PresetFigures{"local", 64, 16 * kGiB, 0, 0, 0, 0, Link{5, 20}, Link{5, 20}}),
    [](const ::testing::TestParamInfo<PresetFigures>& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

TEST(ClusterPresets, LocalPutsEveryStageOnOneNode) {
  Result<Cluster> c = ClusterPreset("local");

  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->SameNode(0, 63));
}

TEST(ClusterPresets, UnknownNameIsNotFoundListingPresets) {
  Result<Cluster> c = ClusterPreset("h100");

  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("'h100'"), HasSubstr("ideal, a100-80gb, h100-sxm, h200")));
}

TEST(ClusterFormat, EveryPresetRoundTripsThroughJson) {
  for (const std::string& name : ClusterPresetNames()) {
    SCOPED_TRACE(name);
    Cluster preset = *ClusterPreset(name);

    Result<Cluster> parsed = ParseCluster(ClusterToJson(preset), name);

    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->name, preset.name);
    EXPECT_EQ(parsed->gpus_per_node, preset.gpus_per_node);
    EXPECT_EQ(parsed->gpu.name, preset.gpu.name);
    EXPECT_EQ(parsed->gpu.memory_bytes, preset.gpu.memory_bytes);
    EXPECT_EQ(parsed->gpu.peak_tflops, preset.gpu.peak_tflops);
    EXPECT_EQ(parsed->gpu.memory_bandwidth_gbps, preset.gpu.memory_bandwidth_gbps);
    EXPECT_EQ(parsed->intra_node.bandwidth_gbps, preset.intra_node.bandwidth_gbps);
    EXPECT_EQ(parsed->intra_node.latency_us, preset.intra_node.latency_us);
    EXPECT_EQ(parsed->inter_node.bandwidth_gbps, preset.inter_node.bandwidth_gbps);
    EXPECT_EQ(parsed->inter_node.latency_us, preset.inter_node.latency_us);
    for (auto [got, want] : {std::pair{&parsed->intra_node, &preset.intra_node},
                             std::pair{&parsed->inter_node, &preset.inter_node}}) {
      EXPECT_EQ(got->efficiency, want->efficiency);
      EXPECT_EQ(got->StepLatencyNs(), want->StepLatencyNs());
      EXPECT_EQ(got->collective_latency_us, want->collective_latency_us);
      EXPECT_EQ(got->nvls_bandwidth_gbps, want->nvls_bandwidth_gbps);
    }
    EXPECT_EQ(parsed->NetworkGbpsPerGpu(), preset.NetworkGbpsPerGpu());
  }
}

// The collective fields (sim/collectives.h) are optional: without them a
// link is the plain ring's, as files were read before the fields existed.
TEST(ClusterFormat, CollectiveFieldsAreOptionalAndChecked) {
  json j = MinimalCluster();
  for (const char* key : {"intra_node", "inter_node"}) {
    for (const char* field :
         {"efficiency", "step_latency_us", "collective_latency_us", "nvls_bandwidth_gbps"}) {
      j[key].erase(field);
    }
  }
  j.erase("nics_per_node");
  Result<Cluster> plain = ParseClusterJson(j);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->intra_node.efficiency, 1);
  EXPECT_EQ(plain->intra_node.StepLatencyNs(), plain->intra_node.LatencyNs());
  EXPECT_EQ(plain->inter_node.collective_latency_us, 0);
  EXPECT_EQ(plain->intra_node.nvls_bandwidth_gbps, 0);
  EXPECT_EQ(plain->nics_per_node, 0);

  json bad = MinimalCluster();
  bad["intra_node"]["efficiency"] = 0;
  EXPECT_THAT(ParseClusterJson(bad).status().message(),
              testing::HasSubstr("intra_node.efficiency"));
  bad = MinimalCluster();
  bad["inter_node"]["nvls_bandwidth_gbps"] = 100;
  EXPECT_THAT(ParseClusterJson(bad).status().message(), testing::HasSubstr("intra_node"));
  bad = MinimalCluster();
  bad["nics_per_node"] = 0;
  EXPECT_THAT(ParseClusterJson(bad).status().message(), testing::HasSubstr("nics_per_node"));
}

// `<link>.nccl_proto` lists NCCL's protocols as NCCL_PROTO does; without it
// LL and LL128 are on. Written only when one is off, and read back alike.
TEST(ClusterFormat, NcclProtoListsTheProtocols) {
  json j = MinimalCluster();
  j["inter_node"]["nccl_proto"] = "Simple";
  j["intra_node"]["nccl_proto"] = "simple,LL128";
  Result<Cluster> c = ParseClusterJson(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->inter_node.protocol_ll);
  EXPECT_FALSE(c->inter_node.protocol_ll128);
  EXPECT_FALSE(c->intra_node.protocol_ll);
  EXPECT_TRUE(c->intra_node.protocol_ll128);
  const json written = ClusterJson(*c);
  EXPECT_EQ(written["inter_node"]["nccl_proto"], "Simple");
  EXPECT_EQ(written["intra_node"]["nccl_proto"], "LL128,Simple");
  Result<Cluster> back = ParseCluster(written.dump(), "c.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->intra_node.protocol_ll128, true);
  EXPECT_EQ(back->inter_node.protocol_ll128, false);
  Result<Cluster> plain = ParseClusterJson(MinimalCluster());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->inter_node.protocol_ll && plain->inter_node.protocol_ll128);
  EXPECT_FALSE(ClusterJson(*plain)["inter_node"].contains("nccl_proto"));

  json bad = MinimalCluster();
  bad["inter_node"]["nccl_proto"] = "LL,LL128";
  EXPECT_THAT(ParseClusterJson(bad).status().message(),
              testing::HasSubstr("inter_node.nccl_proto"));
  bad["inter_node"]["nccl_proto"] = "Simple,Tree";
  EXPECT_THAT(ParseClusterJson(bad).status().message(), testing::HasSubstr("\"tree\""));
}

// `<link>.nccl_algo` lists NCCL's algorithms as NCCL_ALGO does (GCP's TCPXO
// profile: "Ring,Tree", NVLS off); without it the model's default (ring,
// NVLS, NVLS tree). Written only when it differs, and read back alike.
TEST(ClusterFormat, NcclAlgoListsTheAlgorithms) {
  json j = MinimalCluster();
  j["inter_node"]["nccl_algo"] = "Ring,Tree";
  j["intra_node"]["nccl_algo"] = "ring,nvls";
  Result<Cluster> c = ParseClusterJson(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->inter_node.nccl_algos, kNcclAlgoRing | kNcclAlgoTree);
  EXPECT_EQ(c->intra_node.nccl_algos, kNcclAlgoRing | kNcclAlgoNvls);
  const json written = ClusterJson(*c);
  EXPECT_EQ(written["inter_node"]["nccl_algo"], "Ring,Tree");
  EXPECT_EQ(written["intra_node"]["nccl_algo"], "Ring,NVLS");
  Result<Cluster> back = ParseCluster(written.dump(), "c.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->inter_node.nccl_algos, kNcclAlgoRing | kNcclAlgoTree);
  Result<Cluster> plain = ParseClusterJson(MinimalCluster());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->inter_node.nccl_algos, kNcclAlgoDefault);
  EXPECT_FALSE(ClusterJson(*plain)["inter_node"].contains("nccl_algo"));

  json bad = MinimalCluster();
  bad["inter_node"]["nccl_algo"] = "Tree";
  EXPECT_THAT(ParseClusterJson(bad).status().message(), testing::HasSubstr("inter_node.nccl_algo"));
  bad["inter_node"]["nccl_algo"] = "Ring,CollnetDirect";
  EXPECT_THAT(ParseClusterJson(bad).status().message(), testing::HasSubstr("\"collnetdirect\""));
}

TEST(ClusterFormat, HbmBandwidthIsOptional) {
  json j = MinimalCluster();
  j["gpu"].erase("memory_bandwidth_gbps");

  Result<Cluster> c = ParseClusterJson(j);

  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.memory_bandwidth_gbps, 0);
}

json& Gpu(json& j) { return j["gpu"]; }

const ErrorCase kClusterErrors[] = {
    {"FormatMissing", [](json& j) { j.erase("format"); }, "format: missing", "pipecast-cluster/1"},
    {"FormatOfAModel", [](json& j) { j["format"] = "pipecast-model/1"; },
     "format:", "expected a \"pipecast-cluster/1\" file here"},
    {"NameMissing", [](json& j) { j.erase("name"); }, "name: missing", ""},
    {"UnknownKey", [](json& j) { j["gpus_per_nodes"] = 8; },
     "gpus_per_nodes:", "did you mean 'gpus_per_node'?"},
    {"GpusPerNodeMissing", [](json& j) { j.erase("gpus_per_node"); }, "gpus_per_node: missing",
     "a number of GPUs"},
    {"GpusPerNodeZero", [](json& j) { j["gpus_per_node"] = 0; },
     "gpus_per_node:", "must be an integer >= 1, got 0"},
    {"GpuMissing", [](json& j) { j.erase("gpu"); }, "gpu: missing", ""},
    {"GpuNotAnObject", [](json& j) { j["gpu"] = "h100"; }, "gpu:", "must be a JSON object"},
    {"GpuNameMissing", [](json& j) { Gpu(j).erase("name"); }, "gpu.name: missing", ""},
    {"GpuMemoryNegative", [](json& j) { Gpu(j)["memory_bytes"] = -1; },
     "gpu.memory_bytes:", "must be an integer >= 0, got -1"},
    {"GpuMemoryInGigabytes", [](json& j) { Gpu(j)["memory_bytes"] = 80.5; },
     "gpu.memory_bytes:", "must be an integer >= 0, got 80.5"},
    {"GpuMemoryInGigabytesAsInteger", [](json& j) { Gpu(j)["memory_bytes"] = 80; },
     "gpu.memory_bytes:", "80 bytes is too little for a GPU"},
    {"GpuMemoryAbsurd", [](json& j) { Gpu(j)["memory_bytes"] = 1e18; },
     "gpu.memory_bytes:", "over the limit of 2^50 bytes"},
    {"PeakTflopsAString", [](json& j) { Gpu(j)["peak_tflops"] = "989"; },
     "gpu.peak_tflops:", "must be a finite number >= 0, got string \"989\""},
    {"HbmNegative", [](json& j) { Gpu(j)["memory_bandwidth_gbps"] = -1; },
     "gpu.memory_bandwidth_gbps:", "must be a finite number >= 0"},
    {"IntraNodeMissing", [](json& j) { j.erase("intra_node"); }, "intra_node: missing",
     "bandwidth_gbps, latency_us"},
    {"IntraBandwidthAString", [](json& j) { j["intra_node"]["bandwidth_gbps"] = "fast"; },
     "intra_node.bandwidth_gbps:", "got string \"fast\""},
    {"IntraBandwidthAbsurd", [](json& j) { j["intra_node"]["bandwidth_gbps"] = 1e9; },
     "intra_node.bandwidth_gbps:", "over the limit of 1e6 GB/s"},
    {"InterLatencyNegative", [](json& j) { j["inter_node"]["latency_us"] = -5; },
     "inter_node.latency_us:", "must be a finite number >= 0, got -5"},
    {"InterLatencyMissing", [](json& j) { j["inter_node"].erase("latency_us"); },
     "inter_node.latency_us: missing", "a time in microseconds"},
    {"LinkUnknownKey", [](json& j) { j["inter_node"]["latency"] = 5; },
     "inter_node.latency:", "did you mean 'latency_us'?"},
};

class ClusterFormatError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ClusterFormatError, NamesFileAndJsonPath) {
  json j = MinimalCluster();
  GetParam().change(j);

  Result<Cluster> cluster = ParseClusterJson(j);

  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(cluster.status().message(),
              AllOf(HasSubstr("c.json: "), HasSubstr(GetParam().path), HasSubstr(GetParam().what)));
}

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterFormatError, ::testing::ValuesIn(kClusterErrors),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(ClusterFormat, MalformedJsonGivesBytePosition) {
  Result<Cluster> c = ParseCluster("{\"format\" \"x\"}", "c.json");

  EXPECT_THAT(c.status().message(), HasSubstr("c.json: not valid JSON at byte 13"));
}

TEST(ClusterLoad, PresetNameGivesThePreset) {
  Result<Cluster> c = LoadCluster("h200");

  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->gpu.memory_bytes, 143155 * kMiB);
}

TEST(ClusterMemoryLimit, CapacityLessReserveLessMargin) {
  // Given the h100-sxm preset: 81008 MiB exposed, 1979979776 B reserved, 5%.
  const GpuSpec gpu = ClusterPreset("h100-sxm")->gpu;
  // then the margin is 5% of 84943044608 B and the limit what is left.
  EXPECT_EQ(MemoryHeadroomBytes(gpu), 4'247'152'230);
  EXPECT_EQ(MemoryLimitBytes(gpu), 84'943'044'608 - 1'979'979'776 - 4'247'152'230);
  EXPECT_THAT(MemoryLimitText(gpu), HasSubstr("73.31 GiB = 79.11 GiB capacity - 1.84 GiB "
                                              "runtime reserve"));
  EXPECT_THAT(MemoryLimitText(gpu), HasSubstr("3.96 GiB allocator margin (5% of capacity)"));
  // Unlimited stays unlimited.
  EXPECT_EQ(MemoryLimitBytes(ClusterPreset("ideal")->gpu), 0);
}

TEST(ClusterFile, ReserveAndHeadroomRoundTripAndDefaultToNone) {
  json j = MinimalCluster();
  Result<Cluster> preset = ParseClusterJson(j);
  ASSERT_TRUE(preset.ok()) << preset.status().message();
  EXPECT_EQ(preset->gpu.memory_reserve_bytes, ClusterPreset("h100-sxm")->gpu.memory_reserve_bytes);
  EXPECT_EQ(preset->gpu.memory_headroom, 0.05);
  // A file written before the fields existed keeps its whole memory.
  j["gpu"].erase("memory_reserve_bytes");
  j["gpu"].erase("memory_headroom");
  Result<Cluster> old = ParseClusterJson(j);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->gpu.memory_reserve_bytes, 0);
  EXPECT_EQ(MemoryLimitBytes(old->gpu), old->gpu.memory_bytes);
}

TEST(ClusterFile, HeadroomOfOneOrAReserveThatLeavesNothingNamesTheField) {
  json j = MinimalCluster();
  j["gpu"]["memory_headroom"] = 1;
  EXPECT_THAT(ParseClusterJson(j).status().message(),
              HasSubstr("gpu.memory_headroom: must be below 1"));
  j = MinimalCluster();
  j["gpu"]["memory_reserve_bytes"] = j["gpu"]["memory_bytes"];
  EXPECT_THAT(ParseClusterJson(j).status().message(),
              HasSubstr("gpu.memory_reserve_bytes: 84943044608 bytes and memory_headroom 0.05 "
                        "leave nothing"));
}

TEST(ClusterLoad, ReadsAClusterFile) {
  TempDir dir;
  json j = MinimalCluster();
  j["name"] = "my-cluster";
  j["gpus_per_node"] = 4;
  ASSERT_TRUE(WriteFileAtomic(dir.File("c.json"), j.dump()).ok());

  Result<Cluster> c = LoadCluster(dir.File("c.json"));

  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->name, "my-cluster");
  EXPECT_EQ(c->gpus_per_node, 4);
}

TEST(ClusterLoad, FileErrorsNameTheFile) {
  TempDir dir;
  json j = MinimalCluster();
  j["inter_node"]["bandwidth_gbps"] = -1;
  ASSERT_TRUE(WriteFileAtomic(dir.File("c.json"), j.dump()).ok());

  Result<Cluster> c = LoadCluster(dir.File("c.json"));

  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(dir.File("c.json") + ": inter_node.bandwidth_gbps:"));
}

TEST(ClusterLoad, NeitherPresetNorFileIsNotFoundListingPresets) {
  Result<Cluster> c = LoadCluster("dgx-h100");

  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("'dgx-h100'"), HasSubstr("ideal, a100-80gb, h100-sxm, h200")));
}

// --- SelectCluster: --cluster, the measured device, --memory-gb ---------------

TEST(SelectCluster, TheFlagWinsAndNeedsNoNote) {
  Model model;
  model.source.device = "h100-sxm";
  Result<ClusterSelection> s = SelectCluster("a100-80gb", model, -1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->cluster.name, "a100-80gb");
  EXPECT_EQ(s->source, ClusterSource::kFlag);
  EXPECT_EQ(s->note, "");
}

TEST(SelectCluster, DefaultsToTheMeasuredDeviceThenIdeal) {
  Model model;
  model.source.device = "h100-sxm";
  Result<ClusterSelection> measured = SelectCluster("", model, -1);
  ASSERT_TRUE(measured.ok());
  EXPECT_EQ(measured->cluster.name, "h100-sxm");
  EXPECT_EQ(measured->source, ClusterSource::kMeasuredDevice);
  EXPECT_EQ(measured->note,
            "cluster 'h100-sxm' chosen by default (the GPU the model was measured on); choose "
            "with --cluster");
  model.source.device = "a laptop";
  Result<ClusterSelection> ideal = SelectCluster("", model, 16);
  ASSERT_TRUE(ideal.ok());
  EXPECT_EQ(ideal->source, ClusterSource::kIdeal);
  EXPECT_EQ(ideal->cluster.gpu.memory_bytes, 16 * kGiB);
  EXPECT_THAT(ideal->note, HasSubstr("; its GPU memory is set to 16 GiB by --memory-gb"));
}

TEST(SelectCluster, TheMeasuredContextReplacesThePresetsEstimate) {
  // A model profiler cupti measured on an H200: the driver's name, the
  // matched preset, and 143000 MiB usable with a 600 MiB context. The
  // preset's reserve is 512 MiB (context) + 2 x 32 MiB (cuBLAS) + 2 x 688 MB
  // (NCCL); the measured context replaces its 512 MiB.
  Model model;
  model.source.method = "cupti";
  model.source.device = "NVIDIA H200";
  model.source.details[kGpuPresetKey] = "\"h200\"";
  model.source.details[kMeasuredMemoryKey] =
      R"({"device": "NVIDIA H200", "usable_bytes": 149946368000, "cuda_context_bytes": 629145600})";
  Result<ClusterSelection> s = SelectCluster("", model, -1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->cluster.name, "h200");
  EXPECT_EQ(s->source, ClusterSource::kMeasuredDevice);
  EXPECT_EQ(s->cluster.gpu.memory_bytes, Bytes{143000} * kMiB);
  EXPECT_EQ(s->cluster.gpu.memory_reserve_bytes,
            600 * kMiB + 2 * 32 * kMiB + 2 * Bytes{688} * 1000 * 1000);
  EXPECT_THAT(s->note, HasSubstr("CUDA context 0.59 GiB are the ones profiler cupti measured"));
  // --cluster or --memory-gb: the user's figures, not the measurement.
  Result<ClusterSelection> flag = SelectCluster("h200", model, -1);
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->cluster.gpu.memory_bytes, Bytes{143155} * kMiB);
  Result<ClusterSelection> gb = SelectCluster("", model, 100);
  ASSERT_TRUE(gb.ok());
  EXPECT_EQ(gb->cluster.gpu.memory_bytes, 100 * kGiB);
  EXPECT_EQ(gb->cluster.gpu.memory_reserve_bytes, flag->cluster.gpu.memory_reserve_bytes);
}

TEST(SelectCluster, GpuNamesMatchTheirPresetsAndOnlyThose) {
  EXPECT_EQ(PresetForGpuName("NVIDIA H200"), "h200");
  EXPECT_EQ(PresetForGpuName("NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(PresetForGpuName("NVIDIA A100-SXM4-80GB"), "a100-80gb");
  for (const char* other : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL",
                            "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA L4", ""}) {
    EXPECT_EQ(PresetForGpuName(other), "") << other;
  }
}

TEST(SelectCluster, AnUnknownPresetNamesTheFlag) {
  Result<ClusterSelection> s = SelectCluster("no-such-gpu", Model{}, -1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("--cluster"));
}

}  // namespace
}  // namespace pipecast
