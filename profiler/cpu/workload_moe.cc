// The CPU workload's mixture-of-experts passes (profiler/cpu/workload.h,
// "Mixture of experts" and "Expert tensor parallelism"): the hash router's
// rows, the expert-parallel exchange of an MoE block's forward and input
// gradient (the all-to-all dispatch and combine, Megatron-LM's all-gather
// dispatcher, expert tensor parallelism's all-gather and reduce-scatter) and
// ExpertShard. The dense passes, the weight gradient and the counted buffers
// are in workload.cc; the kernels both use in internal/workload_kernels.h.
#include <algorithm>
#include <string>
#include <utility>

#include "profiler/cpu/internal/workload_kernels.h"
#include "profiler/cpu/workload.h"

namespace pipecast::cpu {

using internal::Floats;
using internal::Gelu;
using internal::GeluDerivative;
using internal::MatMulAdd;
using internal::Require;
// ---- mixture of experts ----

std::span<const int> Block::Route(int token) const {
  const std::size_t k = static_cast<std::size_t>(shape_.top_k);
  const std::size_t routes = routes_.size() / k;
  return {routes_.data() + (static_cast<std::size_t>(token) % routes) * k, k};
}

Block::ExpertRows Block::RowsOf(int tokens) const {
  ExpertRows rows;
  const int local = LocalExperts();
  rows.to.resize(static_cast<std::size_t>(ep_));
  for (int i = 0; i < tokens; ++i) {
    int last = -1;
    for (int e : Route(i)) {  // ascending, so each member's experts are consecutive
      const int r = e / local;
      if (r != last) rows.to[r].push_back(i);
      last = r;
    }
  }
  const std::vector<int>& mine = rows.to[ep_rank_];
  rows.first.push_back(0);
  for (int e = ep_rank_ * local; e < (ep_rank_ + 1) * local; ++e) {
    for (int part = 0; part < Parts(); ++part) {
      for (int src = 0; src < Sources(); ++src) {
        for (std::size_t idx = 0; idx < mine.size(); ++idx) {
          const std::span<const int> route = Route(mine[idx]);
          if (std::find(route.begin(), route.end(), e) != route.end()) {
            rows.pair.emplace_back(src, static_cast<int>(idx));
            rows.part.push_back(part);
          }
        }
      }
    }
    rows.first.push_back(rows.pair.size());
  }
  return rows;
}

namespace {

// Dispatch: row to[r][j] of `x` [tokens × h] goes to member r (members in
// order); `received` gets every member's rows for this one, ep × to[me].
Status Dispatch(const std::vector<std::vector<int>>& to, int me, std::span<const float> x, int h,
                ExpertExchange& exchange, Buffer* received) {
  const std::size_t row = static_cast<std::size_t>(h);
  std::vector<std::size_t> send_counts;
  std::size_t total = 0;
  for (const std::vector<int>& rows : to) {
    send_counts.push_back(rows.size() * row);
    total += rows.size() * row;
  }
  Buffer send(total);
  float* out = send.data();
  for (const std::vector<int>& rows : to) {
    for (int tok : rows) out = std::copy_n(x.data() + static_cast<std::size_t>(tok) * row, h, out);
  }
  const std::vector<std::size_t> recv_counts(to.size(), to[me].size() * row);
  *received = Buffer(to[me].size() * row * to.size());
  return exchange.AllToAll(send.span(), send_counts, received->span(), recv_counts);
}

// Combine: `sums` holds, per source member s, a row per token in to[me]
// (ep × to[me] rows); each goes back to its source, and every member's
// returned rows are added to `y` [tokens × h] at their tokens, member by
// member.
Status Combine(const std::vector<std::vector<int>>& to, int me, const Buffer& sums, int h,
               ExpertExchange& exchange, std::span<float> y) {
  const std::size_t row = static_cast<std::size_t>(h);
  const std::vector<std::size_t> send_counts(to.size(), to[me].size() * row);
  std::vector<std::size_t> recv_counts;
  std::size_t total = 0;
  for (const std::vector<int>& rows : to) {
    recv_counts.push_back(rows.size() * row);
    total += rows.size() * row;
  }
  Buffer back(total);
  PIPECAST_RETURN_IF_ERROR(exchange.AllToAll(sums.span(), send_counts, back.span(), recv_counts));
  const float* in = back.data();
  for (const std::vector<int>& rows : to) {
    for (int tok : rows) {
      float* dst = y.data() + static_cast<std::size_t>(tok) * row;
      for (int j = 0; j < h; ++j) dst[j] += in[j];
      in += row;
    }
  }
  return Status::Ok();
}

// Adds each pair row of `rows_out` [P × h], times its gate, into row
// pair_row[p] of `sums` (zeroed first), pair by pair.
void SumPairs(const std::vector<std::size_t>& pair_row, const std::vector<float>& gate,
              const Buffer& rows_out, int h, Buffer* sums) {
  const std::size_t row = static_cast<std::size_t>(h);
  std::fill_n(sums->data(), sums->size(), 0.0f);
  for (std::size_t p = 0; p < pair_row.size(); ++p) {
    float* dst = sums->data() + pair_row[p] * row;
    const float* from = rows_out.data() + p * row;
    for (int j = 0; j < h; ++j) dst[j] += gate[p] * from[j];
  }
}

// The all-gather dispatcher's combine: reduce-scatters `sums` [ep·T × h] and
// adds this member's [T × h] block to `y`.
Status ReduceScatterAdd(const Buffer& sums, ExpertExchange& exchange, std::span<float> y) {
  Buffer mine(y.size());
  PIPECAST_RETURN_IF_ERROR(exchange.ReduceScatter(sums.span(), mine.span()));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += mine.data()[i];
  return Status::Ok();
}

}  // namespace

Status Block::GatherParts(ExpertExchange* tensor, Buffer* rows) const {
  if (etp_ == 1) return Status::Ok();
  Require(tensor != nullptr, "an expert tensor shard needs its etp group's exchange");
  Buffer gathered(rows->size() * static_cast<std::size_t>(etp_));
  PIPECAST_RETURN_IF_ERROR(tensor->AllGather(rows->span(), gathered.span()));
  *rows = std::move(gathered);
  return Status::Ok();
}

Status Block::ScatterParts(ExpertExchange* tensor, Buffer* sums) const {
  if (etp_ == 1) return Status::Ok();
  Require(tensor != nullptr, "an expert tensor shard needs its etp group's exchange");
  Buffer mine(sums->size() / static_cast<std::size_t>(etp_));
  PIPECAST_RETURN_IF_ERROR(tensor->ReduceScatter(sums->span(), mine.span()));
  *sums = std::move(mine);
  return Status::Ok();
}

std::vector<std::size_t> Block::PairRows(const ExpertRows& rows, int tokens) const {
  const std::vector<int>& mine = rows.to[ep_rank_];
  std::vector<std::size_t> out;
  out.reserve(rows.pair.size());
  const std::size_t per_part = static_cast<std::size_t>(ep_) * mine.size();
  for (std::size_t p = 0; p < rows.pair.size(); ++p) {
    const auto& [src, idx] = rows.pair[p];
    // All-to-all: the received rows, per_member from each source (at etp > 1
    // etp such blocks, gathered in etp-rank order); all-gather: the gathered
    // micro-batches, `tokens` from each source.
    out.push_back(all_gather_ ? static_cast<std::size_t>(src) * tokens + mine[idx]
                              : rows.part[p] * per_part +
                                    static_cast<std::size_t>(src) * mine.size() + idx);
  }
  return out;
}

Status Block::GatherTokens(std::span<const float> x, int tokens, const ExpertRows& rows,
                           ExpertExchange& exchange, Buffer* gathered,
                           std::vector<std::size_t>* pair_row, std::vector<float>* gate) const {
  const std::size_t e_all = static_cast<std::size_t>(shape_.experts);
  const std::size_t t = static_cast<std::size_t>(tokens);
  const std::size_t g = static_cast<std::size_t>(Sources());
  // This member's routing map and probs, [T × E] each (1 and 1/k on a route).
  Buffer map(t * e_all), probs(t * e_all);
  std::fill_n(map.data(), map.size(), 0.0f);
  std::fill_n(probs.data(), probs.size(), 0.0f);
  const float k_gate = 1.0f / static_cast<float>(shape_.top_k);
  for (std::size_t i = 0; i < t; ++i) {
    for (int e : Route(static_cast<int>(i))) {
      map.data()[i * e_all + e] = 1.0f;
      probs.data()[i * e_all + e] = k_gate;
    }
  }
  Buffer global_map(g * t * e_all), global_probs(g * t * e_all);
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(map.span(), global_map.span()));
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(probs.span(), global_probs.span()));
  *gathered = Buffer(g * t * static_cast<std::size_t>(shape_.hidden));
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(x, gathered->span()));
  // The local experts' rows, read off the gathered map: expert by expert,
  // gathered token by gathered token (member, then token).
  pair_row->clear();
  gate->clear();
  const int local = LocalExperts();
  for (int j = 0; j < local; ++j) {
    const std::size_t e = static_cast<std::size_t>(ep_rank_ * local + j);
    for (std::size_t r = 0; r < g * t; ++r) {
      if (global_map.data()[r * e_all + e] == 0.0f) continue;
      pair_row->push_back(r);
      gate->push_back(global_probs.data()[r * e_all + e]);
    }
    Require(pair_row->size() == rows.first[j + 1],
            "GatherTokens: the gathered routing map disagrees with the hash router");
  }
  return Status::Ok();
}

Status Block::Forward(std::span<const float> x, std::span<float> y, int microbatch_size,
                      ExpertExchange& exchange, Saved* saved, ExpertExchange* tensor) const {
  Require(shape_.moe() && microbatch_size >= 1, "Forward: an MoE block, microbatch_size >= 1");
  const int t = Tokens(microbatch_size);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(x.size() == Floats(t, h) && y.size() == Floats(t, h),
          "Forward: x and y hold tokens x hidden floats");
  *saved = Saved();
  const ExpertRows rows = RowsOf(t);
  const std::size_t pairs = rows.pair.size();
  // `received`: the rows this member's experts read (all-to-all: ep x to[me]
  // received; all-gather: the group's ep x T gathered); each pair's row of it
  // and its gate.
  Buffer received;
  std::vector<std::size_t> pair_row;
  std::vector<float> gate;
  if (all_gather_) {
    PIPECAST_RETURN_IF_ERROR(GatherTokens(x, t, rows, exchange, &received, &pair_row, &gate));
  } else {
    PIPECAST_RETURN_IF_ERROR(Dispatch(rows.to, ep_rank_, x, h, exchange, &received));
    PIPECAST_RETURN_IF_ERROR(GatherParts(tensor, &received));
    pair_row = PairRows(rows, t);
    gate.assign(pairs, 1.0f / static_cast<float>(shape_.top_k));
  }
  const std::size_t received_rows = received.size() / static_cast<std::size_t>(h);
  Saved s;
  s.microbatch_size_ = microbatch_size;
  s.x_ = Buffer(pairs * h);
  for (std::size_t p = 0; p < pairs; ++p) {
    std::copy_n(received.data() + pair_row[p] * h, h, s.x_.data() + p * h);
  }
  received.Reset();
  s.a_ = Buffer(pairs * f);
  std::fill_n(s.a_.data(), s.a_.size(), 0.0f);
  s.g_ = Buffer(pairs * f);
  Buffer out(pairs * h);
  std::fill_n(out.data(), out.size(), 0.0f);
  for (int e = 0; e < LocalExperts(); ++e) {
    const std::size_t lo = rows.first[e];
    const int m = static_cast<int>(rows.first[e + 1] - lo);
    MatMulAdd(s.x_.data() + lo * h, w1_.data() + e * Floats(h, f), s.a_.data() + lo * f, m, h, f);
    for (std::size_t i = lo * f; i < (lo + m) * f; ++i) s.g_.data()[i] = Gelu(s.a_.data()[i]);
    MatMulAdd(s.g_.data() + lo * f, w2_.data() + e * Floats(f, h), out.data() + lo * h, m, f, h);
  }
  Buffer sums(received_rows * h);
  SumPairs(pair_row, gate, out, h, &sums);
  out.Reset();
  if (y.data() != x.data()) std::copy(x.begin(), x.end(), y.begin());  // the residual
  if (!all_gather_) PIPECAST_RETURN_IF_ERROR(ScatterParts(tensor, &sums));
  PIPECAST_RETURN_IF_ERROR(all_gather_ ? ReduceScatterAdd(sums, exchange, y)
                                       : Combine(rows.to, ep_rank_, sums, h, exchange, y));
  s.stage_ = Saved::Stage::kForwardDone;
  *saved = std::move(s);
  return Status::Ok();
}

Status Block::BackwardInput(Saved& saved, std::span<const float> dy, std::span<float> dx,
                            ExpertExchange& exchange, ExpertExchange* tensor) const {
  Require(shape_.moe() && saved.ready_for_input_gradient(),
          "BackwardInput: an MoE block, saved comes from Forward");
  const int t = Tokens(saved.microbatch_size_);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(dy.size() == Floats(t, h) && dx.size() == Floats(t, h),
          "BackwardInput: dy and dx hold tokens x hidden floats");
  const ExpertRows rows = RowsOf(t);
  const std::size_t pairs = rows.pair.size();
  const std::vector<std::size_t> pair_row = PairRows(rows, t);
  // dy's rows for this member's experts: all-to-all, as the forward's x;
  // all-gather, the group's whole dy.
  Buffer received;
  if (all_gather_) {
    received = Buffer(static_cast<std::size_t>(Sources()) * dy.size());
    PIPECAST_RETURN_IF_ERROR(exchange.AllGather(dy, received.span()));
  } else {
    PIPECAST_RETURN_IF_ERROR(Dispatch(rows.to, ep_rank_, dy, h, exchange, &received));
    PIPECAST_RETURN_IF_ERROR(GatherParts(tensor, &received));  // the reduce-scatter's adjoint
  }
  const std::size_t received_rows = received.size() / static_cast<std::size_t>(h);
  // Each pair's output gradient: its token's dy × the gate 1/k.
  const float gate = 1.0f / static_cast<float>(shape_.top_k);
  saved.dy_ = Buffer(pairs * h);
  for (std::size_t p = 0; p < pairs; ++p) {
    const float* from = received.data() + pair_row[p] * h;
    for (int j = 0; j < h; ++j) saved.dy_.data()[p * h + j] = gate * from[j];
  }
  received.Reset();
  Buffer da(pairs * f);
  std::fill_n(da.data(), da.size(), 0.0f);
  Buffer dxe(pairs * h);
  std::fill_n(dxe.data(), dxe.size(), 0.0f);
  for (int e = 0; e < LocalExperts(); ++e) {
    const std::size_t lo = rows.first[e];
    const int m = static_cast<int>(rows.first[e + 1] - lo);
    MatMulAdd(saved.dy_.data() + lo * h, w2t_.data() + e * Floats(h, f), da.data() + lo * f, m, h,
              f);
    for (std::size_t i = lo * f; i < (lo + m) * f; ++i) {
      da.data()[i] *= GeluDerivative(saved.a_.data()[i]);
    }
    MatMulAdd(da.data() + lo * f, w1t_.data() + e * Floats(f, h), dxe.data() + lo * h, m, f, h);
  }
  saved.a_ = std::move(da);
  Buffer sums(received_rows * h);
  SumPairs(pair_row, std::vector<float>(pairs, 1.0f), dxe, h, &sums);
  dxe.Reset();
  if (dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());  // the residual
  if (!all_gather_) PIPECAST_RETURN_IF_ERROR(ScatterParts(tensor, &sums));  // the gather's adjoint
  PIPECAST_RETURN_IF_ERROR(all_gather_ ? ReduceScatterAdd(sums, exchange, dx)
                                       : Combine(rows.to, ep_rank_, sums, h, exchange, dx));
  saved.stage_ = Saved::Stage::kInputGradientDone;
  return Status::Ok();
}

Result<Block> Block::ExpertShard(int ep, int index, ExpertDispatcher dispatcher, int etp,
                                 int tensor_rank) const {
  if (!shape_.moe()) {
    return Status::InvalidArgument("expert shard of a dense block: only MoE blocks have experts");
  }
  if (ep < 1 || index < 0 || index >= ep || expert_group_size() != 1) {
    return Status::InvalidArgument("expert shard " + std::to_string(index) + " of " +
                                   std::to_string(ep) +
                                   ": give ep >= 1 and an index in [0, ep) of a whole block");
  }
  if (shape_.experts % ep != 0) {
    return Status::InvalidArgument(
        "expert parallelism " + std::to_string(ep) + " does not divide the " +
        std::to_string(shape_.experts) +
        " experts: each member holds experts / ep whole experts; use a divisor of " +
        std::to_string(shape_.experts));
  }
  if (etp < 1 || tensor_rank < 0 || tensor_rank >= etp || shape_.ffn % etp != 0) {
    return Status::InvalidArgument("expert tensor shard " + std::to_string(tensor_rank) + " of " +
                                   std::to_string(etp) + " of an expert of ffn " +
                                   std::to_string(shape_.ffn) +
                                   ": give etp >= 1 dividing ffn and a tensor rank in [0, etp)");
  }
  const std::size_t local = static_cast<std::size_t>(shape_.experts / ep);
  const std::size_t n = Floats(shape_.hidden, shape_.ffn);
  if (etp > 1) {
    // Each local expert's fc1 columns and fc2 rows r·F/etp .. (r+1)·F/etp.
    const int h = shape_.hidden;
    const int f = shape_.ffn / etp;
    BlockShape shape = shape_;
    shape.ffn = f;
    Block s(shape);
    s.routes_ = routes_;
    s.ep_ = ep;
    s.ep_rank_ = index;
    s.etp_ = etp;
    s.etp_rank_ = tensor_rank;
    s.all_gather_ = dispatcher == ExpertDispatcher::kAllGather;
    s.w1_.resize(local * Floats(h, f));
    s.w2_.resize(local * Floats(f, h));
    for (std::size_t e = 0; e < local; ++e) {
      const std::size_t whole = (local * index + e) * n;
      for (int r = 0; r < h; ++r) {  // W1 [H×F]: columns tensor_rank·f ..
        std::copy_n(w1_.begin() + static_cast<std::ptrdiff_t>(whole) +
                        static_cast<std::ptrdiff_t>(r) * shape_.ffn + tensor_rank * f,
                    f, s.w1_.begin() + static_cast<std::ptrdiff_t>(e * Floats(h, f)) + r * f);
      }
      // W2 [F×H]: rows tensor_rank·f .., contiguous.
      std::copy_n(w2_.begin() + static_cast<std::ptrdiff_t>(whole) +
                      static_cast<std::ptrdiff_t>(tensor_rank) * f * h,
                  Floats(f, h), s.w2_.begin() + static_cast<std::ptrdiff_t>(e * Floats(f, h)));
    }
    s.TransposeExperts();
    s.grad_w1_.assign(s.w1_.size(), 0.0f);
    s.grad_w2_.assign(s.w2_.size(), 0.0f);
    return s;
  }
  Block s(shape_);
  s.routes_ = routes_;
  s.ep_ = ep;
  s.ep_rank_ = index;
  s.all_gather_ = dispatcher == ExpertDispatcher::kAllGather;
  const auto from = static_cast<std::ptrdiff_t>(local * index * n);
  const auto count = static_cast<std::ptrdiff_t>(local * n);
  s.w1_.assign(w1_.begin() + from, w1_.begin() + from + count);
  s.w2_.assign(w2_.begin() + from, w2_.begin() + from + count);
  s.w1t_.assign(w1t_.begin() + from, w1t_.begin() + from + count);
  s.w2t_.assign(w2t_.begin() + from, w2t_.begin() + from + count);
  s.grad_w1_.assign(s.w1_.size(), 0.0f);
  s.grad_w2_.assign(s.w2_.size(), 0.0f);
  return s;
}

}  // namespace pipecast::cpu
