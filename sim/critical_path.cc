#include "sim/critical_path.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "sim/simulator.h"

namespace pipecast {

namespace {

constexpr int kNone = -1;

class Walker {
 public:
  Walker(const Schedule& s, const std::vector<OpRecord>& ops,
         const std::vector<TransferRecord>& transfers)
      : s_(s), ops_(ops), xfers_(transfers) {
    const int64_t cells = int64_t{s.num_stages} * s.num_microbatches;
    f_op_.assign(cells, kNone);
    bi_op_.assign(cells, kNone);
    act_xfer_.assign(cells, kNone);
    grad_xfer_.assign(cells, kNone);
    prev_on_link_.assign(transfers.size(), kNone);
    // Whether each rank's ops are one block (SimResult's order: then an op's neighbours on its
    // rank are its neighbours in the record, and no table of them is built).
    int blocks = 0;
    std::vector<char> seen(s.num_ranks, 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      const OpRecord& o = ops[i];
      const OpRecord& l = ops[last_op_];
      // The path ends at the op that ends last: of several, the one that started last, then the
      // highest rank, whatever the records' order.
      if (std::tie(o.end_ns, o.start_ns, o.rank) >= std::tie(l.end_ns, l.start_ns, l.rank)) {
        last_op_ = static_cast<int>(i);
      }
      const Action& a = o.action;
      if (a.kind == OpKind::kForward) f_op_[Cell(a.stage, a.microbatch)] = static_cast<int>(i);
      if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardInput) {
        bi_op_[Cell(a.stage, a.microbatch)] = static_cast<int>(i);
      }
      if (i == 0 || ops[i - 1].rank != o.rank) {
        ++blocks;
        seen[o.rank] = 1;
      }
    }
    const int ranks_seen = static_cast<int>(std::count(seen.begin(), seen.end(), 1));
    if (blocks != ranks_seen) {  // a rank's ops in pieces: tables of each op's neighbours
      prev_on_rank_.assign(ops.size(), kNone);
      next_on_rank_.assign(ops.size(), kNone);
      std::vector<int> last_on_rank(s.num_ranks, kNone);
      for (size_t i = 0; i < ops.size(); ++i) {
        prev_on_rank_[i] = last_on_rank[ops[i].rank];
        if (prev_on_rank_[i] != kNone) next_on_rank_[prev_on_rank_[i]] = static_cast<int>(i);
        last_on_rank[ops[i].rank] = static_cast<int>(i);
      }
    }
    // The last transfer seen per (src, dst) rank pair, in a table (a map
    // lookup per transfer cost as much as the rest of the walk).
    const size_t ranks = static_cast<size_t>(s.num_ranks);
    std::vector<int> last_on_link(ranks * ranks, kNone);
    for (size_t i = 0; i < transfers.size(); ++i) {
      const TransferRecord& t = transfers[i];
      (t.gradient ? grad_xfer_ : act_xfer_)[Cell(t.dst_stage, t.microbatch)] = static_cast<int>(i);
      int& last = last_on_link[static_cast<size_t>(t.src_rank) * ranks + t.dst_rank];
      prev_on_link_[i] = last;
      last = static_cast<int>(i);
    }
  }

  CriticalPath Walk() const;

 private:
  int64_t Cell(int stage, int mb) const { return int64_t{stage} * s_.num_microbatches + mb; }
  // The op before and after op i on its rank, or kNone: its neighbours in the record where each
  // rank's ops are one block (SimResult's order).
  int PrevOnRank(int i) const {
    if (!prev_on_rank_.empty()) return prev_on_rank_[i];
    return i > 0 && ops_[i - 1].rank == ops_[i].rank ? i - 1 : kNone;
  }
  int NextOnRank(int i) const {
    if (!next_on_rank_.empty()) return next_on_rank_[i];
    const size_t n = static_cast<size_t>(i) + 1;
    return n < ops_.size() && ops_[n].rank == ops_[i].rank ? i + 1 : kNone;
  }
  // What released op i: {op index, kNone} or {kNone, transfer index}.
  std::pair<int, int> OpPredecessor(int i) const;
  std::pair<int, int> TransferPredecessor(int t) const;

  const Schedule& s_;
  const std::vector<OpRecord>& ops_;
  const std::vector<TransferRecord>& xfers_;
  std::vector<int> f_op_, bi_op_, act_xfer_, grad_xfer_, prev_on_link_;
  // Only where a rank's ops are not one block in the record.
  std::vector<int> prev_on_rank_, next_on_rank_;
  int last_op_ = 0;  // where the path ends
};

std::pair<int, int> Walker::OpPredecessor(int i) const {
  const OpRecord& o = ops_[i];
  const Action& a = o.action;
  int data_op = kNone, data_xfer = kNone;
  if (a.kind == OpKind::kForward && !s_.IsFirstStage(a.stage)) {
    data_xfer = act_xfer_[Cell(a.stage, a.microbatch)];
    data_op = f_op_[Cell(a.stage - 1, a.microbatch)];
  } else if ((a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardInput) &&
             !s_.IsLastStage(a.stage)) {
    data_xfer = grad_xfer_[Cell(a.stage, a.microbatch)];
    data_op = bi_op_[Cell(a.stage + 1, a.microbatch)];
  } else if (a.kind == OpKind::kBackwardWeight) {
    data_op = bi_op_[Cell(a.stage, a.microbatch)];
  }
  if (data_xfer != kNone && xfers_[data_xfer].end_ns == o.start_ns) return {kNone, data_xfer};
  if (data_xfer == kNone && data_op != kNone && ops_[data_op].end_ns == o.start_ns) {
    return {data_op, kNone};
  }
  // The forward half of an overlapped pair also waits for its backward half's gradient.
  if (a.overlapped && a.kind == OpKind::kForward && NextOnRank(i) != kNone) {
    const Action& b = ops_[NextOnRank(i)].action;
    if (!s_.IsLastStage(b.stage)) {
      const int b_xfer = grad_xfer_[Cell(b.stage, b.microbatch)];
      const int b_op = bi_op_[Cell(b.stage + 1, b.microbatch)];
      if (b_xfer != kNone && xfers_[b_xfer].end_ns == o.start_ns) return {kNone, b_xfer};
      if (b_xfer == kNone && b_op != kNone && ops_[b_op].end_ns == o.start_ns) {
        return {b_op, kNone};
      }
    }
  }
  const int prev = PrevOnRank(i);
  if (prev != kNone && ops_[prev].end_ns == o.start_ns) return {prev, kNone};
  // Nothing ended exactly at the start (only the very first ops): follow
  // whichever input ended last, and the gap becomes waiting time.
  TimeNs best = -1;
  std::pair<int, int> pick{kNone, kNone};
  if (data_xfer != kNone) best = xfers_[data_xfer].end_ns, pick = {kNone, data_xfer};
  if (data_xfer == kNone && data_op != kNone) best = ops_[data_op].end_ns, pick = {data_op, kNone};
  if (prev != kNone && ops_[prev].end_ns > best) pick = {prev, kNone};
  return pick;
}

std::pair<int, int> Walker::TransferPredecessor(int t) const {
  const TransferRecord& x = xfers_[t];
  if (x.start_ns > x.ready_ns && prev_on_link_[t] != kNone) return {kNone, prev_on_link_[t]};
  const int64_t src_cell = Cell(x.src_stage, x.microbatch);
  const int producer = x.gradient ? bi_op_[src_cell] : f_op_[src_cell];
  // An overlapped pair's forward half sends when the pair, i.e. its backward half, ends.
  if (producer != kNone && ops_[producer].action.overlapped && !x.gradient &&
      NextOnRank(producer) != kNone) {
    return {NextOnRank(producer), kNone};
  }
  return {producer, kNone};
}

CriticalPath Walker::Walk() const {
  CriticalPath path;
  path.compute_by_rank.assign(s_.num_ranks, 0);
  int cur_op = last_op_;
  int cur_xfer = kNone;
  TimeNs until = ops_[cur_op].end_ns;
  path.length_ns = until;
  std::map<std::pair<int, int>, TimeNs> by_link;
  while (cur_op != kNone || cur_xfer != kNone) {
    CriticalStep step;
    std::pair<int, int> pred;
    if (cur_op != kNone) {
      const OpRecord& o = ops_[cur_op];
      step = CriticalStep{
          CriticalStep::Kind::kCompute, cur_op, kNone, o.rank, kNone, o.start_ns, until};
      path.compute_ns += until - o.start_ns;
      path.compute_by_rank[o.rank] += until - o.start_ns;
      pred = OpPredecessor(cur_op);
    } else {
      const TransferRecord& x = xfers_[cur_xfer];
      step = CriticalStep{CriticalStep::Kind::kCommunication,
                          kNone,
                          cur_xfer,
                          x.src_rank,
                          x.dst_rank,
                          x.start_ns,
                          until};
      path.communication_ns += until - x.start_ns;
      by_link[{x.src_rank, x.dst_rank}] += until - x.start_ns;
      pred = TransferPredecessor(cur_xfer);
    }
    // Zero-length hand-overs (free links) add nothing to read.
    if (step.kind == CriticalStep::Kind::kCompute || step.end_ns > step.start_ns) {
      path.steps.push_back(step);
    }
    until = step.start_ns;
    cur_op = pred.first;
    cur_xfer = pred.second;
    const TimeNs pred_end = cur_op != kNone     ? ops_[cur_op].end_ns
                            : cur_xfer != kNone ? xfers_[cur_xfer].end_ns
                                                : 0;
    if (cur_xfer != kNone && xfers_[cur_xfer].start_ns < until && xfers_[cur_xfer].end_ns > until) {
      continue;  // a link-wait: the previous transfer released the link at `until`
    }
    if (pred_end < until) {
      path.steps.push_back(CriticalStep{CriticalStep::Kind::kWaiting, kNone, kNone, step.rank,
                                        kNone, pred_end, until});
      path.waiting_ns += until - pred_end;
      until = pred_end;
    }
  }
  std::reverse(path.steps.begin(), path.steps.end());
  for (const auto& [link, ns] : by_link) {
    path.communication_by_link.push_back({link.first, link.second, ns});
  }
  return path;
}

}  // namespace

CriticalPath ComputeCriticalPath(const Schedule& schedule, const std::vector<OpRecord>& ops,
                                 const std::vector<TransferRecord>& transfers) {
  return Walker(schedule, ops, transfers).Walk();
}

std::string CriticalStepName(const SimResult& result, const CriticalStep& step) {
  switch (step.kind) {
    case CriticalStep::Kind::kCompute:
      return ActionName(result.ops[step.op].action);
    case CriticalStep::Kind::kCommunication: {
      const TransferRecord& t = result.transfers[step.transfer];
      return fmt::format("send {} {}->{} mb{}", t.gradient ? "grad" : "act", t.src_stage,
                         t.dst_stage, t.microbatch);
    }
    case CriticalStep::Kind::kWaiting:
      return "wait";
  }
  return "?";
}

}  // namespace pipecast
