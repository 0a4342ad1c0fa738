#include "report/html_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "testing/html_test_util.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::FindElements;
using ::pipecast::test_util::HtmlElement;
using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::pipecast::test_util::WithoutZoomedCopies;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;
constexpr Bytes kAct = 100 * kMiB;

// A cluster with real links and 16 GiB GPUs: transfers take time, memory is finite.
Cluster LinkedCluster() {
  Cluster c = IdealCluster();
  c.name = "test-16g";
  c.gpu.memory_bytes = 16 * kGiB;
  c.intra_node = Link{10.0, 20.0};
  c.inter_node = Link{1.0, 50.0};
  return c;
}

// The tools' options: the timeline and its critical path.
SimOptions WithCriticalPath() {
  SimOptions o;
  o.critical_path = true;
  return o;
}

struct Simulation {
  Model model;
  Cluster cluster;
  Schedule schedule;
  SimOptions options = WithCriticalPath();
  SimResult result;
  std::string html;
};

// Simulates `kind` on p ranks, m micro-batches, one layer per virtual stage.
Simulation Simulated(ScheduleKind kind, int p, int m, Cluster cluster = LinkedCluster(),
                     int chunks = 1, std::string model_name = "uniform") {
  Simulation run;
  run.model = UniformModel(p * chunks, kF, kB, kAct, 8 * kMiB, 10'000'000);
  for (Layer& l : run.model.layers) l.profiles[0].backward_weight_ns = kB / 2;
  run.model.name = std::move(model_name);
  run.cluster = std::move(cluster);
  run.schedule = MakeSchedule(kind, p, m, chunks).value();
  auto result = Simulate(run.model, run.cluster, run.schedule, run.options);
  EXPECT_TRUE(result.ok()) << result.status().message();
  run.result = std::move(result.value());
  run.html = SimulationReportHtml(
      run.result, MakeReportInputs(run.model, run.cluster, run.schedule, run.options,
                                   "simulator --model m.json --stages " + std::to_string(p)));
  return run;
}

// (rank, stage, kind, micro-batch, start, end) of every op.
using OpKey = std::tuple<int, int, char, int, TimeNs, TimeNs>;

char KindOf(const HtmlElement& e) {
  for (char k : std::string("FBIW")) {
    if (e.HasClass(std::string("op-") + k)) return k;
  }
  return '?';
}

TEST(HtmlReportTimeline, OneRectPerOpWithTheSimulatedRankMicroBatchAndTimes) {
  // Given 1F1B on 4 ranks with real links, drawn in detail
  const Simulation run = Simulated(ScheduleKind::k1F1B, 4, 8);
  const auto svg = FindElements(WithoutZoomedCopies(run.html), "svg", "timeline");
  ASSERT_EQ(svg.size(), 1u);
  EXPECT_EQ(svg[0].Attr("data-mode"), "detailed");
  // When the op rects are read back, then they are the simulation's ops.
  std::vector<OpKey> drawn, simulated;
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "op")) {
    drawn.emplace_back(e.Int("data-rank"), e.Int("data-stage"), KindOf(e), e.Int("data-mb"),
                       e.Ns("data-start-us"), e.Ns("data-end-us"));
  }
  for (const OpRecord& op : run.result.ops) {
    simulated.emplace_back(op.rank, op.action.stage, OpKindLetter(op.action.kind),
                           op.action.microbatch, op.start_ns, op.end_ns);
  }
  std::sort(drawn.begin(), drawn.end());
  std::sort(simulated.begin(), simulated.end());
  EXPECT_EQ(drawn.size(), run.result.ops.size());
  EXPECT_EQ(drawn, simulated);
  EXPECT_TRUE(FindElements(WithoutZoomedCopies(run.html), "rect", "busy").empty());
  EXPECT_EQ(svg[0].Int("data-ops"), static_cast<int>(run.result.ops.size()));
}

TEST(HtmlReportTimeline, SplitBackwardOpsKeepTheirKinds) {
  const Simulation run = Simulated(ScheduleKind::kZBH1, 4, 8);
  std::map<char, int> kinds;
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "op"))
    ++kinds[KindOf(e)];
  EXPECT_EQ(kinds['F'], 32);
  EXPECT_EQ(kinds['I'], 32);
  EXPECT_EQ(kinds['W'], 32);
  EXPECT_EQ(kinds.count('B'), 0u);
}

// Per rank: op durations + busy spans + idle rects cover the pipeline span,
// the idle rects and the spans' gaps sum to span - busy.
void ExpectLanesCoverTheSpan(const Simulation& run) {
  const auto svg = FindElements(WithoutZoomedCopies(run.html), "svg", "timeline");
  ASSERT_EQ(svg.size(), 1u);
  const TimeNs span = svg[0].Ns("data-span-us");
  EXPECT_EQ(span, run.result.pipeline_ns);
  std::map<int, TimeNs> covered, busy, idle;
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "op")) {
    covered[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
    busy[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
  }
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "busy")) {
    covered[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
    busy[e.Int("data-rank")] += e.Ns("data-busy-us");
  }
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "idle")) {
    EXPECT_GT(e.Ns("data-end-us"), e.Ns("data-start-us"));
    covered[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
    idle[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
  }
  for (const StageResult& s : run.result.per_rank) {
    SCOPED_TRACE(::testing::Message() << "rank " << s.rank);
    EXPECT_EQ(covered[s.rank], span);
    EXPECT_EQ(busy[s.rank], s.busy_ns);
    EXPECT_LE(idle[s.rank], span - s.busy_ns);
    if (FindElements(WithoutZoomedCopies(run.html), "rect", "busy").empty()) {
      EXPECT_EQ(idle[s.rank], span - s.busy_ns);
    }
  }
}

TEST(HtmlReportTimeline, IdleAndOpsCoverEachRanksSpan) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1, ScheduleKind::kNaive}) {
    SCOPED_TRACE(ScheduleKindName(kind));
    ExpectLanesCoverTheSpan(Simulated(kind, 4, 8));
  }
  ExpectLanesCoverTheSpan(Simulated(ScheduleKind::kInterleaved1F1B, 4, 8, LinkedCluster(), 2));
}

// Issue 28: DualPipeV's overlapped F&B pairs were drawn as two bars one
// after the other. The halves run together: each is drawn over the pair's
// whole span, the forward in the lane's upper half and the backward in its
// lower half, while its data attributes keep its own record.
TEST(HtmlReportTimeline, DualPipeVPairsAreDrawnOverlapping) {
  const Simulation run = Simulated(ScheduleKind::kDualPipeV, 4, 8, LinkedCluster(), 2);
  std::map<std::tuple<int, int, char, int>, HtmlElement> rect;  // (rank, stage, kind, mb)
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "op")) {
    rect.emplace(
        std::make_tuple(e.Int("data-rank"), e.Int("data-stage"), KindOf(e), e.Int("data-mb")), e);
  }
  int pairs = 0;
  const std::vector<OpRecord>& ops = run.result.ops;
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    if (!ops[i].action.overlapped) continue;
    const OpRecord& f = ops[i];
    const OpRecord& b = ops[i + 1];
    ASSERT_TRUE(b.action.overlapped);
    const auto fk = std::make_tuple(f.rank, f.action.stage, 'F', f.action.microbatch);
    const auto bk =
        std::make_tuple(b.rank, b.action.stage, OpKindLetter(b.action.kind), b.action.microbatch);
    ASSERT_TRUE(rect.count(fk) && rect.count(bk)) << ActionName(f.action);
    const HtmlElement& fr = rect.at(fk);
    const HtmlElement& br = rect.at(bk);
    EXPECT_EQ(fr.Attr("x"), br.Attr("x"));
    EXPECT_EQ(fr.Attr("width"), br.Attr("width"));
    EXPECT_EQ(fr.Attr("height"), br.Attr("height"));
    EXPECT_NEAR(std::stod(br.Attr("y")), std::stod(fr.Attr("y")) + std::stod(fr.Attr("height")),
                0.01);
    EXPECT_EQ(fr.Ns("data-start-us"), f.start_ns);
    EXPECT_EQ(br.Ns("data-end-us"), b.end_ns);
    ++pairs;
    ++i;
  }
  EXPECT_GT(pairs, 0);
  ExpectLanesCoverTheSpan(run);
}

TEST(HtmlReportTimeline, IdleRectsMatchTheBubbleRatio) {
  // Given GPipe on the ideal cluster: idle = (p-1)(F+B) per rank.
  const Simulation run = Simulated(ScheduleKind::kGPipe, 4, 8, IdealCluster());
  std::map<int, TimeNs> idle;
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "idle")) {
    idle[e.Int("data-rank")] += e.Ns("data-end-us") - e.Ns("data-start-us");
  }
  for (const StageResult& s : run.result.per_rank) {
    EXPECT_EQ(idle[s.rank], 3 * (kF + kB));
    EXPECT_NEAR(static_cast<double>(idle[s.rank]) / run.result.pipeline_ns, s.bubble_ratio, 1e-12);
  }
}

TEST(HtmlReportTimeline, TransfersAreDrawnOnTheSendersCommLane) {
  const Simulation run = Simulated(ScheduleKind::k1F1B, 4, 8);
  ASSERT_FALSE(run.result.transfers.empty());
  int drawn = 0;
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "xfer")) {
    ++drawn;
    const bool grad = e.HasClass("xfer-grad");
    EXPECT_EQ(e.Int("data-dst-rank"), e.Int("data-src-rank") + (grad ? -1 : 1));
    EXPECT_GE(e.Ns("data-end-us"), e.Ns("data-start-us"));
  }
  for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "xfer-span")) {
    drawn += e.Int("data-transfers");
  }
  EXPECT_EQ(drawn, static_cast<int>(run.result.transfers.size()));
}

TEST(HtmlReportTimeline, CriticalOpsAreTheCriticalPathsComputeSteps) {
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZBH1}) {
    const Simulation run = Simulated(kind, 4, 8);
    ASSERT_TRUE(run.result.critical_path.has_value());
    std::set<OpKey> path;
    for (const CriticalStep& s : run.result.critical_path->steps) {
      if (s.kind != CriticalStep::Kind::kCompute) continue;
      const OpRecord& op = run.result.ops[s.op];
      path.emplace(op.rank, op.action.stage, OpKindLetter(op.action.kind), op.action.microbatch,
                   op.start_ns, op.end_ns);
    }
    std::set<OpKey> marked;
    for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "rect", "critical")) {
      if (!e.HasClass("op")) continue;
      marked.emplace(e.Int("data-rank"), e.Int("data-stage"), KindOf(e), e.Int("data-mb"),
                     e.Ns("data-start-us"), e.Ns("data-end-us"));
    }
    EXPECT_FALSE(path.empty());
    EXPECT_EQ(marked, path);
    EXPECT_FALSE(FindElements(WithoutZoomedCopies(run.html), "rect", "crit-mark").empty());
  }
}

TEST(HtmlReportTimeline, AggregatesSliversAtP64M256) {
  // Given 1F1B at p = 64, m = 256: 32768 ops, about 1 px each.
  const Simulation run = Simulated(ScheduleKind::k1F1B, 64, 256);
  const auto svg = FindElements(WithoutZoomedCopies(run.html), "svg", "timeline");
  ASSERT_EQ(svg.size(), 1u);
  EXPECT_EQ(svg[0].Attr("data-mode"), "dense");
  const auto ops = FindElements(WithoutZoomedCopies(run.html), "rect", "op");
  const auto spans = FindElements(WithoutZoomedCopies(run.html), "rect", "busy");
  int merged = 0;
  for (const HtmlElement& e : spans) merged += e.Int("data-ops");
  // Then every op is drawn once, as itself or inside a span, in far fewer rects.
  EXPECT_EQ(static_cast<int>(ops.size()) + merged, static_cast<int>(run.result.ops.size()));
  EXPECT_EQ(svg[0].Int("data-merged-ops"), merged);
  EXPECT_LT(ops.size() + spans.size(), run.result.ops.size() / 10);
  EXPECT_THAT(run.html, HasSubstr("<b>Merged:</b>"));
  ExpectLanesCoverTheSpan(run);
  EXPECT_EQ(FindElements(WithoutZoomedCopies(run.html), "g", "rank").size(), 64u);
}

// Issue 28: the p = 32, m = 256 report was 25.7 MB with 82 559 tooltips and
// took 12.5 s to render: every zoom level drew every op and transfer with a
// tooltip of its own. Each chart now holds at most 4000 tooltips, merging
// over a wider width where it would hold more, and every op is still drawn
// once per chart, alone or inside a span; the caption states the bound.
TEST(HtmlReportTimeline, AReportOfP32M256HoldsAtMost4000TooltipsPerChart) {
  const Simulation run = Simulated(ScheduleKind::k1F1B, 32, 256);
  const std::string html = TimelineHtml(run.result);
  std::vector<std::string> charts;  // each chart's SVG text
  for (size_t at = html.find("<svg class=\"timeline"); at != std::string::npos;
       at = html.find("<svg class=\"timeline", at + 1)) {
    charts.push_back(html.substr(at, html.find("</svg>", at) - at));
  }
  ASSERT_EQ(charts.size(), 3u);  // 1x, 4x, 16x
  for (const std::string& chart : charts) {
    int tooltips = 0;
    for (size_t at = chart.find("<title>"); at != std::string::npos;
         at = chart.find("<title>", at + 1)) {
      ++tooltips;
    }
    EXPECT_LE(tooltips, 4000);
    int drawn = 0;
    for (const HtmlElement& e : FindElements(chart, "rect", "op"))
      drawn += e.HasClass("op") ? 1 : 0;
    for (const HtmlElement& e : FindElements(chart, "rect", "busy")) drawn += e.Int("data-ops");
    EXPECT_EQ(drawn, static_cast<int>(run.result.ops.size()));
  }
  EXPECT_LT(html.size(), 5u << 20);
  EXPECT_THAT(html, HasSubstr("each chart holds at most 4000 bars with a tooltip"));
}

TEST(HtmlReportTimeline, SmallPipelinesAreNotMerged) {
  const Simulation run = Simulated(ScheduleKind::k1F1B, 4, 8);
  EXPECT_THAT(run.html, Not(HasSubstr("<b>Merged:</b>")));
  EXPECT_THAT(run.html, HasSubstr("class=\"oplabel\""));
}

TEST(HtmlReportMemory, PolylinePeakIsTheRanksPeak) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1,
                            ScheduleKind::kZBH2, ScheduleKind::kPipeDream}) {
    SCOPED_TRACE(ScheduleKindName(kind));
    const Simulation run = Simulated(kind, 4, 8);
    const auto lines = FindElements(WithoutZoomedCopies(run.html), "polyline", "mem");
    ASSERT_EQ(lines.size(), run.result.per_rank.size());
    for (const HtmlElement& e : lines) {
      const StageResult& s = run.result.per_rank.at(e.Int("data-rank"));
      EXPECT_EQ(e.Int64("data-peak-bytes"), s.peak_memory_bytes) << "rank " << s.rank;
      const Bytes base =
          s.memory.weights + s.memory.stashed_weights + s.memory.gradients + s.memory.optimizer;
      EXPECT_EQ(e.Int64("data-static-bytes"), base);
      // The line's highest point is the timeline's; it never exceeds the peak.
      Bytes live = 0;
      for (const MemorySample& m : s.memory_timeline) {
        live = std::max(live, m.activations + m.comm_buffers + m.workspace);
      }
      EXPECT_EQ(e.Int64("data-drawn-peak-bytes"), base + live);
      EXPECT_LE(e.Int64("data-drawn-peak-bytes"), s.peak_memory_bytes);
      EXPECT_FALSE(e.Attr("points").empty());
    }
    for (const HtmlElement& e : FindElements(WithoutZoomedCopies(run.html), "tr")) {
      if (e.Attr("data-peak-bytes").empty()) continue;
      EXPECT_EQ(e.Int64("data-peak-bytes"),
                run.result.per_rank.at(e.Int("data-rank")).peak_memory_bytes);
    }
  }
}

// --sharded-state fsdp2: the gradients are not in the static band; a band of their own starts
// at each rank's first backward's end (StageResult::gradients_from_ns), and the line adds them
// from there on, so its highest point is the simulator's peak where that comes after them.
TEST(HtmlReportMemory, Fsdp2GradientsJoinAtTheFirstBackwardsEnd) {
  Simulation run;
  run.model = UniformModel(4, kF, kB, kAct, 8 * kMiB, 100'000'000);
  run.cluster = IdealCluster();
  run.schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4).value();
  run.options.config.layout.pipeline_stages = 2;
  run.options.config.layout.data_parallel = 2;
  run.options.config.microbatches = 4;
  run.options.config.memory.zero = 3;
  run.options.config.memory.sharded_state = ShardedState::kFsdp2;
  run.result = Simulate(run.model, run.cluster, run.schedule, run.options).value();
  run.html = SimulationReportHtml(
      run.result, MakeReportInputs(run.model, run.cluster, run.schedule, run.options,
                                   "simulator --model m.json --sharded-state fsdp2"));
  const std::string html = WithoutZoomedCopies(run.html);
  EXPECT_THAT(html, HasSubstr("under --sharded-state fsdp2 the gradients are not in it"));
  const auto grads = FindElements(html, "rect", "mem-grads");
  ASSERT_EQ(grads.size(), 2u);
  for (const HtmlElement& e : grads) {
    const StageResult& s = run.result.per_rank.at(e.Int("data-rank"));
    // 2 layers x 100 M parameters x 4 B of fp32 gradients / d = 2.
    EXPECT_EQ(s.memory.gradients, Bytes{400'000'000});
    EXPECT_EQ(e.Int64("data-bytes"), s.memory.gradients);
    EXPECT_GT(s.gradients_from_ns, 0);
    EXPECT_EQ(e.Ns("data-from-us"), s.gradients_from_ns);
  }
  // Rank 1 (last stage): F0 at 2 ms, B0 from 4 ms to 8 ms (2 layers x 2 ms).
  EXPECT_EQ(run.result.per_rank[1].gradients_from_ns, 8 * kF);
  for (const HtmlElement& e : FindElements(html, "polyline", "mem")) {
    const StageResult& s = run.result.per_rank.at(e.Int("data-rank"));
    const Bytes base = s.memory.weights + s.memory.optimizer + s.memory.gathered_weights;
    EXPECT_EQ(e.Int64("data-static-bytes"), base) << "rank " << s.rank;
    Bytes above = 0;
    for (const MemorySample& m : s.memory_timeline) {
      const Bytes grads = m.time_ns >= s.gradients_from_ns ? s.memory.gradients : 0;
      above = std::max(above, m.activations + m.comm_buffers + m.workspace + grads);
    }
    EXPECT_EQ(e.Int64("data-drawn-peak-bytes"), base + above) << "rank " << s.rank;
    // 1F1B's peak comes after the first backward, gradients and all: the line reaches it.
    EXPECT_EQ(e.Int64("data-drawn-peak-bytes"), s.peak_memory_bytes) << "rank " << s.rank;
  }
}

TEST(HtmlReportMemory, CapacityLineOnlyWhenTheGpuHasACapacity) {
  const Simulation limited = Simulated(ScheduleKind::k1F1B, 4, 8);
  const auto lines = FindElements(limited.html, "line", "capacity");
  ASSERT_EQ(lines.size(), 4u);
  for (const HtmlElement& e : lines) EXPECT_EQ(e.Int64("data-bytes"), 16 * kGiB);

  const Simulation unlimited = Simulated(ScheduleKind::k1F1B, 4, 8, IdealCluster());
  EXPECT_TRUE(FindElements(unlimited.html, "line", "capacity").empty());
  EXPECT_THAT(unlimited.html, HasSubstr("unlimited memory, so there is no capacity line"));
}

TEST(HtmlReportMemory, EachRankHasItsOwnScaleWithTicksInGiB) {
  // Given unlimited memory, each rank's chart runs from 0 to 1.08 x its own
  // peak (the head room for the peak label), and labels round GiB values
  // inside that range; with a capacity, the scale reaches at least it.
  const Simulation unlimited = Simulated(ScheduleKind::k1F1B, 4, 8, IdealCluster());
  const auto ranks = FindElements(unlimited.html, "g", "mem-rank");
  ASSERT_EQ(ranks.size(), 4u);
  for (const HtmlElement& g : ranks) {
    const StageResult& s = unlimited.result.per_rank.at(g.Int("data-rank"));
    EXPECT_NEAR(std::stod(g.Attr("data-scale-bytes")),
                1.08 * static_cast<double>(s.peak_memory_bytes), 1.0)
        << "rank " << s.rank;
  }
  const auto ticks = FindElements(unlimited.html, "text", "mem-tick");
  ASSERT_FALSE(ticks.empty());
  for (const HtmlElement& t : ticks) EXPECT_GT(std::stod(t.Attr("data-gib")), 0.0);
  EXPECT_THAT(unlimited.html, HasSubstr("Each rank's chart has its own scale"));

  const Simulation limited = Simulated(ScheduleKind::k1F1B, 4, 8);
  for (const HtmlElement& g : FindElements(limited.html, "g", "mem-rank")) {
    EXPECT_GE(std::stod(g.Attr("data-scale-bytes")), 16.0 * static_cast<double>(kGiB));
  }
}

// Issue 28: memory-axis labels were clipped. A label hanging under a grid
// line near the bottom of a rank's chart crossed into the next chart, and
// for the last rank past the figure's edge. Every label now lies inside its
// rank's chart, at every chart height (80, 52 and 34 px).
TEST(HtmlReportMemory, MemoryAxisLabelsStayInsideTheirRanksChart) {
  for (int p : {4, 16, 32}) {
    const Simulation run = Simulated(ScheduleKind::k1F1B, p, 2 * p);
    const auto frames = FindElements(run.html, "rect", "chart-frame");
    const auto ticks = FindElements(run.html, "text", "mem-tick");
    ASSERT_EQ(frames.size(), static_cast<size_t>(p));
    ASSERT_FALSE(ticks.empty());
    constexpr double kLabelPx = 10;  // the 10 px font above its baseline
    for (const HtmlElement& t : ticks) {
      const double baseline = std::stod(t.Attr("y"));
      bool inside = false;
      for (const HtmlElement& f : frames) {
        const double top = std::stod(f.Attr("y")), bottom = top + std::stod(f.Attr("height"));
        inside = inside || (baseline - kLabelPx >= top && baseline <= bottom);
      }
      EXPECT_TRUE(inside) << "p=" << p << ": label " << t.Attr("data-gib") << " GiB at y "
                          << baseline;
    }
  }
}

TEST(HtmlReportMemory, OverCapacityRanksAreFlagged) {
  Cluster small = LinkedCluster();
  small.gpu.memory_bytes = 300 * kMiB;
  const Simulation run = Simulated(ScheduleKind::kGPipe, 4, 8, small);
  EXPECT_THAT(run.html, HasSubstr(" OVER</td>"));
  EXPECT_THAT(run.html, HasSubstr("class=\"metric over\""));
}

TEST(HtmlReportPage, EscapesTheModelName) {
  const Simulation run = Simulated(ScheduleKind::k1F1B, 2, 2, LinkedCluster(), 1, "<b>&\"x\"");
  EXPECT_THAT(run.html, Not(HasSubstr("<b>&\"x\"")));
  EXPECT_THAT(run.html, HasSubstr("&lt;b&gt;&amp;&quot;x&quot;"));
  EXPECT_THAT(run.html, HasSubstr("<title>pipecast simulator: &lt;b&gt;&amp;&quot;x&quot;"));
  EXPECT_EQ(HtmlEscape("a'b"), "a&#39;b");
}

// Issue 17: no way to zoom a timeline of 128 micro-batches. Radio buttons
// before the charts' frames show the chart drawn again 4 or 16 times wider,
// by CSS alone: the page keeps no script.
TEST(HtmlReportTimeline, ZoomWithoutScriptForATimelineOf128Microbatches) {
  // Given 1F1B on 8 ranks, 128 micro-batches, the last stage 20 x slower (as
  // an LM head is): at 1x the other ranks' ops are 0.15 px wide and merged.
  Model model = UniformModel(8, kF, kB, kAct, 8 * kMiB, 10'000'000);
  model.layers[7].profiles[0].forward_ns = 20 * kF;
  model.layers[7].profiles[0].backward_ns = 20 * kB;
  const Schedule schedule = MakeSchedule(ScheduleKind::k1F1B, 8, 128).value();
  const SimOptions options;
  Result<SimResult> result = Simulate(model, LinkedCluster(), schedule, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string html = SimulationReportHtml(
      *result, MakeReportInputs(model, LinkedCluster(), schedule, options, "simulator"));

  EXPECT_THAT(html, Not(HasSubstr("<script")));
  const auto radios = FindElements(html, "input");
  ASSERT_EQ(radios.size(), 3u);
  const std::string levels[] = {"1", "4", "16"};
  for (size_t i = 0; i < radios.size(); ++i) {
    EXPECT_EQ(radios[i].attrs.at("type"), "radio");
    EXPECT_EQ(radios[i].attrs.at("name"), "tl-zoom");
    EXPECT_EQ(radios[i].attrs.at("id"), "tl-zoom-" + levels[i]);
    EXPECT_EQ(radios[i].attrs.count("checked"), i == 0 ? 1u : 0u) << "1x is the default";
  }
  // One frame per level after the buttons (the sibling combinator needs it).
  const size_t last_radio = html.find("id=\"tl-zoom-16\"");
  const size_t frame1 = html.find("<div class=\"tl-scroll tl-z1\">");
  const size_t frame4 = html.find("<div class=\"tl-scroll tl-z4\">");
  const size_t frame16 = html.find("<div class=\"tl-scroll tl-z16\">");
  ASSERT_NE(frame16, std::string::npos);
  EXPECT_LT(last_radio, frame1);
  EXPECT_LT(frame1, frame4);
  EXPECT_LT(frame4, frame16);
  const auto one = FindElements(html, "svg", "timeline");
  const auto zoomed = FindElements(html, "svg", "timeline-zoomed");
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(zoomed.size(), 2u);
  // Widths: the 118 px gutter and 22 px margin, plus 1160 px of plot x zoom.
  EXPECT_EQ(one[0].attrs.at("width"), "1300.0");
  EXPECT_EQ(zoomed[0].attrs.at("width"), "4780.0");
  EXPECT_EQ(zoomed[1].attrs.at("width"), "18700.0");
  EXPECT_EQ(zoomed[1].attrs.at("data-zoom"), "16");
  // Merging is redone at each width: fewer ops merged the wider the chart.
  const int merged1 = std::stoi(one[0].attrs.at("data-merged-ops"));
  const int merged16 = std::stoi(zoomed[1].attrs.at("data-merged-ops"));
  EXPECT_GT(merged1, 0);
  EXPECT_LT(merged16, merged1);
  EXPECT_THAT(html, HasSubstr("#tl-zoom-16:checked~.tl-scroll{display:none}"
                              "#tl-zoom-16:checked~.tl-z16{display:block}"));
  EXPECT_THAT(html, HasSubstr(".zoom>.tl-z16{display:none}"));
}

TEST(HtmlReportPage, SelfContainedAndDeterministic) {
  const Simulation a = Simulated(ScheduleKind::k1F1B, 4, 8);
  const Simulation b = Simulated(ScheduleKind::k1F1B, 4, 8);
  EXPECT_EQ(a.html, b.html);
  EXPECT_THAT(a.html, Not(HasSubstr("<script")));
  EXPECT_THAT(a.html, Not(HasSubstr("src=")));
  EXPECT_THAT(a.html, Not(HasSubstr("href=")));
  EXPECT_THAT(a.html, Not(HasSubstr("@import")));
  EXPECT_THAT(a.html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(a.html, HasSubstr("simulator --model m.json --stages 4"));
}

TEST(HtmlReportPage, NamesTheThreeBubbleFormsAndNeverABareBubble) {
  const Simulation run = Simulated(ScheduleKind::k1F1B, 4, 8);
  EXPECT_THAT(run.html, HasSubstr("data-metric=\"bubble_ratio\""));
  EXPECT_THAT(run.html, HasSubstr("data-metric=\"bubble_fraction_of_ideal\""));
  EXPECT_THAT(run.html, HasSubstr("data-metric=\"zb_bubble_rate\""));
  const std::string& t = run.html;
  for (size_t at = t.find("bubble"); at != std::string::npos; at = t.find("bubble", at + 1)) {
    const std::string next = t.substr(at, 24);
    // The zero-bubble paper's rate: "zero-bubble rate", key zb_bubble_rate.
    const bool zero_bubble = (at >= 5 && t.compare(at - 5, 16, "zero-bubble rate") == 0) ||
                             (at >= 3 && t.compare(at - 3, 14, "zb_bubble_rate") == 0);
    EXPECT_TRUE(zero_bubble || next.rfind("bubble ratio", 0) == 0 ||
                next.rfind("bubble/ideal", 0) == 0 || next.rfind("bubble time fraction", 0) == 0 ||
                next.rfind("bubble_ratio", 0) == 0 ||
                next.rfind("bubble_fraction_of_ideal", 0) == 0)
        << "bare bubble at: " << t.substr(at > 40 ? at - 40 : 0, 80);
  }
}

TEST(HtmlReportPage, WithoutATimelineSaysSo) {
  Simulation run = Simulated(ScheduleKind::k1F1B, 2, 2);
  run.result.ops.clear();
  const std::string html = SimulationReportHtml(run.result, ReportInputs{});
  EXPECT_THAT(html, HasSubstr("The timeline was not recorded"));
  EXPECT_TRUE(FindElements(html, "svg", "timeline").empty());
}

TEST(HtmlReportPage, InputsNameModelClusterAndOptions) {
  const Simulation run = Simulated(ScheduleKind::kInterleaved1F1B, 2, 4, LinkedCluster(), 2);
  EXPECT_THAT(run.html, HasSubstr("p = 2 ranks, v = 2 chunks per rank, m = 4 micro-batches"));
  EXPECT_THAT(run.html, HasSubstr("test-16g"));
  EXPECT_THAT(run.html, HasSubstr("inside a node 10 GB/s, latency 20 µs"));
  EXPECT_THAT(run.html, HasSubstr("interleaved"));
}

TEST(HtmlReportUtil, QuoteCommandLineQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(QuoteCommandLine({"planner", "--gpus", "8", "--report", "a b.html", "it's", ""}),
            "planner --gpus 8 --report 'a b.html' 'it'\\''s' ''");
}

TEST(HtmlReportUtil, NiceTicks) {
  EXPECT_THAT(NiceTicks(10, 5), ::testing::ElementsAre(0, 2, 4, 6, 8, 10));
  EXPECT_THAT(NiceTicks(718.3, 11), ::testing::ElementsAre(0, 100, 200, 300, 400, 500, 600, 700));
  EXPECT_THAT(NiceTicks(0, 5), ::testing::ElementsAre(0));
  EXPECT_EQ(Px(-0.01), "0.0");
}

}  // namespace
}  // namespace pipecast
