// The collective model (sim/collectives.h): its closed forms by hand, and the
// presets against published nccl-tests bus bandwidths (docs/calibration.md,
// "Collectives against nccl-tests"; sources in docs/research/nccl-tests.md).
#include "sim/collectives.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/cluster.h"

namespace pipecast {
namespace {

Cluster Plain() {
  Cluster c;
  c.name = "plain";
  c.gpus_per_node = 8;
  c.intra_node = Link{100.0, 2.0};
  c.inter_node = Link{10.0, 5.0};
  return c;
}

TEST(Collectives, PlainLinksGiveTheRingOfTheLinkInsideANode) {
  // 8 GPUs, 800 MB: 14 steps x 2 us + 1.75 x 800 MB / 100 GB/s = 28 + 14000 us.
  const Cluster c = Plain();
  EXPECT_EQ(CollectiveNs(c, Collective::kAllReduce, 800'000'000, OneNodeGroup(8)),
            28'000 + 14'000'000);
  // All-gather: 7 steps, 0.875 x 800 MB.
  EXPECT_EQ(CollectiveNs(c, Collective::kAllGather, 800'000'000, OneNodeGroup(8)),
            14'000 + 7'000'000);
  // Three layers' gathers: the latency three times, the bytes once.
  EXPECT_EQ(CollectiveNs(c, Collective::kAllGather, 800'000'000, OneNodeGroup(8), 3),
            3 * 14'000 + 7'000'000);
  EXPECT_EQ(IntraNodeCollectiveNs(c.intra_node, Collective::kReduceScatter, 800'000'000, 8),
            14'000 + 7'000'000);
  EXPECT_EQ(CollectiveNs(c, Collective::kAllReduce, 800'000'000, OneNodeGroup(1)), 0);
}

TEST(Collectives, OneGpuPerNodeRingsOverItsOwnNic) {
  // GPUs 0, 8, 16, 24: four nodes, one each: 3 network steps of 5 us and
  // 0.75 x 800 MB through one 10 GB/s NIC.
  const Cluster c = Plain();
  const CollectiveGroup g = StridedGroup(c, 0, 8, 4);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.per_node, 1);
  EXPECT_EQ(CollectiveNs(c, Collective::kReduceScatter, 800'000'000, g), 15'000 + 60'000'000);
}

// StridedGroup counts a data-parallel group's nodes by runs (the GPUs ascend) instead of
// GroupOf's map: the same group for every start, stride, size and node size tried, uneven
// spreads (a stride that does not divide the node) included.
TEST(Collectives, StridedGroupIsGroupOfItsGpus) {
  for (int per_node : {1, 2, 4, 8}) {
    Cluster c = Plain();
    c.gpus_per_node = per_node;
    for (int first : {0, 1, 3, 7}) {
      for (int stride : {1, 2, 3, 5, 8, 16}) {
        for (int count : {1, 2, 3, 7, 16, 33}) {
          std::vector<int> gpus;
          for (int i = 0; i < count; ++i) gpus.push_back(first + i * stride);
          const CollectiveGroup want = GroupOf(c, gpus);
          const CollectiveGroup got = StridedGroup(c, first, stride, count);
          EXPECT_EQ(got.ranks, want.ranks);
          EXPECT_EQ(got.nodes, want.nodes) << per_node << " " << first << " " << stride;
          EXPECT_EQ(got.per_node, want.per_node) << per_node << " " << first << " " << stride;
        }
      }
    }
  }
}

TEST(Collectives, AWholeNodesRingsUseAllItsNicsAtOnce) {
  // 16 GPUs in two nodes: the rings leave each node through its 8 NICs, so
  // the network carries 8 x 10 = 80 GB/s against NVLink's 100: 0.9375 x 800
  // MB / 80 GB/s = 9375 us; 15 steps, 1 across nodes: 14 x 2 + 5 us.
  const Cluster c = Plain();
  const CollectiveGroup g = StridedGroup(c, 0, 1, 16);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.per_node, 8);
  EXPECT_EQ(CollectiveNs(c, Collective::kAllGather, 800'000'000, g), 33'000 + 9'375'000);
  // Four NICs for eight GPUs halve the network: 40 GB/s, 18750 us.
  Cluster four = c;
  four.nics_per_node = 4;
  EXPECT_EQ(CollectiveNs(four, Collective::kAllGather, 800'000'000, g), 33'000 + 18'750'000);
  // A point-to-point transfer between nodes gets one GPU's share.
  EXPECT_DOUBLE_EQ(four.LinkBetween(0, 8).bandwidth_gbps, 5.0);
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 8).bandwidth_gbps, 10.0);
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 1).bandwidth_gbps, 100.0);
}

TEST(Collectives, EfficiencyFixedLatencyAndNvlsOnOneNode) {
  Cluster c = Plain();
  c.intra_node.efficiency = 0.8;  // ring bus bandwidth 80 GB/s
  c.intra_node.step_latency_us = 3;
  c.intra_node.collective_latency_us = 10;
  // Ring all-gather: 10 + 7 x 3 us + 0.875 x 800 MB / 80 GB/s.
  EXPECT_EQ(CollectiveNs(c, Collective::kAllGather, 800'000'000, OneNodeGroup(8)),
            31'000 + 8'750'000);
  // Without NVLS the all-reduce is the ring: 10 + 14 x 3 + 17500 us.
  CollectiveCost ring = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, OneNodeGroup(8));
  EXPECT_EQ(ring.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(ring.ns, 52'000 + 17'500'000);
  // NVLS at 60 GB/s algorithm bandwidth: 10 + 2 x 3 + 800 MB / 60 GB/s,
  // faster than the ring's 17.5 ms, so NCCL (and the model) take it.
  c.intra_node.nvls_bandwidth_gbps = 60;
  CollectiveCost nvls = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, OneNodeGroup(8));
  EXPECT_EQ(nvls.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_EQ(nvls.ns, 16'000 + 13'333'334);
  // NVLS does not gather: the all-gather stays the ring.
  EXPECT_EQ(CollectiveNs(c, Collective::kAllGather, 800'000'000, OneNodeGroup(8)),
            31'000 + 8'750'000);
}

TEST(Collectives, NvlsTreeAcrossNodesIsTheSlowerOfNvlsAndTheNics) {
  Cluster c = Plain();
  c.intra_node.nvls_bandwidth_gbps = 60;
  // Two nodes of 8: each GPU's 1/8 crosses once: 100 MB over 10 GB/s =
  // 10 ms, against NVLS's 800 MB / 60 GB/s = 13.33 ms; latency 2 x 2 us +
  // 2 x 1 x 5 us. The ring: 1.875 x 800 MB / min(100, 80) GB/s = 18.75 ms.
  const CollectiveGroup two = StridedGroup(c, 0, 1, 16);
  CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, two);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kNvlsTree);
  EXPECT_EQ(cost.ns, 14'000 + 13'333'334);
  // Four nodes: the tree sends each byte up and down, 200 MB per NIC = 20 ms,
  // slower than the ring's 1.9375 x 800 MB / 80 GB/s = 19.375 ms.
  const CollectiveGroup four = StridedGroup(c, 0, 1, 32);
  cost = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, four);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kRing);
}

// NCCL_ALGO on the network link: the plain tree only where it is listed,
// NVLS and NVLS tree only where they are. Two nodes of 8 on Plain(), 800 MB:
// the tree sends 2 x 800 MB over each GPU's NVLink (16 ms at 100 GB/s) and
// 1/8 of it once over each 10 GB/s NIC (10 ms): 16 ms + 2 x 7 x 2 us + 2 x 1
// x 5 us. The ring: 18.75 ms + 28 x 2 + 2 x 5 us.
TEST(Collectives, NcclAlgoChoosesAmongTheListedAlgorithms) {
  Cluster c = Plain();
  c.intra_node.nvls_bandwidth_gbps = 60;
  const CollectiveGroup two = StridedGroup(c, 0, 1, 16);
  // Default: ring, NVLS, NVLS tree; NVLS tree wins (13.33 ms).
  EXPECT_EQ(CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, two).algorithm,
            CollectiveAlgorithm::kNvlsTree);
  // NCCL_ALGO=Ring,Tree (NVLS off): the tree.
  c.inter_node.nccl_algos = kNcclAlgoRing | kNcclAlgoTree;
  CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, two);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kTree);
  EXPECT_STREQ(CollectiveAlgorithmName(cost.algorithm), "tree");
  EXPECT_EQ(cost.ns, 38'000 + 16'000'000);
  // Four nodes: each byte crosses twice, 2/8 x 800 MB / 10 GB/s = 20 ms, slower than the
  // ring's 1.9375 x 800 MB / 80 GB/s = 19.375 ms + 56 x 2 + 6 x 5 us.
  const CollectiveGroup four = StridedGroup(c, 0, 1, 32);
  cost = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, four);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(cost.ns, 142'000 + 19'375'000);
  // NCCL_ALGO=Ring: the ring alone, 66 us + 18.75 ms.
  c.inter_node.nccl_algos = kNcclAlgoRing;
  cost = CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, two);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(cost.ns, 66'000 + 18'750'000);
  // Inside one node the intra-node link's list decides: NVLS off there gives the ring.
  c.intra_node.nccl_algos = kNcclAlgoRing;
  EXPECT_EQ(CollectiveCostOf(c, Collective::kAllReduce, 800'000'000, OneNodeGroup(8)).algorithm,
            CollectiveAlgorithm::kRing);
  // The gathers are rings whatever the list.
  c.inter_node.nccl_algos = kNcclAlgoRing | kNcclAlgoTree;
  EXPECT_EQ(CollectiveCostOf(c, Collective::kAllGather, 800'000'000, two).algorithm,
            CollectiveAlgorithm::kRing);
}

// NCCL's protocols by hand (NVIDIA/nccl src/graph/tuning.cc at 5067397c,
// constants in sim/collectives.cc): on an a100-80gb node the ring's Simple
// bus bandwidth is 300 x 0.8 = 240 GB/s, LL's min(240 / 2, 87.7) = 87.7,
// LL128's 0.92 x 240 = 220.8; latencies over 14 NVLink steps: Simple 8.4 +
// 14 x 3.4 = 56 us, LL 6.6 + 14 x 0.6 = 15 us, LL128 14 + 14 x 1.9 = 40.6 us.
TEST(Collectives, ProtocolChoiceOnOneA100NodeByHand) {
  const Cluster c = *ClusterPreset("a100-80gb");
  const CollectiveGroup g = OneNodeGroup(8);
  // 64 KiB: V.S = 1.75 x 65536 = 114688 B; LL 15 us + 114688 / 87.7 ns.
  CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 65536, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(cost.ns, 15'000 + 1'308);
  // 4 MiB: V.S = 7340032 B; LL128 40.6 us + 33243 ns beats Simple's 56 +
  // 30.584 us and LL's 15 + 83.695 us.
  cost = CollectiveCostOf(c, Collective::kAllReduce, 4 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl128);
  EXPECT_EQ(cost.ns, 40'600 + 33'243);
  // 64 MiB: Simple, 56 us + 117440512 / 240 ns, under LL128's 40.6 + 531.887 us.
  cost = CollectiveCostOf(c, Collective::kAllReduce, 64 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kSimple);
  EXPECT_EQ(cost.ns, 56'000 + 489'336);
  // Tensor parallelism's path (the intra-node link alone) chooses alike.
  EXPECT_EQ(IntraNodeCollectiveNs(c.intra_node, Collective::kAllReduce, 65536, 8), 16'308);
}

// Across two a100-80gb nodes (16 GPUs): the ring's Simple bus bandwidth is
// the node's NICs, 8 x 25 x 0.95 = 190 GB/s; LL's is capped at llMaxBw 39
// (two nodes), LL128's 0.92 x 190 = 174.8. 28 steps inside nodes at
// max(NVLink, net overhead 1 us) for LL and LL128, 2 across: LL 6.6 + 28 x 1
// + 2 x 2.7 = 40 us, LL128 14 + 28 x 1.9 + 2 x 4 = 75.2 us, Simple 8.4 + 28 x
// 3.4 + 2 x 14 = 131.6 us, x 1.4 for NCCL's ring plateau (a Simple ring
// all-reduce across nodes, ncclTopoGetAlgoTime): 184.24 us.
TEST(Collectives, ProtocolChoiceAcrossTwoA100NodesByHand) {
  Cluster c = *ClusterPreset("a100-80gb");
  const CollectiveGroup g = StridedGroup(c, 0, 1, 16);
  // 256 KiB: V.S = 1.875 x 262144 = 491520 B. LL: 40 us + 12604 ns.
  CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 256 << 10, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl);
  EXPECT_EQ(cost.ns, 40'000 + 12'604);
  // 1 MiB: V.S = 1966080 B. LL128: 75.2 us + 11248 ns (LL 90.413 us).
  cost = CollectiveCostOf(c, Collective::kAllReduce, 1 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl128);
  EXPECT_EQ(cost.ns, 75'200 + 11'248);
  // 128 MiB: Simple, 184.24 us + 251658240 / 190 ns, under LL128's 75.2 us +
  // 251658240 / 174.8 ns = 1514.9 us.
  cost = CollectiveCostOf(c, Collective::kAllReduce, 128 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kSimple);
  EXPECT_EQ(cost.ns, 184'240 + 1'324'518);
  // NCCL_PROTO=Simple on the network link: the 1 MiB all-reduce is Simple,
  // 184.24 us + 1966080 / 190 ns.
  c.inter_node.protocol_ll = c.inter_node.protocol_ll128 = false;
  cost = CollectiveCostOf(c, Collective::kAllReduce, 1 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kSimple);
  EXPECT_EQ(cost.ns, 184'240 + 10'348);
  // The plateau is the all-reduce's alone: the all-gather's Simple ring (LL
  // and LL128 still off) keeps 8.4 + 14 x 3.4 + 14 = 70 us (15 steps, one
  // across nodes), + 0.9375 x 1 MiB / 190 ns.
  cost = CollectiveCostOf(c, Collective::kAllGather, 1 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kSimple);
  EXPECT_EQ(cost.ns, 70'000 + 5'174);
  // A plain cluster file's ring has no plateau (NCCL's constants are not its):
  // Plain()'s 16-GPU ring, 28 x 2 + 2 x 5 us + 1.875 MiB / 80 GB/s.
  EXPECT_EQ(CollectiveNs(Plain(), Collective::kAllReduce, 1 << 20, StridedGroup(Plain(), 0, 1, 16)),
            66'000 + 24'576);
}

// A long ring (nccl#1368's shape): 5 h100-sxm nodes of 8 GPUs with four 400
// Gb/s NICs each (a GPU's share 4 x 50 / 8 = 25 GB/s, the node's 190 GB/s at
// 0.95), NCCL_ALGO=Ring, 1 MiB all-reduce: 78 steps, 8 of them across nodes;
// V.S = 1.95 x 1048576 = 2044724 B. NCCL's formulas (tuning.cc at 5067397c):
//   LL128: 14 + 70 x 1.9 + 8 x 4.0 = 179 us + V.S / (0.92 x 190) = 190.698 us
//   LL:    6.6 + 70 x max(0.6, 1.0) + 8 x 2.7 = 98.2 us + V.S / 20.4 (llMaxBw,
//          more than two nodes) = 198.432 us
//   Simple: (8.4 + 70 x 3.4 + 8 x 14) x 1.4 (plateau) = 501.76 us + V.S / 190
//          = 512.522 us
// NCCL's tuner takes LL128 (NCCL 2.20, the thread's, gives 2 x 5 network steps
// instead of 2 x 4 and still takes LL128); the run measured 354.9 us.
TEST(Collectives, LongRingAcrossFiveNodesByHand) {
  Cluster c = *ClusterPreset("h100-sxm");
  c.nics_per_node = 4;
  c.inter_node.bandwidth_gbps = 50;
  c.intra_node.nccl_algos = c.inter_node.nccl_algos = kNcclAlgoRing;
  const CollectiveGroup g = StridedGroup(c, 0, 1, 40);
  ASSERT_EQ(g.nodes, 5);
  ASSERT_EQ(g.per_node, 8);
  CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 1 << 20, g);
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl128);
  EXPECT_EQ(cost.ns, 179'000 + 11'698);
  c.inter_node.protocol_ll128 = false;
  cost = CollectiveCostOf(c, Collective::kAllReduce, 1 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl);
  EXPECT_EQ(cost.ns, 98'200 + 100'232);
  c.inter_node.protocol_ll = false;
  cost = CollectiveCostOf(c, Collective::kAllReduce, 1 << 20, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kSimple);
  EXPECT_EQ(cost.ns, 501'760 + 10'762);
}

// One GPU per node: NCCL charges the tree's network latency per step (LL 5
// us, LL128 8.5, Simple 14), and the ring's bandwidth is one NIC's, 25 x 0.95
// = 23.75 GB/s (LL: 11.875). Four a100-80gb nodes, 64 KiB all-reduce: 6
// network steps; LL 6.6 + 6 x 5 = 36.6 us + 1.5 x 65536 / 11.875 ns.
TEST(Collectives, OneGpuPerNodeProtocolsPayTheTreeNetworkLatency) {
  const Cluster c = *ClusterPreset("a100-80gb");
  const CollectiveGroup g = StridedGroup(c, 0, 8, 4);
  ASSERT_EQ(g.per_node, 1);
  const CollectiveCost cost = CollectiveCostOf(c, Collective::kAllReduce, 65536, g);
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl);
  EXPECT_EQ(cost.ns, 36'600 + 8'279);
}

// The all-gather (no NVLS) on one h100-sxm node: LL's bandwidth is Hopper's
// llMaxBw, min(360 / 2, 141) = 141 GB/s; 7 steps, 6.6 + 7 x 0.6 = 10.8 us.
// 1 MiB: V.S = 0.875 x 1048576 = 917504 B, 10.8 us + 6508 ns.
TEST(Collectives, SmallAllGatherOnHopperRunsLl) {
  const Cluster c = *ClusterPreset("h100-sxm");
  const CollectiveCost cost = CollectiveCostOf(c, Collective::kAllGather, 1 << 20, OneNodeGroup(8));
  EXPECT_EQ(cost.protocol, CollectiveProtocol::kLl);
  EXPECT_EQ(cost.ns, 10'800 + 6'508);
  EXPECT_STREQ(CollectiveProtocolName(cost.protocol), "LL");
}

TEST(Collectives, BusBandwidthIsNcclTestsDefinition) {
  // nccl-tests: busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for the
  // gathers. 1 GB in 1 ms over 8 GPUs: algbw 1000 GB/s.
  EXPECT_DOUBLE_EQ(BusBandwidthGbps(Collective::kAllReduce, 1'000'000'000, 8, 1'000'000), 1750);
  EXPECT_DOUBLE_EQ(BusBandwidthGbps(Collective::kAllGather, 1'000'000'000, 8, 1'000'000), 875);
}

// One published nccl-tests figure: the cluster it ran on, the collective, the
// message size (nccl-tests' "size" column), the GPUs and nodes, the bus
// bandwidth it reported, and whether the row is held (see below).
struct NcclTestsRow {
  const char* source;
  const char* cluster;  // a preset, or "a3-mega" / "4-nic-a100" below
  Collective op;
  Bytes bytes;
  int gpus;
  int nodes;
  double published_gbps;  // 0: from published_us
  bool held;
  double published_us = 0;  // where the row is read as a time (sizes too small for busbw)
};

// GCP A3 Mega: H100 nodes with 8 x 200 Gb/s GPUDirect-TCPXO NICs instead of
// InfiniBand. GCP's TCPXO NCCL profile (nccl-env-profile.sh) sets
// NCCL_PROTO=Simple, NCCL_ALGO=Ring,Tree and NCCL_NVLS_ENABLE=0, so the
// model runs Simple rings and trees, no NVLS ("a3-mega"). The network step
// latency (427 us) is fitted to the curve below (its large-message intercept,
// 910 us = 8.4 + 2 x 7 x 3.4 + 2 x 427 for the tree): the one constant this
// cluster adds (450 us when the model timed these rows as NVLS tree,
// 910 = 8.4 + 2 x 3.4 + 2 x 447). "a3-mega-ll" is the same cluster with
// NCCL's LL and LL128 left on, recorded to show what they would give.
Cluster A3Mega() {
  Cluster c = *ClusterPreset("h100-sxm");
  c.name = "a3-mega";
  c.inter_node.bandwidth_gbps = 25;
  c.inter_node.step_latency_us = 427;
  c.inter_node.protocol_ll = c.inter_node.protocol_ll128 = false;
  c.intra_node.nccl_algos = c.inter_node.nccl_algos = kNcclAlgoRing | kNcclAlgoTree;
  return c;
}

Cluster A3MegaWithLl() {
  Cluster c = A3Mega();
  c.name = "a3-mega-ll";
  c.inter_node.protocol_ll = c.inter_node.protocol_ll128 = true;
  return c;
}

// HGX A100 nodes with four 200 Gb/s HDR NICs for eight GPUs.
Cluster FourNicA100() {
  Cluster c = *ClusterPreset("a100-80gb");
  c.name = "4-nic-a100";
  c.nics_per_node = 4;
  return c;
}

// One GPU of each node in the run (the others idle): a node of one GPU and
// its nearest NIC. nccl-tests#232 / nccl#1357: H100, the GPU's PIX NIC a
// 400 Gb/s one (four given to NCCL_IB_HCA; one GPU's traffic reaches one
// NIC's ~50 GB/s, the reporter's "busbw is 50").
Cluster OneH100PerNode() {
  Cluster c = *ClusterPreset("h100-sxm");
  c.name = "h100-1-per-node";
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  c.inter_node.bandwidth_gbps = 50;
  return c;
}

// nccl-tests#150: A100 80GB, HDR InfiniBand, one GPU of each node.
Cluster OneA100PerNode() {
  Cluster c = *ClusterPreset("a100-80gb");
  c.name = "a100-1-per-node";
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  return c;
}

// nccl#1368: 8 x H100 nodes with four 400 Gb/s RoCE NICs, NCCL_ALGO=Ring.
Cluster FourNicH100Ring() {
  Cluster c = *ClusterPreset("h100-sxm");
  c.name = "4-nic-h100-ring";
  c.nics_per_node = 4;
  c.inter_node.bandwidth_gbps = 50;
  c.intra_node.nccl_algos = c.inter_node.nccl_algos = kNcclAlgoRing;
  return c;
}

Cluster ClusterFor(const std::string& name) {
  if (name == "a3-mega") return A3Mega();
  if (name == "a3-mega-ll") return A3MegaWithLl();
  if (name == "4-nic-a100") return FourNicA100();
  if (name == "h100-1-per-node") return OneH100PerNode();
  if (name == "a100-1-per-node") return OneA100PerNode();
  if (name == "4-nic-h100-ring") return FourNicH100Ring();
  return *ClusterPreset(name);
}

constexpr Bytes kMiB1 = Bytes{1} << 20;
constexpr Bytes kGiB1 = Bytes{1} << 30;

// Held rows must be within kTolerance of the published bus bandwidth. The
// A3 Mega rows under 16 MB are recorded, not held: its NCCL runs Simple alone
// there under Google's tuner plugin (NCCL_ALGO=Ring,Tree), whose choices the
// model does not have; with NCCL's LL and LL128 on ("a3-mega-ll") they miss
// too (docs/calibration.md).
constexpr double kTolerance = 0.15;

const std::vector<NcclTestsRow>& Rows() {
  static const auto* const rows = new std::vector<NcclTestsRow>{
      {"nccl-tests#212", "h100-sxm", Collective::kAllReduce, 8 * kGiB1, 8, 1, 480, true},
      {"nccl-tests#290", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 8, 1, 476, true},
      {"nccl-tests#212", "h100-sxm", Collective::kAllGather, 8 * kGiB1, 8, 1, 370, true},
      {"nccl#1455", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 2, 1, 370, true},
      {"nccl#1455", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 4, 1, 370, true},
      {"nccl#1455", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 5, 1, 420, true},
      {"nccl#1455", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 6, 1, 440, true},
      {"nccl#1455", "h100-sxm", Collective::kAllReduce, 4 * kGiB1, 7, 1, 460, true},
      {"nccl-tests#309", "h100-sxm", Collective::kAllReduce, 16 * kGiB1, 16, 2, 470, true},
      {"nccl-tests#309", "h100-sxm", Collective::kAllReduce, 16 * kGiB1, 32, 4, 366, true},
      {"nccl#1218", "h100-sxm", Collective::kAllGather, 2 * kGiB1, 256, 32, 200, false},
      {"nccl#1048", "a100-80gb", Collective::kAllReduce, 4 * kGiB1, 8, 1, 232.5, true},
      {"alayanew guide", "a100-80gb", Collective::kAllReduce, 8 * kGiB1, 8, 1, 240, true},
      {"nccl-tests#100", "4-nic-a100", Collective::kAllReduce, 8 * kGiB1, 16, 2, 91, true},
      {"nccl#1048", "4-nic-a100", Collective::kAllReduce, 4 * kGiB1, 16, 2, 86, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 1 * kMiB1, 16, 2, 9.68, false},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 2 * kMiB1, 16, 2, 15.48, false},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 4 * kMiB1, 16, 2, 21.57, false},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 8 * kMiB1, 16, 2, 27.50, false},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 16 * kMiB1, 16, 2, 32.18, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 32 * kMiB1, 16, 2, 59.36, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 64 * kMiB1, 16, 2, 99.74, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 256 * kMiB1, 16, 2, 213.19, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 1 * kGiB1, 16, 2, 297.86, true},
      {"a3mega log", "a3-mega", Collective::kAllReduce, 8 * kGiB1, 16, 2, 338.82, true},
      {"a3mega log", "a3-mega-ll", Collective::kAllReduce, 1 * kMiB1, 16, 2, 9.68, false},
      {"a3mega log", "a3-mega-ll", Collective::kAllReduce, 4 * kMiB1, 16, 2, 21.57, false},
      {"a3mega log", "a3-mega-ll", Collective::kAllReduce, 8 * kMiB1, 16, 2, 27.50, false},
      {"a3mega log", "a3-mega-ll", Collective::kAllReduce, 16 * kMiB1, 16, 2, 32.18, false},
      // Held out: small and mid sizes on InfiniBand / RoCE, each run's algorithm as forced.
      {"nccl-tests#232", "h100-1-per-node", Collective::kAllReduce, 2 * kMiB1, 2, 2, 18.53, false},
      {"nccl-tests#232", "h100-1-per-node", Collective::kAllReduce, 4 * kMiB1, 2, 2, 27.16, false},
      {"nccl-tests#232", "h100-1-per-node", Collective::kAllReduce, 8 * kMiB1, 2, 2, 36.24, true},
      {"nccl-tests#232", "h100-1-per-node", Collective::kAllReduce, 16 * kMiB1, 2, 2, 39.90, true},
      {"nccl-tests#232", "h100-1-per-node", Collective::kAllReduce, 32 * kMiB1, 2, 2, 41.31, true},
      {"nccl-tests#150", "a100-1-per-node", Collective::kAllReduce, 8, 2, 2, 0, false, 19.90},
      {"nccl#1368", "4-nic-h100-ring", Collective::kAllReduce, 1 * kMiB1, 40, 5, 5.76, false},
      {"nccl#1368", "4-nic-h100-ring", Collective::kAllReduce, 1 * kGiB1, 40, 5, 190, true},
  };
  return *rows;
}

TEST(CollectivesCalibration, NcclTestsBusBandwidthWithinFifteenPercent) {
  for (const NcclTestsRow& row : Rows()) {
    const Cluster cluster = ClusterFor(row.cluster);
    const CollectiveGroup group = StridedGroup(cluster, 0, 1, row.gpus);
    ASSERT_EQ(group.nodes, row.nodes) << row.source;
    const CollectiveCost cost = CollectiveCostOf(cluster, row.op, row.bytes, group);
    const double predicted = BusBandwidthGbps(row.op, row.bytes, row.gpus, cost.ns);
    const double published = row.published_us > 0 ? BusBandwidthGbps(row.op, row.bytes, row.gpus,
                                                                     UsToNs(row.published_us))
                                                  : row.published_gbps;
    const double error = predicted / published - 1;
    std::printf(
        "| %s | %s | %s | %lld B | %d GPUs, %d nodes | %.4g | %.4g (%s, %s; %.1f us) | "
        "%+.1f%%%s |\n",
        row.source, row.cluster, CollectiveName(row.op), static_cast<long long>(row.bytes),
        row.gpus, row.nodes, published, predicted, CollectiveAlgorithmName(cost.algorithm),
        CollectiveProtocolName(cost.protocol), NsToUs(cost.ns), 100 * error,
        row.held ? "" : " (recorded)");
    if (row.held) {
      EXPECT_LE(std::abs(error), kTolerance)
          << row.source << " " << row.cluster << " " << CollectiveName(row.op) << " " << row.bytes
          << " B on " << row.gpus << " GPUs: published " << row.published_gbps
          << " GB/s, predicted " << predicted;
    }
  }
}

}  // namespace
}  // namespace pipecast
