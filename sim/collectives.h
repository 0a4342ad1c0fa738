// Collectives as NCCL runs them: the one model of what an all-reduce,
// all-gather or reduce-scatter costs on a cluster (docs/simulator.md,
// "Collectives"). Data-parallel all-reduces, ZeRO/FSDP gathers and
// reduce-scatters, tensor-parallel collectives and DualPipe's copy reduce all
// time themselves here; point-to-point pipeline transfers use
// Cluster::LinkBetween.
//
// A collective of S bytes (the unsharded size: the all-reduced buffer, the
// all-gather's output, the reduce-scatter's input) over n GPUs in N nodes,
// p = n / N GPUs in each, moves V·S bytes through each GPU, V = 2(n−1)/n for
// an all-reduce and (n−1)/n otherwise (nccl-tests' "bus bandwidth" is
// V·S / time). Each algorithm NCCL has for it costs
//
//   time = fixed latency + V·S / bus bandwidth
//
// and the fastest one is taken, as NCCL's tuner does (src/graph/tuning.cc in
// NVIDIA/nccl has the same structure; the code here is pipecast's own):
//   - ring (every collective): 2(n−1) steps for an all-reduce, n−1 otherwise,
//     of which 2(N−1) (or N−1) cross nodes, each paying its link's
//     step_latency_us, plus the collective_latency_us once. Bus bandwidth:
//     the slowest of NVLink (intra_node bandwidth × efficiency, when p > 1)
//     and the network (when N > 1): the p GPUs' share of the node's NICs ×
//     the NIC's efficiency. The rings of a node run side by side, each leaving
//     through its own NIC (rail-optimized), so the network term is the p
//     GPUs' NICs together, not one NIC.
//   - NVLS (all-reduce inside one node, when intra_node has
//     nvls_bandwidth_gbps, p >= 2): the NVSwitch reduces and multicasts:
//     S / nvls_bandwidth_gbps, latency collective_latency_us + 2 steps.
//   - NVLS tree (all-reduce over nodes with NVLS, p >= 2): NVLS inside each
//     node, then each GPU's 1/p of the buffer all-reduced across the nodes
//     over its NICs, pipelined, so the slower of the two: S / nvls_bandwidth
//     and k·S / p / (its NIC share × efficiency), k = 1 for two nodes (they
//     exchange once), 2 for more (NCCL's double binary tree sends each byte
//     up and down); latency collective_latency_us + 2 NVLink steps +
//     2·ceil(log2 N) network steps.
//   - tree (all-reduce over nodes, only where the group's link lists "Tree"
//     in nccl_algo): NCCL's tree without NVLS, a chain through each node's
//     p GPUs over NVLink and a tree across nodes: the slower of 2·S over
//     NVLink (each GPU sends the buffer up the chain and down it again;
//     none with p = 1) and k·S / p over its NIC share, k as for NVLS tree;
//     latency collective_latency_us + 2(p−1) NVLink steps + 2·ceil(log2 N)
//     network steps; Simple only.
// A link's nccl_algo (Link::nccl_algos, NCCL_ALGO; "NVLS"/"NVLSTree" left
// out = NCCL_NVLS_ENABLE=0) limits the algorithms for a group that uses it
// (the intra-node link's inside a node, the inter-node link's across nodes);
// Ring is always among them. Without it the model chooses among ring, NVLS
// and NVLS tree, not the plain tree: NCCL's default tuner would also weigh
// the tree, which the model leaves to cluster files that name it.
// Each ring also runs in NCCL's three protocols, and the fastest (algorithm,
// protocol) pair is taken, as ncclTopoTuneModel / ncclTopoGetAlgoTime do
// (NVIDIA/nccl src/graph/tuning.cc at 5067397c2676d5aed50042fc39e5c8ee96eb0027,
// constants in collectives.cc):
//   - Simple: the ring above, the links' latencies and bus bandwidth as given.
//   - LL128: bus bandwidth 0.92 x Simple's; latency NCCL's LL128 base 14 us,
//     1.9 us per NVLink step, 4.0 us per network step (8.5 with one GPU
//     per node).
//   - LL: bus bandwidth half Simple's, at most NCCL's llMaxBw (one node:
//     141 GB/s on Hopper, taken where the node has NVLS, else Ampere's 87.7;
//     39.0 for two nodes, 20.4 for more, x86 Intel hosts); latency base
//     6.6 us, 0.6 us per NVLink step, 2.7 per network step (5.0 with one GPU
//     per node).
//   Across nodes a step inside a node costs at least NCCL's net overhead (1 us, 3 for Simple), and
//   a Simple ring all-reduce's latency is x1.4 (ncclTopoGetAlgoTime's ring plateau; from 64 bytes
//   per rank, no channel count). A link's fixed and NVLink-step latencies above NCCL's Simple
//   defaults (8.4, 3.4 us) shift LL and LL128 alike; a network step above 14 us is the network's
//   own latency (latencyInter), paid twice by Simple, once by LL and LL128. NVLS and NVLS tree are
//   Simple only. LL, LL128 and the plateau apply where the group's link has collective_latency_us
//   (presets). Not modelled: NCCL's tree among the defaults (its bandwidth needs channel counts),
//   the per-channel LL128 cap (36.7 GB/s a channel on Hopper, 20 on Ampere). On long rings NCCL's
//   own formulas, followed here, miss small all-reduces ~2x fast (nccl#1368; docs/calibration.md).
// A link's defaults (efficiency 1, step latency = latency_us, no fixed
// latency, no NVLS) give the plain ring this replaced, so a cluster file
// without the collective fields times exactly as before (Simple alone).
//
// Stateless functions, safe from several threads. Units: ns, bytes.
#ifndef PIPECAST_SIM_COLLECTIVES_H_
#define PIPECAST_SIM_COLLECTIVES_H_

#include <optional>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "sim/cluster.h"

namespace pipecast {

enum class Collective { kAllReduce, kAllGather, kReduceScatter };
// "all-reduce", "all-gather", "reduce-scatter".
const char* CollectiveName(Collective op);

enum class CollectiveAlgorithm { kNone, kRing, kNvls, kNvlsTree, kTree };
// "none" (one GPU), "ring", "NVLS", "NVLS tree", "tree".
const char* CollectiveAlgorithmName(CollectiveAlgorithm algorithm);

// The GPUs of one collective: `ranks` of them over `nodes` nodes, at least
// `per_node` in each (the node with the fewest sets the network's share).
struct CollectiveGroup {
  int ranks = 1;
  int nodes = 1;
  int per_node = 1;
};
// The group of GPUs `gpus` (distinct global GPU indices) on `cluster`.
CollectiveGroup GroupOf(const Cluster& cluster, const std::vector<int>& gpus);
// The group of GPUs first + i·stride for i < count (a data-parallel group:
// the same rank of every replica).
CollectiveGroup StridedGroup(const Cluster& cluster, int first, int stride, int count);
// `ranks` GPUs of one node (tensor parallelism).
CollectiveGroup OneNodeGroup(int ranks);

// NCCL's protocols: Simple (the bulk one), LL (8-byte stores, half of them
// flags) and LL128 (128-byte lines, 8 bytes of each a flag).
enum class CollectiveProtocol { kSimple, kLl, kLl128 };
// "Simple", "LL", "LL128".
const char* CollectiveProtocolName(CollectiveProtocol protocol);

struct CollectiveCost {
  TimeNs ns = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kNone;
  CollectiveProtocol protocol = CollectiveProtocol::kSimple;
};

// `pieces` collectives of one kind over `group` whose sizes sum to `bytes`
// (ZeRO-3 gathers a stage layer by layer): each pays the fixed latency, the
// bytes pay the bus bandwidth once; the algorithm is the fastest for
// bytes / pieces. 0 for one GPU or no bytes. REQUIRES: pieces >= 1.
CollectiveCost CollectiveCostOf(const Cluster& cluster, Collective op, Bytes bytes,
                                const CollectiveGroup& group, int pieces = 1);
TimeNs CollectiveNs(const Cluster& cluster, Collective op, Bytes bytes,
                    const CollectiveGroup& group, int pieces = 1);
// The same inside one node, from its intra-node link alone (tensor
// parallelism's collectives, whose options carry only that link).
TimeNs IntraNodeCollectiveNs(const Link& intra_node, Collective op, Bytes bytes, int ranks,
                             int pieces = 1);

// --- Expert parallelism's all-to-all (docs/simulator.md "Expert
// parallelism"). Each MoE layer's forward dispatches every token to the GPUs
// holding its top-k experts and combines the results back; the backward
// does both again, so 2 all-to-alls each way per micro-batch. The ep GPUs of
// a group are laid out as Megatron-LM lays them (rank order tp-cp-ep-dp-pp:
// the etp x ep GPUs of a group consecutive), so a group of ep ranks spans
// ceil(etp x ep / gpus_per_node) nodes with gpus_per_node / etp of its ranks
// in each (all ep when it fits one node).
//
// Bytes are counted as DeepEP's benchmarks count them
// (deepseek-ai/DeepEP tests/test_intranode.py, test_internode.py at
// 567632dd): inside a node, one copy per (token, destination rank),
// the sending rank included; across nodes, one copy per (token, destination
// node), the sending node included (DeepEP sends a token once to a node and
// forwards it over NVLink there). The expected number of distinct ranks
// (nodes) a token's top-k experts fall on, the experts spread evenly:
//   R = n (1 - C(E - E/n, k) / C(E, k))
// for n ranks (nodes) of E/n experts each; with node-limited routing (a
// token's experts in at most M of G expert groups, DeepSeek-V3's
// topk_group / n_group) a token reaches at most L = min(N, M) nodes when
// the G groups fill the N nodes evenly (G >= N), else min(N, M N / G), and
// then R = L (1 - C(E_L - E/N, k) / C(E_L, k)), E_L = L E / N.
// Bandwidths are DeepEP's published ones (README at 567632dd, H800, one
// 400 Gb/s CX7 NIC per GPU): inside a node dispatch 153 and combine
// 158 GB/s of H800 NVLink's ~160 GB/s, taken as shares 153/160 and 158/160
// of the intra-node link's bandwidth x efficiency; across nodes dispatch
// 43, 58, 51 GB/s and combine 43, 57, 50 GB/s at ep = 16, 32, 64 of the
// NIC's 50 GB/s, taken as shares of the GPU's network bandwidth
// (Cluster::NetworkGbpsPerGpu), the nearest published ep below (16 for
// fewer, 64 for more). Each all-to-all also pays the link's
// collective_latency_us.

// Megatron-LM's NCCL all-to-all dispatcher (--moe-token-dispatcher-type
// alltoall; megatron/core/transformer/moe/token_dispatcher.py,
// MoEAlltoAllTokenDispatcher, at d98e8a64) sends what DeepEP deduplicates:
// its first permutation makes one row per (token, expert) pair
// (num_out_tokens = tokens x top-k when dropless; capacity x experts, the
// same at capacity factor 1, when padded) and all_to_all sends each row to
// the rank holding its expert, so one GPU sends k x hidden x bytes per
// element per token each way, whatever ep is. Of those rows, (per_node - 1)
// / ep go to the other ranks of its node over NVLink and (ep - per_node) /
// ep to other nodes over its NIC (experts spread evenly); its own ep-th is a
// local copy, not charged. NCCL runs the two at once, so
//   time = latency + max(NVLink rows / NVLink bandwidth x efficiency,
//                        network rows / (the GPU's NIC share x efficiency))
// at the rates the collectives above use (no DeepEP share); dispatch and
// combine alike. Latency: the collective_latency_us of the link the
// group's widest hop crosses.
//
// Megatron-LM's all-gather dispatcher (--moe-token-dispatcher-type
// allgather, Megatron-LM's own default; token_dispatcher.py,
// MoEAllGatherTokenDispatcher, read at 0014f137) routes nothing over the
// wire: token_permutation all-gathers, over the expert-tensor x expert
// group of g = etp x ep GPUs (tp_ep_group), the routing map ([tokens,
// experts] bool), the probs ([tokens, experts], the activations' dtype) and
// the hidden states ([tokens, hidden]); each GPU keeps the rows of its local
// experts, computes them, and token_unpermutation reduce-scatters the
// [g x tokens, hidden] output back over the same group (in the probs'
// dtype). Every token moves whatever its routing: one GPU receives
// (g - 1) x hidden x bytes per element per local token in the dispatch,
// plus (g - 1) x experts x (bytes per element + 1) of routing map and probs,
// and sends (g - 1) x hidden x bytes per element in the combine. Timed as
// those collectives through the model above (three all-gathers, then one
// reduce-scatter, each paying its fixed latency) on the group of g GPUs laid
// out as the ep group (ExpertGroupOf, per_node x etp GPUs in each node).
//
// Its gathered buffers, g x tokens rows of hidden states, routing map and
// probs, (g x tokens) x (hidden x bytes per element + experts x (bytes per
// element + 1)) bytes, are live from the first all-gather to the
// permutation and, as the [g x tokens, hidden] unpermuted output, again
// before the reduce-scatter: the layer's transient workspace
// (ExpertAllToAll::workspace_bytes; the others' buffers are NCCL's or
// DeepEP's, in the runtime reserve).
//
// Capacity (Megatron-LM's --moe-expert-capacity-factor C, MoeRouting::
// capacity_factor; router.py apply_router_token_dropping and
// token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, at d98e8a64):
// the all-to-all dispatcher padded to capacity
// (--moe-pad-expert-input-to-capacity) sends capacity x experts rows, C x
// tokens x k / E for each of the E experts: C x k rows per token (the ceil
// of capacity ignored), `rows_per_route` = C. Dropping without padding
// sends the routes the router kept, at most C x tokens x k (each expert
// keeps at most C x its mean) and at most tokens x k: min(1, C), exact for
// balanced routing, an upper bound otherwise. DeepEP sends the kept routes
// of each token (dropped ones masked out, setup_metadata), never padding
// (Megatron-LM refuses --moe-pad-expert-input-to-capacity with it): its
// dropless count, an upper bound. The all-gather dispatcher gathers every
// token whatever the capacity: unchanged. Rows per route therefore apply
// to the all-to-all dispatcher only, its etp collectives included
// (ExpertRowsPerRoute, sim/model.h).
//
// Expert tensor parallelism (etp > 1: each expert's fc1 split by columns and
// fc2 by rows over etp consecutive GPUs) as each dispatcher runs it
// (token_dispatcher.py at d98e8a64):
//   - alltoall (MoEAlltoAllTokenDispatcher): the ep all-to-all runs among the
//     GPUs of one etp rank; then dispatch_postprocess all-gathers the
//     received rows and their probs over the etp group (tp_group =
//     expt_tp), and combine_preprocess reduce-scatters the experts' partial
//     outputs back over it. Both sit inside routed_experts_compute, on the
//     compute stream. A GPU receives k x tokens rows in the all-to-all
//     (experts spread evenly), so the all-gather's S is etp x k x tokens
//     rows of hidden x bytes per element (its probs one element a row),
//     the reduce-scatter's the same hidden rows; timed through the
//     collective model on the etp GPUs (inside a node when etp <= its
//     GPUs). At ep = 1 only these remain (the all-to-all of one GPU is
//     none).
//   - deepep (MoEFlexTokenDispatcher): one all-to-all over the etp x ep
//     GPUs (tp_ep_group), each token sent to every etp GPU of each rank
//     holding one of its experts (the routing map expanded etp times,
//     router_topk = etp x k), the combine summing the etp partial outputs:
//     inside a node etp x R copies per token, across nodes R_N as above
//     over the nodes of the etp x ep GPUs, DeepEP's row at etp x ep ranks.
//     No separate collective.
//   - allgather: already over the etp x ep group (above).
enum class ExpertDispatcher { kDeepEp, kAllToAll, kAllGather };
// "deepep", "alltoall" or "allgather".
const char* ExpertDispatcherName(ExpertDispatcher dispatcher);
// "deepep", "alltoall" or "allgather"; nullopt for anything else.
std::optional<ExpertDispatcher> ParseExpertDispatcher(std::string_view name);

// Expected distinct groups (ranks or nodes) of E / n experts each that one
// token's k experts fall on, out of n: n (1 - C(E - E/n, k) / C(E, k)).
// REQUIRES: n >= 1 divides experts; 1 <= k <= experts.
double DistinctGroupsPerToken(int experts, int top_k, int groups);

struct ExpertAllToAllGroup {
  int ranks = 1;          // ep
  int nodes = 1;          // nodes the ep ranks span
  int per_node = 1;       // ep ranks in each node
  int tensor = 1;         // etp: each ep rank's expert split over etp consecutive GPUs
  int gpus_per_node = 1;  // the node's GPUs: the etp group spans ceil(etp / them) nodes
};
// The ep group of (ep, etp) on a node of `gpus_per_node` GPUs, laid out as
// above.
ExpertAllToAllGroup ExpertGroupOf(int expert_parallel, int expert_tensor_parallel,
                                  int gpus_per_node);

// One MoE layer's dispatch and combine on one GPU for `tokens` tokens.
struct ExpertAllToAll {
  // Bytes per token each way: DeepEP's count (above), k x hidden x bytes
  // per element for the all-to-all dispatcher, or (g - 1) x hidden x bytes
  // per element for the all-gather dispatcher (its hidden states alone).
  double bytes_per_token = 0;
  // The all-gather dispatcher's routing map and probs, dispatch only:
  // (g - 1) x experts x (bytes per element + 1). 0 for the others.
  double routing_bytes_per_token = 0;
  // Of them, what crosses NVLink and what crosses the network: DeepEP's all
  // over NVLink inside one node and all over the network across nodes; the
  // all-to-all dispatcher's rows to the other ranks of the node and to other
  // nodes (its own rows are in neither); of the all-gather dispatcher's
  // hidden rows, the GPU's NIC share of the other nodes' tokens, which enter
  // its node once ((g - per_node) / per_node rows), and the rest.
  double nvlink_bytes_per_token = 0;
  double network_bytes_per_token = 0;
  bool across_nodes = false;
  TimeNs dispatch_ns = 0;
  TimeNs combine_ns = 0;
  // The backward's collectives, the adjoints of those the forward's autograd
  // records: the dispatch's and the combine's again for DeepEP and the
  // all-to-all dispatcher; for the all-gather dispatcher an all-gather of the
  // output's gradient (the combine's reduce-scatter's adjoint) and
  // reduce-scatters of the hidden states' and the probs' gradients (the
  // routing map is gathered without grad: no adjoint).
  TimeNs backward_ns = 0;
  // The all-to-all dispatcher's etp collectives (0 at etp = 1 and for the
  // other dispatchers): hidden bytes a GPU receives in the all-gather per
  // token it dispatches, (etp - 1) x k x rows per route x hidden x bytes per
  // element (as many leave it in the reduce-scatter); the all-gathers of the
  // rows and their probs, and the reduce-scatter of the partial outputs.
  double etp_bytes_per_token = 0;
  TimeNs etp_gather_ns = 0;
  TimeNs etp_scatter_ns = 0;
  // etp > 1, any dispatcher: the bytes a GPU's experts keep beyond etp = 1's
  // per micro-batch, (etp - 1) x k x rows per route (the all-to-all
  // dispatcher's; 1 for the others) x tokens x hidden x bytes per element.
  // Each GPU's experts run etp x the token copies (the etp group's rows,
  // gathered or sent to it), each at F/etp: fc1's input and fc2's output
  // gradient are whole rows, kept for the weight gradient, so the
  // activations grow by this and the weight-gradient phase by twice it; a and
  // gelu(a), F/etp wide, stay what etp = 1 keeps.
  Bytes etp_kept_bytes = 0;
  // The all-gather dispatcher's gathered buffers (above), bytes on one GPU
  // while the layer's dispatch or combine runs; 0 for the others.
  Bytes workspace_bytes = 0;
};
// Zero at ep = etp = 1. `rows_per_route`: the all-to-all dispatcher's rows
// per (token, expert) route under a capacity factor (above; 1 dropless),
// also the rows its etp collectives gather; ignored by the other
// dispatchers. REQUIRES: ep divides experts; tokens >= 0; rows_per_route > 0.
ExpertAllToAll ExpertAllToAllOf(const Link& intra_node, const Link& inter_node,
                                double network_gbps_per_gpu, const ExpertAllToAllGroup& group,
                                int experts, int top_k, int expert_groups, int topk_groups,
                                int64_t hidden, int bytes_per_element, double tokens,
                                ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp,
                                double rows_per_route = 1);

// nccl-tests' bus bandwidth, GB/s: V·bytes / ns (V above). 0 for ns <= 0 or
// one GPU.
double BusBandwidthGbps(Collective op, Bytes bytes, int ranks, TimeNs ns);

}  // namespace pipecast

#endif  // PIPECAST_SIM_COLLECTIVES_H_
