#include "measured/megatron_log.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "formats/file_util.h"

namespace pipecast::measured {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// A finite decimal number, all of `s`.
std::optional<double> Number(std::string_view s) {
  s = Trim(s);
  if (s.empty() || s.size() > 64) return std::nullopt;
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The "label: value" fields of a '|'-separated line.
std::vector<std::pair<std::string_view, std::string_view>> Fields(std::string_view line) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  size_t start = 0;
  while (start <= line.size()) {
    size_t bar = line.find('|', start);
    if (bar == std::string_view::npos) bar = line.size();
    std::string_view field = line.substr(start, bar - start);
    if (size_t colon = field.rfind(':'); colon != std::string_view::npos) {
      out.push_back({Trim(field.substr(0, colon)), Trim(field.substr(colon + 1))});
    }
    start = bar + 1;
  }
  return out;
}

Status BadNumber(const std::string& origin, int line, std::string_view label,
                 std::string_view value) {
  return Status::InvalidArgument(
      fmt::format("{}:{}: '{}' is not a number after '{}'", origin, line, value, label));
}

}  // namespace

std::map<int, Bytes> MegatronLog::MaxAllocatedBytes() const {
  std::map<int, Bytes> out;
  for (const MegatronMemory& m : memory) {
    const Bytes b = static_cast<Bytes>(std::llround(m.max_allocated_mb * kMiB));
    auto [it, fresh] = out.try_emplace(m.rank, b);
    if (!fresh) it->second = std::max(it->second, b);
  }
  return out;
}

Result<MegatronLog> ParseMegatronLog(const std::string& text, const std::string& origin) {
  MegatronLog log;
  log.origin = origin;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string_view line = raw;
    if (size_t at = line.find("elapsed time per iteration (ms):"); at != std::string_view::npos) {
      const size_t it = line.find("iteration ");
      MegatronIteration rec;
      rec.line = line_no;
      // "iteration      20/    1000": the number before '/'.
      if (it != std::string_view::npos && it < at) {
        std::string_view rest = line.substr(it + 10);
        rest = rest.substr(0, rest.find('/'));
        if (std::optional<double> n = Number(rest); n && *n >= 0 && *n < 1e15) {
          rec.iteration = static_cast<int64_t>(*n);
        }
      }
      bool elapsed = false;
      for (const auto& [label, value] : Fields(line)) {
        if (label == "elapsed time per iteration (ms)") {
          std::optional<double> v = Number(value);
          if (!v || *v < 0) return BadNumber(origin, line_no, label, value);
          rec.elapsed_ms = *v;
          elapsed = true;
        } else if (label == "throughput per GPU (TFLOP/s/GPU)") {
          std::optional<double> v = Number(value);
          if (!v || *v < 0) return BadNumber(origin, line_no, label, value);
          rec.tflops = *v;
        } else if (label == "global batch size") {
          std::optional<double> v = Number(value);
          if (!v || *v < 0 || *v > 1e15) return BadNumber(origin, line_no, label, value);
          rec.global_batch = static_cast<int64_t>(*v);
        }
      }
      if (elapsed) log.iterations.push_back(rec);
      continue;
    }
    if (size_t at = line.find("memory (MB)"); at != std::string_view::npos) {
      const size_t open = line.find("[Rank ");
      if (open == std::string_view::npos || open > at) continue;
      std::string_view rank_text = line.substr(open + 6);
      rank_text = rank_text.substr(0, rank_text.find(']'));
      std::optional<double> rank = Number(rank_text);
      if (!rank || *rank < 0 || *rank > 1e9 || *rank != std::floor(*rank)) {
        return BadNumber(origin, line_no, "[Rank", rank_text);
      }
      MegatronMemory m;
      m.rank = static_cast<int>(*rank);
      m.line = line_no;
      bool max_allocated = false;
      for (const auto& [label, value] : Fields(line.substr(at + 11))) {
        double* field = label == "allocated"       ? &m.allocated_mb
                        : label == "max allocated" ? &m.max_allocated_mb
                        : label == "reserved"      ? &m.reserved_mb
                        : label == "max reserved"  ? &m.max_reserved_mb
                                                   : nullptr;
        if (field == nullptr) continue;
        std::optional<double> v = Number(value);
        if (!v || *v < 0) return BadNumber(origin, line_no, label, value);
        *field = *v;
        max_allocated = max_allocated || label == "max allocated";
      }
      if (max_allocated) log.memory.push_back(m);
    }
  }
  if (log.iterations.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: no Megatron-LM iteration line (\" iteration 20/ 1000 | ... | elapsed time per "
        "iteration (ms): 820.7 | ...\", printed every --log-interval iterations by rank 0 or "
        "the last rank): give the training log",
        origin));
  }
  return log;
}

Result<MegatronLog> ReadMegatronLog(const std::string& path) {
  PIPECAST_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseMegatronLog(text, path);
}

Result<MegatronRankOrder> ParseMegatronRankOrder(const std::string& text) {
  if (text == "tp-dp-pp" || text == "tp-cp-ep-dp-pp") return MegatronRankOrder::kTpDpPp;
  if (text == "tp-pp-dp") return MegatronRankOrder::kTpPpDp;
  return Status::InvalidArgument(fmt::format(
      "--megatron-rank-order is '{}': give tp-dp-pp (Megatron-LM's default, tp-cp-ep-dp-pp) or "
      "tp-pp-dp (--use-tp-pp-dp-mapping)",
      text));
}

int MegatronPipelineRank(int rank, int t, int p, int d, MegatronRankOrder order) {
  t = std::max(t, 1);
  p = std::max(p, 1);
  d = std::max(d, 1);
  return order == MegatronRankOrder::kTpDpPp ? (rank / (t * d)) % p : (rank / t) % p;
}

}  // namespace pipecast::measured
