#include "measured/names.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace pipecast::measured {
namespace {

// PyTorch pipelining's runtime wraps each action in
// record_function(f"PP:{action}") (schedules.py, _get_profiler_function_name).
constexpr std::string_view kActionPrefix = "PP:";
constexpr std::string_view kStepPrefix = "ProfilerStep#";
constexpr std::string_view kNcclPrefix = "nccl:";
constexpr std::string_view kAutogradPrefix = "autograd::engine::evaluate_function:";
constexpr std::string_view kOverlapSuffix = "OVERLAP_F_B";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A non-negative decimal below 10^9, all of `s`.
std::optional<int> Number(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

// "<stage><F|B|I|W><microbatch>", e.g. "2B5".
std::optional<Action> ParseAction(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0 || i + 1 >= s.size()) return std::nullopt;
  const std::optional<int> stage = Number(s.substr(0, i));
  const std::optional<int> microbatch = Number(s.substr(i + 1));
  if (!stage || !microbatch) return std::nullopt;
  Action a;
  a.stage = *stage;
  a.microbatch = *microbatch;
  switch (s[i]) {
    case 'F':
      a.kind = OpKind::kForward;
      break;
    case 'B':
      a.kind = OpKind::kBackward;
      break;
    case 'I':
      a.kind = OpKind::kBackwardInput;
      break;
    case 'W':
      a.kind = OpKind::kBackwardWeight;
      break;
    default:
      return std::nullopt;
  }
  return a;
}

// "## forward ##", "## backward ##", "## optimizer ##", "## forward:over_arch ##" (the
// record_function names of the training loops in Holistic Trace Analysis' sample traces):
// the word before any ':' between the markers.
std::optional<Phase> HashMarkedPhase(std::string_view name) {
  if (!StartsWith(name, "## ") || !EndsWith(name, " ##") || name.size() < 7) return std::nullopt;
  std::string core = Lower(name.substr(3, name.size() - 6));
  core = core.substr(0, core.find(':'));
  if (core == "forward") return Phase::kForward;
  if (core == "backward") return Phase::kBackward;
  if (core == "optimizer" || core == "zero_grad") return Phase::kOptimizer;
  return std::nullopt;
}

CommKind CommFromCollectiveName(std::string_view op) {
  const std::string s = Lower(op);
  auto has = [&](const char* w) { return s.find(w) != std::string::npos; };
  if (has("all_to_all") || has("alltoall")) return CommKind::kAllToAll;
  if (has("reduce_scatter") || has("reducescatter")) return CommKind::kReduceScatter;
  if (has("all_gather") || has("allgather")) return CommKind::kAllGather;
  if (has("all_reduce") || has("allreduce")) return CommKind::kAllReduce;
  if (has("broadcast")) return CommKind::kBroadcast;
  if (has("send") || has("recv")) return CommKind::kSendRecv;
  if (has("reduce")) return CommKind::kReduce;
  return CommKind::kOther;
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kWeightGrad:
      return "weight gradient";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kOther:
      break;
  }
  return "other";
}

const char* CommKindName(CommKind kind) {
  switch (kind) {
    case CommKind::kAllReduce:
      return "all-reduce";
    case CommKind::kAllGather:
      return "all-gather";
    case CommKind::kReduceScatter:
      return "reduce-scatter";
    case CommKind::kAllToAll:
      return "all-to-all";
    case CommKind::kSendRecv:
      return "send/recv";
    case CommKind::kBroadcast:
      return "broadcast";
    case CommKind::kReduce:
      return "reduce";
    case CommKind::kOther:
      break;
  }
  return "other";
}

Phase PhaseOf(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return Phase::kForward;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return Phase::kBackward;
    case OpKind::kBackwardWeight:
      return Phase::kWeightGrad;
  }
  return Phase::kOther;
}

RangeName ClassifyRange(std::string_view name) {
  RangeName r;
  if (StartsWith(name, kStepPrefix)) {
    if (std::optional<int> n = Number(name.substr(kStepPrefix.size()))) {
      r.kind = RangeName::Kind::kStep;
      r.step = *n;
    }
    return r;
  }
  if (StartsWith(name, kActionPrefix)) {
    std::string_view a = name.substr(kActionPrefix.size());
    if (std::optional<Action> action = ParseAction(a)) {
      r.kind = RangeName::Kind::kAction;
      r.action = *action;
      r.phase = PhaseOf(action->kind);
    } else if (StartsWith(a, "(") && EndsWith(a, kOverlapSuffix)) {
      // "(0F7;7B3)OVERLAP_F_B": PyTorch's overlapped pair, forward then backward.
      const std::string_view inner = a.substr(1, a.size() - 1 - kOverlapSuffix.size());
      const size_t semi = inner.find(';');
      if (semi != std::string_view::npos && EndsWith(inner, ")")) {
        std::optional<Action> f = ParseAction(inner.substr(0, semi));
        std::optional<Action> b = ParseAction(inner.substr(semi + 1, inner.size() - semi - 2));
        if (f && b && f->kind == OpKind::kForward && b->kind != OpKind::kForward &&
            b->kind != OpKind::kBackwardWeight) {
          r.kind = RangeName::Kind::kAction;
          r.action = *f;
          r.action.overlapped = true;
          b->overlapped = true;
          r.pair_backward = *b;
          r.phase = Phase::kForward;
        }
      }
    }
    // Other actions (SEND_F, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD) mark no phase: their
    // kernels are communication, classified by their names.
    return r;
  }
  // The profiler's layer ranges (profiler/attribution.h), read by `profiler trace`.
  if (StartsWith(name, "pipecast:")) {
    r.kind = RangeName::Kind::kLayer;
    return r;
  }
  if (StartsWith(name, kNcclPrefix)) {
    r.kind = RangeName::Kind::kComm;
    r.comm = CommFromCollectiveName(name.substr(kNcclPrefix.size()));
    return r;
  }
  if (StartsWith(name, kAutogradPrefix)) {
    r.kind = RangeName::Kind::kAutograd;
    r.phase = Phase::kBackward;
    return r;
  }
  // PyTorch's optimizer hooks: "Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad".
  if (StartsWith(name, "Optimizer.step#") || StartsWith(name, "Optimizer.zero_grad#")) {
    r.kind = RangeName::Kind::kPhase;
    r.phase = Phase::kOptimizer;
    return r;
  }
  // DeepSeek's profile-data: "attn(F)", "dispatch(B)", "mlp(W)", ...
  if (name.size() > 3 && EndsWith(name, ")") && name[name.size() - 3] == '(') {
    const char k = name[name.size() - 2];
    if (k == 'F' || k == 'B' || k == 'W') {
      r.kind = RangeName::Kind::kPhase;
      r.phase = k == 'F' ? Phase::kForward : k == 'B' ? Phase::kBackward : Phase::kWeightGrad;
      return r;
    }
  }
  if (std::optional<Phase> p = HashMarkedPhase(name)) {
    r.kind = RangeName::Kind::kPhase;
    r.phase = *p;
    return r;
  }
  // A bare "forward" / "backward" record_function, as training loops often name them.
  const std::string lower = Lower(name);
  if (lower == "forward" || lower == "backward") {
    r.kind = RangeName::Kind::kPhase;
    r.phase = lower == "forward" ? Phase::kForward : Phase::kBackward;
  }
  return r;
}

std::optional<CommKind> ClassifyKernel(std::string_view name) {
  const std::string s = Lower(name.substr(0, 256));
  auto has = [&](const char* w) { return s.find(w) != std::string::npos; };
  if (has("deep_ep::") || has("dpsk::ep::")) {
    if (has("dispatch") || has("combine") || has("notify")) return CommKind::kAllToAll;
    return std::nullopt;
  }
  if (!has("nccl")) return std::nullopt;
  // ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL, ...
  if (has("alltoall")) return CommKind::kAllToAll;
  if (has("reducescatter")) return CommKind::kReduceScatter;
  if (has("allgather")) return CommKind::kAllGather;
  if (has("allreduce")) return CommKind::kAllReduce;
  if (has("sendrecv") || has("_send") || has("_recv")) return CommKind::kSendRecv;
  if (has("broadcast")) return CommKind::kBroadcast;
  if (has("_reduce")) return CommKind::kReduce;
  return CommKind::kOther;
}

}  // namespace pipecast::measured
