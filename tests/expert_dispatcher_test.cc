// The expert dispatcher travels (issue 26, docs/planner.md "Expert dispatcher"): plan.json
// carries it at ep > 1 when it is not deepep and reads a bad value as an error naming the field;
// the planner searches it (--ep-dispatcher deepep|alltoall|both), labels and explains it, and
// pins it from a plan; a model whose layer costs were made for the other dispatcher is warned
// about. The times are the hand-worked all-to-alls of tests/expert_parallel_test.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "formats/cluster_select.h"
#include "formats/plan.h"
#include "planner/compare.h"
#include "planner/explain.h"
#include "planner/planner.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

Cluster H100() { return test_util::PresetCluster("h100-sxm"); }

Model TwoLayers() { return test_util::MoeTwoLayers(); }

// The plan of 1F1B over 2 stages x d 8 at ep `ep` with `dispatcher`, written as plan.json.
std::string PlanText(int ep, ExpertDispatcher dispatcher, SimResult* simulated = nullptr) {
  const Model model = TwoLayers();
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  EXPECT_TRUE(schedule.ok());
  SimOptions options;
  options.config.layout.data_parallel = 8;
  options.config.layout.expert_parallel = ep;
  options.config.layout.expert_dispatcher = dispatcher;
  Result<SimResult> r = Simulate(model, H100(), *schedule, options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (simulated != nullptr) *simulated = *r;
  return PlanToJson(MakePlanFile(model.name, "h", H100(), *schedule, options, *r));
}

TEST(ExpertDispatcherPlan, AllToAllRoundTripsAndReplaysTheSame) {
  // Given an ep 8 plan on Megatron-LM's all-to-all dispatcher
  SimResult simulated;
  const std::string text = PlanText(8, ExpertDispatcher::kAllToAll, &simulated);
  // then plan.json names it, and reading it back gives it and the same text
  EXPECT_NE(text.find("\"ep_dispatcher\": \"alltoall\""), std::string::npos) << text;
  Result<PlanFile> back = ParsePlan(text, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->config.layout.expert_dispatcher, ExpertDispatcher::kAllToAll);
  EXPECT_EQ(PlanToJson(*back), text);
  // and the replay (simulator --plan, the validator, planner --check) runs the all-to-all
  // dispatcher: the same iteration and the same all-to-all time, 4 forwards and 4 backwards on
  // the MoE stage, each a dispatch and a combine of 171,512 ns (expert_parallel_test.cc).
  Result<SimResult> replay =
      Simulate(TwoLayers(), back->cluster, back->schedule, PlanSimOptions(*back));
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  EXPECT_EQ(replay->ep_dispatcher, ExpertDispatcher::kAllToAll);
  EXPECT_EQ(replay->ep_comm_ns, 16 * 171'512);
  EXPECT_EQ(replay->iteration_ns, simulated.iteration_ns);
}

TEST(ExpertDispatcherPlan, AllGatherRoundTripsAndReplaysTheSame) {
  // An ep 8 plan on Megatron-LM's all-gather dispatcher: plan.json names it and reads back
  // the same, and the replay times the all-gathers and reduce-scatters again.
  SimResult simulated;
  const std::string text = PlanText(8, ExpertDispatcher::kAllGather, &simulated);
  EXPECT_NE(text.find("\"ep_dispatcher\": \"allgather\""), std::string::npos) << text;
  Result<PlanFile> back = ParsePlan(text, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->config.layout.expert_dispatcher, ExpertDispatcher::kAllGather);
  EXPECT_EQ(PlanToJson(*back), text);
  Result<SimResult> replay =
      Simulate(TwoLayers(), back->cluster, back->schedule, PlanSimOptions(*back));
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  EXPECT_EQ(replay->ep_dispatcher, ExpertDispatcher::kAllGather);
  EXPECT_EQ(replay->ep_comm_ns, simulated.ep_comm_ns);
  EXPECT_EQ(replay->iteration_ns, simulated.iteration_ns);
  // It differs from the all-to-all's: every token moves.
  SimResult alltoall;
  PlanText(8, ExpertDispatcher::kAllToAll, &alltoall);
  EXPECT_NE(simulated.ep_comm_ns, alltoall.ep_comm_ns);
}

TEST(ExpertDispatcherPlan, DeepEpAndEpOneWriteNoKey) {
  // The default, deepep, is not written (plans and baselines read as before), and at ep = 1
  // there is no all-to-all to dispatch.
  const std::string deepep = PlanText(8, ExpertDispatcher::kDeepEp);
  EXPECT_EQ(deepep.find("ep_dispatcher"), std::string::npos);
  Result<PlanFile> back = ParsePlan(deepep, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->config.layout.expert_dispatcher, ExpertDispatcher::kDeepEp);
  EXPECT_EQ(PlanText(1, ExpertDispatcher::kAllToAll).find("ep_dispatcher"), std::string::npos);
}

TEST(ExpertDispatcherPlan, ABadValueIsAnErrorNamingTheFieldAndTheValues) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(PlanText(8, ExpertDispatcher::kDeepEp));
  j["ep_dispatcher"] = "nccl";
  Result<PlanFile> bad = ParsePlan(j.dump(2), "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("p.json: ep_dispatcher: expected \"deepep\", "
                                        "\"alltoall\" or \"allgather\" (the expert "
                                        "dispatcher, --ep-dispatcher), got \"nccl\""),
            std::string::npos)
      << bad.status().message();
  j["ep_dispatcher"] = 2;
  bad = ParsePlan(j.dump(2), "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ep_dispatcher"), std::string::npos)
      << bad.status().message();
}

// One stage of 8 GPUs, d = 8, ep = 8 in an H100 node, one micro-batch (global batch 8): the two
// candidates differ only in the MoE layer's dispatch and combine, each way. DeepEP: 203,342 +
// 197,173 = 400,515 ns; the all-to-all: 2 x 171,512 = 343,024 ns (16,384 B per token of which
// 14,336 B leave the GPU over NVLink at 360 GB/s, plus 8.4 us; expert_parallel_test.cc). So the
// all-to-all is 57,491 ns faster in the forward and again in the backward: 114,982 ns.
PlannerOptions OneStageAtEp8() {
  PlannerOptions options;
  options.gpus = 8;
  options.global_batch = 8;
  options.schedules = {ScheduleKind::k1F1B};
  options.microbatch_sizes = {1};
  options.pipeline_stages = 1;
  options.zero_levels = {1};
  options.recompute = RecomputeMode::kOff;
  options.expert_parallel = {8};
  return options;
}

TEST(ExpertDispatcherPlanner, BothRanksTheFasterAndLabelsTheAllToAll) {
  PlannerOptions options = OneStageAtEp8();
  options.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll};
  Result<PlanReport> report = RunPlanner(TwoLayers(), H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->ranked.size(), 2u);
  const Candidate& first = report->ranked[0];
  const Candidate& second = report->ranked[1];
  EXPECT_EQ(first.config.layout.expert_dispatcher, ExpertDispatcher::kAllToAll);
  EXPECT_EQ(second.config.layout.expert_dispatcher, ExpertDispatcher::kDeepEp);
  EXPECT_NE(first.Label().find(" ep-dispatcher=alltoall"), std::string::npos) << first.Label();
  EXPECT_EQ(second.Label().find("ep-dispatcher"), std::string::npos) << second.Label();
  EXPECT_EQ(second.result->iteration_ns - first.result->iteration_ns, 2 * 57'491);
  // The explanation names the dispatcher chosen; the JSON candidate carries it.
  const std::string text = PlanReportToText(*report, TwoLayers());
  EXPECT_NE(text.find("dispatcher alltoall: Megatron-LM's NCCL all-to-all"), std::string::npos)
      << text;
  EXPECT_NE(PlanReportToJson(*report, TwoLayers()).find("\"ep_dispatcher\": \"alltoall\""),
            std::string::npos);
}

TEST(ExpertDispatcherPlanner, DefaultSearchesDeepEpAloneAndEpOneOnce) {
  // The default: deepep alone, named in the explanation, no label word.
  PlannerOptions options = OneStageAtEp8();
  Result<PlanReport> report = RunPlanner(TwoLayers(), H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->ranked.size(), 1u);
  EXPECT_EQ(report->ranked[0].config.layout.expert_dispatcher, ExpertDispatcher::kDeepEp);
  EXPECT_NE(PlanReportToText(*report, TwoLayers()).find("dispatcher deepep"), std::string::npos);
  // At ep = 1 there is no all-to-all: `both` tries the configuration once.
  options.expert_parallel = {1};
  options.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll};
  report = RunPlanner(TwoLayers(), H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->ranked.size(), 1u);
  EXPECT_EQ(PlanReportToText(*report, TwoLayers()).find("expert parallelism"), std::string::npos);
}

TEST(ExpertDispatcherPlanner, AllSearchesTheThreeAndLabelsTheAllGather) {
  // --ep-dispatcher all: each ep > 1 configuration with each of the three dispatchers.
  PlannerOptions options = OneStageAtEp8();
  options.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll,
                                ExpertDispatcher::kAllGather};
  Result<PlanReport> report = RunPlanner(TwoLayers(), H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->ranked.size(), 3u);
  std::set<ExpertDispatcher> seen;
  for (const Candidate& c : report->ranked) {
    seen.insert(c.config.layout.expert_dispatcher);
    if (c.config.layout.expert_dispatcher == ExpertDispatcher::kAllGather) {
      EXPECT_NE(c.Label().find(" ep-dispatcher=allgather"), std::string::npos) << c.Label();
    }
  }
  EXPECT_EQ(seen.size(), 3u);
  Result<PlannerOptions> words = PinConfiguration(OneStageAtEp8(), "ep-dispatcher=allgather");
  ASSERT_TRUE(words.ok()) << words.status().message();
  EXPECT_EQ(words->expert_dispatchers, std::vector<ExpertDispatcher>{ExpertDispatcher::kAllGather});
}

TEST(ExpertDispatcherPlanner, APlanAndItsLabelPinTheDispatcher) {
  Result<PlanFile> plan = ParsePlan(PlanText(8, ExpertDispatcher::kAllToAll), "p.json");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  PlannerOptions base;
  base.gpus = 16;
  base.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll};
  const PlannerOptions pinned = PinPlan(base, *plan);
  EXPECT_EQ(pinned.expert_dispatchers, std::vector<ExpertDispatcher>{ExpertDispatcher::kAllToAll});
  EXPECT_EQ(pinned.expert_parallel, std::vector<int>{8});
  Result<PlannerOptions> words = PinConfiguration(base, "ep=8 p=2 d=8 ep-dispatcher=alltoall");
  ASSERT_TRUE(words.ok()) << words.status().message();
  EXPECT_EQ(words->expert_dispatchers, std::vector<ExpertDispatcher>{ExpertDispatcher::kAllToAll});
  EXPECT_EQ(words->expert_parallel, std::vector<int>{8});
  EXPECT_NE(PinConfiguration(base, "ep-dispatcher=nccl")
                .status()
                .message()
                .find("ep-dispatcher is deepep, alltoall or allgather"),
            std::string::npos);
}

TEST(ExpertDispatcherModel, CostsMadeForTheOtherDispatcherAreWarnedAbout) {
  // profiler analytic writes source.details["moe"] for an MoE model; its "dispatcher" entry only
  // for --moe-dispatcher alltoall.
  Model deepep = TwoLayers();
  deepep.source.details["moe"] = R"({"moe_blocks": 1})";
  Model alltoall = TwoLayers();
  alltoall.source.details["moe"] = R"({"moe_blocks": 1, "dispatcher": "alltoall: ..."})";
  EXPECT_EQ(ModelExpertDispatcher(deepep), ExpertDispatcher::kDeepEp);
  EXPECT_EQ(ModelExpertDispatcher(alltoall), ExpertDispatcher::kAllToAll);
  EXPECT_EQ(ModelExpertDispatcher(TwoLayers()), std::nullopt);  // not said: no warning
  EXPECT_EQ(ModelDispatcherMismatch(deepep, "m.json", {ExpertDispatcher::kDeepEp}), "");
  EXPECT_EQ(ModelDispatcherMismatch(TwoLayers(), "m.json", {ExpertDispatcher::kAllToAll}), "");
  EXPECT_EQ(ModelDispatcherMismatch(deepep, "m.json", {}), "");
  const std::string lack = ModelDispatcherMismatch(deepep, "m.json", {ExpertDispatcher::kAllToAll});
  EXPECT_NE(lack.find("warning: m.json's MoE layer costs were made for the deepep dispatcher"),
            std::string::npos)
      << lack;
  EXPECT_NE(lack.find("those runs lack Megatron-LM's all-to-all dispatcher's second sort"),
            std::string::npos)
      << lack;
  EXPECT_NE(lack.find("re-profile with --moe-dispatcher alltoall"), std::string::npos) << lack;
  const std::string both = ModelDispatcherMismatch(
      alltoall, "m.json", {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll});
  EXPECT_NE(both.find("part of the search uses --ep-dispatcher deepep at ep > 1: those runs are "
                      "charged"),
            std::string::npos)
      << both;
  // allgather permutes once each side, as deepep: a model made for either serves the other;
  // against alltoall it is warned about and names the flag it was made with.
  Model allgather = TwoLayers();
  allgather.source.details["moe"] = R"({"moe_blocks": 1, "dispatcher": "allgather: ..."})";
  EXPECT_EQ(ModelExpertDispatcher(allgather), ExpertDispatcher::kAllGather);
  EXPECT_EQ(ModelDispatcherMismatch(deepep, "m.json", {ExpertDispatcher::kAllGather}), "");
  EXPECT_EQ(ModelDispatcherMismatch(allgather, "m.json", {ExpertDispatcher::kDeepEp}), "");
  const std::string gather =
      ModelDispatcherMismatch(allgather, "m.json", {ExpertDispatcher::kAllToAll});
  EXPECT_NE(gather.find("made for the allgather dispatcher (profiler analytic --moe-dispatcher "
                        "allgather)"),
            std::string::npos)
      << gather;
}

TEST(ExpertDispatcherModel, TheCapacityFactorIsReadFromTheModel) {
  Model dropless = TwoLayers();
  dropless.source.details["moe"] = R"({"moe_blocks": 1})";
  EXPECT_FALSE(ModelExpertCapacity(dropless).factor.has_value());
  EXPECT_FALSE(ModelExpertCapacity(TwoLayers()).factor.has_value());
  Model padded = TwoLayers();
  padded.source.details["moe"] =
      R"({"moe_blocks": 1, "capacity_factor": 1.25, "pad_to_capacity": true})";
  EXPECT_EQ(ModelExpertCapacity(padded).factor, 1.25);
  EXPECT_TRUE(ModelExpertCapacity(padded).pad);
}

}  // namespace
}  // namespace pipecast
