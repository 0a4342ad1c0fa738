#include "validate/internal/p2p_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <set>
#include <tuple>

#include "base/text_table.h"

namespace pipecast::validate {
namespace {

std::string What(const Message& m) {
  return fmt::format("the {} of {}{}{}", m.gradient ? "gradient" : "activation", m.src_stage,
                     m.gradient ? "B" : "F", m.microbatch);
}

}  // namespace

const char* RouteName(P2pRoute route) {
  switch (route) {
    case P2pRoute::kNccl:
      return "NCCL";
    case P2pRoute::kDeviceCopy:
      return "device-to-device copy";
    case P2pRoute::kHostStaged:
      return "host-staged";
  }
  return "?";
}

Result<std::vector<RankPlacement>> PlaceRanks(int ranks, int gpus_per_node,
                                              const std::vector<int>& node_of_process) {
  if (ranks < 1 || gpus_per_node < 1) {
    return Status::InvalidArgument(
        fmt::format("cannot place {} ranks on {} GPUs per machine", ranks, gpus_per_node));
  }
  const int processes = static_cast<int>(node_of_process.size());
  if (processes != 1 && processes != ranks) {
    return Status::InvalidArgument(fmt::format("{} for {}: run one process, or mpirun -np {}",
                                               Count(processes, "process", "processes"),
                                               Count(ranks, "rank", "ranks"), ranks));
  }
  std::vector<RankPlacement> out(ranks);
  std::map<int, int> next_local;  // node -> ranks placed on it so far
  for (int r = 0; r < ranks; ++r) {
    const int p = processes == 1 ? 0 : r;
    out[r].process = p;
    out[r].node = node_of_process[p];
    out[r].gpu = next_local[out[r].node]++ % gpus_per_node;
  }
  return out;
}

Status CheckTensorGroupsOnDistinctGpus(const std::vector<RankPlacement>& placement,
                                       int tensor_parallel) {
  const int t = std::max(tensor_parallel, 1);
  for (size_t w = 0; w < placement.size(); ++w) {
    const size_t first = w - w % static_cast<size_t>(t);
    for (size_t v = first; v < w; ++v) {
      const RankPlacement &a = placement[v], &b = placement[w];
      if (a.node == b.node && a.gpu == b.gpu) {
        return Status::FailedPrecondition(fmt::format(
            "tensor ranks {} and {} of stage {} would share GPU {}: the NCCL all-reduce of a "
            "stage's {} tensor-parallel workers needs each on its own GPU; give the machine at "
            "least {} GPUs, or validate this plan on --backend cpu or mpi",
            v % t, w % t, w / t, b.gpu, t, t));
      }
    }
  }
  return Status::Ok();
}

Result<P2pRoute> ChooseRoute(int a, int b, const RankPlacement& pa, const RankPlacement& pb,
                             bool nccl_available) {
  const bool same_gpu = pa.node == pb.node && pa.gpu == pb.gpu;
  const bool same_process = pa.process == pb.process;
  if (same_gpu && same_process) return P2pRoute::kDeviceCopy;
  if (same_gpu) {
    return Status::FailedPrecondition(fmt::format(
        "ranks {} and {} run in different processes on the same GPU {} (NCCL cannot put two "
        "ranks of a communicator on one GPU, and CUDA IPC is not implemented): run the cuda "
        "backend as one process (without mpirun) to share GPUs, or start at most as many "
        "processes per machine as it has GPUs",
        a, b, pa.gpu));
  }
  if (nccl_available) return P2pRoute::kNccl;
  if (same_process) return P2pRoute::kHostStaged;
  return Status::FailedPrecondition(fmt::format(
      "ranks {} and {} run in different processes and NCCL could not be loaded: install NCCL "
      "(libnccl.so.2) or run the cuda backend as one process (without mpirun)",
      a, b));
}

std::map<DirectedPair, std::vector<PairMessage>> SendSequences(const ExecPlan& plan) {
  std::map<DirectedPair, std::vector<PairMessage>> out;
  for (const ExecStage& st : plan.per_rank) {
    for (const ExecOp& op : st.ops) {
      if (!op.send.present()) continue;
      out[{st.rank, op.send.peer_rank}].push_back(
          PairMessage{op.send.tag, op.send.bytes, What(op.send)});
    }
  }
  return out;
}

std::map<DirectedPair, std::vector<PairMessage>> CopySendSequences(const ExecPlan& plan) {
  std::map<DirectedPair, std::vector<PairMessage>> out;
  for (const ExecStage& st : plan.per_rank) {
    for (const CopyExchange& x : st.copy_exchanges) {
      out[{st.rank, x.peer_rank}].push_back(
          PairMessage{x.send_tag, x.bytes, fmt::format("the copy gradients of rank {}", st.rank)});
    }
  }
  return out;
}

Result<std::map<DirectedPair, P2pRoute>> RouteTable(const ExecPlan& plan,
                                                    const std::vector<RankPlacement>& placement,
                                                    bool nccl_available) {
  return RouteTable(SendSequences(plan), placement, nccl_available);
}

Result<std::map<DirectedPair, P2pRoute>> RouteTable(
    const std::map<DirectedPair, std::vector<PairMessage>>& sequences,
    const std::vector<RankPlacement>& placement, bool nccl_available) {
  std::map<DirectedPair, P2pRoute> out;
  for (const auto& [pair, seq] : sequences) {
    PIPECAST_ASSIGN_OR_RETURN(P2pRoute route,
                              ChooseRoute(pair.first, pair.second, placement.at(pair.first),
                                          placement.at(pair.second), nccl_available));
    out[pair] = route;
  }
  return out;
}

std::vector<PairMessage> ConsumeSequence(const ExecPlan& plan, int src, int dst) {
  std::vector<PairMessage> out;
  for (const ExecOp& op : plan.per_rank.at(dst).ops) {
    if (op.recv.present() && op.recv.peer_rank == src) {
      out.push_back(PairMessage{op.recv.tag, op.recv.bytes, What(op.recv)});
    }
  }
  return out;
}

namespace {

// SimulatePosting's replay: each rank's host runs its ops in order, posting
// a receive on its stream where an op first needs it and waiting for it;
// the streams match a send and a receive at their heads.
class PostingReplay {
 public:
  PostingReplay(const ExecPlan& plan, StreamLayout layout)
      : plan_(plan),
        layout_(layout),
        pc_(plan.ranks, 0),
        waiting_k_(plan.ranks, -1),
        deferred_(plan.ranks) {
    for (const auto& [pair, seq] : SendSequences(plan)) {
      receivers_.emplace(pair, InOrderReceiver<size_t>(seq));
    }
  }

  PostingReport Run() {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < plan_.ranks; ++r) {
        if (!RunHost(r, &progress)) return report_;
      }
      MatchStreams(&progress);
    }
    ReportStuck();
    return report_;
  }

 private:
  // A comm op on a stream: a send or a receive of the pair's k-th message.
  struct CommOp {
    bool send = false;
    DirectedPair pair;
    size_t k = 0;
  };
  using StreamKey = std::tuple<int, int, int>;  // per pair: (send?, a, b); per rank: (rank, -1, -1)

  StreamKey StreamOf(bool send, const DirectedPair& p) const {
    if (layout_ == StreamLayout::kStreamPerRank) return {send ? p.first : p.second, -1, -1};
    return {send ? 1 : 0, p.first, p.second};
  }

  // Runs rank r's host until it waits for a receive that has not completed.
  // False where a receive cannot be posted (report_.stuck says why).
  bool RunHost(int r, bool* progress) {
    const std::vector<ExecOp>& ops = plan_.per_rank[r].ops;
    while (pc_[r] < ops.size()) {
      const ExecOp& op = ops[pc_[r]];
      if (op.recv.present()) {
        const DirectedPair pair{op.recv.peer_rank, r};
        if (waiting_k_[r] < 0) {
          Result<size_t> k = receivers_.at(pair).Take(
              op.recv.tag, op.recv.bytes, [&](const PairMessage&) -> Result<size_t> {
                const size_t k = index_of_posted_[pair]++;
                streams_[StreamOf(false, pair)].push_back(CommOp{false, pair, k});
                return k;
              });
          if (!k.ok()) {
            report_.stuck = k.status().message();
            return false;
          }
          report_.max_buffered = std::max(report_.max_buffered, receivers_.at(pair).buffered());
          waiting_k_[r] = static_cast<int64_t>(*k);
          *progress = true;
        }
        if (!done_recvs_.count({pair.first, pair.second, static_cast<size_t>(waiting_k_[r])})) {
          break;
        }
        waiting_k_[r] = -1;
      }
      // An overlapped pair's forward sends when the pair ends, after its backward's receive
      // and before its backward's send (runtime.h).
      auto issue = [&](const Message& m) {
        const DirectedPair pair{r, m.peer_rank};
        streams_[StreamOf(true, pair)].push_back(CommOp{true, pair, sent_[pair]++});
      };
      if (op.action.overlapped && op.action.kind == OpKind::kForward) {
        deferred_[r] = op.send;
      } else {
        if (deferred_[r].present()) issue(deferred_[r]);
        deferred_[r] = Message{};
        if (op.send.present()) issue(op.send);
      }
      ++pc_[r];
      *progress = true;
    }
    return true;
  }

  // A send and a receive at the heads of their streams match.
  void MatchStreams(bool* progress) {
    for (auto& [key, q] : streams_) {
      if (q.empty() || !q.front().send) continue;
      const CommOp s = q.front();
      auto& peer = streams_[StreamOf(false, s.pair)];
      if (peer.empty() || peer.front().send || peer.front().pair != s.pair ||
          peer.front().k != s.k) {
        continue;
      }
      peer.pop_front();
      streams_[key].pop_front();
      done_recvs_.insert({s.pair.first, s.pair.second, s.k});
      *progress = true;
    }
  }

  // Whether every op ran and every stream emptied; where not, what waits.
  void ReportStuck() {
    report_.completes = true;
    for (int r = 0; r < plan_.ranks; ++r) {
      if (pc_[r] < plan_.per_rank[r].ops.size()) {
        report_.completes = false;
        const ExecOp& op = plan_.per_rank[r].ops[pc_[r]];
        report_.stuck +=
            fmt::format("{}rank {} waits in {} for {}", report_.stuck.empty() ? "" : "; ", r,
                        ActionName(op.action), What(op.recv));
      }
    }
    for (const auto& [key, q] : streams_) {
      if (!q.empty()) {
        report_.completes = false;
        const CommOp& c = q.front();
        report_.stuck += fmt::format(
            "{}a stream of rank {} is blocked in the {} of message {} "
            "from rank {} to rank {}",
            report_.stuck.empty() ? "" : "; ", c.send ? c.pair.first : c.pair.second,
            c.send ? "send" : "receive", c.k, c.pair.first, c.pair.second);
      }
    }
  }

  const ExecPlan& plan_;
  const StreamLayout layout_;
  std::map<DirectedPair, InOrderReceiver<size_t>> receivers_;
  std::map<DirectedPair, size_t> index_of_posted_;  // next k to post, per pair
  std::map<StreamKey, std::deque<CommOp>> streams_;
  std::set<std::tuple<int, int, size_t>> done_recvs_;  // (a, b, k)
  std::map<DirectedPair, size_t> sent_;                // sends issued per pair
  std::vector<size_t> pc_;
  std::vector<int64_t> waiting_k_;  // the receive the host waits for
  std::vector<Message> deferred_;   // a pair's forward's send, until the pair ends
  PostingReport report_;
};

}  // namespace

PostingReport SimulatePosting(const ExecPlan& plan, StreamLayout layout) {
  return PostingReplay(plan, layout).Run();
}

PostingReport SimulateCopyReduce(const ExecPlan& plan, CopyPosting posting) {
  // An operation of a step: the k-th send (or receive) of a directed pair.
  struct CommOp {
    bool send = false;
    DirectedPair pair;
    size_t k = 0;
    bool met = false;
  };
  using Step = std::vector<CommOp>;  // posted together; the thread waits for all of them
  const int ranks = plan.ranks;
  std::vector<std::vector<Step>> steps(ranks);
  std::map<std::pair<bool, DirectedPair>, size_t> count;  // operations so far per (send?, pair)
  for (int r = 0; r < ranks; ++r) {
    for (const CopyExchange& x : plan.per_rank[r].copy_exchanges) {
      const DirectedPair out{r, x.peer_rank}, in{x.peer_rank, r};
      const CommOp send{true, out, count[{true, out}]++};
      const CommOp recv{false, in, count[{false, in}]++};
      if (posting == CopyPosting::kGroupedExchange) {
        steps[r].push_back({send, recv});
      } else {
        steps[r].push_back({send});
        steps[r].push_back({recv});
      }
    }
  }
  std::vector<size_t> at(ranks, 0);  // each rank's current step
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      if (at[r] >= steps[r].size()) continue;
      for (CommOp& op : steps[r][at[r]]) {
        if (op.met) continue;
        // The peer's matching operation, if its current step posts it.
        const int peer = op.send ? op.pair.second : op.pair.first;
        if (at[peer] >= steps[peer].size()) continue;
        for (CommOp& other : steps[peer][at[peer]]) {
          if (!other.met && other.send != op.send && other.pair == op.pair && other.k == op.k) {
            other.met = op.met = true;
            progress = true;
          }
        }
      }
      const Step& step = steps[r][at[r]];
      if (std::all_of(step.begin(), step.end(), [](const CommOp& c) { return c.met; })) {
        ++at[r];
        progress = true;
      }
    }
  }
  PostingReport report;
  report.completes = true;
  for (int r = 0; r < ranks; ++r) {
    if (at[r] >= steps[r].size()) continue;
    report.completes = false;
    for (const CommOp& op : steps[r][at[r]]) {
      if (op.met) continue;
      report.stuck += fmt::format("{}rank {} waits in its copy reduce to {} rank {}",
                                  report.stuck.empty() ? "" : "; ", r,
                                  op.send ? "send its gradients to" : "receive the gradients of",
                                  op.send ? op.pair.second : op.pair.first);
    }
  }
  return report;
}

}  // namespace pipecast::validate
