// Generators of the V-shaped zero-bubble schedules of Qi et al. 2024, "Pipeline Parallelism with
// Controllable Memory" (arXiv 2405.15362): ZB-V, V-Half and V-Min. Each rank r holds two model
// chunks in a V: virtual stages r and 2p-1-r, so the first and the last stage sit on rank 0 and
// the turn of the V (stages p-1 and p) on rank p-1. The backward is split into I (input
// gradient) and W (weight gradient).
//
// The orders are those of the authors' own generators in sail-sg/zero-bubble-pipeline-
// parallelism (commit 39f2c186a27580b7051eb51e0f651e1efd0a8170), ported line by line:
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py (ZB-V, a greedy list scheduler
// under a memory limit of 2p chunk activations) and zbv_greedy.py (V-Half and V-Min: a repeating
// pattern, then two "squeeze" passes). Both take F, B, W and communication costs; sail-sg's
// runtime schedules V-Half and V-Min with the fixed costs 1000, 1000, 1000 and 1, and pipecast's
// built-ins use those costs for all three (the schedules are built from the shape alone; the
// simulator then times them with the model's real costs). ZB-V's memory model counts a forward
// as 1, its input gradient as 0 and its weight gradient as -1: the same orders as sail-sg's
// runtime approximation (f = 34h + 5as, w = -32h) on every shape compared in
// schedule_zoo_v_test.cc.
//
// Internally both generators number the four F/B arms as sail-sg does: F chunk 0 is virtual
// stage r, F chunk 1 stage 2p-1-r; B chunk 0 is stage 2p-1-r (its gradient flows up the ranks),
// B chunk 1 stage r.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "sim/internal/schedule_builders.h"

namespace pipecast::internal {
namespace {

// sail-sg's runtime costs for the V schedules (runtime.py: "Use fixed schedule for now").
constexpr int64_t kFCost = 1000, kBCost = 1000, kWCost = 1000, kCommCost = 1;

// Virtual stage of sail-sg's (category, chunk) on rank r of p: category 0 forward, 1 input
// gradient, 2 weight gradient.
int VStage(int category, int chunk, int r, int p) {
  const bool first_arm = category == 0 ? chunk == 0 : chunk == 1;
  return first_arm ? r : 2 * p - 1 - r;
}

OpKind KindOf(int category) {
  return category == 0 ? OpKind::kForward
                       : (category == 1 ? OpKind::kBackwardInput : OpKind::kBackwardWeight);
}

// ---- ZB-V: zbv.py PipelineGraph.try_v_schedule / create_schedule ----

struct ZbvOp {
  int category, chunk, microbatch;
};

struct ZbvResult {
  std::vector<std::vector<ZbvOp>> order;  // per rank
  int64_t max_bubble = 0;
  std::vector<int64_t> stage_bubble;
  int64_t peak_mem = 0;
};

// What the ZB-V greedy orders by: per-op costs (F, I, W), the transfer cost, per-op memory and
// the per-rank limit, in the same units as the memory.
struct ZbvParams {
  std::array<int64_t, 3> cost;
  int64_t comm;
  std::array<int64_t, 3> mem;
  int64_t max_mem;
};

class ZbvScheduler {
 public:
  // sail-sg's runtime setting: the fixed costs, F 1, I 0, W -1 and a limit of 2p.
  ZbvScheduler(int p, int m) : ZbvScheduler(p, m, DefaultParams(p)) {}
  ZbvScheduler(int p, int m, const ZbvParams& params)
      : op_cost_(params.cost),
        op_mem_(params.mem),
        comm_cost_(params.comm),
        n_(p),
        m_(m),
        max_mem_(params.max_mem) {}

  static ZbvParams DefaultParams(int p) {
    return {{kFCost, kBCost, kWCost}, kCommCost, {1, 0, -1}, 2 * p};
  }

  // One try_v_schedule call; recurses as the Python does while the bubble shrinks.
  ZbvResult Try(bool fill_f, bool fill_b, const std::vector<int64_t>* approved) {
    Reset(approved);
    Run(fill_f, fill_b);
    ZbvResult out{std::move(order_), MaxStageBubble(-1), stage_bubble_, peak_};
    if (max_approved_ < 0 || out.max_bubble < max_approved_) {
      std::vector<int64_t> next_approved = out.stage_bubble;
      ZbvResult again = Try(fill_f, fill_b, &next_approved);
      if (again.max_bubble < out.max_bubble) return again;
    }
    return out;
  }

 private:
  // The costs and memory of the ops, by category (F, I, W).
  const std::array<int64_t, 3> op_cost_, op_mem_;
  const int64_t comm_cost_;

  size_t Id(int cat, int chunk, int stage, int micro) const {
    return static_cast<size_t>(((cat * 2 + chunk) * n_ + stage) * m_ + micro);
  }
  // Python's end_time[fa_id] with fa_id = -1 reads the last element.
  int64_t EndAt(int64_t id) const {
    return end_time_[id >= 0 ? static_cast<size_t>(id) : end_time_.size() - 1];
  }

  void Reset(const std::vector<int64_t>* approved) {
    count_.assign(n_, std::array<int, 6>{});
    end_time_.assign(static_cast<size_t>(6) * n_ * m_, -1);
    cur_time_.assign(n_, 0);
    mem_.assign(n_, 0);
    stage_bubble_.assign(n_, 0);
    pending_w_.assign(n_, {});
    order_.assign(n_, {});
    approved_ = approved ? *approved : std::vector<int64_t>(n_, -1);
    max_approved_ = *std::max_element(approved_.begin(), approved_.end());
    peak_ = 0;
  }

  int64_t MaxStageBubble(int stage) const {
    int64_t b = 0;
    for (int64_t x : stage_bubble_) b = std::max(b, x);
    if (stage >= 0) b = std::max(b, max_approved_ - approved_[stage]);
    return b;
  }

  void Put(int cat, int chunk, int stage) {
    const int cnt = count_[stage][cat * 2 + chunk];
    if (cnt >= m_) return;  // the Python asserts; no shape reaches it
    const int64_t no_bubble = cur_time_[stage] + op_cost_[cat];
    int64_t t = no_bubble;
    if (cat < 2 && chunk == 1 && stage < n_ - 1) {
      t = std::max(t, end_time_[Id(cat, 1, stage + 1, cnt)] + comm_cost_ + op_cost_[cat]);
    }
    if (cat < 2 && chunk == 0 && stage > 0) {
      t = std::max(t, end_time_[Id(cat, 0, stage - 1, cnt)] + comm_cost_ + op_cost_[cat]);
    }
    if (count_[stage][0] > 0) stage_bubble_[stage] += t - no_bubble;
    end_time_[Id(cat, chunk, stage, cnt)] = t;
    cur_time_[stage] = t;
    mem_[stage] += op_mem_[cat];
    peak_ = std::max(peak_, mem_[stage]);
    order_[stage].push_back(ZbvOp{cat, chunk, cnt});
    if (cat == 1) pending_w_[stage].push_back(chunk);
    ++count_[stage][cat * 2 + chunk];
  }

  void PutW(int stage) {
    const int chunk = pending_w_[stage].front();
    pending_w_[stage].pop_front();
    Put(2, chunk, stage);
  }

  // Fills idle time before the op whose input arrives at end_time[fa_id] with pending W ops, and
  // one more when waiting would exceed the approved bubble (`fill`).
  void FillWithW(int i, int64_t fa_id, bool fill) {
    while (!pending_w_[i].empty() && fa_id >= 0 &&
           EndAt(fa_id) + comm_cost_ >= cur_time_[i] + op_cost_[2]) {
      PutW(i);
    }
    if (!pending_w_[i].empty() &&
        EndAt(fa_id) + comm_cost_ - cur_time_[i] > MaxStageBubble(i) - stage_bubble_[i] && fill) {
      PutW(i);
    }
  }

  void WarmUp() {
    for (int i = 0; i < n_; ++i) Put(0, 0, i);
    for (int i = n_ - 1; i >= 0; --i) {
      if (i == n_ - 1) {
        Put(0, 1, i);
        continue;
      }
      const int64_t tmp = end_time_[Id(0, 1, i + 1, 0)] + comm_cost_;
      while (mem_[i] + op_mem_[0] * (2 + i * 2) <= max_mem_ && cur_time_[i] + op_cost_[0] <= tmp &&
             count_[i][0] < m_) {
        for (int j = 0; j <= i; ++j) Put(0, 0, j);
      }
      Put(0, 1, i);
    }
    int iter_chunk = 0;
    for (int i = 1; i < n_; ++i) {
      while (count_[i][0] + count_[i][1] < count_[i - 1][0] + count_[i - 1][1] ||
             (count_[i][1] <= count_[i - 1][1] && count_[i - 1][1] < m_)) {
        for (int j = n_ - 1; j >= i; --j) {
          if (count_[j][iter_chunk] < m_) Put(0, iter_chunk, j);
        }
        iter_chunk = 1 - iter_chunk;
      }
    }
  }

  void PutBackwards(bool fill_b) {
    for (int i = 0; i < n_; ++i) {
      while (mem_[i] + op_mem_[1] > max_mem_ && !pending_w_[i].empty()) PutW(i);
    }
    std::vector<int> b0, b1;
    for (int i = 0; i < n_; ++i) {
      if (count_[i][3] >= count_[i][2]) {
        b0.push_back(i);
      } else if (i == n_ - 1) {
        b1.push_back(i);
      } else if (end_time_[Id(1, 1, i + 1, count_[i][3])] >= 0 || count_[i][2] >= m_) {
        b1.push_back(i);
      } else {
        b0.push_back(i);
      }
    }
    std::vector<std::pair<int, int>> ranks;
    for (auto it = b1.rbegin(); it != b1.rend(); ++it) ranks.push_back({*it, 1});
    for (int i : b0) ranks.push_back({i, 0});
    for (auto [i, chunk] : ranks) {
      int64_t fa_id = -1;
      if (chunk == 1 && i < n_ - 1) fa_id = static_cast<int64_t>(Id(1, 1, i + 1, count_[i][3]));
      if (chunk == 0 && i > 0) fa_id = static_cast<int64_t>(Id(1, 0, i - 1, count_[i][2]));
      FillWithW(i, fa_id, chunk == 1 || fill_b);
      Put(1, chunk, i);
    }
  }

  void PutForwards(bool fill_f) {
    for (int i = 0; i < n_; ++i) {
      if (count_[i][1] >= m_) continue;
      int item = -1;
      if (count_[i][1] >= count_[i][0]) {
        item = 0;
      } else if (i == n_ - 1) {
        item = 1;
      } else if (end_time_[Id(0, 1, i + 1, count_[i][1])] >= 0) {
        item = 1;
      } else if (count_[i][0] < m_) {
        if (i == 0 || end_time_[Id(0, 0, i - 1, count_[i][0])] >= 0) item = 0;
      }
      if (item < 0) continue;
      while (mem_[i] + op_mem_[0] > max_mem_ && !pending_w_[i].empty()) PutW(i);
      int64_t fa_id = -1;
      if (item == 0 && i > 0) fa_id = static_cast<int64_t>(Id(0, 0, i - 1, count_[i][0]));
      if (item == 1 && i < n_ - 1) fa_id = static_cast<int64_t>(Id(0, 1, i + 1, count_[i][1]));
      FillWithW(i, fa_id, fill_f);
      Put(0, item, i);
    }
  }

  void Run(bool fill_f, bool fill_b) {
    WarmUp();
    for (int k = 0; k < 2 * m_; ++k) {
      PutBackwards(fill_b);
      PutForwards(fill_f);
    }
    for (int i = 0; i < n_; ++i) {
      while (!pending_w_[i].empty()) PutW(i);
    }
  }

  const int n_, m_;
  const int64_t max_mem_;
  std::vector<std::array<int, 6>> count_;
  std::vector<int64_t> end_time_, cur_time_, mem_, stage_bubble_, approved_;
  int64_t max_approved_ = -1;
  int64_t peak_ = 0;  // the largest rank's peak memory in this try
  std::vector<std::deque<int>> pending_w_;
  std::vector<std::vector<ZbvOp>> order_;
};

// ---- V-Half and V-Min: zbv_greedy.py PipelineGraph ----

// Per stage, per op type (F, f, B, b, then W lists), per micro-batch: a time slot.
using Slots = std::vector<std::vector<int>>;

constexpr int kNoSlot = std::numeric_limits<int>::max();

int LastSlotMax(const Slots& s) {
  int bound = 0;
  for (const auto& list : s) bound = std::max(bound, list.back());
  return bound;
}

// The (type) whose next slot is earliest among the first `types` lists; ties to the lower type.
// Returns {slot, type}; slot kNoSlot when all are used up.
std::pair<int, int> NextSlot(const Slots& s, const std::vector<int>& ptr, int types) {
  std::pair<int, int> best{kNoSlot, 0};
  for (int t = 0; t < types; ++t) {
    const int v = ptr[t] < static_cast<int>(s[t].size()) ? s[t][ptr[t]] : kNoSlot;
    if (v < best.first) best = {v, t};
  }
  return best;
}

// put_w: appends the W list(s), one W in each empty slot after a pending input gradient, the rest
// at the end. split_w: one W list per chunk.
void PutW(Slots& s, bool split_w) {
  const int bound = LastSlotMax(s);
  s.emplace_back();
  if (split_w) s.emplace_back();
  std::array<int, 2> w_cnt{0, 0};
  std::vector<int> ptr(s.size(), 0);
  int i = 0;
  for (i = 0; i <= bound; ++i) {
    const auto [next_time, next_type] = NextSlot(s, ptr, 4);
    if (next_time == i) {
      ++ptr[next_type];
      if (next_type >= 2) ++w_cnt[split_w ? next_type - 2 : 0];
    } else {
      for (int w = 0; w < 2; ++w) {
        if (w_cnt[w] != 0) {
          s[w + 4].push_back(i);
          --w_cnt[w];
          break;
        }
      }
    }
  }
  i = bound;
  for (int w = 0; w < 2; ++w) {
    while (w_cnt[w] > 0) {
      s[w + 4].push_back(++i);
      --w_cnt[w];
    }
  }
}

// mem_of_stage: the stage's peak, F = +1, W = -1 (without W lists: a W in each empty slot).
int MemOfStage(const Slots& s) {
  static constexpr std::array<int, 5> kMemory = {1, 1, 0, 0, -1};
  const bool has_w = s.size() > 4;
  const int bound = LastSlotMax(s);
  int w_cnt = 0, cur = 0, res = 0;
  std::vector<int> ptr(s.size(), 0);
  for (int i = 0; i <= bound; ++i) {
    const auto [next_time, next_type] = NextSlot(s, ptr, static_cast<int>(s.size()));
    if (next_time == i) {
      ++ptr[next_type];
      cur += kMemory[next_type];
      if (next_type >= 2 && next_type < 4) ++w_cnt;
    } else if (!has_w && w_cnt != 0) {
      cur += kMemory[4];
      --w_cnt;
    }
    res = std::max(res, cur);
  }
  return res;
}

// The global order of eager_execution_time and reorder: the earliest slot over all stages and
// types, ties to the lower stage, then the lower type.
struct Pick {
  int time, stage, type, mb;
};
Pick NextGlobal(const std::vector<Slots>& all, const std::vector<std::vector<int>>& ptr,
                int types) {
  Pick best{kNoSlot, 0, 0, 0};
  for (int st = 0; st < static_cast<int>(all.size()); ++st) {
    for (int t = 0; t < types; ++t) {
      const int mb = ptr[st][t];
      const int v = mb < static_cast<int>(all[st][t].size()) ? all[st][t][mb] : kNoSlot;
      if (v < best.time) best = Pick{v, st, t, mb};
    }
  }
  return best;
}

// eager_execution_time ("squeeze"): runs the ops in slot order as early as their dependencies
// allow with per-type `cost` and communication `c`. Returns each op's start time and, per
// stage, the (type, micro-batch) execution order.
struct Eager {
  std::vector<Slots> start;
  std::vector<std::vector<std::pair<int, int>>> order;
};
Eager EagerExecution(const std::vector<Slots>& sr, const std::vector<int64_t>& cost, int64_t c) {
  const int types = static_cast<int>(cost.size());
  const int stages = static_cast<int>(sr.size());
  std::vector<std::vector<int>> ptr(stages, std::vector<int>(types, 0));
  // end[stage][type][micro-batch]; the W list of an unsplit stage has one entry per B.
  std::vector<std::vector<std::vector<int64_t>>> end(stages);
  int64_t total = 0;
  for (int st = 0; st < stages; ++st) {
    for (int t = 0; t < types; ++t) {
      end[st].emplace_back(sr[st][t].size(), 0);
      total += static_cast<int64_t>(sr[st][t].size());
    }
  }
  Eager out;
  out.order.resize(stages);
  for (int64_t k = 0; k < total; ++k) {
    const Pick n = NextGlobal(sr, ptr, types);
    ++ptr[n.stage][n.type];
    int64_t deps = 0;
    if ((n.type == 0 || n.type == 2) && n.stage > 0) {
      deps = std::max(deps, end[n.stage - 1][n.type][n.mb] + c);
    }
    if ((n.type == 1 || n.type == 3) && n.stage + 1 < stages) {
      deps = std::max(deps, end[n.stage + 1][n.type][n.mb] + c);
    }
    if (n.type > 0 && n.type < 4) deps = std::max(deps, end[n.stage][n.type - 1][n.mb]);
    if (n.mb > 0) deps = std::max(deps, end[n.stage][n.type][n.mb - 1]);
    if (!out.order[n.stage].empty()) {
      const auto [lt, lmb] = out.order[n.stage].back();
      deps = std::max(deps, end[n.stage][lt][lmb]);
    }
    end[n.stage][n.type][n.mb] = deps + cost[n.type];
    out.order[n.stage].push_back({n.type, n.mb});
  }
  out.start.resize(stages);
  for (int st = 0; st < stages; ++st) {
    for (int t = 0; t < types; ++t) {
      std::vector<int> starts;
      for (int64_t e : end[st][t]) starts.push_back(static_cast<int>(e - cost[t]));
      out.start[st].push_back(std::move(starts));
    }
  }
  return out;
}

// reorder: moves each op after the pattern's first steady phase to the earliest free slot its
// dependencies allow that keeps the stage's memory peak, then squeezes with unit costs.
std::vector<Slots> Reorder(std::vector<Slots> sr, bool consider_w) {
  int types = 4;
  if (consider_w) {
    for (Slots& s : sr) PutW(s, false);
    types = 5;
  }
  int current_mem = 0;
  for (const Slots& s : sr) current_mem = std::max(current_mem, MemOfStage(s));
  const int stages = static_cast<int>(sr.size());
  std::vector<std::vector<int>> ptr(stages, std::vector<int>(types, 0));
  std::vector<std::vector<bool>> occupied(stages);
  for (int st = 0; st < stages; ++st) occupied[st].assign(LastSlotMax(sr[st]) + 1, false);
  int64_t total = 0;
  for (int t = 0; t < types; ++t) total += static_cast<int64_t>(sr[0][t].size()) * stages;
  const int last_mb = static_cast<int>(sr[0][0].size()) - 1;
  int phase = 0;
  for (int64_t k = 0; k < total; ++k) {
    const Pick n = NextGlobal(sr, ptr, types);
    ++ptr[n.stage][n.type];
    std::vector<int>& slot_list = sr[n.stage][n.type];
    if (n.type == 3 && n.stage == 0 && phase == 0) ++phase;
    if (phase == 1) {
      if (n.type == 0 && n.mb == last_mb) ++phase;
      occupied[n.stage][slot_list[n.mb]] = true;
      continue;
    }
    if (phase == 0 && !consider_w) {
      occupied[n.stage][slot_list[n.mb]] = true;
      continue;
    }
    int deps = -1;
    if ((n.type == 0 || n.type == 2) && n.stage > 0) {
      deps = std::max(deps, sr[n.stage - 1][n.type][n.mb]);
    }
    if ((n.type == 1 || n.type == 3) && n.stage + 1 < stages) {
      deps = std::max(deps, sr[n.stage + 1][n.type][n.mb]);
    }
    if (n.type > 0 && n.type < 4) deps = std::max(deps, sr[n.stage][n.type - 1][n.mb]);
    if (n.type == 4) {
      std::vector<int> b_times = sr[n.stage][2];
      b_times.insert(b_times.end(), sr[n.stage][3].begin(), sr[n.stage][3].end());
      std::sort(b_times.begin(), b_times.end());
      deps = std::max(deps, b_times[n.mb]);
    }
    if (n.mb > 0) deps = std::max(deps, slot_list[n.mb - 1]);
    ++deps;
    bool ok = false;
    for (int t = deps; t < n.time; ++t) {
      if (!occupied[n.stage][t]) {
        slot_list[n.mb] = t;
        if (MemOfStage(sr[n.stage]) <= current_mem) {
          ok = true;
          break;
        }
      }
    }
    if (!ok) slot_list[n.mb] = n.time;
    occupied[n.stage][slot_list[n.mb]] = true;
  }
  if (!consider_w) {
    for (Slots& s : sr) PutW(s, false);
  }
  return EagerExecution(sr, std::vector<int64_t>(5, 1), 0).start;
}

// schedule_from_pattern with do_reorder: the pattern repeated every 6 slots, squeezed with W,
// squeezed again without, the W ops put back per chunk; the order of the final eager run.
std::vector<std::vector<std::pair<int, int>>> ScheduleFromPattern(
    const std::vector<std::array<int, 4>>& pattern, int nmb) {
  std::vector<Slots> sr;
  for (const auto& stage : pattern) {
    Slots s;
    for (int x : stage) {
      std::vector<int> list;
      for (int k = 0; k < nmb; ++k) list.push_back(x + 6 * k);
      s.push_back(std::move(list));
    }
    sr.push_back(std::move(s));
  }
  std::vector<Slots> r1 = Reorder(std::move(sr), /*consider_w=*/true);
  for (Slots& s : r1) s.resize(4);
  std::vector<Slots> r2 = Reorder(std::move(r1), /*consider_w=*/false);
  for (Slots& s : r2) {
    s.resize(4);
    PutW(s, /*split_w=*/true);
  }
  return EagerExecution(r2, {kFCost, kFCost, kBCost, kBCost, kWCost, kWCost}, kCommCost).order;
}

// The stable patterns of zbv_greedy.py: each stage's first slot for F, f, B, b.
std::vector<std::array<int, 4>> PatternVMin(int n) {
  const int interval = n % 3 == 0 ? 2 : 0;
  std::vector<std::array<int, 4>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({i, 2 * n - i - 1, 2 * n + interval + i, 4 * n + interval - i - 1});
  }
  return out;
}
std::vector<std::array<int, 4>> PatternVHalf(int n) {
  const int interval = n % 2 == 0 ? 3 : 0;
  std::vector<std::array<int, 4>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({i * 2, 3 * n - i - 2, 3 * n + interval + i * 2 - 1, 6 * n + interval - i - 2});
  }
  return out;
}

void FillFromGreedy(Schedule& s, const std::vector<std::array<int, 4>>& pattern) {
  const int p = s.num_ranks;
  const auto order = ScheduleFromPattern(pattern, s.num_microbatches);
  for (int r = 0; r < p; ++r) {
    for (const auto& [type, mb] : order[r]) {
      const int category = type / 2;
      s.actions[r].push_back(Action{VStage(category, type % 2, r, p), KindOf(category), mb});
    }
  }
}

// Fills s from the best of ZB-V's four tries under `params`; returns the rank peak memory.
int64_t FillFromZbv(Schedule& s, const ZbvParams& params) {
  ZbvScheduler scheduler(s.num_ranks, s.num_microbatches, params);
  ZbvResult best;
  bool have = false;
  for (bool fill_b : {true, false}) {
    for (bool fill_f : {true, false}) {
      ZbvResult r = scheduler.Try(fill_f, fill_b, nullptr);
      if (!have || r.max_bubble < best.max_bubble) {
        best = std::move(r);
        have = true;
      }
    }
  }
  const int p = s.num_ranks;
  for (int r = 0; r < p; ++r) {
    for (const ZbvOp& op : best.order[r]) {
      s.actions[r].push_back(
          Action{VStage(op.category, op.chunk, r, p), KindOf(op.category), op.microbatch});
    }
  }
  return best.peak_mem;
}

}  // namespace

// ZB-V (Qi et al. 2024, section 4; sail-sg zbv.py): the best of sail-sg's four fill variants
// (W ops filling the bubble before input gradients and before forwards, or not), each retried
// while its largest per-rank bubble shrinks, under a limit of 2p chunk activations (1F1B's
// memory, p whole-model activations). With F = B = W per chunk op and free communication, for
// m >= 2p, an iteration takes 6m + p - 1 ops: only the fill before the last rank's first
// forward remains (schedule_zoo_v_test.cc).
void BuildZBV(Schedule& s) { FillFromZbv(s, ZbvScheduler::DefaultParams(s.num_ranks)); }

namespace {

// Fixed-point units of one chunk's activations for zb-v-auto (a rank holds two chunks).
constexpr int64_t kChunkMemUnit = 1024;

// sail-sg's avg_then_mid (runtime.py): each rank's mean over its two chunks, then the median
// over ranks (the upper one for even p), rounded to ns.
int64_t AverageThenMedian(const Schedule& s, const std::vector<TimeNs>& per_stage) {
  const int p = s.num_ranks;
  std::vector<int64_t> per_rank(p);
  for (int r = 0; r < p; ++r) per_rank[r] = (per_stage[r] + per_stage[2 * p - 1 - r] + 1) / 2;
  std::sort(per_rank.begin(), per_rank.end());
  return per_rank[p / 2];
}

}  // namespace

// zb-v-auto: ZB-V's greedy (zbv.py) with the configuration's costs and memory limit instead of
// sail-sg's fixed ones. Costs are one per op kind, as zbv.py takes them: the median over ranks of
// each rank's two chunks (sail-sg's avg_then_mid); a chunk's forward holds half of the rank's
// micro-batch activations, its input gradient frees the share W does not keep (the mean of
// kept_after_input), and the limit is memory_limit rank activations (2 x memory_limit chunks).
Status BuildZBVAutoFromCosts(Schedule& s, const ScheduleCosts& costs) {
  double kept = 0;
  for (double k : costs.kept_after_input) kept += std::clamp(k, 0.0, 1.0);
  kept /= static_cast<double>(costs.kept_after_input.size());
  const int64_t w_mem = std::llround(kept * static_cast<double>(kChunkMemUnit));
  const ZbvParams params{
      {AverageThenMedian(s, costs.forward_ns), AverageThenMedian(s, costs.input_grad_ns),
       AverageThenMedian(s, costs.weight_grad_ns)},
      costs.comm_ns,
      {kChunkMemUnit, w_mem - kChunkMemUnit, -w_mem},
      static_cast<int64_t>(
          std::floor(2 * costs.memory_limit * static_cast<double>(kChunkMemUnit) + 1e-9))};
  const int64_t peak = FillFromZbv(s, params);
  if (peak > params.max_mem) {
    return Status::InvalidArgument(fmt::format(
        "zb-v-auto cannot keep within --memory-limit {:g} on {} ranks: ZB-V's greedy holds "
        "{:.2f} micro-batch activations on a rank (about p); give a larger --memory-limit, or "
        "use v-half (about p/2) or v-min (about p/3) for less memory",
        costs.memory_limit, s.num_ranks, static_cast<double>(peak) / (2 * kChunkMemUnit)));
  }
  return Status::Ok();
}

// V-Half (Qi et al. 2024; sail-sg zbv_greedy.py, stable_pattern_v_half): about half of 1F1B's
// activation memory, 2·((p+2)/2) chunk activations at peak (p + 2 for even p).
void BuildVHalf(Schedule& s) { FillFromGreedy(s, PatternVHalf(s.num_ranks)); }

// V-Min (Qi et al. 2024; sail-sg zbv_greedy.py, stable_pattern_v_min): about a third of 1F1B's
// activation memory, 2·((p+4)/3) chunk activations at peak.
void BuildVMin(Schedule& s) { FillFromGreedy(s, PatternVMin(s.num_ranks)); }

}  // namespace pipecast::internal
