// Cluster files (formats/formats.h, docs/formats.md): their fields, ranges and cross-field rules,
// read and written; the presets live in sim/cluster.cc. Errors are worded by the formats part's
// one JSON reader (formats/internal/json_reader.h), as model.json's (formats/formats.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/internal/format_rules.h"
#include "formats/internal/json_reader.h"

namespace pipecast {
namespace {

using json = internal::Json;
using internal::Dump;
using internal::IntRule;
using internal::Join;
using internal::Member;
using internal::NumberRule;
using internal::ParseWith;
using Reader = internal::JsonReader;
using internal::kBandwidth;
using internal::kEfficiency;
using internal::kGpusPerNode;
using internal::kHbmBandwidth;
using internal::kHeadroom;
using internal::kMemoryBytes;
using internal::kMinGpuMemoryBytes;
using internal::kNicsPerNode;
using internal::kReserveBytes;
using internal::kTflops;
using internal::kTimeUs;

// ---------------------------------------------------------------------------
// cluster files

// One name of an NCCL list setting and its bit.
struct NcclName {
  const char* name;  // lower case
  unsigned bit;
};

// `<link>.<field>`: names as NCCL's environment variables list them,
// comma-separated, any case, `required` among them. Sets `bits` to the names'
// bits when the field is given and leaves it unchanged when not.
Status ReadNcclList(const Reader& r, const json& v, const char* key, const char* field,
                    std::span<const NcclName> names, const char* unknown, unsigned required,
                    const char* missing, unsigned* bits) {
  std::optional<std::string> list;
  PIPECAST_RETURN_IF_ERROR(r.String(v, key, field, &list));
  if (!list) return Status::Ok();
  unsigned given = 0;
  std::string_view rest = *list;
  while (true) {
    const size_t comma = rest.find(',');
    std::string name(rest.substr(0, comma));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto it =
        std::find_if(names.begin(), names.end(), [&](const NcclName& n) { return name == n.name; });
    if (it == names.end()) {
      return r.Error(Member(key, field), fmt::format("\"{}\" {}", name, unknown));
    }
    given |= it->bit;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if ((given & required) == 0) return r.Error(Member(key, field), missing);
  *bits = given;
  return Status::Ok();
}

// `<link>.nccl_proto`: the protocols as NCCL_PROTO lists them ("Simple",
// "Simple,LL128", "LL,LL128,Simple"; any case), Simple among them.
Status ReadNcclProto(const Reader& r, const json& v, const char* key, Link* link) {
  constexpr unsigned kSimple = 1, kLl = 2, kLl128 = 4;
  constexpr NcclName kProtocols[] = {{"simple", kSimple}, {"ll", kLl}, {"ll128", kLl128}};
  unsigned bits = kSimple | (link->protocol_ll ? kLl : 0) | (link->protocol_ll128 ? kLl128 : 0);
  PIPECAST_RETURN_IF_ERROR(
      ReadNcclList(r, v, key, "nccl_proto", kProtocols,
                   "is not a protocol; list LL, LL128, Simple, comma-separated", kSimple,
                   "Simple must be among the protocols (\"Simple\")", &bits));
  link->protocol_ll = (bits & kLl) != 0;
  link->protocol_ll128 = (bits & kLl128) != 0;
  return Status::Ok();
}

// `<link>.nccl_algo`: the algorithms as NCCL_ALGO lists them ("Ring,Tree",
// "ring,nvls"; any case), Ring among them.
Status ReadNcclAlgo(const Reader& r, const json& v, const char* key, Link* link) {
  constexpr NcclName kAlgorithms[] = {{"ring", kNcclAlgoRing},
                                      {"tree", kNcclAlgoTree},
                                      {"nvls", kNcclAlgoNvls},
                                      {"nvlstree", kNcclAlgoNvlsTree}};
  return ReadNcclList(r, v, key, "nccl_algo", kAlgorithms,
                      "is not an algorithm pipecast times; list Ring, Tree, NVLS, NVLSTree, "
                      "comma-separated",
                      kNcclAlgoRing,
                      "Ring must be among the algorithms (\"Ring\"): all-gathers and "
                      "reduce-scatters run only as rings",
                      &link->nccl_algos);
}

Status ReadLink(const Reader& r, const json& root, const char* key, Link* link) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", key, "an object {bandwidth_gbps, latency_us}", true, &v));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, key));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(*v, key,
                  {"bandwidth_gbps", "latency_us", "efficiency", "step_latency_us",
                   "collective_latency_us", "nvls_bandwidth_gbps", "nccl_proto", "nccl_algo"}));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "bandwidth_gbps", kBandwidth, &link->bandwidth_gbps));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "latency_us", kTimeUs, &link->latency_us));
  // Optional: how collectives run over the link (sim/collectives.h); a file
  // without them keeps the plain ring, as before these fields existed.
  std::optional<double> efficiency, step, fixed, nvls;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "efficiency", kEfficiency, &efficiency));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "step_latency_us", kTimeUs, &step));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "collective_latency_us", kTimeUs, &fixed));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "nvls_bandwidth_gbps", kBandwidth, &nvls));
  link->efficiency = efficiency.value_or(1);
  link->step_latency_us = step.value_or(-1);
  link->collective_latency_us = fixed.value_or(0);
  link->nvls_bandwidth_gbps = nvls.value_or(0);
  if (link->nvls_bandwidth_gbps != 0 && std::string(key) != "intra_node") {
    return r.Error(Member(key, "nvls_bandwidth_gbps"),
                   "NVLink SHARP runs inside a node: give it on intra_node");
  }
  PIPECAST_RETURN_IF_ERROR(ReadNcclProto(r, *v, key, link));
  return ReadNcclAlgo(r, *v, key, link);
}

Status ReadGpu(const Reader& r, const json& root, GpuSpec* gpu) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", "gpu", "an object {name, memory_bytes, peak_tflops}", true, &v));
  const std::string path = "gpu";
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, path));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(*v, path,
                  {"name", "memory_bytes", "memory_reserve_bytes", "memory_headroom", "peak_tflops",
                   "memory_bandwidth_gbps", "peak_fp8_tflops", "mxfp8"}));
  PIPECAST_RETURN_IF_ERROR(r.String(*v, path, "name", "the GPU's name", &gpu->name));
  PIPECAST_RETURN_IF_ERROR(r.Integer(*v, path, "memory_bytes", kMemoryBytes, &gpu->memory_bytes));
  if (gpu->memory_bytes > 0 && gpu->memory_bytes < kMinGpuMemoryBytes) {
    return r.Error(Member(path, "memory_bytes"),
                   fmt::format("{} bytes is too little for a GPU; the unit is bytes (80 GiB is "
                               "85899345920), and 0 means unlimited",
                               gpu->memory_bytes));
  }
  // Optional: a file without them keeps its whole memory_bytes (as before
  // these fields existed, so older plan files replay unchanged).
  std::optional<Bytes> reserve;
  PIPECAST_RETURN_IF_ERROR(r.Integer(*v, path, "memory_reserve_bytes", kReserveBytes, &reserve));
  gpu->memory_reserve_bytes = reserve.value_or(0);
  std::optional<double> headroom;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "memory_headroom", kHeadroom, &headroom));
  gpu->memory_headroom = headroom.value_or(0);
  if (gpu->memory_headroom >= 1) {
    return r.Error(Member(path, "memory_headroom"),
                   "must be below 1: it is the fraction of memory_bytes kept free");
  }
  if (gpu->memory_bytes > 0 &&
      gpu->memory_reserve_bytes + MemoryHeadroomBytes(*gpu) >= gpu->memory_bytes) {
    return r.Error(Member(path, "memory_reserve_bytes"),
                   fmt::format("{} bytes and memory_headroom {} leave nothing of memory_bytes {}",
                               gpu->memory_reserve_bytes, gpu->memory_headroom, gpu->memory_bytes));
  }
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "peak_tflops", kTflops, &gpu->peak_tflops));
  std::optional<double> hbm;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "memory_bandwidth_gbps", kHbmBandwidth, &hbm));
  gpu->memory_bandwidth_gbps = hbm.value_or(0);
  // Optional, read only (written plans leave them out, so that their text
  // stays as it was): the FP8 peak and MXFP8 support --precision fp8 needs.
  std::optional<double> fp8;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "peak_fp8_tflops", kTflops, &fp8));
  gpu->peak_fp8_tflops = fp8.value_or(0);
  if (v->contains("mxfp8")) {
    if (!(*v)["mxfp8"].is_boolean()) {
      return r.Error(Member(path, "mxfp8"), "must be true or false (MXFP8 tensor cores)");
    }
    gpu->mxfp8 = (*v)["mxfp8"].get<bool>();
  }
  return Status::Ok();
}

Status ReadCluster(const Reader& r, const json& root, Cluster* cluster) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(root, ""));
  PIPECAST_RETURN_IF_ERROR(r.Format(root, kClusterFormat));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
      root, "",
      {"format", "name", "gpus_per_node", "gpu", "intra_node", "inter_node", "nics_per_node"}));
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "name", "the cluster's name", &cluster->name));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(root, "", "gpus_per_node", kGpusPerNode, &cluster->gpus_per_node));
  PIPECAST_RETURN_IF_ERROR(ReadGpu(r, root, &cluster->gpu));
  PIPECAST_RETURN_IF_ERROR(ReadLink(r, root, "intra_node", &cluster->intra_node));
  PIPECAST_RETURN_IF_ERROR(ReadLink(r, root, "inter_node", &cluster->inter_node));
  std::optional<int64_t> nics;
  PIPECAST_RETURN_IF_ERROR(r.Integer(root, "", "nics_per_node", kNicsPerNode, &nics));
  cluster->nics_per_node = static_cast<int>(nics.value_or(0));
  return Status::Ok();
}

}  // namespace

Result<Cluster> ParseCluster(const std::string& text, const std::string& origin) {
  return ParseWith<Cluster>(text, origin, ReadCluster);
}

Result<Cluster> LoadCluster(const std::string& spec) {
  Result<Cluster> preset = ClusterPreset(spec);
  if (preset.ok()) return preset;
  Result<std::string> text = ReadFile(spec);
  if (!text.ok()) {
    const std::vector<std::string> names = ClusterPresetNames();
    return Status::NotFound(
        fmt::format("cluster '{}' is neither a preset ({}) nor a readable "
                    "pipecast-cluster/1 file: {}",
                    spec, Join({names.begin(), names.end()}), text.status().message()));
  }
  return ParseCluster(*text, spec);
}

namespace {

// A link's keys; the collective ones only where they differ from the plain
// ring's defaults, so a file that had none is written as it was read.
nlohmann::ordered_json LinkJson(const Link& link) {
  nlohmann::ordered_json out = {{"bandwidth_gbps", link.bandwidth_gbps},
                                {"latency_us", link.latency_us}};
  if (link.efficiency != 1) out["efficiency"] = link.efficiency;
  if (link.step_latency_us >= 0) out["step_latency_us"] = link.step_latency_us;
  if (link.collective_latency_us != 0) out["collective_latency_us"] = link.collective_latency_us;
  if (link.nvls_bandwidth_gbps != 0) out["nvls_bandwidth_gbps"] = link.nvls_bandwidth_gbps;
  if (!link.protocol_ll || !link.protocol_ll128) {
    std::string proto = link.protocol_ll ? "LL," : "";
    if (link.protocol_ll128) proto += "LL128,";
    out["nccl_proto"] = proto + "Simple";
  }
  if (link.nccl_algos != kNcclAlgoDefault) {
    std::string algo = "Ring";
    if (link.nccl_algos & kNcclAlgoTree) algo += ",Tree";
    if (link.nccl_algos & kNcclAlgoNvls) algo += ",NVLS";
    if (link.nccl_algos & kNcclAlgoNvlsTree) algo += ",NVLSTree";
    out["nccl_algo"] = algo;
  }
  return out;
}

}  // namespace

nlohmann::ordered_json ClusterJson(const Cluster& cluster) {
  json root;
  root["format"] = kClusterFormat;
  root["name"] = cluster.name;
  root["gpus_per_node"] = cluster.gpus_per_node;
  root["gpu"] = {{"name", cluster.gpu.name},
                 {"memory_bytes", cluster.gpu.memory_bytes},
                 {"memory_reserve_bytes", cluster.gpu.memory_reserve_bytes},
                 {"memory_headroom", cluster.gpu.memory_headroom},
                 {"peak_tflops", cluster.gpu.peak_tflops},
                 {"memory_bandwidth_gbps", cluster.gpu.memory_bandwidth_gbps}};
  root["intra_node"] = LinkJson(cluster.intra_node);
  root["inter_node"] = LinkJson(cluster.inter_node);
  if (cluster.nics_per_node > 0) root["nics_per_node"] = cluster.nics_per_node;
  return root;
}

std::string ClusterToJson(const Cluster& cluster) { return Dump(ClusterJson(cluster)); }

}  // namespace pipecast
