#include "formats/result_json.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/internal/json_reader.h"
#include "formats/internal/result_reader.h"

namespace pipecast {
namespace {

using Json = nlohmann::ordered_json;
using internal::Element;
using internal::JsonReader;
using internal::Member;
using internal::Shown;

// The keys of the result JSON, listed once: KeyWriter writes them (ResultJson) and KeyReader
// reads them (plan.json's `predicted`, internal::ReadResultJson), so a key cannot be written
// without being read back, or read under another name or unit. A visitor V has, for a key `k`
// and a field `f` of the result:
//   V::Time(k, f)             TimeNs, microseconds in the file
//   V::Number(k, f, max)      double in [0, max]; std::optional<double> (null or absent: unset)
//   V::Int(k, f, max)         an integer in [0, max]
//   V::Bool(k, f), V::Text(k, f), V::Texts(k, f)
//   V::Recipe(k, f)           an Fp8Recipe, by name
//   V::Algorithm(k, f)        a CpAlgorithm, by name
//   V::Dispatcher(k, f)       an ExpertDispatcher, by name
//   V::State(k, f)            a ShardedState, by name
//   V::Constant(k, value)     written only; the reader derives it (e.g. fits_memory)
//   V::Layers(stage)          a rank's first_layer, last_layer and `chunks`
//   V::Object(name, fn)       a nested object whose keys fn(V&) lists
// The lists take the result as R& with R a SimResult, StageResult or MemoryBreakdown: const for
// the writer, mutable for the reader.

// Limits past which a value is a mistake, not a result.
constexpr int64_t kMaxCount = int64_t{1} << 24;
constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max() / 2;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 40;
constexpr double kMaxTimeUs = 1e12;  // 11.6 days
constexpr double kAnyNumber = std::numeric_limits<double>::max();

// One key. `written`: the writer writes it (false leaves it out, so keys of a feature not in use,
// e.g. tensor parallelism at t = 1, do not change the output of runs without it); the reader
// reads every key that is present. `required`: the reader refuses a file without it (the metrics
// the planner's check compares).
struct Key {
  const char* name;
  bool written = true;
  bool required = false;
};

// One rank's `memory` object.
template <typename V, typename M>
void MemoryKeys(V& v, M& m) {
  v.Int(Key{"weights_bytes"}, m.weights, kMaxBytes);
  v.Int(Key{"gradients_bytes"}, m.gradients, kMaxBytes);
  v.Int(Key{"optimizer_bytes"}, m.optimizer, kMaxBytes);
  v.Int(Key{"activations_peak_bytes"}, m.activations_peak, kMaxBytes);
  v.Int(Key{"comm_buffers_peak_bytes"}, m.comm_buffers_peak, kMaxBytes);
  v.Int(Key{"workspace_peak_bytes"}, m.workspace_peak, kMaxBytes);
  v.Int(Key{"stashed_weights_bytes"}, m.stashed_weights, kMaxBytes);
  v.Int(Key{"gathered_weights_bytes"}, m.gathered_weights, kMaxBytes);
  // FP8 runs only: the FP8 weight copies, a part of weights_bytes.
  v.Int(Key{"fp8_weight_copy_bytes", m.fp8_weights > 0}, m.fp8_weights, kMaxBytes);
}

// One entry of `stages`. `tensor_parallel` and `bidirectional` are the whole result's: a rank's
// tp_comm_us is written only at t > 1, its copy_reduce_us only for bidirectional schedules.
template <typename V, typename S>
void StageKeys(V& v, S& s, bool tensor_parallel, bool bidirectional) {
  v.Int(Key{"stage"}, s.rank, kMaxCount);
  v.Layers(s);
  v.Time(Key{"busy_us"}, s.busy_ns);
  v.Time(Key{"first_start_us"}, s.first_start_ns);
  v.Time(Key{"last_end_us"}, s.last_end_ns);
  v.Number(Key{"bubble_ratio"}, s.bubble_ratio, kAnyNumber);
  v.Number(Key{"bubble_fraction_of_ideal"}, s.bubble_fraction_of_ideal, kAnyNumber);
  v.Int(Key{"peak_inflight_microbatches"}, s.peak_inflight_microbatches, kMaxCount);
  v.Int(Key{"peak_memory_bytes", true, true}, s.peak_memory_bytes, kMaxBytes);
  v.Bool(Key{"fits_memory"}, s.fits_memory);
  v.Int(Key{"parameters"}, s.parameters, kMaxBytes);
  v.Time(Key{"allreduce_us"}, s.allreduce_ns);
  v.Time(Key{"allreduce_hidden_us"}, s.allreduce_hidden_ns);
  v.Int(Key{"grad_buckets"}, s.grad_buckets, kMaxCount);
  v.Time(Key{"optimizer_us"}, s.optimizer_ns);
  v.Time(Key{"allgather_us"}, s.allgather_ns);
  v.Time(Key{"sharding_exposed_us"}, s.sharding_exposed_ns);
  v.Time(Key{"tp_comm_us", tensor_parallel}, s.tp_comm_ns);
  v.Time(Key{"copy_reduce_us", bidirectional}, s.copy_reduce_ns);
  v.Int(Key{"weight_versions"}, s.weight_versions, kMaxCount);
  v.Object("memory", [&s](auto& m) { MemoryKeys(m, s.memory); });
}

// The whole pipeline's keys, before `stages` (and the writer's `critical_path`).
template <typename V, typename R>
void TotalsKeys(V& v, R& r) {
  v.Time(Key{"iteration_time_us", true, true}, r.iteration_ns);
  v.Time(Key{"pipeline_time_us"}, r.pipeline_ns);
  v.Time(Key{"allreduce_time_us"}, r.allreduce_ns);
  v.Time(Key{"optimizer_time_us"}, r.optimizer_ns);
  v.Number(Key{"throughput_samples_per_s", true, true}, r.samples_per_s, kAnyNumber);
  v.Number(Key{"tokens_per_s"}, r.tokens_per_s);
  v.Number(Key{"tflops_per_gpu"}, r.tflops_per_gpu);
  v.Number(Key{"mfu"}, r.mfu);
  v.Number(Key{"bubble_ratio", true, true}, r.bubble_ratio, 1);
  v.Number(Key{"bubble_fraction_of_ideal", true, true}, r.bubble_fraction_of_ideal, kAnyNumber);
  v.Number(Key{"zb_bubble_rate"}, r.zb_bubble_rate, kAnyNumber);
  v.Text(Key{"schedule"}, r.schedule_name);
  v.Int(Key{"ranks"}, r.ranks, kMaxCount);
  v.Int(Key{"stages_count"}, r.stages, kMaxCount);
  v.Int(Key{"microbatches"}, r.microbatches, kMaxCount);
  v.Int(Key{"microbatch_size"}, r.microbatch_size, kMaxCount);
  v.Int(Key{"data_parallel"}, r.data_parallel, kMaxCount);
  // Written only with tensor parallelism; absent reads as t = 1.
  const bool tp = r.tensor_parallel > 1;
  v.Int(Key{"tensor_parallel", tp}, r.tensor_parallel, kMaxCount);
  v.Bool(Key{"sequence_parallel", tp}, r.sequence_parallel);
  v.Bool(Key{"tp_comm_overlap", tp}, r.tp_comm_overlap);
  v.Time(Key{"tp_comm_time_us", tp}, r.tp_comm_ns);
  // Written only with context parallelism; absent reads as cp = 1 (ring).
  const bool cp = r.context_parallel > 1;
  v.Int(Key{"context_parallel", cp}, r.context_parallel, kMaxCount);
  v.Algorithm(Key{"cp_algorithm", cp}, r.cp_algorithm);
  // Written only with expert parallelism; absent reads as ep = etp = 1.
  const bool ep = r.expert_parallel > 1 || r.expert_tensor_parallel > 1;
  v.Int(Key{"expert_parallel", ep}, r.expert_parallel, kMaxCount);
  v.Int(Key{"expert_tensor_parallel", ep}, r.expert_tensor_parallel, kMaxCount);
  v.Time(Key{"ep_comm_time_us", ep}, r.ep_comm_ns);
  // Written only for the all-to-all and all-gather dispatchers (--ep-dispatcher); absent reads as
  // deepep.
  v.Dispatcher(Key{"ep_dispatcher", ep && r.ep_dispatcher != ExpertDispatcher::kDeepEp},
               r.ep_dispatcher);
  // Written only when the all-to-alls hide in overlapped pairs (--ep-overlap); absent: off.
  v.Bool(Key{"ep_overlap", r.ep_overlap}, r.ep_overlap);
  v.Bool(Key{"ep_combined_1f1b", r.ep_overlap}, r.ep_combined_1f1b);
  // Written only for bidirectional schedules (DualPipe).
  v.Bool(Key{"bidirectional", r.bidirectional}, r.bidirectional);
  v.Time(Key{"copy_reduce_time_us", r.bidirectional}, r.copy_reduce_ns);
  v.Int(Key{"zero"}, r.zero, 3);
  // Written only for FP8 runs; `precision` is what fp8_recipe implies.
  const bool fp8 = r.fp8_recipe != Fp8Recipe::kNone;
  v.Constant(Key{"precision", fp8}, "fp8");
  v.Recipe(Key{"fp8_recipe", fp8}, r.fp8_recipe);
  v.Bool(Key{"fp8_param_gather", fp8}, r.fp8_param_gather);
  // Written only under --sharded-state fsdp2; absent reads as zero.
  v.State(Key{"sharded_state", r.sharded_state != ShardedState::kZero}, r.sharded_state);
  v.Time(Key{"allgather_time_us"}, r.allgather_ns);
  v.Time(Key{"sharding_exposed_time_us"}, r.sharding_exposed_ns);
  v.Bool(Key{"optimizer_estimated"}, r.optimizer_estimated);
  v.Time(Key{"allreduce_hidden_time_us"}, r.allreduce_hidden_ns);
  v.Bool(Key{"overlap_grad_reduce"}, r.overlap_grad_reduce);
  v.Int(Key{"global_batch"}, r.global_batch, kMaxGlobalBatch);
  v.Bool(Key{"costs_measured"}, r.costs_measured);
  v.Texts(Key{"notes"}, r.notes);
  v.Int(Key{"memory_capacity_bytes"}, r.memory_capacity_bytes, kMaxBytes);
  v.Int(Key{"memory_reserve_bytes"}, r.memory_reserve_bytes, kMaxBytes);
  v.Number(Key{"memory_headroom"}, r.memory_headroom, kAnyNumber);
  v.Int(Key{"memory_headroom_bytes"}, r.memory_headroom_bytes, kMaxBytes);
  v.Int(Key{"memory_limit_bytes"}, r.memory_limit_bytes, kMaxBytes);
  // Written only with --memory-replay: the reserved and allocated peaks it gives per GPU.
  const bool replay = !r.memory_replay.empty();
  v.Text(Key{"memory_replay", replay}, r.memory_replay);
  v.Int(Key{"replay_reserved_peak_bytes", replay}, r.replay_reserved_peak_bytes, kMaxBytes);
  v.Int(Key{"replay_allocated_peak_bytes", replay}, r.replay_allocated_peak_bytes, kMaxBytes);
  v.Constant(Key{"fits_memory"}, r.FitsMemory());  // every rank within the limit
  v.Int(Key{"iterations_simulated"}, r.iterations_simulated, kMaxCount);
  // With the warm-up, when more than one iteration was simulated.
  v.Time(Key{"first_iteration_time_us", r.iterations_simulated > 1}, r.first_iteration_ns);
}

// Writes the keys of the lists above into one JSON object.
class KeyWriter {
 public:
  explicit KeyWriter(Json* out) : out_(*out) {}

  void Time(Key k, TimeNs ns) {
    if (k.written) out_[k.name] = NsToUs(ns);
  }
  void Number(Key k, double v, double /*max*/) {
    if (k.written) out_[k.name] = v;
  }
  void Number(Key k, const std::optional<double>& v) {
    if (k.written && v.has_value()) out_[k.name] = *v;
  }
  template <typename T>
  void Int(Key k, T v, int64_t /*max*/) {
    if (k.written) out_[k.name] = v;
  }
  void Bool(Key k, bool v) {
    if (k.written) out_[k.name] = v;
  }
  void Text(Key k, const std::string& v) {
    if (k.written) out_[k.name] = v;
  }
  void Texts(Key k, const std::vector<std::string>& v) {
    if (k.written) out_[k.name] = v;
  }
  void Recipe(Key k, Fp8Recipe v) {
    if (k.written) out_[k.name] = Fp8RecipeName(v);
  }
  void Algorithm(Key k, CpAlgorithm v) {
    if (k.written) out_[k.name] = CpAlgorithmName(v);
  }
  void Dispatcher(Key k, ExpertDispatcher v) {
    if (k.written) out_[k.name] = ExpertDispatcherName(v);
  }
  void State(Key k, ShardedState v) {
    if (k.written) out_[k.name] = ShardedStateName(v);
  }
  template <typename T>
  void Constant(Key k, const T& v) {
    if (k.written) out_[k.name] = v;
  }
  void Layers(const StageResult& r) {
    if (r.layers.empty()) {
      out_["first_layer"] = nullptr;
      out_["last_layer"] = nullptr;
    } else {
      out_["first_layer"] = r.layers.front().first_layer;
      out_["last_layer"] = r.layers.back().last_layer;
    }
    out_["chunks"] = Json::array();
    for (size_t i = 0; i < r.layers.size(); ++i) {
      Json chunk;
      chunk["stage"] = i < r.stages.size() ? Json(r.stages[i]) : Json(nullptr);
      chunk["first_layer"] = r.layers[i].first_layer;
      chunk["last_layer"] = r.layers[i].last_layer;
      out_["chunks"].push_back(std::move(chunk));
    }
  }
  template <typename Fn>
  void Object(const char* name, Fn&& keys) {
    KeyWriter nested(&out_[name]);
    keys(nested);
  }

 private:
  Json& out_;
};

// One rank's chunks: the virtual stages it runs and their layers.
Status ReadChunks(const JsonReader& r, const Json& stage, const std::string& path,
                  StageResult* out) {
  if (!stage.contains("chunks")) return Status::Ok();
  const Json* chunks = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Array(stage, path, "chunks", &chunks));
  const std::string list = Member(path, "chunks");
  for (size_t i = 0; i < chunks->size(); ++i) {
    const Json& c = (*chunks)[i];
    const std::string where = Element(list, i);
    PIPECAST_RETURN_IF_ERROR(r.CheckObject(c, where));
    StageLayers layers;
    PIPECAST_RETURN_IF_ERROR(r.Int(c, where, "first_layer", 0, kMaxCount, &layers.first_layer));
    PIPECAST_RETURN_IF_ERROR(r.Int(c, where, "last_layer", 0, kMaxCount, &layers.last_layer));
    out->layers.push_back(layers);
    if (c.contains("stage") && !c["stage"].is_null()) {
      int v = 0;
      PIPECAST_RETURN_IF_ERROR(r.Int(c, where, "stage", 0, kMaxCount, &v));
      out->stages.push_back(v);
    }
  }
  return Status::Ok();
}

// Reads the keys of the lists above out of one object of `predicted`: a required
// key must be there; an optional one keeps the result's default when absent and must have the
// right type when present. Keeps the first error (status()) and reads nothing after it.
class KeyReader {
 public:
  KeyReader(const JsonReader& r, const Json& obj, std::string path)
      : r_(r), obj_(obj), path_(std::move(path)) {}

  Status status() const { return status_; }

  void Time(Key k, TimeNs& out) {
    double us = 0;
    if (Present(k) && Take(r_.Number(obj_, path_, k.name, kMaxTimeUs, &us))) {
      out = UsToNs(us);
    }
  }
  void Number(Key k, double& out, double max) {
    if (Present(k)) Take(r_.Number(obj_, path_, k.name, max, &out));
  }
  // null (a value that was not finite) reads as absent.
  void Number(Key k, std::optional<double>& out) {
    double v = 0;
    if (Present(k) && !obj_[k.name].is_null() &&
        Take(r_.Number(obj_, path_, k.name, kAnyNumber, &v))) {
      out = v;
    }
  }
  template <typename T>
  void Int(Key k, T& out, int64_t max) {
    if (Present(k)) Take(r_.Int(obj_, path_, k.name, 0, max, &out));
  }
  void Bool(Key k, bool& out) {
    if (Present(k)) Take(r_.Bool(obj_, path_, k.name, &out));
  }
  void Text(Key k, std::string& out) {
    if (!Present(k)) return;
    if (!obj_[k.name].is_string()) {
      Take(r_.Error(Member(path_, k.name), "expected a string, got " + Shown(obj_[k.name])));
      return;
    }
    out = obj_[k.name].get<std::string>();
  }
  void Texts(Key k, std::vector<std::string>& out) {
    const Json* list = nullptr;
    if (!Present(k) || !Take(r_.Array(obj_, path_, k.name, &list))) return;
    out.clear();
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) {
        Take(r_.Error(Element(Member(path_, k.name), i),
                      "expected a string, got " + Shown((*list)[i])));
        return;
      }
      out.push_back((*list)[i].get<std::string>());
    }
  }
  void Recipe(Key k, Fp8Recipe& out) {
    if (!Present(k)) return;
    const Json& name = obj_[k.name];
    Result<Fp8Recipe> recipe = name.is_string() ? ParseFp8Recipe(name.get<std::string>())
                                                : Result<Fp8Recipe>(Status::InvalidArgument(""));
    if (!recipe.ok() || *recipe == Fp8Recipe::kNone) {
      Take(r_.Error(
          Member(path_, k.name),
          "expected \"delayed\", \"current\", \"blockwise\" or \"mxfp8\", got " + Shown(name)));
      return;
    }
    out = *recipe;
  }
  void Algorithm(Key k, CpAlgorithm& out) {
    Named(k, out, ParseCpAlgorithm, "\"ring\" or \"allgather\"");
  }
  void Dispatcher(Key k, ExpertDispatcher& out) {
    Named(k, out, ParseExpertDispatcher, "\"deepep\", \"alltoall\" or \"allgather\"");
  }
  void State(Key k, ShardedState& out) {
    const auto parse = [](const std::string& name) -> std::optional<ShardedState> {
      Result<ShardedState> state = ParseShardedState(name);
      if (!state.ok()) return std::nullopt;
      return *state;
    };
    Named(k, out, parse, "\"zero\" or \"fsdp2\"");
  }
  // An enum written by name: `parse` maps the name to the value or nullopt.
  template <typename T, typename Parse>
  void Named(Key k, T& out, Parse parse, const char* expected) {
    if (!Present(k)) return;
    const Json& name = obj_[k.name];
    std::optional<T> value = name.is_string() ? parse(name.get<std::string>()) : std::nullopt;
    if (!value) {
      Take(r_.Error(Member(path_, k.name),
                    std::string("expected ") + expected + ", got " + Shown(name)));
      return;
    }
    out = *value;
  }
  // Derived, not read: `precision` from fp8_recipe, `fits_memory` from the ranks.
  template <typename T>
  void Constant(Key /*k*/, const T& /*v*/) {}
  void Layers(StageResult& out) {
    if (status_.ok()) Take(ReadChunks(r_, obj_, path_, &out));
  }
  template <typename Fn>
  void Object(const char* name, Fn&& keys) {
    if (!status_.ok() || !obj_.contains(name)) return;
    const std::string where = Member(path_, name);
    if (!Take(r_.CheckObject(obj_[name], where))) return;
    KeyReader nested(r_, obj_[name], where);
    keys(nested);
    Take(nested.status());
  }

 private:
  // Whether to read `k`: no earlier error, and the key is there (an error if it is required).
  bool Present(Key k) {
    if (!status_.ok()) return false;
    if (obj_.contains(k.name)) return true;
    if (k.required) {
      const Json* unused = nullptr;
      Take(r_.Find(obj_, path_, k.name, &unused));
    }
    return false;
  }
  bool Take(Status s) {
    if (status_.ok() && !s.ok()) status_ = std::move(s);
    return status_.ok();
  }

  const JsonReader& r_;
  const Json& obj_;
  std::string path_;
  Status status_ = Status::Ok();
};

const char* StepKind(CriticalStep::Kind kind) {
  switch (kind) {
    case CriticalStep::Kind::kCompute:
      return "compute";
    case CriticalStep::Kind::kCommunication:
      return "communication";
    case CriticalStep::Kind::kWaiting:
      return "waiting";
  }
  return "?";
}

Json CriticalPathJson(const SimResult& result) {
  const CriticalPath& cp = *result.critical_path;
  Json j;
  j["length_us"] = NsToUs(cp.length_ns);
  j["compute_us"] = NsToUs(cp.compute_ns);
  if (result.tensor_parallel > 1) j["tp_comm_us"] = NsToUs(cp.tp_comm_ns);
  j["communication_us"] = NsToUs(cp.communication_ns);
  j["waiting_us"] = NsToUs(cp.waiting_ns);
  j["compute_by_stage"] = Json::array();
  for (size_t r = 0; r < cp.compute_by_rank.size(); ++r) {
    j["compute_by_stage"].push_back({{"stage", r}, {"us", NsToUs(cp.compute_by_rank[r])}});
  }
  j["communication_by_link"] = Json::array();
  for (const auto& l : cp.communication_by_link) {
    j["communication_by_link"].push_back(
        {{"src_stage", l.src_rank}, {"dst_stage", l.dst_rank}, {"us", NsToUs(l.ns)}});
  }
  j["steps"] = Json::array();
  for (const CriticalStep& step : cp.steps) {
    j["steps"].push_back({{"kind", StepKind(step.kind)},
                          {"what", CriticalStepName(result, step)},
                          {"stage", step.rank},
                          {"start_us", NsToUs(step.start_ns)},
                          {"end_us", NsToUs(step.end_ns)}});
  }
  return j;
}

}  // namespace

Json ResultJson(const SimResult& result) {
  Json j;
  KeyWriter totals(&j);
  TotalsKeys(totals, result);
  j["stages"] = Json::array();
  for (const StageResult& r : result.per_rank) {
    Json stage;
    KeyWriter keys(&stage);
    StageKeys(keys, r, result.tensor_parallel > 1, result.bidirectional);
    j["stages"].push_back(std::move(stage));
  }
  if (result.critical_path) j["critical_path"] = CriticalPathJson(result);
  return j;
}

std::string ResultToJson(const SimResult& result) {
  // The format key first, as in every file pipecast writes; plan.json's
  // `predicted` block (ResultJson alone) is inside a file that has its own.
  Json j;
  j["format"] = kSimulationFormat;
  j.update(ResultJson(result));
  // Invalid UTF-8 in a name or note becomes U+FFFD instead of throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

namespace internal {

Status ReadResultJson(const JsonReader& r, const Json& obj, const std::string& path, int ranks,
                      SimResult* out) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(obj, path));
  SimResult& p = *out;
  KeyReader totals(r, obj, path);
  TotalsKeys(totals, p);
  PIPECAST_RETURN_IF_ERROR(totals.status());
  const Json* stages = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Array(obj, path, "stages", &stages));
  const std::string list = Member(path, "stages");
  if (static_cast<int64_t>(stages->size()) != ranks) {
    return r.Error(
        list, fmt::format("has {} entries, expected one per rank ({})", stages->size(), ranks));
  }
  p.per_rank.assign(stages->size(), StageResult{});
  for (size_t i = 0; i < stages->size(); ++i) {
    const std::string where = Element(list, i);
    PIPECAST_RETURN_IF_ERROR(r.CheckObject((*stages)[i], where));
    p.per_rank[i].rank = static_cast<int>(i);
    KeyReader keys(r, (*stages)[i], where);
    StageKeys(keys, p.per_rank[i], p.tensor_parallel > 1, p.bidirectional);
    PIPECAST_RETURN_IF_ERROR(keys.status());
  }
  return Status::Ok();
}

}  // namespace internal

}  // namespace pipecast
