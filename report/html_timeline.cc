// The HTML report's timeline (TimelineHtml in report/html_report.h): an SVG with
// one lane per rank for its compute ops, idle gaps and outgoing transfers, the
// critical path marked, and ops merged into busy spans where they would be
// slivers.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "report/html_report.h"
#include "report/internal/html_util.h"
#include "report/report.h"

namespace pipecast {
namespace {

using internal::kAxisPx;
using internal::kGutterPx;
using internal::TimeAxis;
using internal::UsAttr;

// A label fits an op when it is this wide per digit plus padding (10 px font).
constexpr double kLabelPxPerChar = 6.5;
constexpr double kLabelPadPx = 3;
// A merged span is drawn at least this wide, so a lone narrow op stays visible.
constexpr double kMinSpanPx = 1.0;
// Critical ops narrower than this get no outline (class "thin"): on a
// few pixels the outline would hide the op's colour; the bar under the lane
// still marks them.
constexpr double kOutlineMinPx = 8.0;
// Height of the critical-path bar under a rank's ops.
constexpr double kCritBarPx = 2;
// Above this share of narrow ops a chart is dense: every lane is drawn as
// merged spans, since wide ops left alone would cut the narrow runs between
// them into single slivers (1F1B at p = 64: 1 px forwards between 2 px
// backwards).
constexpr double kDenseShare = 0.1;
// In a dense chart a gap narrower than a few ops reads as texture, not as an
// idle period: spans close such gaps, and show the idle time they hold by a
// lighter shade. Wider gaps (the fill and drain bubbles) stay hatched.
constexpr double kDenseGapPx = 6.0;
// Ops of one kind in a row that make a phase of their own, which no span crosses:
// enough to be a warm-up or drain, more than the pairs of a steady state.
constexpr int kPurePhaseOps = 3;
// A busy span's opacity: kSpanMinOpacity when all idle, 1 when all busy.
constexpr double kSpanMinOpacity = 0.35;
// The most bars with a tooltip (ops, merged spans, idle gaps, transfers) one
// chart (the 1x chart or a zoom level's) holds. Past it the chart merges ops
// and transfers narrower than a wider width (kMergeGrowth times, and again,
// until it fits), so a report's size and the time a browser takes to draw it
// stay bounded however many ops the run has: three charts of at most 4000
// tooltips each, about 350 bytes apiece, keep the timeline near 4 MB
// (docs/report.md). 1F1B at p = 32, m = 256 drew 82 362 tooltips (25.2 MB)
// before.
constexpr int kMaxTooltipsPerChart = 4000;
// How much wider each try merges, and how many tries before a chart is drawn
// as it is: small steps, so that a zoomed chart keeps as many bars as fit.
constexpr double kMergeGrowth = 1.25;
constexpr int kMaxMergeSteps = 60;

// Heights of one rank's lanes: fewer ranks get taller lanes and labels.
struct Lanes {
  double op_h;    // compute ops
  double comm_h;  // transfers (activations above gradients)
  double gap;     // space before the next rank
  double Row() const { return op_h + kCritBarPx + 1 + comm_h + gap; }
};

Lanes LanesFor(int ranks) {
  if (ranks <= 8) return {26, 10, 8};
  if (ranks <= 24) return {18, 8, 6};
  return {11, 6, 4};  // p = 64 fits in about 1500 px
}

const char* KindWord(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kBackwardInput:
      return "input-gradient backward";
    case OpKind::kBackwardWeight:
      return "weight-gradient backward";
  }
  return "?";
}

std::string Rect(double x, double y, double w, double h) {
  return fmt::format("x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"", Px(x), Px(y), Px(w), Px(h));
}

// What one rectangle of a lane stands for: one op or transfer (`count` 1,
// `index` its record), or a run of narrow ones merged into a span.
struct Block {
  TimeNs start = 0;
  TimeNs end = 0;
  TimeNs busy = 0;  // ops: summed durations
  int count = 0;
  int index = -1;  // the record when count == 1
  int critical = 0;
  std::string kinds;  // op kinds in it, in F B I W order
};

void AddKind(std::string* kinds, char kind) {
  if (kinds->find(kind) != std::string::npos) return;
  std::string sorted;
  for (char c : std::string("FBIW")) {
    if (c == kind || kinds->find(c) != std::string::npos) sorted.push_back(c);
  }
  *kinds = sorted;
}

class TimelineBuilder {
 public:
  // `zoom`: drawn this many times wider (kZoomLevels); ops are merged by
  // their width at this zoom: those narrower than `merge_px`.
  explicit TimelineBuilder(const SimResult& r, int zoom = 1, double merge_px = kMinOpPx)
      : r_(r),
        axis_(internal::TimeAxisFor(r).Zoomed(zoom)),
        lanes_(LanesFor(r.ranks)),
        merge_px_(merge_px),
        dense_gap_px_(kDenseGapPx * merge_px / kMinOpPx) {
    int narrow = 0;
    std::vector<int> lane_ops(r.ranks, 0), lane_narrow(r.ranks, 0);
    for (const OpRecord& op : r.ops) {
      pipe_end_ = std::max(pipe_end_, op.end_ns);
      const bool thin = W(op.start_ns, op.end_ns) < kMinOpPx;  // slivers make a lane dense
      narrow += thin;
      if (op.rank >= 0 && op.rank < r.ranks) {
        ++lane_ops[op.rank];
        lane_narrow[op.rank] += thin;
      }
    }
    dense_ = narrow > kDenseShare * static_cast<double>(r.ops.size());
    // Zoomed, each lane decides for itself: one rank of slivers (an
    // embedding stage) must not grey out the ranks whose ops are now wide.
    lane_dense_.assign(r.ranks, dense_);
    if (zoom > 1) {
      for (int k = 0; k < r.ranks; ++k) {
        lane_dense_[k] = lane_narrow[k] > kDenseShare * static_cast<double>(lane_ops[k]);
      }
    }
    FindPairs();
    op_critical_.assign(r.ops.size(), false);
    xfer_critical_.assign(r.transfers.size(), false);
    if (r.critical_path) {
      for (const CriticalStep& s : r.critical_path->steps) {
        if (s.kind == CriticalStep::Kind::kCompute && s.op >= 0) op_critical_[s.op] = true;
        if (s.kind == CriticalStep::Kind::kCommunication && s.transfer >= 0) {
          xfer_critical_[s.transfer] = true;
        }
      }
    }
  }

  // The SVG; afterwards the counters below describe what was merged.
  std::string Svg() {
    merged_ops_ = busy_spans_ = merged_xfers_ = tooltips_ = 0;
    const double top = kAxisPx + 4;
    const double height = top + r_.ranks * lanes_.Row() + 2;
    std::string body;
    for (int k = 0; k < r_.ranks; ++k) body += RankLane(k, top + k * lanes_.Row());
    std::string out = fmt::format(
        "<svg class=\"{11}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
        "height=\"{1}\" viewBox=\"0 0 {0} {1}\" data-ranks=\"{2}\" data-ops=\"{3}\" "
        "data-transfers=\"{4}\" data-span-us=\"{5}\" data-axis-end-us=\"{6}\" data-mode=\"{7}\" "
        "data-merged-ops=\"{8}\" data-busy-spans=\"{9}\" data-merged-transfers=\"{10}\" "
        "data-zoom=\"{12}\" role=\"img\" aria-label=\"timeline per rank\">\n",
        Px(axis_.SvgWidthPx()), Px(height), r_.ranks, r_.ops.size(), r_.transfers.size(),
        UsAttr(pipe_end_), UsAttr(axis_.end_ns()),
        axis_.zoom() > 1 ? "per-lane" : (dense_ ? "dense" : "detailed"), merged_ops_, busy_spans_,
        merged_xfers_, axis_.zoom() == 1 ? "timeline" : "timeline-zoomed", axis_.zoom());
    out += internal::TimeAxisSvg(axis_, top, height - 2);
    out += body;
    out += "</svg>\n";
    return out;
  }

  bool dense() const { return dense_; }
  double merge_px() const { return merge_px_; }
  double dense_gap_px() const { return dense_gap_px_; }
  // Bars with a tooltip in the SVG last made.
  int tooltips() const { return tooltips_; }
  int merged_ops() const { return merged_ops_; }
  int busy_spans() const { return busy_spans_; }
  int merged_transfers() const { return merged_xfers_; }
  int critical_ops() const {
    return static_cast<int>(std::count(op_critical_.begin(), op_critical_.end(), true));
  }
  const TimeAxis& axis() const { return axis_; }

 private:
  double W(TimeNs a, TimeNs b) const { return static_cast<double>(b - a) * axis_.PxPerNs(); }

  // An overlapped F&B pair (docs/simulator.md, "Overlapped F&B") is two
  // records back to back on one rank, its forward half then its backward
  // half, each with its share of the pair's time; the halves run together,
  // so each is drawn over the whole pair, the forward in the lane's upper
  // half and the backward in its lower half. Fills span_ and half_.
  void FindPairs() {
    const std::vector<OpRecord>& ops = r_.ops;
    span_.resize(ops.size());
    half_.assign(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i) span_[i] = {ops[i].start_ns, ops[i].end_ns};
    for (size_t i = 0; i + 1 < ops.size(); ++i) {
      const OpRecord& f = ops[i];
      const OpRecord& b = ops[i + 1];
      if (f.action.overlapped && b.action.overlapped && f.rank == b.rank &&
          f.action.kind == OpKind::kForward && b.action.kind != OpKind::kForward) {
        span_[i] = span_[i + 1] = {f.start_ns, std::max(f.end_ns, b.end_ns)};
        half_[i] = 1;
        half_[i + 1] = 2;
        ++i;
      }
    }
  }

  std::string RankLane(int k, double y0) {
    lane_dense_now_ = lane_dense_[k];
    const double comm_y = y0 + lanes_.op_h + kCritBarPx + 1;
    std::string out = fmt::format("<g class=\"rank\" data-rank=\"{}\" data-span-us=\"{}\">\n", k,
                                  UsAttr(pipe_end_));
    out +=
        fmt::format("<rect class=\"lane\" {}/>", Rect(kGutterPx, y0, W(0, pipe_end_), lanes_.op_h));
    out += fmt::format("<rect class=\"comm-lane\" {}/>\n",
                       Rect(kGutterPx, comm_y, W(0, axis_.end_ns()), lanes_.comm_h));
    const StageResult* sr = k < static_cast<int>(r_.per_rank.size()) ? &r_.per_rank[k] : nullptr;
    // With tensor parallelism the rank's GPUs show on hover (the gutter is narrow).
    const std::string gpus =
        r_.tensor_parallel > 1 || r_.context_parallel > 1
            ? fmt::format("<title>rank {} ({})</title>", k,
                          RankGpusText(k, r_.tensor_parallel, r_.context_parallel))
            : "";
    tooltips_ += r_.tensor_parallel > 1 || r_.context_parallel > 1;
    out += fmt::format(
        "<text class=\"rank-label\" x=\"8\" y=\"{}\" dominant-baseline=\"central\">"
        "rank {}{}</text>",
        Px(y0 + lanes_.op_h / 2), k, gpus);
    if (sr != nullptr && lanes_.op_h >= 18) {
      out += fmt::format(
          "<text class=\"rank-note\" x=\"8\" y=\"{}\" dominant-baseline=\"central\">"
          "idle {} of span</text>",
          Px(comm_y + lanes_.comm_h / 2), PercentText(sr->bubble_ratio));
    }
    out += "\n";
    std::vector<int> ops;
    for (size_t i = 0; i < r_.ops.size(); ++i) {
      if (r_.ops[i].rank == k) ops.push_back(static_cast<int>(i));
    }
    const std::vector<Block> blocks = OpBlocks(ops);
    out += IdleRects(k, blocks, y0);
    for (const Block& b : blocks) out += b.count == 1 ? OpRect(b.index, y0) : SpanRect(k, b, y0);
    out += CriticalBars(k, ops, y0 + lanes_.op_h + 0.5);
    out += TransferRects(k, false, comm_y, lanes_.comm_h / 2 - 0.5);
    out += TransferRects(k, true, comm_y + lanes_.comm_h / 2, lanes_.comm_h / 2 - 0.5);
    if (sr != nullptr && r_.iterations_simulated == 1 && sr->allreduce_ns > 0) {
      ++tooltips_;
      const TimeNs a = sr->last_end_ns, b = sr->last_end_ns + sr->allreduce_ns;
      out += fmt::format(
          "<rect class=\"allreduce\" data-rank=\"{}\" data-start-us=\"{}\" data-end-us=\"{}\" "
          "{}><title>rank {}: gradient all-reduce across {} replicas, {} → {}</title></rect>\n",
          k, UsAttr(a), UsAttr(b), Rect(axis_.X(a), comm_y, std::max(W(a, b), 1.0), lanes_.comm_h),
          k, r_.data_parallel, axis_.Time(a), axis_.Time(b));
    }
    out += "</g>\n";
    return out;
  }

  // Groups a lane's items (in start order) into blocks. An item that is at
  // least kMinOpPx wide stays alone unless the lane is dense; narrow items join the
  // open run when they start less than `gap_px` after its end and `phase`
  // (one value per item; empty: all equal) does not change. `start_end`
  // gives the span an item is drawn over; `busy` the time it is busy (an
  // overlapped pair's half is drawn over the pair but busy for its share).
  template <typename StartEnd, typename Busy>
  std::vector<Block> Blocks(const std::vector<int>& items, double gap_px, StartEnd start_end,
                            Busy busy, const std::vector<int>& phase = {}) {
    std::vector<Block> out;
    bool open = false;
    for (size_t n = 0; n < items.size(); ++n) {
      const int i = items[n];
      const auto [start, end] = start_end(i);
      const bool alone = !lane_dense_now_ && W(start, end) >= merge_px_;
      const bool new_phase = !phase.empty() && n > 0 && phase[n] != phase[n - 1];
      // A chart merging wider than kMinOpPx to stay within its tooltip
      // bound also closes a span once it is that wide: bars of about the
      // merge width, instead of one span per phase.
      const bool full =
          merge_px_ > kMinOpPx && open && W(out.back().start, out.back().end) >= merge_px_;
      if (open && (alone || new_phase || full || W(out.back().end, start) >= gap_px)) open = false;
      if (!open) {
        out.push_back(Block{start, end, 0, 0, i, 0, ""});
        open = !alone;
      }
      Block& b = out.back();
      b.end = std::max(b.end, end);
      b.busy += busy(i);
      ++b.count;
    }
    return out;
  }

  // Phases of a rank's ops: runs of at least kPurePhaseOps ops of one kind
  // (a warm-up of forwards, a drain of backwards) each get their own phase
  // number, and the ops between them share one; spans never cross phases.
  std::vector<int> Phases(const std::vector<int>& ops) const {
    std::vector<int> phase(ops.size(), 0);
    int current = 0;
    bool in_mixed = false;
    for (size_t n = 0; n < ops.size();) {
      size_t m = n + 1;
      const OpKind kind = r_.ops[ops[n]].action.kind;
      while (m < ops.size() && r_.ops[ops[m]].action.kind == kind) ++m;
      const bool pure = m - n >= static_cast<size_t>(kPurePhaseOps);
      if (pure || !in_mixed) ++current;
      in_mixed = !pure;
      for (size_t j = n; j < m; ++j) phase[j] = current;
      n = m;
    }
    return phase;
  }

  std::vector<Block> OpBlocks(const std::vector<int>& ops) {
    std::vector<Block> blocks = Blocks(
        ops, lane_dense_now_ ? dense_gap_px_ : merge_px_, [&](int i) { return span_[i]; },
        [&](int i) { return r_.ops[i].end_ns - r_.ops[i].start_ns; }, Phases(ops));
    // Fill in kinds and critical counts: blocks hold consecutive ops.
    size_t next = 0;
    for (Block& b : blocks) {
      for (int n = 0; n < b.count; ++n, ++next) {
        const int i = ops[next];
        AddKind(&b.kinds, OpKindLetter(r_.ops[i].action.kind));
        if (op_critical_[i]) ++b.critical;
      }
    }
    return blocks;
  }

  // The rank's gaps between 0 and the end of the pipeline, outside blocks.
  std::string IdleRects(int k, const std::vector<Block>& blocks, double y) {
    std::string out;
    TimeNs cursor = 0;
    auto gap = [&](TimeNs a, TimeNs b) {
      ++tooltips_;
      out += fmt::format(
          "<rect class=\"idle\" data-rank=\"{}\" data-start-us=\"{}\" data-end-us=\"{}\" {}>"
          "<title>rank {} idle {} → {}</title></rect>\n",
          k, UsAttr(a), UsAttr(b), Rect(axis_.X(a), y, W(a, b), lanes_.op_h), k, axis_.Time(a),
          axis_.Time(b));
    };
    for (const Block& b : blocks) {
      if (b.start > cursor) gap(cursor, b.start);
      cursor = std::max(cursor, b.end);
    }
    if (cursor < pipe_end_) gap(cursor, pipe_end_);
    return out;
  }

  std::string OpRect(int i, double lane_y) {
    ++tooltips_;
    const OpRecord& op = r_.ops[i];
    const Action& a = op.action;
    const char kind = OpKindLetter(a.kind);
    const bool alt = r_.ranks > 0 && (a.stage / r_.ranks) % 2 == 1;
    const auto [from, to] = span_[i];
    const double x = axis_.X(from), w = W(from, to);
    const double h = half_[i] == 0 ? lanes_.op_h : lanes_.op_h / 2;
    const double y = half_[i] == 2 ? lane_y + lanes_.op_h / 2 : lane_y;
    std::string out = fmt::format(
        "<rect class=\"op op-{}{}{}{}\" data-rank=\"{}\" data-stage=\"{}\" data-mb=\"{}\" "
        "data-start-us=\"{}\" data-end-us=\"{}\" {}><title>rank {} · {}: {} of stage {}, "
        "micro-batch {}, {} → {}{}{}</title></rect>",
        kind, alt ? " alt" : "",
        op_critical_[i] ? (w < kOutlineMinPx ? " critical thin" : " critical") : "",
        half_[i] != 0 ? " pair-half" : "", op.rank, a.stage, a.microbatch, UsAttr(op.start_ns),
        UsAttr(op.end_ns), Rect(x, y, std::max(w, kMinSpanPx), h), op.rank, ActionName(a),
        KindWord(a.kind), a.stage, a.microbatch, axis_.Time(from), axis_.Time(to),
        a.overlapped ? fmt::format(" · half of an overlapped F&B pair, running with the other "
                                   "half for the pair's whole span ({} of it is this half's "
                                   "share)",
                                   axis_.Time(op.end_ns - op.start_ns))
                     : "",
        op_critical_[i] ? " · on the critical path" : "");
    const std::string label = fmt::format("{}", a.microbatch);
    if (w >= kLabelPxPerChar * static_cast<double>(label.size()) + kLabelPadPx && h >= 11) {
      out += fmt::format("<text class=\"oplabel\" x=\"{}\" y=\"{}\">{}</text>", Px(x + w / 2),
                         Px(y + h / 2), label);
    }
    return out + "\n";
  }

  std::string SpanRect(int k, const Block& s, double y) {
    ++tooltips_;
    ++busy_spans_;
    merged_ops_ += s.count;
    const std::string kind_class =
        s.kinds.size() == 1 ? std::string("busy-") + s.kinds : std::string("busy-mixed");
    const double busy_share =
        static_cast<double>(s.busy) / static_cast<double>(std::max<TimeNs>(s.end - s.start, 1));
    return fmt::format(
        "<rect class=\"busy {}\" data-rank=\"{}\" data-ops=\"{}\" data-kinds=\"{}\" "
        "data-busy-us=\"{}\" data-critical-ops=\"{}\" data-start-us=\"{}\" data-end-us=\"{}\" "
        "fill-opacity=\"{:.2f}\" {}><title>rank {}: {} ops merged ({}), busy {} of {} → {} ({} "
        "busy){}</title></rect>\n",
        kind_class, k, s.count, s.kinds, UsAttr(s.busy), s.critical, UsAttr(s.start), UsAttr(s.end),
        kSpanMinOpacity + (1 - kSpanMinOpacity) * busy_share,
        Rect(axis_.X(s.start), y, std::max(W(s.start, s.end), kMinSpanPx), lanes_.op_h), k, s.count,
        s.kinds, axis_.Time(s.busy), axis_.Time(s.start), axis_.Time(s.end),
        PercentText(busy_share),
        s.critical > 0 ? fmt::format(", {} on the critical path", s.critical) : "");
  }

  // A dark bar under each run of critical ops, merged below a pixel apart.
  std::string CriticalBars(int k, const std::vector<int>& ops, double y) const {
    std::string out;
    bool open = false;
    TimeNs a = 0, b = 0;
    auto emit = [&] {
      out += fmt::format(
          "<rect class=\"crit-mark\" data-rank=\"{}\" data-start-us=\"{}\" data-end-us=\"{}\" "
          "{}/>\n",
          k, UsAttr(a), UsAttr(b), Rect(axis_.X(a), y, std::max(W(a, b), kMinSpanPx), kCritBarPx));
    };
    for (int i : ops) {
      if (!op_critical_[i]) continue;
      const OpRecord& op = r_.ops[i];
      if (open && W(b, op.start_ns) < 1.0) {
        b = std::max(b, op.end_ns);
        continue;
      }
      if (open) emit();
      a = op.start_ns;
      b = op.end_ns;
      open = true;
    }
    if (open) emit();
    return out;
  }

  std::string TransferRect(int i, double y, double h) {
    ++tooltips_;
    const TransferRecord& t = r_.transfers[i];
    const char* what = t.gradient ? "gradient" : "activation";
    return fmt::format(
        "<rect class=\"xfer xfer-{}{}\" data-src-rank=\"{}\" data-dst-rank=\"{}\" "
        "data-src-stage=\"{}\" data-dst-stage=\"{}\" data-mb=\"{}\" data-bytes=\"{}\" "
        "data-start-us=\"{}\" data-end-us=\"{}\" {}><title>{} of micro-batch {}, stage {} → {} "
        "(rank {} → {}), {} bytes, {} → {}{}</title></rect>\n",
        t.gradient ? "grad" : "act", xfer_critical_[i] ? " critical" : "", t.src_rank, t.dst_rank,
        t.src_stage, t.dst_stage, t.microbatch, t.bytes, UsAttr(t.start_ns), UsAttr(t.end_ns),
        Rect(axis_.X(t.start_ns), y, std::max(W(t.start_ns, t.end_ns), kMinSpanPx), h), what,
        t.microbatch, t.src_stage, t.dst_stage, t.src_rank, t.dst_rank, t.bytes,
        axis_.Time(t.start_ns), axis_.Time(t.end_ns),
        xfer_critical_[i] ? " · on the critical path" : "");
  }

  // Rank k's outgoing transfers of one direction, narrow ones merged.
  std::string TransferRects(int k, bool gradient, double y, double h) {
    std::vector<std::tuple<TimeNs, TimeNs, int>> list;
    for (size_t i = 0; i < r_.transfers.size(); ++i) {
      const TransferRecord& t = r_.transfers[i];
      if (t.src_rank == k && t.gradient == gradient) {
        list.emplace_back(t.start_ns, t.end_ns, static_cast<int>(i));
      }
    }
    std::sort(list.begin(), list.end());
    std::vector<int> order;
    for (const auto& item : list) order.push_back(std::get<2>(item));
    const std::vector<Block> blocks = Blocks(
        order, lane_dense_now_ ? dense_gap_px_ : merge_px_,
        [&](int i) {
          return std::pair<TimeNs, TimeNs>(r_.transfers[i].start_ns, r_.transfers[i].end_ns);
        },
        [&](int i) { return r_.transfers[i].end_ns - r_.transfers[i].start_ns; });
    std::string out;
    const char* dir = gradient ? "grad" : "act";
    for (const Block& b : blocks) {
      if (b.count == 1) {
        out += TransferRect(b.index, y, h);
        continue;
      }
      merged_xfers_ += b.count;
      ++tooltips_;
      out += fmt::format(
          "<rect class=\"xfer-span xfer-{}\" data-rank=\"{}\" data-transfers=\"{}\" "
          "data-start-us=\"{}\" data-end-us=\"{}\" {}><title>rank {}: {} {} transfers merged, "
          "{} → {}</title></rect>\n",
          dir, k, b.count, UsAttr(b.start), UsAttr(b.end),
          Rect(axis_.X(b.start), y, std::max(W(b.start, b.end), kMinSpanPx), h), k, b.count,
          gradient ? "gradient" : "activation", axis_.Time(b.start), axis_.Time(b.end));
    }
    return out;
  }

  const SimResult& r_;
  TimeAxis axis_;
  Lanes lanes_;
  TimeNs pipe_end_ = 0;
  bool dense_ = false;            // the whole chart's mode (1x: every lane's)
  std::vector<bool> lane_dense_;  // each lane's mode
  bool lane_dense_now_ = false;   // the mode of the lane being drawn
  std::vector<bool> op_critical_;
  std::vector<bool> xfer_critical_;
  std::vector<std::pair<TimeNs, TimeNs>> span_;  // per op: the span it is drawn over
  std::vector<int> half_;  // per op: 0, or 1 / 2 for a pair's forward / backward half
  int merged_ops_ = 0;
  int busy_spans_ = 0;
  int merged_xfers_ = 0;
  int tooltips_ = 0;
  double merge_px_;      // ops and transfers narrower than this are merged
  double dense_gap_px_;  // in a dense lane, spans close gaps narrower than this
};

// A chart at `zoom` within kMaxTooltipsPerChart: drawn with the usual merge
// width, then twice it, and so on until it fits. Returns the SVG; `builder`
// is left as the one that drew it.
std::string BoundedSvg(const SimResult& r, int zoom, std::optional<TimelineBuilder>* builder) {
  double merge_px = kMinOpPx;
  for (int n = 0;; ++n, merge_px *= kMergeGrowth) {
    builder->emplace(r, zoom, merge_px);
    std::string svg = (*builder)->Svg();
    if ((*builder)->tooltips() <= kMaxTooltipsPerChart || n == kMaxMergeSteps) return svg;
  }
}

std::string Swatch(const char* cls, const std::string& text) {
  return fmt::format("<span><i class=\"sw {}\"></i>{}</span>", cls, text);
}

std::string Legend(const SimResult& r, bool merged) {
  bool kinds[4] = {false, false, false, false};
  for (const OpRecord& op : r.ops) kinds[static_cast<int>(op.action.kind)] = true;
  std::string out = "<div class=\"legend\">";
  const char* names[4] = {"F forward", "B backward", "I input-gradient backward",
                          "W weight-gradient backward"};
  const char* classes[4] = {"sw-F", "sw-B", "sw-I", "sw-W"};
  for (int i = 0; i < 4; ++i) {
    if (kinds[i]) out += Swatch(classes[i], names[i]);
  }
  if (r.stages > r.ranks) out += Swatch("sw-F sw-alt", "lighter: odd model chunks of a rank");
  if (merged) out += Swatch("sw-mixed", "merged ops of several kinds");
  out += Swatch("sw-idle", "idle");
  out += Swatch("sw-act", "activation sent (upper comm lane)");
  out += Swatch("sw-grad", "gradient sent (lower comm lane)");
  if (r.allreduce_ns > 0 && r.iterations_simulated == 1) out += Swatch("sw-ar", "all-reduce");
  if (r.critical_path) out += Swatch("sw-crit", "critical path");
  return out + "</div>\n";
}

// The zoom buttons: radio inputs, one per level, each followed by its label;
// the frames of the levels' charts follow them, so that `input:checked ~
// frame` (CSS only, ZoomCss) shows one. The page stays script-free. Opens a
// <div class="zoom"> that the caller closes after the frames.
std::string ZoomControls() {
  std::string out = "<div class=\"zoom\" role=\"radiogroup\" aria-label=\"timeline zoom\">";
  for (int z : internal::kZoomLevels) {
    out += fmt::format(
        "<input type=\"radio\" name=\"tl-zoom\" id=\"tl-zoom-{0}\" value=\"{0}\"{1}>"
        "<label for=\"tl-zoom-{0}\">{0}×</label>",
        z, z == 1 ? " checked=\"checked\"" : "");
  }
  return out + "\n";
}

// "4 or 16".
std::string ZoomLevelsText() {
  std::string out;
  const size_t n = std::size(internal::kZoomLevels);
  for (size_t i = 1; i < n; ++i) {
    if (i > 1) out += i + 1 == n ? " or " : ", ";
    out += fmt::format("{}", internal::kZoomLevels[i]);
  }
  return out;
}

std::string LayerRanges(const std::vector<StageLayers>& layers) {
  std::string out;
  for (const StageLayers& l : layers) {
    if (!out.empty()) out += ", ";
    out += l.first_layer == l.last_layer ? fmt::format("{}", l.first_layer)
                                         : fmt::format("{}–{}", l.first_layer, l.last_layer);
  }
  return out.empty() ? "-" : out;
}

std::string RankTable(const SimResult& r) {
  std::string out =
      "<table class=\"ranks\"><tr><th>rank</th><th class=\"l\">stages</th><th class=\"l\">"
      "layers</th><th>busy ms</th><th>idle ms</th><th>bubble ratio</th><th>bubble/ideal</th>"
      "<th>peak in-flight micro-batches</th></tr>\n";
  for (const StageResult& s : r.per_rank) {
    std::string stages;
    for (int v : s.stages) stages += (stages.empty() ? "" : ", ") + fmt::format("{}", v);
    out += fmt::format(
        "<tr data-rank=\"{}\"><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>"
        "<td>{:.3f}</td><td>{:.3f}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        s.rank, s.rank, stages, LayerRanges(s.layers), static_cast<double>(s.busy_ns) / 1e6,
        static_cast<double>(r.pipeline_ns - s.busy_ns) / 1e6, PercentText(s.bubble_ratio),
        PercentText(s.bubble_fraction_of_ideal), s.peak_inflight_microbatches);
  }
  return out + "</table>\n";
}

// The chart's caption up to the zoom: what it shows, the critical path, the
// iterations drawn, and what was merged to keep it in bounds.
std::string TimelineCaption(const SimResult& r, const TimelineBuilder& builder) {
  std::string caption = fmt::format(
      "Time runs left to right in {}, one lane per rank (GPU): its {} ops, labelled with their "
      "micro-batch where they are wide enough (hover any bar for details); hatched gaps are idle "
      "time. The thin lane under each rank shows what it sends: activations above, gradients "
      "below",
      builder.axis().Unit(), r.ops.size());
  if (r.allreduce_ns > 0 && r.iterations_simulated == 1) {
    caption += ", then the gradient all-reduce across the data-parallel replicas";
  }
  caption += ".";
  if (r.critical_path) {
    caption += fmt::format(
        " The critical path, the chain of ops and transfers that sets the pipeline's length, is "
        "underlined in black, and outlined where an op is wide enough ({} ops).",
        builder.critical_ops());
  }
  if (r.iterations_simulated > 1) {
    caption += fmt::format(
        " The {} iterations simulated to reach the steady state of this schedule (no flush) are "
        "all drawn.",
        r.iterations_simulated);
  }
  if (builder.merged_ops() > 0) {
    caption += fmt::format(
        " <b>Merged:</b> at this scale {} of the {} ops are narrower than {:g} px, so runs of "
        "them are drawn as {} busy spans, in their kind's colour when they hold one kind and "
        "grey when they mix kinds (hover for counts).",
        builder.merged_ops(), r.ops.size(), builder.merge_px(), builder.busy_spans());
    if (builder.dense()) {
      caption += fmt::format(
          " Every lane is drawn this way, and a span also closes idle gaps narrower than {:g} px: "
          "the more idle time it holds, the lighter its shade.",
          builder.dense_gap_px());
    }
    caption += " Simulate fewer micro-batches, or open the --trace in Perfetto, to see every op.";
  }
  if (builder.merged_transfers() > 0) {
    caption += fmt::format(" {} transfers narrower than {:g} px are merged the same way.",
                           builder.merged_transfers(), builder.merge_px());
  }
  return caption;
}

// The zoom levels past 1x, each drawn again at its width in a frame of its
// own, appended to `out`; returns the levels that still merge over more than
// kMinOpPx ("" when none does).
std::string AppendZoomFrames(const SimResult& r, std::string* out) {
  std::string wider;
  for (int z : internal::kZoomLevels) {
    if (z == 1) continue;
    *out += fmt::format("<div class=\"tl-scroll tl-z{}\">\n", z);
    std::optional<TimelineBuilder> zoomed;
    *out += BoundedSvg(r, z, &zoomed);
    *out += "</div>\n";
    if (zoomed->merge_px() > kMinOpPx) {
      wider += fmt::format("{}{}× below {:g} px", wider.empty() ? "" : ", ", z, zoomed->merge_px());
    }
  }
  return wider;
}

}  // namespace

std::string TimelineHtml(const SimResult& r) {
  std::optional<TimelineBuilder> bounded;
  const std::string svg = BoundedSvg(r, 1, &bounded);
  const TimelineBuilder& builder = *bounded;
  std::string caption = TimelineCaption(r, builder);
  // Zoom where the chart had to merge: each level drawn again at its width,
  // so that ops merged at 1x get their own bars (and labels) when zoomed.
  // Appended piece by piece into one string: the frames are most of the
  // page, and every `a + b` of them held another copy.
  const bool zoom = builder.merged_ops() > 0 || builder.merged_transfers() > 0;
  std::string wider;  // zoom levels that merge over more than kMinOpPx to stay in bounds
  std::string out = Legend(r, builder.merged_ops() > 0);
  out += "<figure class=\"timeline\">\n";
  if (zoom) out += ZoomControls();
  out += "<div class=\"tl-scroll tl-z1\">\n";
  out += svg;
  out += "</div>\n";
  if (zoom) {
    caption += fmt::format(
        " <b>Zoom:</b> the buttons above the chart draw it {} times wider in a frame that "
        "scrolls sideways; the merging above is redone at each width.",
        ZoomLevelsText());
    wider = AppendZoomFrames(r, &out);
    out += "</div>\n";
    if (!wider.empty()) {
      caption +=
          fmt::format(" Zoomed, ops are merged below more than {:g} px too: {}.", kMinOpPx, wider);
    }
  }
  if (builder.merge_px() > kMinOpPx || !wider.empty()) {
    caption += fmt::format(
        " To keep the page small and quick to open, each chart holds at most {} bars with a "
        "tooltip, merging narrow ops over a wider width where it would hold more.",
        kMaxTooltipsPerChart);
  }
  out += "<figcaption>";
  out += caption;
  out += "</figcaption>\n</figure>\n";
  out += RankTable(r);
  return out;
}

}  // namespace pipecast
