#include "sim/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/text_table.h"

namespace pipecast {

namespace {

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<StageLayers>> ParsePartition(const std::string& text, int num_layers,
                                                int num_stages) {
  std::vector<StageLayers> out;
  std::string_view rest = text;
  int expected_first = 0;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = Trim(rest.substr(0, comma));
    size_t dash = item.find('-');
    StageLayers st;
    bool ok = dash == std::string_view::npos
                  ? ParseInt(item, &st.first_layer) && ParseInt(item, &st.last_layer)
                  : ParseInt(Trim(item.substr(0, dash)), &st.first_layer) &&
                        ParseInt(Trim(item.substr(dash + 1)), &st.last_layer);
    if (!ok) {
      return Status::InvalidArgument(fmt::format(
          "--partition: range {} is '{}': expected FIRST-LAST layer indices such as 0-3",
          out.size(), item));
    }
    if (st.first_layer != expected_first) {
      return Status::InvalidArgument(fmt::format(
          "--partition: range {} ('{}') starts at layer {}, expected {}: ranges must be "
          "contiguous and in order from layer 0",
          out.size(), item, st.first_layer, expected_first));
    }
    if (st.last_layer < st.first_layer) {
      return Status::InvalidArgument(
          fmt::format("--partition: range {} ('{}') is empty: the last layer is before the first",
                      out.size(), item));
    }
    if (st.last_layer >= num_layers) {
      return Status::InvalidArgument(
          fmt::format("--partition: range {} ('{}') goes past the model's last layer {}",
                      out.size(), item, num_layers - 1));
    }
    expected_first = st.last_layer + 1;
    out.push_back(st);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (expected_first != num_layers) {
    return Status::InvalidArgument(
        fmt::format("--partition: covers layers 0-{} but the model has {} (0-{})",
                    expected_first - 1, Count(num_layers, "layer", "layers"), num_layers - 1));
  }
  if (static_cast<int>(out.size()) != num_stages) {
    return Status::InvalidArgument(fmt::format("--partition: has {} but the pipeline has {}",
                                               Count(out.size(), "range", "ranges"),
                                               Count(num_stages, "stage", "stages")));
  }
  return out;
}

std::string PartitionToString(const std::vector<StageLayers>& partition) {
  std::string s;
  for (size_t i = 0; i < partition.size(); ++i) {
    if (i) s += ',';
    s += fmt::format("{}-{}", partition[i].first_layer, partition[i].last_layer);
  }
  return s;
}

namespace {

// Stages needed when no stage may exceed `limit` (greedy from the front).
int StagesNeeded(const std::vector<TimeNs>& cost, TimeNs limit) {
  int stages = 1;
  TimeNs sum = 0;
  for (TimeNs c : cost) {
    if (sum + c > limit) {
      ++stages;
      sum = 0;
    }
    sum += c;
  }
  return stages;
}

}  // namespace

Result<std::vector<StageLayers>> BalancedPartition(const std::vector<TimeNs>& layer_cost,
                                                   int num_stages) {
  const int n = static_cast<int>(layer_cost.size());
  if (num_stages < 1) {
    return Status::InvalidArgument(fmt::format("{} stages: need at least 1", num_stages));
  }
  if (num_stages > n) {
    return Status::InvalidArgument(fmt::format(
        "{} but the model has only {}: use at most {}", Count(num_stages, "stage", "stages"),
        Count(n, "layer", "layers"), Count(n, "stage", "stages")));
  }
  // The smallest bottleneck B with StagesNeeded(B) <= p, by binary search:
  // O(n log(total)) instead of the O(p n^2) dynamic programme.
  TimeNs lo = *std::max_element(layer_cost.begin(), layer_cost.end());
  TimeNs hi = 0;
  for (TimeNs c : layer_cost) hi += c;
  while (lo < hi) {
    const TimeNs mid = lo + (hi - lo) / 2;
    if (StagesNeeded(layer_cost, mid) <= num_stages) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Fill from the last stage backwards up to B, leaving one layer for each
  // earlier stage: later stages take the extra layers on ties, since early
  // stages hold more in-flight activations under 1F1B.
  std::vector<StageLayers> out(num_stages);
  int end = n;  // exclusive
  for (int k = num_stages - 1; k >= 0; --k) {
    int start = end - 1;
    TimeNs sum = layer_cost[start];
    while (start > k && sum + layer_cost[start - 1] <= lo) sum += layer_cost[--start];
    if (k == 0) start = 0;
    out[k] = StageLayers{start, end - 1};
    end = start;
  }
  return out;
}

}  // namespace pipecast
