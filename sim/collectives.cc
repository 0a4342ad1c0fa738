#include "sim/collectives.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>

namespace pipecast {

namespace {

// The time of V·bytes at `gbps` bus bandwidth; 0 when gbps is infinite (0 or
// unbounded).
TimeNs VolumeNs(double volume, Bytes bytes, double gbps) {
  if (!(gbps > 0) || std::isinf(gbps)) return 0;
  return TransferNs(static_cast<Bytes>(std::ceil(volume * static_cast<double>(bytes))), gbps);
}

// Bandwidth `gbps` at `efficiency`; an infinite (0) bandwidth stays infinite.
double Effective(double gbps, double efficiency) {
  if (gbps <= 0) return std::numeric_limits<double>::infinity();
  return efficiency == 1 ? gbps : gbps * efficiency;
}

// What the algorithms need to know of the hardware.
struct Fabric {
  const Link& intra;
  const Link& inter;
  double network_gbps_per_gpu;  // one GPU's share of its node's NICs; 0 = infinite
};

// V above, computed as factor·(n−1)/n in that order (the rounding the ring
// model has always had).
double Volume(Collective op, int n) {
  const double factor = op == Collective::kAllReduce ? 2.0 : 1.0;
  return factor * (n - 1) / n;
}

// NCCL's tuning constants for the ring, per protocol (NVIDIA/nccl
// src/graph/tuning.cc at 5067397c2676d5aed50042fc39e5c8ee96eb0027,
// ncclTunerConstantsDefaults and ncclTopoTuneModel): baseLatencies[Ring],
// hwLatencies[NVLINK][Ring], hwLatencies[NET][Ring] (hwLatencies[NET][Tree]
// when one GPU per node: "With ppn=1 latencies are fully exposed"), and the
// net overhead a step inside a node pays at least when the ring crosses
// nodes (getNetOverhead: 1 us on an x86 Intel host, x3 for Simple). Microseconds.
struct ProtocolLatencies {
  double base, nvlink_step, net_step, net_step_one_per_node, net_overhead;
};
constexpr ProtocolLatencies kLl{6.6, 0.6, 2.7, 5.0, 1.0};
constexpr ProtocolLatencies kLl128{14.0, 1.9, 4.0, 8.5, 1.0};
constexpr ProtocolLatencies kSimple{8.4, 3.4, 14.0, 14.0, 3.0};
// The ring's bus bandwidth under LL (half the bytes are flags) and LL128
// (tuning.cc: busBw * 0.92, its comment "120.0/128.0"), as shares of Simple's.
constexpr double kLlShare = 0.5;
constexpr double kLl128Share = 0.92;
// llMaxBws (GB/s of bus bandwidth): one node by GPU (Hopper 141.0, Ampere
// 87.7), several by host CPU (Intel row: 39.0 for two nodes, 20.4 for more).
constexpr double kLlMaxHopperGbps = 141.0;
constexpr double kLlMaxAmpereGbps = 87.7;
constexpr double kLlMaxTwoNodesGbps = 39.0;
constexpr double kLlMaxMoreNodesGbps = 20.4;
// ncclTopoGetAlgoTime's "Plateau effect of ring": a Simple ring all-reduce
// across nodes has its latency multiplied by 1.4 on Ampere and later (1.9
// before; the presets are Ampere and Hopper) once it moves at least 64 bytes
// per channel and rank (nBytes / (nChannels * nRanks) >= 64). The model has
// no channel count; the threshold is taken with one channel, 64 bytes per
// rank, which only a Simple-only link reaches first (elsewhere LL wins far
// above it).
constexpr double kRingPlateau = 1.4;
constexpr Bytes kRingPlateauBytesPerRank = 64;

// The ring's latency under `p`, from the links' Simple latencies: a link's
// fixed and NVLink step latencies beyond NCCL's Simple defaults are added to
// every protocol's alike; a network step beyond NCCL's 14 us is the
// network's own latency (NCCL's graph latencyInter), which Simple pays twice
// (its flush) and LL and LL128 once. Simple's is the links' as given.
struct RingLatency {
  TimeNs fixed, intra_step, inter_step;
};
RingLatency RingLatencyOf(const Fabric& f, const CollectiveGroup& g, CollectiveProtocol protocol) {
  const Link& outer = g.nodes > 1 ? f.inter : f.intra;
  if (protocol == CollectiveProtocol::kSimple) {
    return {outer.CollectiveLatencyNs(), f.intra.StepLatencyNs(), f.inter.StepLatencyNs()};
  }
  const ProtocolLatencies& p = protocol == CollectiveProtocol::kLl ? kLl : kLl128;
  const auto us = [](double v) { return UsToNs(std::max(0.0, v)); };
  const double fixed = outer.collective_latency_us - kSimple.base + p.base;
  double intra = NsToUs(f.intra.StepLatencyNs()) - kSimple.nvlink_step + p.nvlink_step;
  if (g.nodes > 1) intra = std::max(intra, p.net_overhead);
  const double extra = (NsToUs(f.inter.StepLatencyNs()) - kSimple.net_step) / 2;
  const double inter = (g.per_node == 1 ? p.net_step_one_per_node : p.net_step) + extra;
  return {us(fixed), us(intra), us(inter)};
}

// LL and LL128 are NCCL's defaults on the presets' nodes (LL128 on Hopper
// and on Ampere over NVLink with the NIC on the GPU's PCIe switch), unless
// the group's link turns them off (NCCL_PROTO); a link without
// collective_latency_us (a plain cluster file) keeps Simple alone.
bool ProtocolOn(const Fabric& f, const CollectiveGroup& g, CollectiveProtocol p) {
  const Link& link = g.nodes > 1 ? f.inter : f.intra;
  if (!(link.collective_latency_us > 0)) return p == CollectiveProtocol::kSimple;
  if (p == CollectiveProtocol::kLl) return link.protocol_ll;
  if (p == CollectiveProtocol::kLl128) return link.protocol_ll128;
  return true;
}

double LlMaxGbps(const Fabric& f, const CollectiveGroup& g) {
  if (g.nodes == 1) return f.intra.nvls_bandwidth_gbps > 0 ? kLlMaxHopperGbps : kLlMaxAmpereGbps;
  return g.nodes == 2 ? kLlMaxTwoNodesGbps : kLlMaxMoreNodesGbps;
}

// The plateau (kRingPlateau) applies to a Simple ring all-reduce across
// nodes, on a link NCCL's constants apply to (one with collective_latency_us,
// as for LL and LL128: a plain cluster file keeps its ring as before).
bool RingPlateauApplies(const Fabric& f, Collective op, Bytes bytes, const CollectiveGroup& g,
                        CollectiveProtocol protocol) {
  if (protocol != CollectiveProtocol::kSimple || op != Collective::kAllReduce || g.nodes <= 1) {
    return false;
  }
  if (!(f.inter.collective_latency_us > 0)) return false;
  return bytes / g.ranks >= kRingPlateauBytesPerRank;
}

double RingBusGbps(const Fabric& f, const CollectiveGroup& g) {
  double bus = std::numeric_limits<double>::infinity();
  if (g.per_node > 1 || g.nodes == 1) {
    bus = std::min(bus, Effective(f.intra.bandwidth_gbps, f.intra.efficiency));
  }
  if (g.nodes > 1) {
    const double share =
        g.per_node == 1 ? f.network_gbps_per_gpu : g.per_node * f.network_gbps_per_gpu;
    bus = std::min(bus, Effective(share, f.inter.efficiency));
  }
  return bus;
}

TimeNs RingNs(const Fabric& f, Collective op, Bytes bytes, const CollectiveGroup& g, int pieces,
              CollectiveProtocol protocol) {
  const RingLatency lat = RingLatencyOf(f, g, protocol);
  const int factor = op == Collective::kAllReduce ? 2 : 1;
  const int64_t steps = int64_t{factor} * (g.ranks - 1);
  const int64_t inter_steps = g.nodes > 1 ? int64_t{factor} * (g.nodes - 1) : 0;
  TimeNs fixed = lat.fixed + (steps - inter_steps) * lat.intra_step + inter_steps * lat.inter_step;
  if (RingPlateauApplies(f, op, bytes / std::max(1, pieces), g, protocol)) {
    fixed = std::llround(kRingPlateau * static_cast<double>(fixed));
  }
  double bus = RingBusGbps(f, g);
  if (protocol == CollectiveProtocol::kLl) bus = std::min(bus * kLlShare, LlMaxGbps(f, g));
  if (protocol == CollectiveProtocol::kLl128) bus *= kLl128Share;
  return pieces * fixed + VolumeNs(Volume(op, g.ranks), bytes, bus);
}

TimeNs NvlsNs(const Fabric& f, Bytes bytes, int pieces) {
  const TimeNs fixed = f.intra.CollectiveLatencyNs() + 2 * f.intra.StepLatencyNs();
  return pieces * fixed + TransferNs(bytes, f.intra.nvls_bandwidth_gbps);
}

TimeNs NvlsTreeNs(const Fabric& f, Bytes bytes, const CollectiveGroup& g, int pieces) {
  const int depth = std::bit_width(static_cast<unsigned>(g.nodes - 1));  // ceil(log2 N)
  const TimeNs fixed = f.inter.CollectiveLatencyNs() + 2 * f.intra.StepLatencyNs() +
                       2 * int64_t{depth} * f.inter.StepLatencyNs();
  const double crossings = g.nodes == 2 ? 1 : 2;
  const double per_gpu = crossings / g.per_node;
  const TimeNs network =
      VolumeNs(per_gpu, bytes, Effective(f.network_gbps_per_gpu, f.inter.efficiency));
  return pieces * fixed + std::max(TransferNs(bytes, f.intra.nvls_bandwidth_gbps), network);
}

// NCCL's tree all-reduce across nodes (Simple): a chain through the p GPUs of
// each node over NVLink, a tree (two nodes) or double binary tree (more)
// across them. Each GPU sends the buffer twice over NVLink (up the chain
// reducing, down it broadcasting), and each node's NICs carry it k times per
// direction (k = 1 on two nodes, 2 on more), 1/p of it through each GPU's
// share; the slower of the two sets the time. Latency: the fixed latency,
// 2(p - 1) NVLink steps and 2 ceil(log2 N) network steps.
TimeNs TreeNs(const Fabric& f, Bytes bytes, const CollectiveGroup& g, int pieces) {
  const int depth = std::bit_width(static_cast<unsigned>(g.nodes - 1));  // ceil(log2 N)
  const TimeNs fixed = f.inter.CollectiveLatencyNs() +
                       2 * int64_t{g.per_node - 1} * f.intra.StepLatencyNs() +
                       2 * int64_t{depth} * f.inter.StepLatencyNs();
  const double crossings = g.nodes == 2 ? 1 : 2;
  const TimeNs network = VolumeNs(crossings / g.per_node, bytes,
                                  Effective(f.network_gbps_per_gpu, f.inter.efficiency));
  const TimeNs nvlink =
      g.per_node > 1 ? VolumeNs(2, bytes, Effective(f.intra.bandwidth_gbps, f.intra.efficiency))
                     : 0;
  return pieces * fixed + std::max(nvlink, network);
}

// The algorithms the group's link allows (Link::nccl_algos; the intra-node
// link's inside a node, the inter-node link's across nodes).
bool AlgorithmOn(const Fabric& f, const CollectiveGroup& g, unsigned algorithm) {
  const Link& link = g.nodes > 1 ? f.inter : f.intra;
  return (link.nccl_algos & algorithm) != 0;
}

CollectiveCost Best(const Fabric& f, Collective op, Bytes bytes, const CollectiveGroup& g,
                    int pieces) {
  if (g.ranks <= 1 || bytes <= 0) return {};
  CollectiveCost best{RingNs(f, op, bytes, g, pieces, CollectiveProtocol::kSimple),
                      CollectiveAlgorithm::kRing, CollectiveProtocol::kSimple};
  for (CollectiveProtocol p : {CollectiveProtocol::kLl128, CollectiveProtocol::kLl}) {
    if (!ProtocolOn(f, g, p)) continue;
    const TimeNs ns = RingNs(f, op, bytes, g, pieces, p);
    if (ns < best.ns) best = {ns, CollectiveAlgorithm::kRing, p};
  }
  if (op != Collective::kAllReduce) return best;
  if (g.nodes > 1 && AlgorithmOn(f, g, kNcclAlgoTree)) {
    const CollectiveCost tree{TreeNs(f, bytes, g, pieces), CollectiveAlgorithm::kTree};
    if (tree.ns < best.ns) best = tree;
  }
  const bool nvls = f.intra.nvls_bandwidth_gbps > 0 && f.intra.bandwidth_gbps > 0 &&
                    g.per_node >= 2 &&
                    AlgorithmOn(f, g, g.nodes == 1 ? kNcclAlgoNvls : kNcclAlgoNvlsTree);
  if (nvls) {
    const CollectiveCost other =
        g.nodes == 1
            ? CollectiveCost{NvlsNs(f, bytes, pieces), CollectiveAlgorithm::kNvls}
            : CollectiveCost{NvlsTreeNs(f, bytes, g, pieces), CollectiveAlgorithm::kNvlsTree};
    if (other.ns < best.ns) best = other;
  }
  return best;
}

}  // namespace

const char* CollectiveName(Collective op) {
  switch (op) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kReduceScatter:
      return "reduce-scatter";
  }
  return "";
}

const char* CollectiveProtocolName(CollectiveProtocol protocol) {
  switch (protocol) {
    case CollectiveProtocol::kSimple:
      return "Simple";
    case CollectiveProtocol::kLl:
      return "LL";
    case CollectiveProtocol::kLl128:
      return "LL128";
  }
  return "";
}

const char* CollectiveAlgorithmName(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kNone:
      return "none";
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kNvls:
      return "NVLS";
    case CollectiveAlgorithm::kNvlsTree:
      return "NVLS tree";
    case CollectiveAlgorithm::kTree:
      return "tree";
  }
  return "";
}

CollectiveGroup GroupOf(const Cluster& cluster, const std::vector<int>& gpus) {
  std::map<int, int> per_node;
  for (int g : gpus) ++per_node[g / std::max(1, cluster.gpus_per_node)];
  CollectiveGroup group;
  group.ranks = static_cast<int>(gpus.size());
  group.nodes = std::max<int>(1, static_cast<int>(per_node.size()));
  group.per_node = group.ranks;
  for (const auto& [node, count] : per_node) group.per_node = std::min(group.per_node, count);
  group.per_node = std::max(1, group.per_node);
  return group;
}

CollectiveGroup StridedGroup(const Cluster& cluster, int first, int stride, int count) {
  // GroupOf of first + i x stride, i < count, without its map: the GPUs ascend (stride >= 1), so
  // a node's GPUs are consecutive and the counts per node are runs (the planner costs these
  // groups for every candidate it simulates; the map was a tenth of a 2048-GPU search).
  if (count < 1 || stride < 1) {
    std::vector<int> gpus;
    for (int i = 0; i < count; ++i) gpus.push_back(first + i * stride);
    return GroupOf(cluster, gpus);
  }
  const int per = std::max(1, cluster.gpus_per_node);
  CollectiveGroup group;
  group.ranks = count;
  group.nodes = 0;
  group.per_node = count;
  int node = first / per, run = 0;
  for (int i = 0; i < count; ++i) {
    const int here = (first + i * stride) / per;
    if (here != node) {
      group.per_node = std::min(group.per_node, run);
      ++group.nodes;
      node = here;
      run = 0;
    }
    ++run;
  }
  group.per_node = std::max(1, std::min(group.per_node, run));
  group.nodes = std::max(1, group.nodes + 1);
  return group;
}

CollectiveGroup OneNodeGroup(int ranks) {
  return CollectiveGroup{.ranks = ranks, .nodes = 1, .per_node = ranks};
}

CollectiveCost CollectiveCostOf(const Cluster& cluster, Collective op, Bytes bytes,
                                const CollectiveGroup& group, int pieces) {
  const Fabric fabric{cluster.intra_node, cluster.inter_node, cluster.NetworkGbpsPerGpu()};
  return Best(fabric, op, bytes, group, pieces);
}

TimeNs CollectiveNs(const Cluster& cluster, Collective op, Bytes bytes,
                    const CollectiveGroup& group, int pieces) {
  return CollectiveCostOf(cluster, op, bytes, group, pieces).ns;
}

TimeNs IntraNodeCollectiveNs(const Link& intra_node, Collective op, Bytes bytes, int ranks,
                             int pieces) {
  const Link none;
  const Fabric fabric{intra_node, none, 0};
  return Best(fabric, op, bytes, OneNodeGroup(ranks), pieces).ns;
}

double BusBandwidthGbps(Collective op, Bytes bytes, int ranks, TimeNs ns) {
  if (ns <= 0 || ranks <= 1) return 0;
  return Volume(op, ranks) * static_cast<double>(bytes) / static_cast<double>(ns);
}

namespace {

// DeepEP's published bandwidths (deepseek-ai/DeepEP README at
// 567632dd59810d77b3cc05553df953cc0f779799, "Normal kernels with NVLink and
// RDMA forwarding", H800, CX7 400 Gb/s): inside a node, of NVLink's ~160 GB/s
// on H800.
constexpr double kDeepEpNvlinkMaxGbps = 160;
constexpr double kDeepEpIntraDispatchGbps = 153;
constexpr double kDeepEpIntraCombineGbps = 158;
// Across nodes, of the NIC's ~50 GB/s, at ep = 16, 32, 64.
constexpr double kDeepEpNicGbps = 50;
struct DeepEpInternode {
  int ep;
  double dispatch_gbps, combine_gbps;
};
constexpr DeepEpInternode kDeepEpInternode[] = {{16, 43, 43}, {32, 58, 57}, {64, 51, 50}};

// The published row for `ep`: the nearest published ep at or below it (16
// below 16).
const DeepEpInternode& InternodeRow(int ep) {
  const DeepEpInternode* row = &kDeepEpInternode[0];
  for (const DeepEpInternode& r : kDeepEpInternode) {
    if (r.ep <= ep) row = &r;
  }
  return *row;
}

// C(a, k) / C(b, k) for a <= b, as a product (no overflow).
double BinomialRatio(int a, int b, int k) {
  if (k > a) return 0;
  double ratio = 1;
  for (int i = 0; i < k; ++i) ratio *= static_cast<double>(a - i) / (b - i);
  return ratio;
}

}  // namespace

double DistinctGroupsPerToken(int experts, int top_k, int groups) {
  if (groups <= 1) return 1;
  const int per_group = experts / groups;
  return groups * (1 - BinomialRatio(experts - per_group, experts, top_k));
}

ExpertAllToAllGroup ExpertGroupOf(int expert_parallel, int expert_tensor_parallel,
                                  int gpus_per_node) {
  ExpertAllToAllGroup g;
  g.ranks = expert_parallel;
  g.tensor = std::max(1, expert_tensor_parallel);
  const int64_t span = int64_t{expert_parallel} * expert_tensor_parallel;
  const int node = std::max(1, gpus_per_node);
  g.gpus_per_node = node;
  if (span <= node) {
    g.nodes = 1;
    g.per_node = expert_parallel;
  } else {
    g.nodes = static_cast<int>((span + node - 1) / node);
    g.per_node = std::max(1, node / expert_tensor_parallel);
  }
  return g;
}

const char* ExpertDispatcherName(ExpertDispatcher dispatcher) {
  switch (dispatcher) {
    case ExpertDispatcher::kDeepEp:
      return "deepep";
    case ExpertDispatcher::kAllToAll:
      return "alltoall";
    case ExpertDispatcher::kAllGather:
      return "allgather";
  }
  return "";
}

std::optional<ExpertDispatcher> ParseExpertDispatcher(std::string_view name) {
  if (name == "deepep") return ExpertDispatcher::kDeepEp;
  if (name == "alltoall") return ExpertDispatcher::kAllToAll;
  if (name == "allgather") return ExpertDispatcher::kAllGather;
  return std::nullopt;
}

namespace {

// Megatron-LM's all-to-all dispatcher (sim/collectives.h): k rows per token
// (x the capacity's rows per route), each to its expert's rank, NVLink and network side by side at
// NCCL's rates.
ExpertAllToAll NcclAllToAllOf(const Link& intra_node, const Link& inter_node,
                              double network_gbps_per_gpu, const ExpertAllToAllGroup& group,
                              double rows_per_token, double token_bytes, double tokens) {
  ExpertAllToAll a;
  a.across_nodes = group.nodes > 1;
  a.bytes_per_token = rows_per_token * token_bytes;
  const double ranks = group.ranks;
  const double per_node = a.across_nodes ? group.per_node : group.ranks;
  a.nvlink_bytes_per_token = a.bytes_per_token * (per_node - 1) / ranks;
  a.network_bytes_per_token = a.across_nodes ? a.bytes_per_token * (ranks - per_node) / ranks : 0;
  const auto transfer_ns = [&](double bytes_per_token, double gbps) -> double {
    if (bytes_per_token <= 0 || std::isinf(gbps)) return 0;
    return bytes_per_token * tokens / gbps;  // GB/s = bytes/ns
  };
  const double nvlink = transfer_ns(a.nvlink_bytes_per_token,
                                    Effective(intra_node.bandwidth_gbps, intra_node.efficiency));
  const double network = transfer_ns(a.network_bytes_per_token,
                                     Effective(network_gbps_per_gpu, inter_node.efficiency));
  const TimeNs latency = (a.across_nodes ? inter_node : intra_node).CollectiveLatencyNs();
  a.dispatch_ns = latency + static_cast<TimeNs>(std::llround(std::max(nvlink, network)));
  a.combine_ns = a.dispatch_ns;
  a.backward_ns = a.dispatch_ns + a.combine_ns;
  return a;
}

// Megatron-LM's all-gather dispatcher (sim/collectives.h): over the etp x ep
// group, all-gathers of the routing map, the probs and the hidden states, and
// a reduce-scatter of the output, through the collective model.
ExpertAllToAll AllGatherDispatchOf(const Link& intra_node, const Link& inter_node,
                                   double network_gbps_per_gpu, const ExpertAllToAllGroup& group,
                                   int experts, double token_bytes, int bytes_per_element,
                                   double tokens) {
  ExpertAllToAll a;
  const int tensor = std::max(1, group.tensor);
  const CollectiveGroup g{.ranks = group.ranks * tensor,
                          .nodes = group.nodes,
                          .per_node = (group.nodes > 1 ? group.per_node : group.ranks) * tensor};
  a.across_nodes = g.nodes > 1;
  const double others = g.ranks - 1;
  a.bytes_per_token = others * token_bytes;
  a.routing_bytes_per_token = others * experts * (bytes_per_element + 1.0);
  // The other nodes' tokens enter a node once, over its per_node NICs (the rings leave through
  // their own NICs, as the ring model takes them); the rest arrive over NVLink.
  a.network_bytes_per_token =
      a.across_nodes ? static_cast<double>(g.ranks - g.per_node) / g.per_node * token_bytes : 0;
  a.nvlink_bytes_per_token = a.bytes_per_token - a.network_bytes_per_token;
  const Fabric fabric{intra_node, inter_node, network_gbps_per_gpu};
  // Each collective's S: the gathered (or scattered) buffer of all g GPUs.
  const auto gathered = [&](double bytes_per_row) -> Bytes {
    return std::llround(g.ranks * tokens * bytes_per_row);
  };
  const auto ns = [&](Collective op, double bytes_per_row) {
    return Best(fabric, op, gathered(bytes_per_row), g, 1).ns;
  };
  a.workspace_bytes = gathered(token_bytes + experts * (bytes_per_element + 1.0));
  a.dispatch_ns = ns(Collective::kAllGather, experts * 1.0) +
                  ns(Collective::kAllGather, experts * static_cast<double>(bytes_per_element)) +
                  ns(Collective::kAllGather, token_bytes);
  a.combine_ns = ns(Collective::kReduceScatter, token_bytes);
  // The backward runs the adjoints autograd records (Megatron-LM d98e8a64, token_dispatcher.py
  // token_dispatch, tensor_parallel/mappings.py _GatherFromSequenceParallelRegion.backward): the
  // output's reduce-scatter becomes an all-gather of its gradient, the hidden states' and the
  // probs' all-gathers reduce-scatters of theirs (the probs carry the router's gradient); the
  // routing map, gathered under torch.no_grad(), has none.
  a.backward_ns = ns(Collective::kAllGather, token_bytes) +
                  ns(Collective::kReduceScatter, token_bytes) +
                  ns(Collective::kReduceScatter, experts * static_cast<double>(bytes_per_element));
  return a;
}

// The all-to-all dispatcher's etp collectives (sim/collectives.h): over the etp consecutive
// GPUs, all-gathers of the k x tokens received rows and of their probs, and a reduce-scatter of
// the partial outputs, through the collective model.
void AddExpertTensorParallel(const Link& intra_node, const Link& inter_node,
                             double network_gbps_per_gpu, const ExpertAllToAllGroup& group,
                             double rows_per_token, double token_bytes, int bytes_per_element,
                             double tokens, ExpertAllToAll* a) {
  const int etp = group.tensor;
  if (etp <= 1) return;
  const int node = std::max(1, group.gpus_per_node);
  const CollectiveGroup g{
      .ranks = etp, .nodes = (etp + node - 1) / node, .per_node = std::min(etp, node)};
  const Fabric fabric{intra_node, inter_node, network_gbps_per_gpu};
  // Received in the all-to-all, experts spread evenly (k rows per token, x C
  // padded to capacity).
  const double rows = rows_per_token * tokens;
  const auto gathered = [&](double bytes_per_row) -> Bytes {
    return std::llround(etp * rows * bytes_per_row);
  };
  a->etp_bytes_per_token = (etp - 1.0) * rows_per_token * token_bytes;
  a->etp_gather_ns = Best(fabric, Collective::kAllGather, gathered(token_bytes), g, 1).ns +
                     Best(fabric, Collective::kAllGather, gathered(bytes_per_element), g, 1).ns;
  a->etp_scatter_ns = Best(fabric, Collective::kReduceScatter, gathered(token_bytes), g, 1).ns;
}

}  // namespace

ExpertAllToAll ExpertAllToAllOf(const Link& intra_node, const Link& inter_node,
                                double network_gbps_per_gpu, const ExpertAllToAllGroup& group,
                                int experts, int top_k, int expert_groups, int topk_groups,
                                int64_t hidden, int bytes_per_element, double tokens,
                                ExpertDispatcher dispatcher, double rows_per_route) {
  ExpertAllToAll a;
  const int etp = std::max(1, group.tensor);
  if (group.ranks * etp <= 1 || tokens <= 0) return a;
  const double token_bytes = static_cast<double>(hidden) * bytes_per_element;
  // The expert rows beyond etp = 1's each GPU keeps (sim/collectives.h).
  const auto kept = [&](double rows_per_token) -> Bytes {
    return std::llround((etp - 1) * rows_per_token * tokens * token_bytes);
  };
  if (dispatcher == ExpertDispatcher::kAllGather) {
    a = AllGatherDispatchOf(intra_node, inter_node, network_gbps_per_gpu, group, experts,
                            token_bytes, bytes_per_element, tokens);
    a.etp_kept_bytes = kept(top_k);
    return a;
  }
  if (dispatcher == ExpertDispatcher::kAllToAll) {
    const double rows_per_token = top_k * rows_per_route;
    if (group.ranks > 1) {
      a = NcclAllToAllOf(intra_node, inter_node, network_gbps_per_gpu, group, rows_per_token,
                         token_bytes, tokens);
    }
    AddExpertTensorParallel(intra_node, inter_node, network_gbps_per_gpu, group, rows_per_token,
                            token_bytes, bytes_per_element, tokens, &a);
    a.etp_kept_bytes = kept(rows_per_token);
    return a;
  }
  a.etp_kept_bytes = kept(top_k);
  double dispatch_gbps = 0, combine_gbps = 0;
  TimeNs latency = 0;
  if (group.nodes == 1) {
    // One copy per destination GPU: each of the token's distinct ranks, etp GPUs each.
    a.bytes_per_token = etp * DistinctGroupsPerToken(experts, top_k, group.ranks) * token_bytes;
    a.nvlink_bytes_per_token = a.bytes_per_token;
    const double nvlink = Effective(intra_node.bandwidth_gbps, intra_node.efficiency);
    dispatch_gbps = nvlink * (kDeepEpIntraDispatchGbps / kDeepEpNvlinkMaxGbps);
    combine_gbps = nvlink * (kDeepEpIntraCombineGbps / kDeepEpNvlinkMaxGbps);
    latency = intra_node.CollectiveLatencyNs();
  } else {
    a.across_nodes = true;
    const int n = group.nodes;
    int limit = n;  // nodes one token may reach
    if (expert_groups > 0 && topk_groups > 0) {
      limit = expert_groups >= n
                  ? std::min(n, topk_groups)
                  : std::min<int>(n, static_cast<int>(int64_t{topk_groups} * n / expert_groups));
      limit = std::max(1, limit);
    }
    const double nodes_per_token = limit >= n
                                       ? DistinctGroupsPerToken(experts, top_k, n)
                                       : DistinctGroupsPerToken(experts / n * limit, top_k, limit);
    a.bytes_per_token = nodes_per_token * token_bytes;
    a.network_bytes_per_token = a.bytes_per_token;
    const DeepEpInternode& row = InternodeRow(group.ranks * etp);  // DeepEP's group: etp x ep
    const double network = network_gbps_per_gpu > 0 ? network_gbps_per_gpu : 0;
    const double nic = Effective(network, 1.0);
    dispatch_gbps = nic * (row.dispatch_gbps / kDeepEpNicGbps);
    combine_gbps = nic * (row.combine_gbps / kDeepEpNicGbps);
    latency = inter_node.CollectiveLatencyNs();
  }
  const double bytes = a.bytes_per_token * tokens;
  const auto time = [&](double gbps) -> TimeNs {
    if (std::isinf(gbps)) return latency;
    return latency + static_cast<TimeNs>(std::llround(bytes / gbps));  // GB/s = bytes/ns
  };
  a.dispatch_ns = time(dispatch_gbps);
  a.combine_ns = time(combine_gbps);
  a.backward_ns = a.dispatch_ns + a.combine_ns;
  return a;
}

}  // namespace pipecast
