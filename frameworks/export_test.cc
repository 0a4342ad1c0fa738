// The exports read back as each framework reads them: the Megatron-LM
// arguments token by token (every flag checked against the list taken from
// Megatron-LM's argument parser, tests/fixtures/frameworks/megatron_flags.txt,
// and the layout string unrolled by Megatron's own two rules), the torchtitan
// TOML with toml++, the DeepSpeed JSON with nlohmann-json. Each round trip
// gives back the plan's t, p, d, v, micro-batch size and global batch; the
// numbers are worked by hand in each test's comment.
#include "frameworks/export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "formats/schedule_text.h"
#include "sim/schedule.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a framework's settings say about the run.
struct ReadBack {
  int t = 0, p = 0, d = 0, v = 0, mbs = 0;
  int64_t global_batch = 0;
  std::vector<int> layers_per_stage;  // transformer layers, when the file states them
};

struct PlanShape {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int t = 1, p = 1, d = 1, v = 1, mbs = 1, m = 1, zero = 0;
  bool sp = false;
  Recompute recompute = Recompute::kOff;
  RecomputeLayers recompute_layers;
  ShardingConfig sharding;
  std::vector<int> blocks;  // transformer layers per virtual stage; embedding first, head last
};

// "embedding", "block.0", ..., "lm_head", as the analytic profiler names them.
std::vector<std::string> LayerNames(int blocks) {
  std::vector<std::string> names = {"embedding"};
  for (int i = 0; i < blocks; ++i) names.push_back("block." + std::to_string(i));
  names.push_back("lm_head");
  return names;
}

int Sum(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

PlanFile MakePlan(const PlanShape& shape) {
  PlanFile plan;
  plan.model_name = "test-model";
  auto schedule = MakeSchedule(shape.kind, shape.p, shape.m, shape.v);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  plan.schedule = *schedule;
  plan.schedule_name = schedule->name;
  TrainingConfig& c = plan.config;
  c.layout.tensor_parallel = shape.t;
  c.layout.sequence_parallel = shape.sp;
  c.layout.pipeline_stages = shape.p;
  c.layout.data_parallel = shape.d;
  c.layout.chunks = shape.v;
  c.microbatch_size = shape.mbs;
  c.microbatches = shape.m;
  c.schedule = shape.kind;
  c.recompute = shape.recompute;
  c.recompute_layers = shape.recompute_layers;
  c.memory.zero = shape.zero;
  c.memory.sharding = shape.sharding;
  plan.gpus = shape.t * shape.p * shape.d;
  plan.global_batch = int64_t{shape.mbs} * shape.m * shape.d;
  // Layer 0 is the embedding (with the first stage), the last the head (with the last stage).
  int next = 1;
  for (size_t s = 0; s < shape.blocks.size(); ++s) {
    StageLayers st;
    st.first_layer = s == 0 ? 0 : next;
    next += shape.blocks[s];
    st.last_layer = s + 1 == shape.blocks.size() ? next : next - 1;
    plan.partition.push_back(st);
  }
  return plan;
}

FrameworkExport Export(Framework f, const PlanShape& shape, const std::string& csv = "") {
  ExportRequest request;
  request.layer_names = LayerNames(Sum(shape.blocks));
  request.sequence_length = 4096;
  request.schedule_csv = csv;
  return ExportPlan(f, MakePlan(shape), request);
}

// --- Megatron-LM: arguments, checked against the parser's list ---

std::set<std::string> MegatronFlagList() {
  std::ifstream in("tests/fixtures/frameworks/megatron_flags.txt");
  EXPECT_TRUE(in.good()) << "run from the source root (ctest does)";
  std::set<std::string> flags;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') flags.insert(line);
  }
  return flags;
}

// Megatron's PipelineParallelLayerLayout.parse_str_to_list: drop commas, unroll (..)*n, then
// x*n; stages split by '|'. Returns the decoder layers ('t') per stage.
std::vector<int> UnrollLayout(std::string layout) {
  layout.erase(std::remove(layout.begin(), layout.end(), ','), layout.end());
  for (const std::regex& pattern :
       {std::regex(R"(\(([^)]+)\)\*(\d+))"), std::regex(R"((.)\*(\d+))")}) {
    std::smatch m;
    std::string out;
    auto begin = layout.cbegin();
    while (std::regex_search(begin, layout.cend(), m, pattern)) {
      out.append(begin, m[0].first);
      for (int i = 0; i < std::stoi(m[2].str()); ++i) out += m[1].str();
      begin = m[0].second;
    }
    out.append(begin, layout.cend());
    layout = out;
  }
  std::vector<int> stages(1, 0);
  for (char c : layout) {
    if (c == '|') stages.push_back(0);
    if (c == 't') ++stages.back();
  }
  return stages;
}

// Megatron-LM's own arithmetic (megatron/core/transformer/transformer_block.py
// get_num_layers_to_build; training/arguments.py): d is the world size over t x p, the
// layers of each stage from the even split, the uneven first/last flags or the layout.
ReadBack ReadMegatron(const std::string& text, int world_size) {
  static const std::set<std::string> known = MegatronFlagList();
  std::map<std::string, std::string> flags;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream tokens(line);
    std::string name, value;
    tokens >> name;
    std::getline(tokens >> std::ws, value);
    EXPECT_TRUE(known.count(name)) << name << " is not a Megatron-LM flag at the fixture's commit";
    if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
    flags[name] = value;
  }
  auto get = [&](const std::string& name, int fallback) {
    return flags.count(name) ? std::stoi(flags[name]) : fallback;
  };
  ReadBack r;
  r.t = get("--tensor-model-parallel-size", 1);
  r.p = get("--pipeline-model-parallel-size", 1);
  r.d = world_size / (r.t * r.p);
  r.mbs = get("--micro-batch-size", 1);
  r.global_batch = get("--global-batch-size", 0);
  const int layers = get("--num-layers", 0);
  if (flags.count("--pipeline-model-parallel-layout")) {
    r.layers_per_stage = UnrollLayout(flags["--pipeline-model-parallel-layout"]);
    r.v = static_cast<int>(r.layers_per_stage.size()) / r.p;
  } else if (flags.count("--num-layers-per-virtual-pipeline-stage")) {
    const int per = get("--num-layers-per-virtual-pipeline-stage", 0);
    r.v = layers / (r.p * per);
    r.layers_per_stage.assign(r.p * r.v, per);
  } else {
    r.v = 1;
    int first = get("--decoder-first-pipeline-num-layers", -1);
    int last = get("--decoder-last-pipeline-num-layers", -1);
    int rest = layers - std::max(first, 0) - std::max(last, 0);
    int left = r.p - (first >= 0) - (last >= 0);
    const int middle = left > 0 ? rest / left : 0;
    for (int s = 0; s < r.p; ++s) {
      r.layers_per_stage.push_back(s == 0 && first >= 0        ? first
                                   : s == r.p - 1 && last >= 0 ? last
                                                               : middle);
    }
  }
  return r;
}

// --- torchtitan: the TOML through toml++ ---

ReadBack ReadTorchtitan(const std::string& text, int* microbatches, std::string* csv = nullptr) {
  toml::table t = toml::parse(text);
  ReadBack r;
  r.t = t["parallelism"]["tensor_parallel_degree"].value_or(0);
  r.p = t["parallelism"]["pipeline_parallel_degree"].value_or(0);
  r.d = t["parallelism"]["data_parallel_replicate_degree"].value_or(0) *
        t["parallelism"]["data_parallel_shard_degree"].value_or(0);
  const int64_t local = t["training"]["local_batch_size"].value_or(int64_t{0});
  r.global_batch = t["training"]["global_batch_size"].value_or(int64_t{0});
  // torchtitan's train.py: accumulation steps = global // (local x d); pipeline_parallel.py:
  // n_microbatches = local_batch_size // pipeline_parallel_microbatch_size (with p > 1).
  const int64_t steps = r.global_batch / (local * r.d);
  EXPECT_EQ(r.global_batch, local * r.d * steps);
  r.mbs = t["parallelism"]["pipeline_parallel_microbatch_size"].value_or(static_cast<int>(local));
  *microbatches = static_cast<int>(local / r.mbs * steps);
  if (const toml::array* parts = t["parallelism"]["module_fqns_per_model_part"].as_array()) {
    r.v = static_cast<int>(parts->size()) / r.p;
    for (const toml::node& part : *parts) {
      int n = 0;
      for (const toml::node& name : *part.as_array()) {
        n += name.value_or(std::string()).rfind("layers.", 0) == 0;
      }
      r.layers_per_stage.push_back(n);
    }
  } else {
    r.v = 1;
  }
  if (csv) *csv = t["parallelism"]["pipeline_parallel_schedule_csv"].value_or(std::string());
  return r;
}

// --- DeepSpeed: the JSON through nlohmann-json ---

ReadBack ReadDeepSpeed(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  ReadBack r;
  r.mbs = j.at("train_micro_batch_size_per_gpu").get<int>();
  const int gas = j.at("gradient_accumulation_steps").get<int>();
  r.global_batch = j.at("train_batch_size").get<int64_t>();
  // DeepSpeed's _batch_assertion: train_batch_size = micro x accumulation x data-parallel size.
  r.d = static_cast<int>(r.global_batch / (int64_t{r.mbs} * gas));
  EXPECT_EQ(r.global_batch, int64_t{r.mbs} * gas * r.d);
  r.p = j.contains("pipeline") ? j["pipeline"].at("stages").get<int>() : 1;
  r.t = j.contains("tensor_parallel") ? j["tensor_parallel"].at("autotp_size").get<int>() : 1;
  r.v = 1;  // DeepSpeed's PipelineModule holds one stage per rank
  return r;
}

void ExpectLayout(const ReadBack& r, const PlanShape& s) {
  EXPECT_EQ(r.t, s.t);
  EXPECT_EQ(r.p, s.p);
  EXPECT_EQ(r.d, s.d);
  EXPECT_EQ(r.v, s.v);
  EXPECT_EQ(r.mbs, s.mbs);
  EXPECT_EQ(r.global_batch, int64_t{s.mbs} * s.m * s.d);
}

// 1F1B, t=2 with sequence parallelism, p=4, d=2, mbs=2, m=8, ZeRO-1, full recomputation,
// 32 blocks split 8/8/8/8: global batch 2 x 8 x 2 = 32 on 16 GPUs.
PlanShape OneFOneB() {
  PlanShape s;
  s.kind = ScheduleKind::k1F1B;
  s.t = 2, s.sp = true, s.p = 4, s.d = 2, s.mbs = 2, s.m = 8, s.zero = 1;
  s.recompute = Recompute::kFull;
  s.blocks = {8, 8, 8, 8};
  return s;
}

TEST(MegatronExport, OneFOneBRoundTripsWithItsFlags) {
  const PlanShape s = OneFOneB();
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_TRUE(out.RunsAsPlanned());
  const ReadBack r = ReadMegatron(out.text, 16);
  ExpectLayout(r, s);
  EXPECT_EQ(r.layers_per_stage, s.blocks);
  EXPECT_THAT(out.text, HasSubstr("--global-batch-size 32\n"));
  EXPECT_THAT(out.text, HasSubstr("--sequence-parallel\n"));
  EXPECT_THAT(out.text, HasSubstr("--use-distributed-optimizer\n"));
  EXPECT_THAT(out.text, HasSubstr("--recompute-granularity full\n--recompute-method uniform\n"
                                  "--recompute-num-layers 1\n"));
  EXPECT_THAT(out.text, HasSubstr("--overlap-grad-reduce\n"));  // the default, d > 1
  EXPECT_THAT(out.text, HasSubstr("--num-layers 32\n"));
  EXPECT_THAT(out.text, HasSubstr("--seq-length 4096\n"));
  EXPECT_THAT(out.text, HasSubstr("# world size: 16 GPUs"));
}

// Selective recomputation of Megatron-LM's modules: its own flag, the names space-separated
// (nargs '*'); the default modules (core_attn) write no --recompute-modules.
TEST(MegatronExport, SelectiveModulesWriteRecomputeModules) {
  PlanShape s = OneFOneB();
  s.recompute = Recompute::kSelective;
  s.recompute_layers.modules = kRecomputeLayernorm | kRecomputeMoeAct;
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_TRUE(out.RunsAsPlanned());
  EXPECT_THAT(out.text, HasSubstr("--recompute-granularity selective\n"
                                  "--recompute-modules layernorm moe_act\n"));
  s.recompute_layers.modules = 0;
  const FrameworkExport plain = Export(Framework::kMegatron, s);
  EXPECT_THAT(plain.text, HasSubstr("--recompute-granularity selective\n"));
  EXPECT_THAT(plain.text, Not(HasSubstr("--recompute-modules")));
}

// Interleaved 1F1B, p=4, v=2, m=8 over 32 blocks: 4 a virtual stage.
TEST(MegatronExport, InterleavedWritesLayersPerVirtualStage) {
  PlanShape s;
  s.kind = ScheduleKind::kInterleaved1F1B;
  s.p = 4, s.v = 2, s.m = 8;
  s.blocks = std::vector<int>(8, 4);
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_TRUE(out.RunsAsPlanned());
  EXPECT_THAT(out.text, HasSubstr("--num-layers-per-virtual-pipeline-stage 4\n"));
  const ReadBack r = ReadMegatron(out.text, 4);
  ExpectLayout(r, s);
  EXPECT_EQ(r.layers_per_stage, s.blocks);
}

// 7/9/9/7 over 4 stages: Megatron puts (32 - 7 - 7) / 2 = 9 on each middle stage.
TEST(MegatronExport, UnevenFirstAndLastStagesUseTheirFlags) {
  PlanShape s;
  s.p = 4, s.m = 4;
  s.blocks = {7, 9, 9, 7};
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_THAT(out.text, HasSubstr("--decoder-first-pipeline-num-layers 7\n"));
  EXPECT_THAT(out.text, HasSubstr("--decoder-last-pipeline-num-layers 7\n"));
  EXPECT_THAT(out.text, Not(HasSubstr("--pipeline-model-parallel-layout")));
  const ReadBack r = ReadMegatron(out.text, 4);
  ExpectLayout(r, s);
  EXPECT_EQ(r.layers_per_stage, s.blocks);
}

// Only the first stage lighter (6/9/9/8 would leave 17 for 2 middle stages: no); 5/9/9/9: the
// last flag is not needed, (32 - 5) / 3 = 9.
TEST(MegatronExport, OnlyTheStageThatDiffersGetsAFlag) {
  PlanShape s;
  s.p = 4, s.m = 4;
  s.blocks = {5, 9, 9, 9};
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_THAT(out.text, HasSubstr("--decoder-first-pipeline-num-layers 5\n"));
  EXPECT_THAT(out.text, Not(HasSubstr("--decoder-last-pipeline-num-layers")));
  EXPECT_EQ(ReadMegatron(out.text, 4).layers_per_stage, s.blocks);
}

// A partition the first/last flags cannot hold (middle stages differ, or v > 1 uneven) is a
// --pipeline-model-parallel-layout, E on the first stage and L on the last.
TEST(MegatronExport, OtherPartitionsAreALayout) {
  PlanShape s;
  s.kind = ScheduleKind::kInterleaved1F1B;
  s.p = 2, s.v = 2, s.m = 4;
  s.blocks = {3, 5, 4, 4};
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_THAT(out.text, HasSubstr("--pipeline-model-parallel-layout Ettt|ttttt|tttt|ttttL\n"));
  EXPECT_THAT(out.text, Not(HasSubstr("--num-layers-per-virtual-pipeline-stage")));
  const ReadBack r = ReadMegatron(out.text, 2);
  ExpectLayout(r, s);
  EXPECT_EQ(r.layers_per_stage, s.blocks);

  PlanShape middle;
  middle.p = 4, middle.m = 4;
  middle.blocks = {8, 7, 9, 8};
  const FrameworkExport uneven = Export(Framework::kMegatron, middle);
  EXPECT_THAT(uneven.text, HasSubstr(" Etttttttt|ttttttt|ttttttttt|ttttttttL\n"));
  EXPECT_EQ(ReadMegatron(uneven.text, 4).layers_per_stage, middle.blocks);
}

// DualPipeV: Megatron-LM has no such schedule; the file holds interleaved 1F1B with v=2 and
// says so, in the file and in `differences`.
TEST(MegatronExport, ScheduleItLacksIsSaidWithTheClosest) {
  PlanShape s;
  s.kind = ScheduleKind::kDualPipeV;
  s.p = 4, s.v = 2, s.m = 8;
  s.blocks = std::vector<int>(8, 2);
  const FrameworkExport out = Export(Framework::kMegatron, s);
  ASSERT_FALSE(out.RunsAsPlanned());
  EXPECT_THAT(out.differences[0], HasSubstr("no dualpipev schedule"));
  EXPECT_THAT(out.differences[0],
              HasSubstr("closest it runs, written here: interleaved 1F1B with 2 virtual stages"));
  EXPECT_THAT(out.text, HasSubstr("# differs from the plan: Megatron-LM has no dualpipev"));
  EXPECT_THAT(out.text, HasSubstr("--num-layers-per-virtual-pipeline-stage 2\n"));
  ExpectLayout(ReadMegatron(out.text, 4), s);
}

TEST(MegatronExport, ZeroThreeWithPipelineIsTheDistributedOptimizer) {
  PlanShape s = OneFOneB();
  s.zero = 3;
  const FrameworkExport out = Export(Framework::kMegatron, s);
  EXPECT_FALSE(out.RunsAsPlanned());
  EXPECT_THAT(out.text, HasSubstr("--use-distributed-optimizer\n"));
  EXPECT_THAT(out.text, Not(HasSubstr("--use-megatron-fsdp")));
  // Without pipeline parallelism, Megatron-FSDP shards all three.
  PlanShape flat;
  flat.d = 8, flat.zero = 3, flat.m = 2;
  flat.blocks = {32};
  const FrameworkExport fsdp = Export(Framework::kMegatron, flat);
  EXPECT_TRUE(fsdp.RunsAsPlanned());
  EXPECT_THAT(
      fsdp.text,
      HasSubstr("--use-megatron-fsdp\n--data-parallel-sharding-strategy optim_grads_params"));
  ExpectLayout(ReadMegatron(fsdp.text, 8), flat);
}

// --- torchtitan ---

TEST(TorchtitanExport, OneFOneBRoundTripsAndMatchesItsCsv) {
  const PlanShape s = OneFOneB();
  const PlanFile plan = MakePlan(s);
  const FrameworkExport out = Export(Framework::kTorchtitan, s, "/runs/plan.csv");
  int m = 0;
  std::string csv_path;
  const ReadBack r = ReadTorchtitan(out.text, &m, &csv_path);
  ExpectLayout(r, s);
  EXPECT_EQ(m, s.m);
  EXPECT_EQ(r.layers_per_stage, s.blocks);
  EXPECT_EQ(csv_path, "/runs/plan.csv");
  const toml::table t = toml::parse(out.text);
  EXPECT_EQ(t["parallelism"]["pipeline_parallel_schedule"].value_or(std::string()), "1F1B");
  EXPECT_EQ(t["activation_checkpoint"]["mode"].value_or(std::string()), "full");
  EXPECT_EQ(t["training"]["seq_len"].value_or(0), 4096);
  // ZeRO-1 is not torchtitan's: FSDP without resharding is the closest, and said.
  EXPECT_EQ(t["parallelism"]["data_parallel_shard_degree"].value_or(0), 2);
  EXPECT_EQ(t["parallelism"]["fsdp_reshard_after_forward"].value_or(std::string()), "never");
  ASSERT_FALSE(out.RunsAsPlanned());
  EXPECT_THAT(out.differences[0], HasSubstr("no ZeRO-1"));

  // The CSV the TOML names (what --schedule-format pytorch-csv writes): one row per pipeline
  // rank, stage ids 0..p·v-1 as module_fqns_per_model_part has parts, micro-batches 0..m-1
  // as local_batch_size / pipeline_parallel_microbatch_size.
  const std::string csv = ScheduleToPyTorchCsv(plan.schedule);
  int rows = 0, max_stage = -1, max_mb = -1;
  std::istringstream lines(csv);
  const std::regex action(R"((\d+)(F|B|I|W)(\d+))");
  for (std::string line; std::getline(lines, line);) {
    ++rows;
    for (std::sregex_iterator it(line.begin(), line.end(), action), end; it != end; ++it) {
      max_stage = std::max(max_stage, std::stoi((*it)[1].str()));
      max_mb = std::max(max_mb, std::stoi((*it)[3].str()));
    }
  }
  EXPECT_EQ(rows, r.p);
  EXPECT_EQ(max_stage + 1, static_cast<int>(r.layers_per_stage.size()));
  EXPECT_EQ(max_mb + 1, m);
}

TEST(TorchtitanExport, VScheduleKeepsItsNameAndParts) {
  PlanShape s;
  s.kind = ScheduleKind::kDualPipeV;
  s.p = 4, s.v = 2, s.m = 8, s.d = 4, s.zero = 3;
  s.blocks = {1, 2, 2, 2, 2, 2, 2, 3};
  const FrameworkExport out = Export(Framework::kTorchtitan, s, "/runs/dualpipev.csv");
  int m = 0;
  const ReadBack r = ReadTorchtitan(out.text, &m);
  ExpectLayout(r, s);
  EXPECT_EQ(r.layers_per_stage, s.blocks);
  EXPECT_TRUE(out.RunsAsPlanned());
  const toml::table t = toml::parse(out.text);
  EXPECT_EQ(t["parallelism"]["pipeline_parallel_schedule"].value_or(std::string()), "DualPipeV");
  EXPECT_EQ(t["parallelism"]["data_parallel_shard_degree"].value_or(0), 4);
  EXPECT_EQ(t["parallelism"]["fsdp_reshard_after_forward"].value_or(std::string()), "always");
  // The first part holds the embedding, the last the norm and the output.
  const toml::array& parts = *t["parallelism"]["module_fqns_per_model_part"].as_array();
  EXPECT_EQ(parts[0].as_array()->at(0).value_or(std::string()), "tok_embeddings");
  EXPECT_EQ(parts[7].as_array()->back().value_or(std::string()), "output");
}

// zb-h1 has no torchtitan class of its own: 1F1B places the stages, the CSV orders them.
TEST(TorchtitanExport, ZeroBubbleRunsFromTheCsv) {
  PlanShape s;
  s.kind = ScheduleKind::kZBH1;
  s.p = 4, s.m = 8;
  s.blocks = {8, 8, 8, 8};
  const FrameworkExport out = Export(Framework::kTorchtitan, s, "/runs/zb.csv");
  EXPECT_TRUE(out.RunsAsPlanned());
  const toml::table t = toml::parse(out.text);
  EXPECT_EQ(t["parallelism"]["pipeline_parallel_schedule"].value_or(std::string()), "1F1B");
  EXPECT_EQ(t["parallelism"]["pipeline_parallel_schedule_csv"].value_or(std::string()),
            "/runs/zb.csv");
}

TEST(TorchtitanExport, DataParallelAloneIsDdp) {
  PlanShape s;
  s.d = 8, s.m = 4, s.mbs = 2;
  s.blocks = {32};
  const FrameworkExport out = Export(Framework::kTorchtitan, s);
  EXPECT_TRUE(out.RunsAsPlanned());
  int m = 0;
  const ReadBack r = ReadTorchtitan(out.text, &m);
  EXPECT_EQ(r.d, 8);
  EXPECT_EQ(r.global_batch, 2 * 4 * 8);
  const toml::table t = toml::parse(out.text);
  EXPECT_EQ(t["parallelism"]["data_parallel_replicate_degree"].value_or(0), 8);
  EXPECT_FALSE(t["parallelism"]["pipeline_parallel_schedule"]);
}

// --- DeepSpeed ---

TEST(DeepSpeedExport, OneFOneBRoundTrips) {
  PlanShape s = OneFOneB();
  s.sp = false;
  const FrameworkExport out = Export(Framework::kDeepSpeed, s);
  EXPECT_TRUE(out.RunsAsPlanned()) << out.differences[0];
  ExpectLayout(ReadDeepSpeed(out.text), s);
  const nlohmann::json j = nlohmann::json::parse(out.text);
  EXPECT_EQ(j["zero_optimization"]["stage"], 1);
  EXPECT_EQ(j["gradient_accumulation_steps"], 8);
  EXPECT_EQ(j["pipeline"]["partition"], "uniform");
  EXPECT_EQ(j["pipeline"]["activation_checkpoint_interval"], 1);
}

TEST(DeepSpeedExport, ZeroThreeWithPipelineIsStageOneAndSaid) {
  PlanShape s = OneFOneB();
  s.sp = false;
  s.zero = 3;
  const FrameworkExport out = Export(Framework::kDeepSpeed, s);
  ASSERT_FALSE(out.RunsAsPlanned());
  EXPECT_THAT(out.differences[0], HasSubstr("incompatible with pipeline parallelism"));
  EXPECT_THAT(out.differences[0], HasSubstr("closest it runs, written here: stage 1"));
  EXPECT_EQ(nlohmann::json::parse(out.text)["zero_optimization"]["stage"], 1);
}

TEST(DeepSpeedExport, InterleavedIsItsOneScheduleAndSaid) {
  PlanShape s;
  s.kind = ScheduleKind::kInterleaved1F1B;
  s.p = 4, s.v = 2, s.m = 8;
  s.blocks = std::vector<int>(8, 4);
  const FrameworkExport out = Export(Framework::kDeepSpeed, s);
  ASSERT_FALSE(out.RunsAsPlanned());
  EXPECT_THAT(out.differences[0], HasSubstr("TrainSchedule (1F1B"));
  const ReadBack r = ReadDeepSpeed(out.text);
  EXPECT_EQ(r.v, 1);
  EXPECT_EQ(r.p, 4);
  EXPECT_EQ(r.global_batch, 8);
}

TEST(FrameworkNames, UnknownNameListsTheKnownOnes) {
  EXPECT_EQ(*ParseFramework("torchtitan"), Framework::kTorchtitan);
  const auto bad = ParseFramework("nemo");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("unknown framework 'nemo': expected megatron, torchtitan or deepspeed"));
}

// The fixture is the parser's list, not a copy of what the export writes: it holds the flags
// Megatron-LM defines and not ones it does not (there is no --data-parallel-size: d is the
// world size over t x p x cp).
// Context parallelism (issue 25): each framework's names for cp and the K/V exchange.
PlanFile ContextParallelPlan(CpAlgorithm algorithm) {
  PlanShape s = OneFOneB();
  s.sp = false;
  PlanFile plan = MakePlan(s);
  plan.config.layout.context_parallel = 4;
  plan.config.layout.cp_algorithm = algorithm;
  plan.gpus = plan.config.layout.Gpus();
  return plan;
}

FrameworkExport ExportPlanWith(Framework f, const PlanFile& plan) {
  ExportRequest request;
  request.layer_names = LayerNames(32);
  request.sequence_length = 4096;
  return ExportPlan(f, plan, request);
}

TEST(ContextParallelExport, MegatronWritesTheSizeAndCommType) {
  const FrameworkExport ring =
      ExportPlanWith(Framework::kMegatron, ContextParallelPlan(CpAlgorithm::kRing));
  EXPECT_THAT(ring.text, HasSubstr("--context-parallel-size 4\n--cp-comm-type p2p\n"));
  EXPECT_THAT(ring.text, HasSubstr("# world size: 64 GPUs"));  // t 2 x cp 4 x p 4 x d 2
  const ReadBack r = ReadMegatron(ring.text, 64 / 4);          // Megatron's d: world / (t x cp x p)
  EXPECT_EQ(r.d, 2);
  const FrameworkExport gather =
      ExportPlanWith(Framework::kMegatron, ContextParallelPlan(CpAlgorithm::kAllGather));
  EXPECT_THAT(gather.text, HasSubstr("--cp-comm-type all_gather\n"));
}

TEST(ContextParallelExport, TorchtitanWritesTheDegreeAndRotateMethod) {
  const FrameworkExport ring =
      ExportPlanWith(Framework::kTorchtitan, ContextParallelPlan(CpAlgorithm::kRing));
  EXPECT_THAT(ring.text, HasSubstr("context_parallel_degree = 4\n"));
  EXPECT_THAT(ring.text, HasSubstr("context_parallel_rotate_method = \"alltoall\"\n"));
  const FrameworkExport gather =
      ExportPlanWith(Framework::kTorchtitan, ContextParallelPlan(CpAlgorithm::kAllGather));
  EXPECT_THAT(gather.text, HasSubstr("context_parallel_rotate_method = \"allgather\"\n"));
}

TEST(ContextParallelExport, DeepSpeedSaysItDiffers) {
  const FrameworkExport out =
      ExportPlanWith(Framework::kDeepSpeed, ContextParallelPlan(CpAlgorithm::kRing));
  ASSERT_FALSE(out.RunsAsPlanned());
  const bool said = std::any_of(out.differences.begin(), out.differences.end(), [](auto& d) {
    return d.find("DeepSpeed has no ring or all-gather context parallelism") != std::string::npos;
  });
  EXPECT_TRUE(said);
}

// Expert parallelism (issue 26): ep 4 folded over the t 2 x d 2 GPUs of each 1F1B stage, on
// each dispatcher; every Megatron-LM flag is checked against the parser's list by ReadMegatron.
PlanFile ExpertPlan(ExpertDispatcher dispatcher, int ep = 4) {
  PlanFile plan = MakePlan(OneFOneB());
  plan.config.layout.expert_parallel = ep;
  plan.config.layout.expert_dispatcher = dispatcher;
  return plan;
}

TEST(ExpertExport, MegatronWritesTheDegreesAndTheDispatcher) {
  const FrameworkExport deepep =
      ExportPlanWith(Framework::kMegatron, ExpertPlan(ExpertDispatcher::kDeepEp));
  EXPECT_THAT(
      deepep.text,
      HasSubstr("--expert-model-parallel-size 4\n--expert-tensor-parallel-size 1\n"
                "--moe-token-dispatcher-type flex\n--moe-flex-dispatcher-backend deepep\n"));
  EXPECT_EQ(ReadMegatron(deepep.text, 16).d, 2);  // every flag in the parser's list
  const FrameworkExport alltoall =
      ExportPlanWith(Framework::kMegatron, ExpertPlan(ExpertDispatcher::kAllToAll));
  EXPECT_THAT(alltoall.text, HasSubstr("--moe-token-dispatcher-type alltoall\n"));
  EXPECT_THAT(alltoall.text, Not(HasSubstr("flex")));
  EXPECT_EQ(ReadMegatron(alltoall.text, 16).d, 2);
  // Megatron-LM's all-gather dispatcher, its own default, written out.
  const FrameworkExport allgather =
      ExportPlanWith(Framework::kMegatron, ExpertPlan(ExpertDispatcher::kAllGather));
  EXPECT_THAT(allgather.text, HasSubstr("--moe-token-dispatcher-type allgather\n"));
  EXPECT_THAT(allgather.text, Not(HasSubstr("flex")));
  EXPECT_TRUE(allgather.RunsAsPlanned());
  EXPECT_EQ(ReadMegatron(allgather.text, 16).d, 2);
  // ep = 1 (etp alone): no all-to-all, no dispatcher flag.
  PlanFile etp_only = ExpertPlan(ExpertDispatcher::kAllToAll, 1);
  etp_only.config.layout.expert_tensor_parallel = 2;
  EXPECT_THAT(ExportPlanWith(Framework::kMegatron, etp_only).text,
              Not(HasSubstr("--moe-token-dispatcher-type")));
}

TEST(ExpertExport, MegatronWritesTheModelsCapacityFactor) {
  // A model estimated with --moe-capacity-factor (ModelExpertCapacity) runs with Megatron-LM's
  // --moe-expert-capacity-factor, and padded with --moe-pad-expert-input-to-capacity; a
  // dropless model writes neither.
  ExportRequest request;
  request.layer_names = LayerNames(32);
  request.moe_capacity_factor = 1.25;
  const PlanFile plan = ExpertPlan(ExpertDispatcher::kAllToAll);
  const FrameworkExport dropping = ExportPlan(Framework::kMegatron, plan, request);
  EXPECT_THAT(dropping.text, HasSubstr("--moe-expert-capacity-factor 1.25\n"));
  EXPECT_THAT(dropping.text, Not(HasSubstr("--moe-pad-expert-input-to-capacity")));
  EXPECT_EQ(ReadMegatron(dropping.text, 16).d, 2);
  request.moe_pad_to_capacity = true;
  const FrameworkExport padded = ExportPlan(Framework::kMegatron, plan, request);
  EXPECT_THAT(padded.text, HasSubstr("--moe-expert-capacity-factor 1.25\n"
                                     "--moe-pad-expert-input-to-capacity\n"));
  EXPECT_EQ(ReadMegatron(padded.text, 16).d, 2);
  EXPECT_THAT(ExportPlanWith(Framework::kMegatron, plan).text, Not(HasSubstr("capacity")));
}

TEST(ExpertExport, TorchtitanWritesTheDegreesAndTheCommBackend) {
  const FrameworkExport deepep =
      ExportPlanWith(Framework::kTorchtitan, ExpertPlan(ExpertDispatcher::kDeepEp));
  const toml::table t = toml::parse(deepep.text);
  EXPECT_EQ(t["parallelism"]["expert_parallel_degree"].value_or(0), 4);
  EXPECT_EQ(t["parallelism"]["expert_tensor_parallel_degree"].value_or(0), 1);
  EXPECT_EQ(t["parallelism"]["expert_parallel_comm_backend"].value_or(std::string()), "deepep");
  const FrameworkExport alltoall =
      ExportPlanWith(Framework::kTorchtitan, ExpertPlan(ExpertDispatcher::kAllToAll));
  EXPECT_EQ(toml::parse(alltoall.text)["parallelism"]["expert_parallel_comm_backend"].value_or(
                std::string()),
            "standard");
  // torchtitan has no all-gather dispatcher: standard, the closest, is written and said.
  const FrameworkExport allgather =
      ExportPlanWith(Framework::kTorchtitan, ExpertPlan(ExpertDispatcher::kAllGather));
  EXPECT_EQ(toml::parse(allgather.text)["parallelism"]["expert_parallel_comm_backend"].value_or(
                std::string()),
            "standard");
  EXPECT_TRUE(std::any_of(allgather.differences.begin(), allgather.differences.end(),
                          [](const std::string& d) {
                            return d.find("no all-gather dispatcher") != std::string::npos;
                          }));
  // torchtitan runs etp = 1 or etp = t only (parallel_dims.py): at d = 4, ep 2 x etp 4 over a
  // stage's t 2 x d 4 GPUs is said, ep 2 x etp 2 (etp = t) is not.
  auto etp_said = [](int etp) {
    PlanShape shape = OneFOneB();
    shape.d = 4;
    PlanFile plan = MakePlan(shape);
    plan.config.layout.expert_parallel = 2;
    plan.config.layout.expert_tensor_parallel = etp;
    const FrameworkExport out = ExportPlanWith(Framework::kTorchtitan, plan);
    return std::any_of(out.differences.begin(), out.differences.end(), [](const std::string& d) {
      return d.find("only at etp = 1 or etp = t") != std::string::npos;
    });
  };
  EXPECT_TRUE(etp_said(4));
  EXPECT_FALSE(etp_said(2));
  EXPECT_FALSE(etp_said(1));
  // A plan without experts writes none of the keys.
  EXPECT_THAT(Export(Framework::kTorchtitan, OneFOneB()).text, Not(HasSubstr("expert_")));
}

TEST(ExpertExport, DeepSpeedSaysItSetsExpertsInTheModelAndHasNoDeepEp) {
  const FrameworkExport deepep =
      ExportPlanWith(Framework::kDeepSpeed, ExpertPlan(ExpertDispatcher::kDeepEp));
  auto experts_said = [](const FrameworkExport& out) {
    for (const std::string& d : out.differences) {
      if (d.find("autoep_size = 4") != std::string::npos) return d;
    }
    return std::string();
  };
  EXPECT_THAT(experts_said(deepep), HasSubstr("it has no DeepEP dispatcher"));
  const FrameworkExport alltoall =
      ExportPlanWith(Framework::kDeepSpeed, ExpertPlan(ExpertDispatcher::kAllToAll));
  EXPECT_THAT(experts_said(alltoall), HasSubstr("expert_tensor_parallel_size = 1"));
  EXPECT_THAT(experts_said(alltoall), Not(HasSubstr("DeepEP")));
}

TEST(MegatronFlagList, IsTheParsersList) {
  const std::set<std::string> flags = MegatronFlagList();
  EXPECT_GT(flags.size(), 500u);
  EXPECT_TRUE(flags.count("--pipeline-model-parallel-layout"));
  EXPECT_FALSE(flags.count("--data-parallel-size"));
  // The dispatcher's flags at the fixture's commit (transformer_config.py).
  EXPECT_TRUE(flags.count("--moe-token-dispatcher-type"));
  EXPECT_TRUE(flags.count("--moe-flex-dispatcher-backend"));
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

// --- Sharding settings (ShardingConfig) in each framework's names ---

// FSDP over d = 16 (two nodes of 8), m = 4: HSDP in groups of 8, gathered parameters kept for the
// backward, gradients reduced once per step.
PlanShape HybridShard() {
  PlanShape s;
  s.d = 16, s.zero = 3, s.m = 4;
  s.blocks = {32};
  s.sharding = {.reshard_after_forward = false,
                .prefetch = true,
                .reduce_every_microbatch = false,
                .shard_group = 8};
  return s;
}

TEST(ShardingExport, TorchtitanWritesTheShardAndReplicateDegreesAndResharding) {
  const PlanShape s = HybridShard();
  const FrameworkExport out = Export(Framework::kTorchtitan, s);
  const toml::table t = toml::parse(out.text);
  // 16 replicas = 2 replicate x 8 shard
  EXPECT_EQ(t["parallelism"]["data_parallel_shard_degree"].value_or(0), 8);
  EXPECT_EQ(t["parallelism"]["data_parallel_replicate_degree"].value_or(0), 2);
  EXPECT_EQ(t["parallelism"]["fsdp_reshard_after_forward"].value_or(std::string()), "never");
  // torchtitan reduce-scatters every micro-batch: the one difference
  ASSERT_EQ(out.differences.size(), 1u);
  EXPECT_THAT(out.differences[0], HasSubstr("once per step"));
  // the defaults: FULL_SHARD over all 16, nothing differs
  PlanShape plain = s;
  plain.sharding = ShardingConfig{};
  const FrameworkExport full = Export(Framework::kTorchtitan, plain);
  const toml::table f = toml::parse(full.text);
  EXPECT_EQ(f["parallelism"]["data_parallel_shard_degree"].value_or(0), 16);
  EXPECT_EQ(f["parallelism"]["data_parallel_replicate_degree"].value_or(0), 1);
  EXPECT_EQ(f["parallelism"]["fsdp_reshard_after_forward"].value_or(std::string()), "always");
  EXPECT_TRUE(full.RunsAsPlanned());
}

TEST(ShardingExport, MegatronFsdpWritesHybridShardingAndSaysWhatItLacks) {
  const PlanShape s = HybridShard();
  const FrameworkExport out = Export(Framework::kMegatron, s);
  // 16 / 8 = 2 optimizer instances, replicated (no_shard) across them
  EXPECT_THAT(out.text, HasSubstr("--num-distributed-optimizer-instances 2\n"
                                  "--outer-dp-sharding-strategy no_shard\n"
                                  "--overlap-param-gather\n"));
  ExpectLayout(ReadMegatron(out.text, 16), s);
  ASSERT_EQ(out.differences.size(), 2u);
  EXPECT_THAT(out.differences[0], HasSubstr("reshard_after_forward off"));
  EXPECT_THAT(out.differences[1], HasSubstr("once per step"));
  // shard prefetch off: no overlapped parameter gather
  PlanShape in_turn = s;
  in_turn.sharding = {.prefetch = false};
  const FrameworkExport off = Export(Framework::kMegatron, in_turn);
  EXPECT_THAT(off.text, Not(HasSubstr("--overlap-param-gather")));
  EXPECT_THAT(off.text, Not(HasSubstr("--num-distributed-optimizer-instances")));
  EXPECT_TRUE(off.RunsAsPlanned());
}

TEST(ShardingExport, DeepSpeedWritesMicsAndPrefetchAndSaysWhatItLacks) {
  PlanShape s = HybridShard();
  s.sharding.prefetch = false;
  const FrameworkExport out = Export(Framework::kDeepSpeed, s);
  const nlohmann::json j = nlohmann::json::parse(out.text);
  EXPECT_EQ(j["zero_optimization"]["stage"], 3);
  EXPECT_EQ(j["zero_optimization"]["mics_shard_size"], 8);
  EXPECT_EQ(j["zero_optimization"]["stage3_prefetch_bucket_size"], 0);
  ExpectLayout(ReadDeepSpeed(out.text), s);
  ASSERT_EQ(out.differences.size(), 2u);
  EXPECT_THAT(out.differences[0], HasSubstr("reshard_after_forward off"));
  EXPECT_THAT(out.differences[1], HasSubstr("once per step"));
  // the defaults write neither key
  PlanShape plain = s;
  plain.sharding = ShardingConfig{};
  const nlohmann::json d = nlohmann::json::parse(Export(Framework::kDeepSpeed, plain).text);
  EXPECT_FALSE(d["zero_optimization"].contains("mics_shard_size"));
  EXPECT_FALSE(d["zero_optimization"].contains("stage3_prefetch_bucket_size"));
}

}  // namespace
}  // namespace pipecast
