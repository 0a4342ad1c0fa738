// The error catalogue's rows about outputs and runs (tests/error_catalogue.h):
// writes that fail, the validator, measured runs, sums past 64 bits, issue
// 28's impossible numbers, messages and flags, control characters in names.
#include <string>
#include <vector>

#include "tests/error_catalogue.h"

namespace pipecast::cli_test {
namespace {

// The validator's command line for the gpt-7b baseline plan.
constexpr char kBaselinePlan7b[] =
    "--model {ex}/gpt-7b.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json";

// Unwritable outputs: nothing half-written, no temporary file.
std::vector<Case> UnwritableOutputRows() {
  std::vector<Case> c;
  c.push_back(Row("trace_into_missing_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --trace {dir}/missing/t.json", 1,
                  "--trace: cannot write '{dir}/missing/t.json': No such file or directory",
                  After::kNoOutputs));
  // The temporary file is written, then rename() fails: it must be removed.
  c.push_back(Row("report_onto_a_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --report {dir}/out", 1,
                  "--report: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  c.push_back(Row("schedule_out_under_a_file", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule-out {dir}/m.json/s.txt", 1,
                  "--schedule-out: cannot write '{dir}/m.json/s.txt': Not a directory",
                  After::kNoOutputs));
  c.push_back(Row("trace_into_read_only_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --trace {dir}/ro/t.json", 1,
                  "--trace: cannot write '{dir}/ro/t.json': Permission denied", After::kNoOutputs,
                  "ro", true));
  c.push_back(Row("planner_out_into_missing_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --out {dir}/missing/plan.json", 1,
                  "--out: cannot write '{dir}/missing/plan.json': No such file or directory",
                  After::kNoOutputs));
  // --export FRAMEWORK=PATH (docs/frameworks.md): refused before anything is simulated.
  c.push_back(Row("export_unknown_framework", kSimulator, {kGoodModel},
                  std::string(kSim) + " --export nemo={dir}/n.yaml", 2,
                  "--export: unknown framework 'nemo': expected megatron, torchtitan or deepspeed",
                  After::kNoOutputs));
  c.push_back(Row("export_without_a_path", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export megatron", 2,
                  "--export 'megatron': expected FRAMEWORK=PATH", After::kNoOutputs));
  c.push_back(Row("export_framework_twice", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export deepspeed={dir}/a.json "
                  "--export deepspeed={dir}/b.json",
                  2, "--export: deepspeed is given twice", After::kNoOutputs));
  c.push_back(Row("export_into_missing_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export "
                  "deepspeed={dir}/missing/ds.json",
                  1,
                  "--export deepspeed: cannot write '{dir}/missing/ds.json': No such file or "
                  "directory",
                  After::kNoOutputs));
  c.push_back(Row("export_onto_the_model", kSimulator, {kGoodModel},
                  std::string(kSim) + " --export megatron={dir}/m.json", 1,
                  "--export megatron '{dir}/m.json' is the same file as --model",
                  After::kInputsUnchanged));
  c.push_back(Row("planner_trace_onto_a_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --trace {dir}/out", 1,
                  "--trace: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  c.push_back(Row("planner_report_into_read_only_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --report {dir}/ro/r.html", 1,
                  "--report: cannot write '{dir}/ro/r.html': Permission denied", After::kNoOutputs,
                  "ro", true));
  c.push_back(Row("profiler_out_into_missing_folder", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 --out "
                  "{dir}/missing/m.json",
                  1, "cannot write '{dir}/missing/m.json': No such file or directory",
                  After::kNoOutputs));
  // Issue 28: --out onto --gpu's cluster file replaced the cluster file with
  // the model; --out of profiler cpu was checked only after measuring.
  c.push_back(Row("profiler_analytic_out_onto_the_gpu_cluster_file", kProfiler,
                  {{"c.json", kCluster}},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 --gpu "
                  "{dir}/c.json --out {dir}/./c.json",
                  1,
                  "--out '{dir}/./c.json' is the same file as --gpu: pipecast never writes over "
                  "its inputs",
                  After::kInputsUnchanged));
  // Issue 28: 10^5 layers at four t ran into std::bad_alloc after 65 s,
  // writing a file no tool would read.
  c.push_back(Row("profiler_analytic_model_over_what_the_tools_read", kProfiler, {},
                  "analytic --name x --layers 100000 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--tensor-parallel 1,2,4,8 --out {dir}/m.json",
                  1, "MiB of model.json, over the 512 MiB that pipecast's tools read",
                  After::kNoOutputs));
  {
    Case row = Row("profiler_cpu_out_checked_before_measuring", kProfiler, {},
                   "cpu --layers 1 --hidden 8 --ffn 8 --out {dir}/missing/m.json", 1,
                   "--out: cannot write '{dir}/missing/m.json': No such file or directory",
                   After::kNoOutputs);
    row.absent = "measuring";
    c.push_back(row);
  }
  // Issue 28: 10^4 values of a list flag ran into std::bad_alloc and
  // std::terminate; the search's size is refused before it is allocated.
  // (10^4 repeated values are one value since part two: a list is
  // deduplicated; 10^4 distinct ones are refused.)
  {
    std::string sizes = "1";
    for (int i = 2; i <= 10000; ++i) sizes += "," + std::to_string(i);
    c.push_back(Row("planner_list_flag_of_10000_values", kPlanner, {},
                    "--model {ex}/gpt-7b.json --gpus 8 --microbatch-sizes " + sizes, 1,
                    "the search would enumerate 6330000 configurations, over the limit of 500000"));
  }
  return c;
}

// The validator: its flags and the plan it runs.
std::vector<Case> ValidatorRows() {
  std::vector<Case> c;
  const std::string v7b = kBaselinePlan7b;
  c.push_back(Row("validator_plan_truncated_json", kValidator, {{"p.json", "{\"format\": "}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "p.json: not valid JSON: parse error at line 1, column 12"));
  c.push_back(Row("validator_plan_for_a_smaller_model", kValidator, {kGoodModel},
                  "--model {dir}/m.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 1,
                  "partition stage 0 holds layers 0-33: stages must be non-empty, contiguous and "
                  "within layers 0-7"));
  c.push_back(Row("validator_model_missing", kValidator, {},
                  "--model {dir}/nope.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 1,
                  "cannot read '{dir}/nope.json': No such file or directory"));
  c.push_back(Row("validator_plan_deadlock", kValidator,
                  {{"p.json", Baseline("\"0F0 0B0 ", "\"0B0 0F0 ")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "can never finish: stuck are rank 0 at 0B0"));
  c.push_back(Row("validator_unknown_backend", kValidator, {}, v7b + " --backend tpu", 2,
                  "--backend: 'tpu' is not one of cpu, mpi, cuda"));
  c.push_back(
      Row("validator_zero_iterations", kValidator, {}, v7b + " --iterations 0", 2, "--iterations"));
  c.push_back(Row("validator_negative_tolerance", kValidator, {}, v7b + " --tolerance -0.1", 2,
                  "--tolerance: '-0.1' is not a number of relative error above 0 up to 1000"));
  c.push_back(Row("validator_nan_memory_tolerance", kValidator, {}, v7b + " --memory-tolerance nan",
                  2, "--memory-tolerance: 'nan' is not a number of relative error above 0"));
  c.push_back(Row("validator_negative_memory_limit", kValidator, {}, v7b + " --memory-limit-mb -5",
                  2, "--memory-limit-mb: '-5' is not a number of MiB from 0 to 1073741824"));
  c.push_back(Row("validator_absurd_memory_limit", kValidator, {}, v7b + " --memory-limit-mb 1e300",
                  2, "--memory-limit-mb: '1e300' is not a number of MiB from 0 to 1073741824"));
  // Issue 28: a drop of an op that sends nothing passed, having injected nothing.
  c.push_back(Row("validator_drop_of_an_op_that_sends_nothing", kValidator, {},
                  v7b + " --inject-fault drop:0F0", 1,
                  "--inject-fault drop:0F0: 0F0 sends no message to another rank"));
  c.push_back(Row("validator_infinite_watchdog_factor", kValidator, {},
                  v7b + " --watchdog-factor inf", 2,
                  "--watchdog-factor: 'inf' is not a number of times from 1 to 1000000"));
  c.push_back(Row("validator_zero_recv_timeout", kValidator, {}, v7b + " --recv-timeout-ms 0", 2,
                  "--recv-timeout-ms: '0' is not a number of ms above 0 up to 86400000"));
  c.push_back(Row("validator_unknown_fault", kValidator, {}, v7b + " --inject-fault melt:0F0", 1,
                  "--inject-fault 'melt:0F0': expected KIND:ACTION with KIND throw, stall, drop "
                  "or oom"));
  // A fault for an op the plan does not have once ran the plan and passed (issue 17).
  c.push_back(Row("validator_fault_op_not_in_plan", kValidator, {},
                  v7b + " --inject-fault throw:5F0", 1,
                  "--inject-fault: the plan has no op 5F0 (its ranks run stages 0-0, "
                  "micro-batches 0-15, kinds F and B): name one of its ops"));
  c.push_back(Row("validator_unknown_cluster", kValidator, {}, v7b + " --cluster tpu-pod", 1,
                  "--cluster: cluster 'tpu-pod' is neither a preset"));
  // Found before the run, not after it: nothing written, nothing left.
  c.push_back(Row("validator_trace_into_missing_folder", kValidator, {},
                  v7b + " --trace {dir}/missing/t.json", 1,
                  "--trace: cannot write '{dir}/missing/t.json': No such file or directory",
                  After::kNoOutputs));
  c.push_back(Row("validator_trace_onto_a_folder", kValidator, {}, v7b + " --trace {dir}/out", 1,
                  "--trace: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  // Expert parallelism (issue 26 item 6): an ep plan for a model without MoE
  // layers is the simulator's refusal, before anything runs.
  c.push_back(Row("validator_expert_parallel_on_a_dense_model", kValidator,
                  {{"p.json", Baseline("\"data_parallel\": 8,",
                                       "\"data_parallel\": 8, \"expert_parallel\": 2,")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json --backend cpu", 1,
                  "the simulator cannot replay this plan: --expert-parallel 2: the model has no "
                  "mixture-of-experts layer"));
  return c;
}

// Measured runs (issue 27, docs/measured-runs.md).
std::vector<Case> MeasuredRunRows() {
  std::vector<Case> c;
  const std::string v7b = kBaselinePlan7b;
  const std::string step = R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)";
  c.push_back(Row("measured_trace_malformed", kValidator,
                  {{"r0.json", "{\"traceEvents\": [\n {\"ph\": \"X\",, }]}"}},
                  "--measured {dir}/r0.json", 1, "r0.json: not valid JSON: parse error at line 2"));
  c.push_back(Row("measured_trace_field_type", kValidator,
                  {{"r0.json", R"({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "now"}]})"}},
                  "--measured {dir}/r0.json", 1,
                  "r0.json: traceEvents[0].ts: expected microseconds as a number, got a string"));
  c.push_back(Row("measured_trace_missing", kValidator, {}, "--measured {dir}/r9.json", 1,
                  "{dir}/r9.json: cannot be opened: No such file or directory"));
  c.push_back(Row("measured_trace_without_steps", kValidator,
                  {{"r0.json", R"({"traceEvents": []})"}}, "--measured {dir}/r0.json", 1,
                  "r0.json: no ProfilerStep#N range: pipecast finds iterations by them"));
  const std::string kernel =
      R"(, "pid": 1, "tid": 1, "ts": 0, "dur": 100}, {"ph": "X", "cat": "cuda_runtime", "name": "L", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}}, {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 5, "args": {"correlation": 1}}]})";
  c.push_back(Row("measured_traces_share_no_step", kValidator,
                  {{"r0.json", "{\"traceEvents\": [" + step + "1\"" + kernel},
                   {"r1.json", "{\"traceEvents\": [" + step + "2\"" + kernel}},
                  "--measured {dir}/r0.json,{dir}/r1.json", 1,
                  "the traces share no ProfilerStep number ({dir}/r0.json: steps 1; "
                  "{dir}/r1.json: steps 2)"));
  c.push_back(Row("measured_plan_without_model", kValidator, {},
                  "--measured {dir}/r0.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 2,
                  "--plan needs --model"));
  c.push_back(Row("measured_gzip", kValidator, {{"r0.json.gz", "\x1f\x8b"}},
                  "--measured {dir}/r0.json.gz", 1, "a gzip-compressed file: decompress it first"));
  c.push_back(Row("megatron_log_without_iterations", kValidator, {{"train.log", "hello\n"}},
                  "--megatron-log {dir}/train.log", 1, "train.log: no Megatron-LM iteration line"));
  c.push_back(Row("megatron_log_bad_number", kValidator,
                  {{"train.log", " iteration 1/ 2 | elapsed time per iteration (ms): fast |\n"}},
                  "--megatron-log {dir}/train.log", 1,
                  "train.log:1: 'fast' is not a number after 'elapsed time per iteration (ms)'"));
  c.push_back(Row("profiler_trace_without_layer_ranges", kProfiler,
                  {{"r0.json", "{\"traceEvents\": [" + step + "1\"" + kernel}},
                  "trace --name m {dir}/r0.json", 1,
                  "r0.json: no layer range: mark each layer's passes with record_function ranges"));
  Case no_gpu = Row("validator_cuda_without_a_gpu", kValidator, {}, v7b + " --backend cuda", 1,
                    "the cuda backend needs an NVIDIA GPU; use --backend cpu or mpi");
  no_gpu.needs_no_gpu = true;
  c.push_back(no_gpu);
  // Tensor parallelism (issue 15): flags that contradict each other are usage
  // errors; a degree the cluster or the model cannot run is bad input.
  c.push_back(Row("tensor_parallel_not_dividing_node", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cluster h100-sxm --tensor-parallel 3", 1,
                  "--tensor-parallel 3 does not divide the 8 GPUs of a node of h100-sxm: a "
                  "stage's tensor-parallel GPUs share a node; use a divisor of 8"));
  // Context parallelism (issue 25): a degree below 1 is a usage error; one the
  // sequence or the model cannot run is bad input.
  c.push_back(Row("context_parallel_zero", kSimulator, {kGoodModel},
                  std::string(kSim) + " --context-parallel 0", 2, "--context-parallel"));
  c.push_back(Row("context_parallel_not_splitting_the_sequence", kSimulator, {},
                  "--model {ex}/llama-70b.json --stages 4 --microbatches 4 --context-parallel 3", 1,
                  "--context-parallel 3: the sequence of 2048 tokens does not split into 2 x cp "
                  "= 6 equal chunks"));
  c.push_back(Row("context_parallel_without_attention_shape", kSimulator, {kGoodModel},
                  std::string(kSim) + " --context-parallel 2", 1,
                  "--context-parallel 2: the model"));
  c.push_back(Row("cp_algorithm_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cp-algorithm tree", 2,
                  "--cp-algorithm: 'tree' is not one of ring, p2p, allgather, all_gather"));
  c.push_back(Row("context_parallel_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 4 --global-batch 8 --context-parallel 3", 2,
                  "--context-parallel 3 does not divide --gpus 4"));
  // Expert parallelism (issue 26): a degree below 1 or against the folding
  // rule is a usage error; one the model cannot run is bad input.
  c.push_back(Row("expert_parallel_zero", kSimulator, {kGoodModel},
                  std::string(kSim) + " --expert-parallel 0", 2, "--expert-parallel"));
  c.push_back(Row("expert_tensor_parallel_zero", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --expert-tensor-parallel 0", 2,
                  "--expert-tensor-parallel"));
  c.push_back(Row("expert_parallel_not_folding", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --expert-parallel 4", 2,
                  "--expert-parallel 4 x --expert-tensor-parallel 1 = 4 does not divide the 2 "
                  "GPUs of a stage"));
  c.push_back(Row("expert_parallel_on_a_dense_model", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --expert-parallel 2", 1,
                  "--expert-parallel 2: the model has no mixture-of-experts layer"));
  // The expert all-to-all overlap (issue 26 item 3): on where it cannot run is a usage error.
  c.push_back(Row("ep_overlap_without_expert_parallel", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule interleaved --ep-overlap on", 2,
                  "--ep-overlap on needs --expert-parallel above 1"));
  c.push_back(Row(
      "ep_overlap_on_a_schedule_without_pairs", kSimulator, {kGoodModel},
      std::string(kSim) + " --data-parallel 2 --expert-parallel 2 --schedule gpipe --ep-overlap on",
      2, "--ep-overlap on with --schedule gpipe"));
  c.push_back(Row("ep_overlap_1f1b_over_a_pipeline", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --expert-parallel 2 --ep-overlap on", 2,
                  "--ep-overlap on with --schedule 1f1b over 2 stages"));
  c.push_back(Row("ep_overlap_with_the_allgather_dispatcher", kSimulator, {kGoodModel},
                  std::string(kSim) +
                      " --data-parallel 2 --expert-parallel 2 --schedule interleaved "
                      "--ep-overlap on --ep-dispatcher allgather",
                  2, "--ep-overlap on with --ep-dispatcher allgather"));
  c.push_back(Row("ep_overlap_unknown", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --ep-overlap sometimes", 2,
                  "--ep-overlap"));
  // The expert dispatcher (--ep-dispatcher): deepep, alltoall or allgather, nothing else.
  c.push_back(Row("ep_dispatcher_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --ep-dispatcher nccl", 2,
                  "--ep-dispatcher: 'nccl' is not one of deepep, alltoall, allgather"));
  c.push_back(Row("ep_dispatcher_empty", kSimulator, {kGoodModel},
                  std::string(kSim) + " --ep-dispatcher ''", 2, "--ep-dispatcher"));
  c.push_back(Row("planner_ep_dispatcher_unknown", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --ep-dispatcher nccl", 2,
                  "--ep-dispatcher: 'nccl' is not one of deepep, alltoall, allgather, both, all"));
  c.push_back(
      Row("plan_ep_dispatcher_unknown", kSimulator,
          {{"p.json", Baseline("\"placement\":", "\"ep_dispatcher\": \"nccl\", \"placement\":")}},
          "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
          "--plan: {dir}/p.json: ep_dispatcher: expected \"deepep\", \"alltoall\" or "
          "\"allgather\" (the expert dispatcher, --ep-dispatcher), got \"nccl\""));
  c.push_back(Row("tensor_parallel_over_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --tensor-parallel 4", 2,
                  "--tensor-parallel 4 is more than --gpus 2: t x p x d must equal the GPUs"));
  c.push_back(Row("sequence_parallel_without_tensor_parallel", kSimulator, {kGoodModel},
                  std::string(kSim) + " --sequence-parallel", 2,
                  "--sequence-parallel needs --tensor-parallel above 1"));
  c.push_back(Row("tp_comm_overlap_without_tensor_parallel", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --tensor-parallel 1 "
                  "--tp-comm-overlap",
                  2, "--tp-comm-overlap needs --tensor-parallel above 1"));
  c.push_back(Row("missing_tp_comm_bytes", kSimulator, {kGoodModel},
                  std::string(kSim) + " --tensor-parallel 2", 1,
                  "layer 0 ('l0') gives no tp_comm_bytes, so its tensor-parallel communication at "
                  "--tensor-parallel 2 is unknown: re-profile with `profiler analytic "
                  "--tensor-parallel 1,2,4,8`"));
  c.push_back(
      Row("profile_sequence_parallel_at_t1", kSimulator,
          {{"m.json", Model(8, Profile("output_bytes", "512, \"sequence_parallel\": true"))}}, kSim,
          1, "layers[0].profiles[0].sequence_parallel: is true but tensor_parallel is 1"));
  c.push_back(Row("profile_tp_comm_bytes_alone", kSimulator,
                  {{"m.json", Model(8, Profile("output_bytes", "512, \"tp_comm_bytes\": 4096"))}},
                  kSim, 1,
                  "layers[0].profiles[0]: gives only some of tp_comm_bytes, tp_forward_collectives "
                  "and tp_backward_collectives"));
  c.push_back(Row("planner_stages_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --stages 3 --global-batch 16", 2,
                  "--stages 3 does not divide --gpus 8: the GPUs are t tensor-parallel x p "
                  "pipeline stages x d replicas"));
  return c;
}

// Sums past 64 bits (issue 17, sim/totals.h).
std::vector<Case> SumsPast64BitsRows() {
  std::vector<Case> c;
  // Layer 0's forward at the file limit (10^12 us) over 2400 micro-batches:
  // 2400 x 2 x 10^15 ns = 4.8e18 ns, past 2^62, though every field is valid.
  const File huge_model = {"m.json", Model(2, Profile("forward_us", "1e12"))};
  c.push_back(Row("simulator_times_sum_past_2_62", kSimulator, {huge_model},
                  "--model {dir}/m.json --stages 2 --microbatches 2400", 1,
                  "simulator: error: forward_us + backward_us summed over the model's 2 layers at "
                  "micro-batch size 1, times 2400 micro-batches, is 4.8e+18 ns, over the "
                  "4.61e+18 ns (2^62)"));
  c.push_back(Row("planner_times_sum_past_2_62", kPlanner, {huge_model},
                  "--model {dir}/m.json --gpus 2 --global-batch 2400", 1,
                  "planner: error: forward_us + backward_us summed over the model's 2 layers at "
                  "micro-batch size 1, times 2400 micro-batches, is 4.8e+18 ns"));
  // Layer 0 keeps 2^50 activation bytes per micro-batch: over 8192 of them,
  // 9.22e18 bytes (2^63), though the field is within its 2^50 limit.
  c.push_back(Row("simulator_bytes_sum_past_2_62", kSimulator,
                  {{"m.json", Model(2, Profile("activation_bytes", "1125899906842624"))}},
                  "--model {dir}/m.json --stages 2 --microbatches 8192", 1,
                  "activation_bytes + output_bytes + workspace_bytes (and the other memory fields) "
                  "summed over the model's 2 layers at micro-batch size 1, times 8192 "
                  "micro-batches, is 9.22e+18 bytes"));
  return c;
}

// Issue 28 part two: impossible numbers.
std::vector<Case> ImpossibleNumberRows() {
  std::vector<Case> c;
  // 1e15 FLOPs per sample in a 100 us forward: 10^7 TFLOP/s, above the
  // cluster's 989 TFLOP/s bf16 peak.
  const std::string fast_layer = std::string(R"({"name": "fast", "parameters": 1000, )") +
                                 R"("forward_flops": 1e15, "profiles": [)" +
                                 Profile("forward_us", "100") + "]}";
  std::string fast_model = Model(8);
  fast_model.replace(fast_model.find(R"({"name": "l0")"),
                     fast_model.find(R"(, {"name": "l1")") - fast_model.find(R"({"name": "l0")"),
                     fast_layer);
  c.push_back(Row("costs_faster_than_the_gpu", kSimulator,
                  {{"m.json", fast_model}, {"c.json", kCluster}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "{dir}/m.json: layer 0 ('fast') at micro-batch size 1 and t = 1: 1e+06 GFLOP in "
                  "a 100 us forward implies 1e+07 TFLOP/s per GPU, above the 989 TFLOP/s dense "
                  "bf16 peak of c (g): costs faster than the GPU would give an MFU of 1011122%"));
  c.push_back(Row("costs_faster_than_the_gpu_planner", kPlanner,
                  {{"m.json", fast_model}, {"c.json", kCluster}},
                  "--model {dir}/m.json --gpus 2 --global-batch 4 --cluster {dir}/c.json", 1,
                  "implies 1e+07 TFLOP/s per GPU, above the 989 TFLOP/s dense bf16 peak of c"));
  // gpt-7b's costs are profiler analytic's for h100-sxm: about twice what an
  // A100 (312 TFLOP/s) can do.
  c.push_back(Row("model_made_for_another_gpu", kPlanner, {},
                  "--model {ex}/gpt-7b.json --gpus 8 --cluster a100-80gb", 1,
                  "above the 312 TFLOP/s dense bf16 peak of a100-80gb (NVIDIA A100-SXM4-80GB): "
                  "costs faster than the GPU would give an MFU of"));
  c.push_back(Row("model_made_for_another_gpu_says_which", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 2 --cluster a100-80gb", 1,
                  "the model's costs were made for h100-sxm: re-estimate them for this GPU "
                  "(profiler analytic --gpu a100-80gb) or run on --cluster h100-sxm"));
  c.push_back(Row("memory_gb_below_one_byte", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb 1e-300", 2,
                  "--memory-gb: '1e-300' GiB is less than one byte: give 0 for unlimited, or a "
                  "size of at least one byte (9.31e-10 GiB)"));
  c.push_back(Row("memory_gb_below_one_byte_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --memory-gb 5e-10", 2,
                  "--memory-gb: '5e-10' GiB is less than one byte"));
  c.push_back(Row("memory_gb_denormal", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --memory-gb 4.9e-324", 2,
                  "--memory-gb: '4.9e-324' GiB is less than one byte"));
  c.push_back(Row("validator_memory_limit_below_one_byte", kValidator, {},
                  "--plan {ex}/baselines/gpt-7b-8gpu.plan.json --model {ex}/gpt-7b.json "
                  "--memory-limit-mb 1e-9",
                  2, "--memory-limit-mb: '1e-9' MiB is less than one byte"));
  // A model of 12 heads (GPT-2 small's) on 8-GPU nodes: t = 8 fits a node but
  // splits heads.
  std::string twelve_heads = Model(8);
  twelve_heads.insert(twelve_heads.find(R"("layers")"),
                      R"("source": {"method": "manual", "architecture": )"
                      R"({"hidden": 768, "heads": 12, "kv_heads": 12}}, )");
  c.push_back(Row("simulator_tensor_parallel_not_dividing_heads", kSimulator,
                  {{"m.json", twelve_heads}, {"c.json", kCluster}},
                  std::string(kSim) + " --cluster {dir}/c.json --tensor-parallel 8", 1,
                  "--tensor-parallel 8 does not divide the model's 12 attention heads "
                  "(source.architecture): each GPU of a tensor-parallel group holds whole heads; "
                  "use a t that divides 12"));
  c.push_back(Row("planner_tensor_parallel_not_dividing_heads", kPlanner,
                  {{"m.json", twelve_heads}, {"c.json", kCluster}},
                  "--model {dir}/m.json --gpus 16 --global-batch 16 --cluster {dir}/c.json "
                  "--tensor-parallel 8",
                  1,
                  "--tensor-parallel 8 does not divide the model's 12 attention heads "
                  "(source.architecture)"));
  c.push_back(Row("simulator_far_over_memory", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb 1e-6", 4,
                  "the configuration does not fit (exit 4; --allow-over-memory to exit 0)"));
  return c;
}

// Issue 28 part two: messages.
std::vector<Case> MessageRows() {
  std::vector<Case> c;
  c.push_back(Row("tensor_parallel_zero_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --tensor-parallel 0", 2,
                  "--tensor-parallel: '0' is not an integer from 1 to 2147483647"));
  c.push_back(Row("microbatches_zero_names_the_range", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --microbatches 0", 2,
                  "--microbatches: '0' is not an integer from 1 to 2147483647"));
  c.push_back(Row("threads_negative_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --threads -1", 2,
                  "--threads: '-1' is not an integer from 0 to 2147483647"));
  c.push_back(Row("top_negative_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --top -1", 2,
                  "--top: '-1' is not an integer from 0 to 2147483647"));
  c.push_back(Row("long_flag_value_shortened", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --top " + std::string(400, '9'), 2,
                  "--top: '" + std::string(32, '9') +
                      "...' (400 characters) is not an integer from 0 to 2147483647"));
  {
    Case row = Row(
        "pytorch_csv_huge_token_shortened", kSimulator,
        {kGoodModel, {"s.csv", "0F0,0B" + std::string(100000, '7') + "X\n1F0,1B0\n"}},
        "--model {dir}/m.json --schedule-in {dir}/s.csv", 1,
        "{dir}/s.csv:1: column 2: token '0B" + std::string(30, '7') + "... (100003 characters)'");
    row.absent = std::string(1000, '7');
    c.push_back(row);
  }
  c.push_back(Row("memory_limit_past_any_schedule", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit 1e308", 1,
                  "--memory-limit 1e308 is 1e+308 micro-batch activations, more than any "
                  "schedule holds (at most 8388608)"));
  c.push_back(Row("memory_limit_infinite", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit inf", 1,
                  "--memory-limit 'inf': expected a number of micro-batch activations (16) or a "
                  "size with a unit"));
  c.push_back(Row("memory_limit_with_schedule_in", kSimulator,
                  {kGoodModel, {"s.csv", "0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.csv --memory-limit 4", 1,
                  "--memory-limit applies to the schedules built from the stage costs (zb-auto, "
                  "zb-v-auto), not to --schedule-in {dir}/s.csv, whose order is given"));
  // --memory-replay (sim/memory_replay.h): a configuration or a model the replay does not
  // describe is refused, naming the setting or the field and what to do.
  c.push_back(Row("memory_replay_two_stages", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-replay torchtitan-fsdp2", 1,
                  "--memory-replay torchtitan-fsdp2 describes torchtitan's FSDP2 step only, but "
                  "--stages is 2: the trace is one stage holding every layer; give --stages 1, "
                  "or leave --memory-replay out for the flat allocator margin"));
  c.push_back(Row("memory_replay_model_without_shape", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 1 --microbatches 1 --zero 3 --recompute op "
                  "--memory-replay torchtitan-fsdp2",
                  1,
                  "--memory-replay torchtitan-fsdp2 needs the model's shape, but the model has no "
                  "source.architecture: make it with `profiler analytic`"));
  c.push_back(Row("empty_flag_value", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit ''", 2,
                  "--memory-limit: the value is empty: give one (see --help)"));
  c.push_back(Row("empty_cluster_value", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --cluster ''", 2,
                  "--cluster: the value is empty"));
  c.push_back(Row("progress_after_nan", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --progress-after nan", 2,
                  "--progress-after: 'nan' is not a number of seconds from 0 to 1000000"));
  c.push_back(Row("pins_data_parallel_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --data-parallel 3", 2,
                  "--data-parallel 3 does not divide --gpus 8"));
  c.push_back(Row("pins_multiplying_past_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --tensor-parallel 2 --stages 4 "
                  "--data-parallel 2",
                  2,
                  "--tensor-parallel 2 x --stages 4 x --data-parallel 2 cannot make --gpus 8: t "
                  "x p x d must equal the GPUs, so t must be 1"));
  c.push_back(Row("pins_product_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --stages 4 --data-parallel 4", 2,
                  "--stages 4 x --data-parallel 4 = 16 does not divide --gpus 8"));
  return c;
}

// Issue 28 part two: flags.
std::vector<Case> FlagRows() {
  std::vector<Case> c;
  c.push_back(Row("schedule_out_csv_as_text", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule-out {dir}/s.csv --schedule-format text", 2,
                  "--schedule-out {dir}/s.csv with --schedule-format text: a .csv file gets "
                  "PyTorch's schedule CSV",
                  After::kNoOutputs));
  c.push_back(Row("pytorch_class_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule ScheduleFoo", 2,
                  "--schedule: 'ScheduleFoo' is not one of naive, gpipe, 1f1b"));
  {
    Case row = Row("validator_unknown_flag_named", kValidator, {}, "--bogus", 2, "--bogus");
    row.absent = "--plan";
    c.push_back(row);
  }
  return c;
}

// Control characters in names (issue 17, base/terminal_text.h).
std::vector<Case> ControlCharacterRows() {
  std::vector<Case> c;
  // A path with ESC [31m in it is shown escaped, not obeyed by the terminal.
  c.push_back(Row("error_escapes_control_characters", kSimulator, {},
                  "--model \"{dir}/$(printf '\\033[31mred\\nx').json\" --stages 2", 1,
                  "\\x1b[31mred\\nx.json"));
  return c;
}

}  // namespace

// Rows about outputs and runs, in the catalogue's order.
std::vector<Case> RunRows() {
  std::vector<Case> rows;
  for (const std::vector<Case>& part :
       {UnwritableOutputRows(), ValidatorRows(), MeasuredRunRows(), SumsPast64BitsRows(),
        ImpossibleNumberRows(), MessageRows(), FlagRows(), ControlCharacterRows()}) {
    rows.insert(rows.end(), part.begin(), part.end());
  }
  return rows;
}

}  // namespace pipecast::cli_test
