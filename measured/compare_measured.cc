#include "measured/compare_measured.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "formats/formats.h"

namespace pipecast::measured {
namespace {

using validate::Comparison;
using validate::MakeMetricRow;
using validate::MetricRow;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int64_t GlobalBatch(const Prediction& p) {
  if (p.predicted.global_batch > 0) return p.predicted.global_batch;
  return int64_t{p.plan.config.microbatch_size} * p.plan.config.microbatches *
         std::max(p.plan.config.layout.data_parallel, 1);
}

// The predicted compute of rank r, in the measured sense: its ops less the communication the
// simulator puts inside them, plus its optimizer step.
TimeNs PredictedCompute(const StageResult& s) {
  return s.busy_ns - s.tp_comm_ns - s.sharding_exposed_ns + s.optimizer_ns;
}

TimeNs PredictedExposedComm(const StageResult& s) {
  return s.tp_comm_ns + s.sharding_exposed_ns + s.allreduce_ns + s.allgather_ns + s.copy_reduce_ns;
}

void Finish(Comparison* c) {
  c->within_tolerance = true;
  for (const MetricRow& row : c->rows) c->within_tolerance = c->within_tolerance && row.within;
}

}  // namespace

Result<Prediction> PredictPlan(const std::string& plan_path, const std::string& model_path,
                               const std::string& cluster) {
  Prediction p;
  PIPECAST_ASSIGN_OR_RETURN(PlanFile plan, LoadPlan(plan_path));
  p.plan = std::move(plan);
  PIPECAST_ASSIGN_OR_RETURN(Model model, LoadModel(model_path));
  p.model_name = model.name;
  if (!cluster.empty()) {
    Result<Cluster> c = LoadCluster(cluster);
    if (!c.ok()) return c.status().WithPrefix("--cluster");
    p.cluster = *c;
  } else {
    p.cluster = p.plan.cluster;
  }
  SimOptions sim = PlanSimOptions(p.plan);
  sim.record_timeline = true;
  Result<SimResult> predicted = Simulate(model, p.cluster, p.plan.schedule, sim);
  if (!predicted.ok())
    return predicted.status().WithPrefix("the simulator cannot replay this plan");
  p.predicted = std::move(*predicted);
  for (const std::string& n : p.predicted.notes) p.notes.push_back("prediction: " + n);
  return p;
}

namespace {

// Whether the measured median step's ops are the plan's: each named action on a stage of the
// plan, run by the rank the plan puts it on. Returns whether every op named its action (else
// compute is compared per rank only).
Result<bool> CheckOpsMatchPlan(const Schedule& schedule, const MeasuredRun& run) {
  bool actions = true;
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    for (const MeasuredOp& op : run.Step(r, run.median).ops) {
      if (op.inferred) {
        actions = false;
        continue;
      }
      if (op.action.stage >= schedule.num_stages) {
        return Status::InvalidArgument(fmt::format(
            "{} runs stage {}, but the plan has stages 0-{}: is it a trace of this plan?",
            run.ranks[r].file, op.action.stage, schedule.num_stages - 1));
      }
      const int owner = schedule.stage_rank[op.action.stage];
      if (owner != r) {
        return Status::InvalidArgument(fmt::format(
            "{} (measured rank {}) runs stage {}, which the plan puts on rank {}: give the "
            "traces in pipeline-rank order",
            run.ranks[r].file, r, op.action.stage, owner));
      }
    }
  }
  return actions;
}

// The run's bubble ratio, then per rank: compute, bubble ratio, exposed communication (PyTorch
// traces) and peak memory (where the trace has it).
void AddRankRows(const SimResult& pred, const MeasuredRun& run, const validate::Tolerances& tol,
                 Comparison* c) {
  const int ranks = static_cast<int>(run.ranks.size());
  const double pred_iter = static_cast<double>(pred.iteration_ns);
  const double meas_iter = static_cast<double>(run.iteration_ns[run.median]);
  std::vector<double> pred_compute(ranks), meas_compute(ranks), pred_bubble(ranks),
      meas_bubble(ranks);
  double pred_sum = 0, meas_sum = 0;
  for (int r = 0; r < ranks; ++r) {
    const StageResult& s = pred.per_rank[r];
    pred_compute[r] = static_cast<double>(run.pipecast_trace ? s.busy_ns : PredictedCompute(s));
    meas_compute[r] = static_cast<double>(run.Step(r, run.median).compute_ns);
    pred_bubble[r] = pred_iter > 0 ? 1.0 - pred_compute[r] / pred_iter : 0;
    meas_bubble[r] = meas_iter > 0 ? 1.0 - meas_compute[r] / meas_iter : 0;
    pred_sum += pred_bubble[r];
    meas_sum += meas_bubble[r];
  }
  c->rows.push_back(MakeMetricRow("bubble ratio", -1, "ratio", pred_sum / ranks, meas_sum / ranks,
                                  false, true, tol.bubble));
  for (int r = 0; r < ranks; ++r) {
    const StageResult& s = pred.per_rank[r];
    const RankStep& m = run.Step(r, run.median);
    c->rows.push_back(
        MakeMetricRow("compute", r, "ns", pred_compute[r], meas_compute[r], true, false, tol.time));
    c->rows.push_back(MakeMetricRow("bubble ratio", r, "ratio", pred_bubble[r], meas_bubble[r],
                                    false, false, tol.bubble));
    if (!run.pipecast_trace) {
      const TimeNs exposed =
          m.exposed_comm_ns - m.exposed_by_kind[static_cast<int>(CommKind::kSendRecv)];
      c->rows.push_back(MakeMetricRow("exposed comm", r, "ns",
                                      static_cast<double>(PredictedExposedComm(s)),
                                      static_cast<double>(exposed), true, false, tol.time));
    }
    if (m.peak_allocated_bytes >= 0) {
      c->rows.push_back(
          MakeMetricRow("peak memory", r, "bytes", static_cast<double>(s.peak_memory_bytes),
                        static_cast<double>(m.peak_allocated_bytes), true, true, tol.memory));
    }
  }
}

// Each stage's op time, predicted against measured (traces that name their actions).
void AddStageRows(const SimResult& pred, const MeasuredRun& run, const validate::Tolerances& tol,
                  Comparison* c) {
  std::map<int, double> pred_stage, meas_stage;
  for (const OpRecord& op : pred.ops) {
    pred_stage[op.action.stage] += static_cast<double>(op.end_ns - op.start_ns);
  }
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    for (const MeasuredOp& op : run.Step(r, run.median).ops) {
      meas_stage[op.action.stage] += static_cast<double>(op.end_ns - op.start_ns);
    }
  }
  for (const auto& [stage, ns] : pred_stage) {
    c->rows.push_back(MakeMetricRow(fmt::format("op time, stage {}", stage), -1, "ns", ns,
                                    meas_stage[stage], true, false, tol.time));
  }
}

}  // namespace

// Check the trace is of this plan, then the whole-run rows, the per-rank rows and, where the
// traces name their actions, the per-stage rows.
Result<Comparison> CompareRun(const Prediction& prediction, const MeasuredRun& run,
                              const validate::Tolerances& tol, std::vector<std::string>* notes) {
  PIPECAST_RETURN_IF_ERROR(tol.Validate());
  const SimResult& pred = prediction.predicted;
  const Schedule& schedule = prediction.plan.schedule;
  const int ranks = static_cast<int>(run.ranks.size());
  if (ranks != schedule.num_ranks || static_cast<int>(pred.per_rank.size()) != ranks) {
    return Status::InvalidArgument(fmt::format(
        "the plan has {} pipeline ranks but {} measured: give one trace per pipeline rank, in "
        "rank order (tensor- and data-parallel replicas of a rank are left out)",
        schedule.num_ranks, ranks));
  }
  PIPECAST_ASSIGN_OR_RETURN(const bool actions, CheckOpsMatchPlan(schedule, run));
  Comparison c;
  c.iteration_ns = run.iteration_ns;
  c.median_iteration = run.median;
  const double pred_iter = static_cast<double>(pred.iteration_ns);
  const double meas_iter = static_cast<double>(run.iteration_ns[run.median]);
  c.rows.push_back(
      MakeMetricRow("iteration time", -1, "ns", pred_iter, meas_iter, true, true, tol.time));
  const double batch = static_cast<double>(GlobalBatch(prediction));
  c.rows.push_back(
      MakeMetricRow("throughput", -1, "samples/s", pred_iter > 0 ? batch * 1e9 / pred_iter : 0,
                    meas_iter > 0 ? batch * 1e9 / meas_iter : 0, true, true, tol.time));
  AddRankRows(pred, run, tol, &c);
  if (actions) {
    AddStageRows(pred, run, tol, &c);
  } else {
    notes->push_back(
        "the traces name no pipeline actions (PP:<action>): compute is compared per rank, not "
        "per stage");
  }
  notes->push_back(
      "iteration time compares whole iterations: the prediction's pipeline, data-parallel tail "
      "and optimizer step against the measured step's first to last GPU work");
  if (!run.pipecast_trace) {
    notes->push_back(
        "compute is the union of non-communication GPU work (optimizer included); predicted "
        "compute is busy time less tensor-parallel and sharding communication plus the "
        "optimizer step; exposed comm leaves out pipeline send/recv (waiting for it is bubble)");
  }
  Finish(&c);
  return c;
}

Result<Comparison> CompareLog(const Prediction& prediction, const MegatronLog& log,
                              MegatronRankOrder order, int skip, const validate::Tolerances& tol,
                              std::vector<std::string>* notes) {
  PIPECAST_RETURN_IF_ERROR(tol.Validate());
  if (skip < 0 || skip >= static_cast<int>(log.iterations.size())) {
    return Status::InvalidArgument(
        fmt::format("--skip-steps {} leaves none of the {} iteration lines of {}: skip fewer", skip,
                    log.iterations.size(), log.origin));
  }
  const SimResult& pred = prediction.predicted;
  const PlanFile& plan = prediction.plan;
  Comparison c;
  std::vector<double> elapsed, tflops;
  for (size_t i = static_cast<size_t>(skip); i < log.iterations.size(); ++i) {
    const MegatronIteration& it = log.iterations[i];
    elapsed.push_back(it.elapsed_ms);
    c.iteration_ns.push_back(static_cast<TimeNs>(std::llround(it.elapsed_ms * 1e6)));
    if (it.tflops) tflops.push_back(*it.tflops);
    if (it.global_batch && *it.global_batch != GlobalBatch(prediction)) {
      notes->push_back(fmt::format(
          "{}:{}: the log's global batch size {} is not the plan's {}: the two describe "
          "different configurations",
          log.origin, it.line, *it.global_batch, GlobalBatch(prediction)));
    }
  }
  c.median_iteration = static_cast<int>(elapsed.size() - 1) / 2;
  c.rows.push_back(MakeMetricRow("iteration time", -1, "ns", static_cast<double>(pred.iteration_ns),
                                 Median(elapsed) * 1e6, true, true, tol.time));
  if (!tflops.empty() && pred.tflops_per_gpu) {
    c.rows.push_back(MakeMetricRow("TFLOP/s per GPU", -1, "TFLOP/s", *pred.tflops_per_gpu,
                                   Median(tflops), true, true, tol.time));
  } else if (!tflops.empty()) {
    notes->push_back(
        "the log has TFLOP/s per GPU but the prediction has none (the model gives no FLOPs)");
  }
  const int t = std::max(plan.config.layout.tensor_parallel, 1), p = plan.schedule.num_ranks,
            d = std::max(plan.config.layout.data_parallel, 1);
  std::map<int, Bytes> per_rank;
  for (const auto& [rank, bytes] : log.MaxAllocatedBytes()) {
    if (rank >= t * p * d) {
      return Status::InvalidArgument(
          fmt::format("{}: a memory report from rank {}, but the plan has {} GPUs (t={} p={} d={})",
                      log.origin, rank, t * p * d, t, p, d));
    }
    Bytes& b = per_rank[MegatronPipelineRank(rank, t, p, d, order)];
    b = std::max(b, bytes);
  }
  for (const auto& [rank, bytes] : per_rank) {
    c.rows.push_back(MakeMetricRow("peak memory", rank, "bytes",
                                   static_cast<double>(pred.per_rank[rank].peak_memory_bytes),
                                   static_cast<double>(bytes), true, true, tol.memory));
  }
  if (per_rank.empty())
    notes->push_back("the log has no memory report line ([Rank N] ... memory (MB))");
  notes->push_back(fmt::format(
      "Megatron-LM's elapsed time per iteration is an average over each --log-interval; the "
      "table takes the median of {} logged averages{}",
      elapsed.size(), skip > 0 ? fmt::format(" after skipping {}", skip) : ""));
  Finish(&c);
  return c;
}

}  // namespace pipecast::measured
