#include "validate/validator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/text_table.h"
#include "formats/formats.h"
#include "validate/internal/work_select.h"

namespace pipecast::validate {
namespace {

using Json = nlohmann::ordered_json;

// The probe's message size: the plan's largest message, but at least enough
// to see bandwidth over latency and at most what keeps the probe short.
constexpr Bytes kMinProbeBytes = 256 * kKiB;
constexpr Bytes kMaxProbeBytes = 64 * kMiB;
// Plan message tags must stay below the probe's (probe.cc).
constexpr int64_t kMaxPlanTag = int64_t{1} << 30;

Bytes LargestOutput(const Model& model, const PlanFile& plan) {
  Bytes most = 0;
  for (const StageLayers& s : plan.partition) {
    if (s.last_layer >= 0 && s.last_layer < static_cast<int>(model.layers.size())) {
      most = std::max(most,
                      CostAt(model.layers[s.last_layer], plan.config.microbatch_size).output_bytes);
    }
  }
  return most;
}

// This machine's physical memory shared by the stages: the `local` cluster's
// "GPU" memory.
Bytes MachineMemoryPerStage(int stages) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<Bytes>(pages) * page / std::max(stages, 1);
}

std::string TimeText(double ns) { return fmt::format("{:.3f} ms", ns / 1e6); }

// --inject-fault names an op of the plan, or the run would pass having
// injected nothing.
Status CheckFaultInPlan(const std::optional<Fault>& fault, const Schedule& schedule) {
  if (!fault) return Status::Ok();
  for (const std::vector<Action>& rank : schedule.actions) {
    for (const Action& a : rank) {
      if (FaultNames(*fault, a)) return Status::Ok();
    }
  }
  return Status::InvalidArgument(fmt::format(
      "--inject-fault: the plan has no op {} (its ranks run stages 0-{}, micro-batches 0-{}, "
      "kinds {}): name one of its ops",
      ActionName(fault->action), schedule.num_stages - 1, schedule.num_microbatches - 1,
      schedule.split_backward ? "F, I and W" : "F and B"));
}

// A `drop` fault loses the op's message: an op that sends none (the last
// stage's forward, a stage whose neighbour is on its own rank) would drop
// nothing, and the run would pass with no fault injected.
Status CheckDropSendsSomething(const std::optional<Fault>& fault, const ExecPlan& exec) {
  if (!fault || fault->kind != Fault::Kind::kDrop) return Status::Ok();
  std::string senders;  // a few ops that do send, for the message
  int shown = 0;
  for (const ExecStage& stage : exec.per_rank) {
    for (const ExecOp& op : stage.ops) {
      if (FaultNames(*fault, op.action) && op.send.present()) return Status::Ok();
      if (op.send.present() && shown < 3 && op.action.microbatch == fault->action.microbatch) {
        senders += (shown++ > 0 ? ", " : "") + ActionName(op.action);
      }
    }
  }
  return Status::InvalidArgument(fmt::format(
      "--inject-fault drop:{}: {} sends no message to another rank (the end of a micro-batch's "
      "path, or a neighbour on its own rank), so there is nothing to drop: {}",
      ActionName(fault->action), ActionName(fault->action),
      senders.empty() ? "this plan sends no messages between ranks; inject another kind"
                      : "name an op that sends, such as " + senders));
}

}  // namespace

Status ValidatorOptions::Validate() const {
  if (plan_path.empty()) return Status::InvalidArgument("--plan is required");
  if (model_path.empty()) return Status::InvalidArgument("--model is required");
  // -1 (the default) = the cluster's GPU memory; otherwise 0 (unlimited) up
  // to a petabyte, a bound that keeps the byte count far from overflow.
  if (memory_limit_mb != -1 && !(memory_limit_mb >= 0 && memory_limit_mb <= kMaxMemoryLimitMb)) {
    return Status::InvalidArgument(fmt::format(
        "--memory-limit-mb is {}: give MiB between 0 (unlimited) and {:.0f}, or leave it out for "
        "the cluster's GPU memory",
        memory_limit_mb, kMaxMemoryLimitMb));
  }
  PIPECAST_RETURN_IF_ERROR(runtime.Validate());
  return tolerances.Validate();
}

namespace {

// Step 1, load: the plan and the model, refused when the validator cannot
// run them or when the processes started do not match the plan.
Result<Model> LoadInputs(const ValidatorOptions& options, const Backend& backend,
                         ValidationResult* out) {
  PIPECAST_ASSIGN_OR_RETURN(PlanFile plan, LoadPlan(options.plan_path));
  out->plan = plan;
  const int tp = std::max(plan.config.layout.tensor_parallel, 1);
  if (tp > 1 && plan.config.layout.sequence_parallel) {
    return Status::InvalidArgument(fmt::format(
        "{}: the plan uses sequence parallelism, which the validator does not run (its "
        "tensor-parallel blocks all-reduce whole activations; docs/validator.md): validate a plan "
        "made without --sequence-parallel",
        options.plan_path));
  }
  if (plan.config.layout.context_parallel > 1) {
    return Status::InvalidArgument(fmt::format(
        "{}: the plan uses context parallelism (context_parallel {}), which the validator does "
        "not run (its stages hold whole sequences); validate a plan made with --context-parallel "
        "1",
        options.plan_path, plan.config.layout.context_parallel));
  }
  if (tp > 1 && plan.config.overlap.tp_comm_overlap) {
    return Status::InvalidArgument(fmt::format(
        "{}: the plan overlaps tensor-parallel communication with compute (--tp-comm-overlap), "
        "which the validator does not run: its all-reduces follow the products they sum; "
        "validate a plan made without --tp-comm-overlap",
        options.plan_path));
  }
  const int etp = std::max(plan.config.layout.expert_tensor_parallel, 1);
  // The expert group's workers: ep x etp.
  const int ep = std::max(plan.config.layout.expert_parallel, 1) * etp;
  if (ep > 1 && tp > 1) {
    return Status::InvalidArgument(fmt::format(
        "{}: the plan has expert_parallel {} with tensor_parallel {} and expert_tensor_parallel "
        "{}, which the validator does not run (it runs expert parallelism over data-parallel "
        "replicas; docs/validator.md): validate a plan made with --tensor-parallel 1",
        options.plan_path, plan.config.layout.expert_parallel, tp, etp));
  }
  if (etp > 1 && plan.config.layout.expert_dispatcher == ExpertDispatcher::kDeepEp) {
    return Status::InvalidArgument(fmt::format(
        "{}: the plan has expert_tensor_parallel {} with the deepep dispatcher, whose wider "
        "all-to-all over the etp x ep GPUs the validator does not run (it runs etp with the "
        "alltoall and allgather dispatchers; docs/validator.md): validate a plan made with "
        "--ep-dispatcher alltoall or allgather",
        options.plan_path, etp));
  }
  PIPECAST_ASSIGN_OR_RETURN(Model model, LoadModel(options.model_path));
  out->model_name = model.name;
  const int ranks = plan.schedule.num_ranks;
  const int per_rank = tp * ep;
  if (backend.processes() != 1 && backend.processes() != ranks * per_rank) {
    return Status::InvalidArgument(
        fmt::format("the plan has {}{} but {} were started: run mpirun -np {}",
                    Count(ranks, "pipeline rank", "pipeline ranks"),
                    tp > 1   ? fmt::format(" x {} tensor-parallel workers", tp)
                    : ep > 1 ? fmt::format(" x {} expert-parallel workers", ep)
                             : "",
                    Count(backend.processes(), "process", "processes"), ranks * per_rank));
  }
  if (MessageTag(plan.schedule.num_stages - 1, plan.schedule.num_microbatches, true,
                 plan.schedule.num_stages) >= kMaxPlanTag) {
    return Status::InvalidArgument("the plan has too many (stage, micro-batch) pairs to tag");
  }

  return model;
}

// Step 2, the cluster the prediction assumes: --cluster, else the local
// preset with its link probed where the backend can, else the plan's.
Status ChooseCluster(const ValidatorOptions& options, const Model& model, Backend* backend,
                     ValidationResult* out) {
  const PlanFile& plan = out->plan;
  const int tp = std::max(plan.config.layout.tensor_parallel, 1);
  // The expert group's workers, ep x etp.
  const int ep = std::max(plan.config.layout.expert_parallel, 1) *
                 std::max(plan.config.layout.expert_tensor_parallel, 1);
  const int ranks = plan.schedule.num_ranks;
  if (!options.cluster.empty()) {
    Result<Cluster> c = LoadCluster(options.cluster);
    if (!c.ok()) return c.status().WithPrefix("--cluster");
    out->cluster = *c;
  } else if (backend->has_link_probe()) {
    PIPECAST_ASSIGN_OR_RETURN(Cluster c, ClusterPreset("local"));
    out->cluster = c;
    out->cluster.gpu.memory_bytes = MachineMemoryPerStage(ranks * tp * ep);
  } else {
    out->cluster = plan.cluster;
  }
  // Expert parallelism's all-to-alls travel the same way as the pipeline's
  // messages: probed even with one stage.
  if (options.cluster.empty() && backend->has_link_probe() && (ranks > 1 || ep > 1)) {
    const Bytes probe = std::clamp(LargestOutput(model, plan), kMinProbeBytes, kMaxProbeBytes);
    Result<Link> link = backend->ProbeLink(probe);
    if (!link.ok()) return link.status().WithPrefix("link probe");
    out->cluster.intra_node = *link;
    out->cluster.inter_node = *link;
    out->cluster.name = "local (measured)";
    out->link_measured = true;
  }
  return Status::Ok();
}

// Step 3, predict: the simulator's replay of the plan on that cluster, with
// what the run will not execute stated as notes.
Status Predict(const Model& model, ValidationResult* out) {
  const PlanFile& plan = out->plan;
  const int tp = std::max(plan.config.layout.tensor_parallel, 1);
  SimOptions sim = PlanSimOptions(plan);
  sim.record_timeline = true;
  sim.critical_path = true;
  Result<SimResult> predicted = Simulate(model, out->cluster, plan.schedule, sim);
  if (!predicted.ok()) {
    return predicted.status().WithPrefix("the simulator cannot replay this plan");
  }
  out->predicted = std::move(*predicted);
  for (const std::string& n : out->predicted.notes) out->notes.push_back("prediction: " + n);
  const int etp = std::max(plan.config.layout.expert_tensor_parallel, 1);
  const int ep = std::max(plan.config.layout.expert_parallel, 1) * etp;  // the group's workers
  if (plan.config.layout.data_parallel > 1) {
    out->notes.push_back(fmt::format(
        "the plan has {} data-parallel replicas: {} runs; its gradient all-reduce "
        "(predicted {}) is not executed, so times compare the pipeline span",
        plan.config.layout.data_parallel,
        ep > 1 ? fmt::format("one expert-parallel group of {} replicas", ep) : "one replica",
        TimeText(static_cast<double>(out->predicted.allreduce_ns))));
  }
  if (ep > 1) {
    out->notes.push_back(fmt::format(
        "expert parallelism: {} workers a stage, each a data-parallel replica with its own "
        "micro-batches holding 1/{} of every MoE layer's experts (a GPU of the simulator's "
        "{}-way expert-parallel group); a stage's peak memory is its workers' largest; 'ep "
        "all-to-all' sets the time measured inside the dispatch and combine all-to-alls (mean "
        "over the workers) beside the predicted (per iteration {} on the busiest rank), "
        "reported, not checked; times are expert rank 0's",
        ep, ep, ep, TimeText(static_cast<double>(out->predicted.ep_comm_ns))));
  }
  if (etp > 1) {
    out->notes.push_back(fmt::format(
        "expert tensor parallelism: the {} workers are {} expert ranks x {} expert-tensor ranks "
        "(etp innermost); each holds 1/{} of its expert rank's experts' fc1 columns and fc2 "
        "rows; {}",
        ep, ep / etp, etp, etp,
        plan.config.layout.expert_dispatcher == ExpertDispatcher::kAllGather
            ? "the all-gather dispatcher's collectives span all of them (tp_ep_group)"
            : "the all-to-alls run among the workers of one expert-tensor rank, then the received "
              "rows are all-gathered and the partial outputs reduce-scattered over the etp "
              "workers of one expert rank (each as an all-to-all of the stage's group with "
              "nothing sent to the others; the probs, the hash router's constant 1/k, are not "
              "gathered)"));
  }
  if (plan.config.optimizer_step.time_ns > 0 || out->predicted.optimizer_ns > 0) {
    out->notes.push_back("the optimizer step is not executed; times compare the pipeline span");
  }
  if (tp > 1) {
    out->notes.push_back(fmt::format(
        "tensor parallelism: {} workers a stage, each a GPU of the simulator's {}-way group; a "
        "stage's peak memory is its workers' largest; 'tp all-reduce' sets the time measured "
        "inside the all-reduces (mean over the workers) beside the predicted tp_comm_us, "
        "reported, not checked; times are tensor rank 0's",
        tp, tp));
  }
  if (plan.schedule.bidirectional) {
    out->notes.push_back(fmt::format(
        "bidirectional schedule: micro-batches 0-{} enter at rank 0 and {}-{} at rank {}; each "
        "rank holds two model chunks, and after its last op it exchanges the gradients of the "
        "chunks whose other copy its partner holds (the copy reduce, predicted {}): its 'copy "
        "reduce' rows are reported, not checked, and are not in the iteration time, which "
        "compares the pipeline span",
        plan.schedule.num_microbatches / 2 - 1, plan.schedule.num_microbatches / 2,
        plan.schedule.num_microbatches - 1, plan.schedule.num_ranks - 1,
        TimeText(static_cast<double>(out->predicted.copy_reduce_ns))));
  }
  if (!plan.schedule.flush) {
    out->notes.push_back(
        "schedule without a flush: stashed weight versions are allocated as "
        "static memory, as the simulator counts them");
  }
  return Status::Ok();
}

// Step 4, execute: the plan's ops on the backend, with the CPU workload
// unless the backend runs its own; every process returns its stages' runs.
Result<std::vector<StageRun>> Execute(const ValidatorOptions& options, const Model& model,
                                      Backend* backend, OpWork* work_override,
                                      ValidationResult* out) {
  const PlanFile& plan = out->plan;
  PIPECAST_RETURN_IF_ERROR(CheckFaultInPlan(options.runtime.fault, plan.schedule));
  PIPECAST_ASSIGN_OR_RETURN(
      ExecPlan exec, BuildExecPlan(model, plan, plan.schedule, out->predicted, out->cluster));
  out->exec = std::move(exec);
  PIPECAST_RETURN_IF_ERROR(CheckDropSendsSomething(options.runtime.fault, out->exec));

  out->memory_limit_bytes = options.memory_limit_mb >= 0
                                ? static_cast<Bytes>(std::llround(options.memory_limit_mb * kMiB))
                                : MemoryLimitBytes(out->cluster.gpu);
  std::unique_ptr<OpWork> owned;
  OpWork* work = work_override;
  if (work == nullptr && !backend->OwnOpsDescription().empty()) {
    out->work = backend->OwnOpsDescription();  // the backend's own ops; `work` unused
  } else if (work == nullptr) {
    PIPECAST_ASSIGN_OR_RETURN(std::unique_ptr<OpWork> made,
                              MakeWork(model, plan, backend->clock()));
    owned = std::move(made);
    work = owned.get();
  }
  if (work != nullptr) out->work = work->Description();
  PIPECAST_ASSIGN_OR_RETURN(
      std::vector<StageRun> runs,
      backend->Run(out->exec, options.runtime, work, out->memory_limit_bytes));
  const std::vector<std::string> backend_notes = backend->Notes();
  out->notes.insert(out->notes.begin(), backend_notes.begin(), backend_notes.end());
  return runs;
}

// Step 5, compare: measured against predicted, on the root.
Status CompareRuns(const ValidatorOptions& options, ValidationResult* out) {
  const PlanFile& plan = out->plan;
  const int64_t samples = int64_t{plan.config.microbatch_size} * plan.config.microbatches;
  PIPECAST_ASSIGN_OR_RETURN(
      Comparison cmp, Compare(out->predicted, out->exec, out->runs, samples, options.tolerances));
  out->comparison = std::move(cmp);
  return Status::Ok();
}

}  // namespace

Result<ValidationResult> RunValidation(const ValidatorOptions& options, Backend* backend,
                                       OpWork* work_override) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  ValidationResult out;
  out.is_root = backend->is_root();
  // load -> cluster -> predict -> execute -> compare.
  PIPECAST_ASSIGN_OR_RETURN(Model model, LoadInputs(options, *backend, &out));
  PIPECAST_RETURN_IF_ERROR(ChooseCluster(options, model, backend, &out));
  PIPECAST_RETURN_IF_ERROR(Predict(model, &out));
  PIPECAST_ASSIGN_OR_RETURN(std::vector<StageRun> runs,
                            Execute(options, model, backend, work_override, &out));
  if (!out.is_root) return out;
  out.runs = std::move(runs);
  PIPECAST_RETURN_IF_ERROR(CompareRuns(options, &out));
  return out;
}

std::string ValidationJson(const ValidationResult& r) {
  Json j;
  j["format"] = "pipecast-validation/1";
  j["model"] = r.model_name;
  j["schedule"] = r.plan.schedule_name;
  j["pipeline_stages"] = r.plan.config.layout.pipeline_stages;
  j["tensor_parallel"] = std::max(r.plan.config.layout.tensor_parallel, 1);
  j["expert_parallel"] = std::max(r.plan.config.layout.expert_parallel, 1);
  j["microbatches"] = r.plan.config.microbatches;
  j["microbatch_size"] = r.plan.config.microbatch_size;
  j["ops"] = r.work;
  j["cluster"] = {{"name", r.cluster.name},
                  {"link_bandwidth_gbps", r.cluster.intra_node.bandwidth_gbps},
                  {"link_latency_us", r.cluster.intra_node.latency_us},
                  {"link_measured", r.link_measured},
                  {"memory_limit_bytes", r.memory_limit_bytes}};
  j["notes"] = r.notes;
  Json iters = Json::array();
  for (TimeNs t : r.comparison.iteration_ns) iters.push_back(NsToUs(t));
  j["iterations_us"] = iters;
  j["median_iteration"] = r.comparison.median_iteration;
  j["metrics"] = ComparisonRowsJson(r.comparison.rows);
  // Every worker's own peak (with tensor parallelism the stage rows show the
  // largest of its workers').
  Json workers = Json::array();
  for (const StageRun& run : r.runs) {
    workers.push_back({{"stage", run.rank},
                       {"tensor_rank", run.tensor_rank},
                       {"expert_rank", run.expert_rank},
                       {"peak_memory_bytes", run.peak_bytes}});
  }
  j["workers"] = workers;
  j["within_tolerance"] = r.comparison.within_tolerance;
  return j.dump(2) + "\n";
}

std::string ValidationText(const ValidationResult& r) {
  std::string out = fmt::format(
      "validator: model {}, schedule {}, {} stages{}, {} micro-batches of {}\n", r.model_name,
      r.plan.schedule_name, r.plan.config.layout.pipeline_stages,
      r.plan.config.layout.tensor_parallel > 1
          ? fmt::format(" x {} tensor-parallel workers", r.plan.config.layout.tensor_parallel)
      : r.plan.config.layout.expert_parallel * r.plan.config.layout.expert_tensor_parallel > 1
          ? fmt::format(
                " x {} expert-parallel workers",
                r.plan.config.layout.expert_parallel * r.plan.config.layout.expert_tensor_parallel)
          : "",
      r.plan.config.microbatches, r.plan.config.microbatch_size);
  out += fmt::format("  {}\n", r.work);
  out +=
      fmt::format("  predicted on cluster '{}': link {:.3f} GB/s, {:.1f} us latency{}\n",
                  r.cluster.name, r.cluster.intra_node.bandwidth_gbps,
                  r.cluster.intra_node.latency_us, r.link_measured ? " (measured by a probe)" : "");
  for (const std::string& n : r.notes) out += "  note: " + n + "\n";
  std::string iters;
  for (TimeNs t : r.comparison.iteration_ns) iters += fmt::format(" {:.3f}", NsToMs(t));
  out += fmt::format("  measured iterations (ms):{}; the table shows the median\n\n", iters);
  out += ComparisonTableText(r.comparison.rows, "  ");
  out += r.comparison.within_tolerance ? "\nverdict: every checked metric is within tolerance\n"
                                       : "\nverdict: BEYOND TOLERANCE (exit 3)\n";
  return out;
}

}  // namespace pipecast::validate
