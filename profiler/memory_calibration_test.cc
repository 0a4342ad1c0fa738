// The memory rows of docs/calibration-memory.md ("Memory as the GPU reports it"):
// published per-GPU memory figures of runs by people outside the project,
// each run pinned as it was made: `profiler analytic` from the model's
// Hugging Face config with the row's sequence, micro-batch size, precision
// and loss on the row's GPU, then the simulator with p = 1, d = the GPU
// count, one micro-batch, its recomputation and FSDP (ZeRO-3). What is
// compared is what the publisher measured: max_reserved (PyTorch's
// reserved_bytes.all.peak) against DeviceMemory::ReservedBytes() (the
// allocated peak, the allocator's cache and the cuBLAS workspaces). The rows
// come from tests/calibration/memory_rows.json; none was tuned on.
//
// Held: each row at its bound: within 5% (the target) where it is,
// and for a listed miss a guard around its present error, so that a change
// that moves it is seen and the docs' table is updated.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "sim/memory.h"
#include "sim/memory_replay.h"
#include "sim/runtime_memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/step_trace.h"

namespace pipecast {
namespace {

struct MemoryRow {
  std::string id, preset, hf_config, recompute, loss, precision, fp8_recipe;
  int seq = 0, mbs = 0, d = 0;
  bool fp8_param_gather = false;
  double published_gib = 0;
  double within = 0;                     // > 0: |error| <= within
  double guard_low = 0, guard_high = 0;  // else: error in [low, high]
  // The simulator's --memory-replay for the row ("" where the replay does
  // not describe the run and must refuse it) and its bound, |error| <= it.
  std::string replay;
  double replay_within = 0;
  // The same run with --sharded-state fsdp2 (every row's run was FSDP2): the allocated peak
  // against what torchtitan's code allocates there, worked term by term in
  // docs/calibration-memory.md (|difference| <= allocated_within_gib), and the reserved figure's
  // error held in a guard [low, high] around its present value.
  double code_allocated_gib = 0, allocated_within_gib = 0;
  double fsdp2_low = 0, fsdp2_high = 0;
};

void PrintTo(const MemoryRow& row, std::ostream* os) { *os << row.id; }

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

std::vector<MemoryRow> LoadRows() {
  std::ifstream in(SourcePath("tests/calibration/memory_rows.json"));
  std::vector<MemoryRow> rows;
  if (!in) return rows;  // MemoryRows.FileIsThere says why
  const nlohmann::json doc = nlohmann::json::parse(in);
  for (const nlohmann::json& r : doc.at("rows")) {
    MemoryRow row;
    row.id = r.at("id");
    row.preset = r.at("preset");
    row.hf_config = r.at("hf_config");
    row.seq = r.at("seq");
    row.mbs = r.at("mbs");
    row.d = r.at("d");
    row.recompute = r.at("recompute");
    row.loss = r.at("loss");
    row.precision = r.at("precision");
    row.fp8_recipe = r.value("fp8_recipe", "");
    row.fp8_param_gather = r.value("fp8_param_gather", false);
    row.published_gib = r.at("published_gib");
    const nlohmann::json& bound = r.at("bound");
    if (bound.contains("within")) {
      row.within = bound.at("within");
    } else {
      row.guard_low = bound.at("guard").at(0);
      row.guard_high = bound.at("guard").at(1);
    }
    row.replay = r.value("replay", "");
    if (!row.replay.empty()) row.replay_within = r.at("replay_bound").at("within");
    const nlohmann::json& fsdp2 = r.at("fsdp2");
    row.code_allocated_gib = fsdp2.at("code_allocated_gib");
    row.allocated_within_gib = fsdp2.at("allocated_within_gib");
    row.fsdp2_low = fsdp2.at("reserved_guard").at(0);
    row.fsdp2_high = fsdp2.at("reserved_guard").at(1);
    rows.push_back(row);
  }
  return rows;
}

const std::vector<MemoryRow>& Rows() {
  static const std::vector<MemoryRow> rows = LoadRows();
  return rows;
}

std::string PresetSpec(const std::string& preset) {
  return preset.find('/') != std::string::npos ? SourcePath(preset) : preset;
}

// What the simulator reports for the row, in GiB: the allocated peak and
// what PyTorch reserves (allocated + cache + cuBLAS).
struct Prediction {
  double allocated_gib = 0;
  double reserved_gib = 0;
  // The caching allocator's replay of two steps (sim/step_trace.h): the
  // trace's allocated peak and the reserved peak + cuBLAS; 0 without a trace.
  double replay_allocated_gib = 0;
  double replay_reserved_gib = 0;
  // The simulator's --memory-replay torchtitan-fsdp2 (sim/memory_replay.h) on
  // the same model and configuration: what it reports as reserved (the
  // replay's peak + cuBLAS) and allocated, or why it refuses.
  double wired_reserved_gib = 0;
  double wired_allocated_gib = 0;
  std::string wired_refusal;
  // The simulator with --sharded-state fsdp2: allocated peak and allocated + cache + cuBLAS.
  double fsdp2_allocated_gib = 0;
  double fsdp2_reserved_gib = 0;
};

// The replay of two steps of the row's trace on its GPU's memory less the
// runtime's (CUDA context, cuBLAS, NCCL).
void Replay(const MemoryRow& row, const Model& model, const Cluster& cluster, const SimOptions& sim,
            const DeviceMemory& device, Prediction* p) {
  StepTraceOptions options;
  options.microbatch_size = row.mbs;
  options.data_parallel = row.d;
  options.memory = sim.config.memory;
  options.op_recompute = row.recompute == "op";
  options.pytorch_loss = row.loss == "pytorch";
  Result<std::vector<TraceEvent>> trace = BuildStepTrace(model, options);
  ASSERT_TRUE(trace.ok()) << row.id << ": " << trace.status().message();
  Result<ReplayResult> replay =
      ReplayTrace(*trace, cluster.gpu.memory_bytes - device.RuntimeBytes());
  ASSERT_TRUE(replay.ok()) << row.id << ": " << replay.status().message();
  Bytes cublas = 0;
  for (const DeviceMemoryTerm& t : device.terms) {
    if (t.name == "cuBLAS workspaces") cublas = t.bytes;
  }
  p->replay_allocated_gib = ToGiB(replay->run.peak_allocated);
  p->replay_reserved_gib = ToGiB(replay->run.peak_reserved + cublas);
  std::printf(
      "%s replay: step 1 allocated %.2f reserved %.2f; step 2 allocated %.2f reserved %.2f\n",
      row.id.c_str(), ToGiB(replay->first_step.peak_allocated),
      ToGiB(replay->first_step.peak_reserved), ToGiB(replay->last_step.peak_allocated),
      ToGiB(replay->last_step.peak_reserved));
}

// As docs/calibration.md gives the commands.
Prediction Predict(const MemoryRow& row) {
  Result<HfConfig> hf = LoadHfConfig(SourcePath(row.hf_config));
  EXPECT_TRUE(hf.ok()) << row.id << ": " << hf.status().message();
  if (!hf.ok()) return {};
  TransformerSpec spec = hf->architecture;
  spec.name = row.id;
  spec.sequence_length = row.seq;
  spec.microbatch_sizes = {row.mbs};
  AnalyticOptions options;
  options.gpu_preset = PresetSpec(row.preset);
  options.loss = *ParseLoss(row.loss);
  if (row.precision == "fp8") options.fp8 = *ParseFp8Recipe(row.fp8_recipe);
  Result<Model> model = EstimateTransformer(spec, options);
  EXPECT_TRUE(model.ok()) << row.id << ": " << model.status().message();
  if (!model.ok()) return {};
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, 1, 1);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  Result<Cluster> cluster = LoadCluster(PresetSpec(row.preset));
  EXPECT_TRUE(cluster.ok()) << row.id << ": " << cluster.status().message();
  if (!schedule.ok() || !cluster.ok()) return {};
  SimOptions sim;
  sim.config.microbatch_size = row.mbs;
  sim.config.layout.data_parallel = row.d;
  EXPECT_TRUE(
      ParseRecomputeSpec(row.recompute, &sim.config.recompute, &sim.config.recompute_layers))
      << row.id;
  sim.config.memory =
      *MemoryConfigFor(row.precision, "adam", "fp32", row.fp8_recipe, row.fp8_param_gather);
  sim.config.memory.zero = 3;
  sim.partition = {StageLayers{0, static_cast<int>(model->layers.size()) - 1}};
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << row.id << ": " << result.status().message();
  if (!result.ok()) return {};
  const Bytes allocated = result->per_rank[0].peak_memory_bytes;
  const DeviceMemory device = DeviceMemoryFor(*cluster, sim.config, allocated, 0);
  Prediction p;
  p.allocated_gib = ToGiB(allocated);
  p.reserved_gib = ToGiB(device.ReservedBytes());
  Replay(row, *model, *cluster, sim, device, &p);
  // As `simulator ... --sharded-state fsdp2` runs it: the same command, FSDP2's sharded state.
  SimOptions fsdp2 = sim;
  fsdp2.config.memory.sharded_state = ShardedState::kFsdp2;
  Result<SimResult> flat = Simulate(*model, *cluster, *schedule, fsdp2);
  EXPECT_TRUE(flat.ok()) << row.id << ": " << flat.status().message();
  if (flat.ok()) {
    const Bytes peak = flat->per_rank[0].peak_memory_bytes;
    p.fsdp2_allocated_gib = ToGiB(peak);
    p.fsdp2_reserved_gib = ToGiB(DeviceMemoryFor(*cluster, fsdp2.config, peak, 0).ReservedBytes());
  }
  // As `simulator --stages 1 --microbatches 1 ... --memory-replay torchtitan-fsdp2` completes
  // the configuration.
  TrainingConfig wired = sim.config;
  wired.layout.pipeline_stages = 1;
  wired.layout.chunks = 1;
  wired.microbatches = 1;
  Result<ReplayedMemory> replayed = ReplayTorchtitanFsdp2(*model, *cluster, wired);
  if (replayed.ok()) {
    const DeviceMemory from_replay = DeviceMemoryFromReplay(
        *cluster, wired, replayed->allocated_peak, replayed->reserved_peak, "replay", 0);
    p.wired_reserved_gib = ToGiB(from_replay.ReservedBytes());
    p.wired_allocated_gib = ToGiB(replayed->allocated_peak);
  } else {
    p.wired_refusal = replayed.status().message();
  }
  return p;
}

TEST(MemoryRows, FileIsThere) {
  ASSERT_EQ(Rows().size(), 4u) << "tests/calibration/memory_rows.json should hold the four "
                               << "torchtitan-published rows (PIPECAST_SOURCE_DIR is the "
                               << "repository root)";
}

class MemoryRow_ : public testing::TestWithParam<MemoryRow> {};

TEST_P(MemoryRow_, HoldsItsBound) {
  const MemoryRow& row = GetParam();
  const Prediction p = Predict(row);
  const double error = p.reserved_gib / row.published_gib - 1;
  std::printf("%s published %.2f GiB predicted %.2f (allocated %.2f) error %+.1f%%\n",
              row.id.c_str(), row.published_gib, p.reserved_gib, p.allocated_gib, error * 100);
  std::printf("%s replay: reserved %.2f (allocated %.2f) error %+.1f%%\n", row.id.c_str(),
              p.replay_reserved_gib, p.replay_allocated_gib,
              (p.replay_reserved_gib / row.published_gib - 1) * 100);
  if (row.replay.empty()) {
    // The FP8 + torch.compile rows: no trace describes their step, so the replay refuses.
    EXPECT_NE(p.wired_refusal, "") << row.id << ": --memory-replay should refuse this run";
    std::printf("%s --memory-replay: refused (%s)\n", row.id.c_str(), p.wired_refusal.c_str());
  } else {
    ASSERT_EQ(p.wired_refusal, "") << row.id;
    const double wired_error = p.wired_reserved_gib / row.published_gib - 1;
    std::printf("%s --memory-replay %s: reserved %.2f (allocated %.2f) error %+.1f%%\n",
                row.id.c_str(), row.replay.c_str(), p.wired_reserved_gib, p.wired_allocated_gib,
                wired_error * 100);
    EXPECT_LE(std::abs(wired_error), row.replay_within) << row.id;
  }
  // --sharded-state fsdp2: the allocated peak is the code's (the parts, not the sum's luck); the
  // reserved figure is then short by the allocator's cache beyond the flat 5% (held out).
  const double fsdp2_error = p.fsdp2_reserved_gib / row.published_gib - 1;
  std::printf(
      "%s --sharded-state fsdp2: allocated %.2f (the code's %.1f) reserved %.2f error "
      "%+.1f%%\n",
      row.id.c_str(), p.fsdp2_allocated_gib, row.code_allocated_gib, p.fsdp2_reserved_gib,
      fsdp2_error * 100);
  EXPECT_NEAR(p.fsdp2_allocated_gib, row.code_allocated_gib, row.allocated_within_gib) << row.id;
  EXPECT_GE(fsdp2_error, row.fsdp2_low) << row.id << ": the fsdp2 row moved; update the docs";
  EXPECT_LE(fsdp2_error, row.fsdp2_high) << row.id << ": the fsdp2 row moved; update the docs";
  if (row.within > 0) {
    EXPECT_LE(std::abs(error), row.within) << row.id;
  } else {
    EXPECT_GE(error, row.guard_low)
        << row.id << ": a listed miss moved; update docs/calibration.md";
    EXPECT_LE(error, row.guard_high)
        << row.id << ": a listed miss moved; update docs/calibration.md";
  }
}

std::string RowName(const testing::TestParamInfo<MemoryRow>& info) {
  std::string name = info.param.id;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Published, MemoryRow_, testing::ValuesIn(Rows()), RowName);

}  // namespace
}  // namespace pipecast
