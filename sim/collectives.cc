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

TimeNs RingNs(const Fabric& f, Collective op, Bytes bytes, const CollectiveGroup& g, int pieces) {
  const int factor = op == Collective::kAllReduce ? 2 : 1;
  const int64_t steps = int64_t{factor} * (g.ranks - 1);
  const int64_t inter_steps = g.nodes > 1 ? int64_t{factor} * (g.nodes - 1) : 0;
  const TimeNs fixed = (g.nodes > 1 ? f.inter : f.intra).CollectiveLatencyNs() +
                       (steps - inter_steps) * f.intra.StepLatencyNs() +
                       inter_steps * f.inter.StepLatencyNs();
  double bus = std::numeric_limits<double>::infinity();
  if (g.per_node > 1 || g.nodes == 1) {
    bus = std::min(bus, Effective(f.intra.bandwidth_gbps, f.intra.efficiency));
  }
  if (g.nodes > 1) {
    const double share =
        g.per_node == 1 ? f.network_gbps_per_gpu : g.per_node * f.network_gbps_per_gpu;
    bus = std::min(bus, Effective(share, f.inter.efficiency));
  }
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

CollectiveCost Best(const Fabric& f, Collective op, Bytes bytes, const CollectiveGroup& g,
                    int pieces) {
  if (g.ranks <= 1 || bytes <= 0) return {};
  CollectiveCost best{RingNs(f, op, bytes, g, pieces), CollectiveAlgorithm::kRing};
  const bool nvls = op == Collective::kAllReduce && f.intra.nvls_bandwidth_gbps > 0 &&
                    f.intra.bandwidth_gbps > 0 && g.per_node >= 2;
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
  std::vector<int> gpus;
  gpus.reserve(count);
  for (int i = 0; i < count; ++i) gpus.push_back(first + i * stride);
  return GroupOf(cluster, gpus);
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

}  // namespace pipecast
