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

const char* PartitionRuleName(PartitionRule rule) {
  switch (rule) {
    case PartitionRule::kBalanced:
      return "balanced";
    case PartitionRule::kEven:
      return "even";
    case PartitionRule::kGiven:
      return "given";
  }
  return "?";
}

Result<PartitionRule> ParsePartitionRule(const std::string& name, const std::string& flag) {
  if (name == "balanced") return PartitionRule::kBalanced;
  if (name == "even") return PartitionRule::kEven;
  return Status::InvalidArgument(fmt::format(
      "{} '{}': expected balanced (pipecast's, balanced on time where memory fits) or even "
      "(Megatron-LM's even split of the decoder layers)",
      flag, name));
}

Status EvenSplitOptions::Validate() const {
  if (first_stage_layers < 0 || last_stage_layers < 0) {
    return Status::InvalidArgument(
        fmt::format("--{}-stage-layers {}: give a positive number of decoder layers",
                    first_stage_layers < 0 ? "first" : "last",
                    first_stage_layers < 0 ? first_stage_layers : last_stage_layers));
  }
  if (Uneven() && (account_for_embedding || account_for_loss)) {
    return Status::InvalidArgument(fmt::format(
        "--{}-stage-layers and --account-for-{} cannot be given together (Megatron-LM refuses "
        "them together too): choose one way to lighten the end stages",
        first_stage_layers > 0 ? "first" : "last", account_for_embedding ? "embedding" : "loss"));
  }
  return Status::Ok();
}

Status PartitionSetting::Validate() const {
  PIPECAST_RETURN_IF_ERROR(even.Validate());
  if (rule != PartitionRule::kEven && even != EvenSplitOptions{}) {
    const char* flag = even.first_stage_layers > 0  ? "--first-stage-layers"
                       : even.last_stage_layers > 0 ? "--last-stage-layers"
                       : even.account_for_embedding ? "--account-for-embedding"
                                                    : "--account-for-loss";
    return Status::InvalidArgument(fmt::format(
        "{} shapes Megatron-LM's even split, but the partition rule is {}: add --partition even "
        "or leave {} out",
        flag, PartitionRuleName(rule), flag));
  }
  return Status::Ok();
}

ModelEnds EndsOf(const std::vector<std::string>& layer_names) {
  ModelEnds ends;
  if (layer_names.size() >= 2) {
    ends.embedding = layer_names.front() == "embedding";
    ends.head = layer_names.back() == "lm_head";
  }
  return ends;
}

Status CheckStageCount(int stages, int num_layers) {
  if (stages < 1) {
    return Status::InvalidArgument(fmt::format("{} stages: need at least 1", stages));
  }
  if (stages > num_layers) {
    return Status::InvalidArgument(fmt::format(
        "{} but the model has only {}: use at most {}", Count(stages, "stage", "stages"),
        Count(num_layers, "layer", "layers"), Count(num_layers, "stage", "stages")));
  }
  return Status::Ok();
}

namespace {

// Decoder layers (with the account-for options' extra units) of each rank,
// as Megatron-LM's get_num_layers_to_build counts them, checked as its
// TransformerConfig checks them.
Result<std::vector<int>> RankUnits(int decoder, int p, int v, const EvenSplitOptions& o) {
  std::vector<int> units(p, 0);
  if (!o.Uneven()) {
    const int total = decoder + o.account_for_embedding + o.account_for_loss;
    const std::string what = o.account_for_embedding || o.account_for_loss
                                 ? fmt::format("{} decoder layers{}{} ({} in the split)", decoder,
                                               o.account_for_embedding ? " + the embedding" : "",
                                               o.account_for_loss ? " + the loss" : "", total)
                                 : fmt::format("{} decoder layers", decoder);
    if (total % p != 0) {
      return Status::InvalidArgument(fmt::format(
          "--partition even: the model's {} do not divide evenly over {}: choose a stage count "
          "that divides them, or give --first-stage-layers / --last-stage-layers",
          what, Count(p, "pipeline stage", "pipeline stages")));
    }
    if ((total / p) % v != 0) {
      return Status::InvalidArgument(fmt::format(
          "--partition even: each of the {} pipeline stages holds {} of the {}, which do not "
          "divide over its {} virtual stages: choose p and v with p x v dividing them",
          p, total / p, what, v));
    }
    units.assign(p, total / p);
    return units;
  }
  const int first = o.first_stage_layers, last = o.last_stage_layers;
  if (p < 2) {
    return Status::InvalidArgument(
        "--first-stage-layers and --last-stage-layers need at least 2 pipeline stages");
  }
  const int middle_stages = p - (first > 0) - (last > 0);
  const int middle = decoder - first - last;
  if (middle < 0) {
    return Status::InvalidArgument(fmt::format(
        "--first-stage-layers {} + --last-stage-layers {} = {}, but the model has only {} "
        "decoder layers",
        first, last, first + last, decoder));
  }
  if ((middle > 0) != (middle_stages > 0)) {
    return Status::InvalidArgument(
        middle_stages == 0
            ? fmt::format("--first-stage-layers {} + --last-stage-layers {} leave {} of the {} "
                          "decoder layers for no middle stage: on 2 stages they must add up to {}",
                          first, last, middle, decoder, decoder)
            : fmt::format("--first-stage-layers and --last-stage-layers take all {} decoder "
                          "layers, leaving none for the {} middle stages: give them fewer",
                          decoder, middle_stages));
  }
  if (middle_stages > 0 && middle % middle_stages != 0) {
    return Status::InvalidArgument(
        fmt::format("--partition even: the {} decoder layers left besides --first-stage-layers / "
                    "--last-stage-layers do not divide evenly over the other {}",
                    middle, Count(middle_stages, "pipeline stage", "pipeline stages")));
  }
  const int per_middle = middle_stages > 0 ? middle / middle_stages : 0;
  const std::pair<const char*, int> per_rank[] = {{"--first-stage-layers", first},
                                                  {"--last-stage-layers", last},
                                                  {"each middle stage's layers", per_middle}};
  for (const auto& [name, count] : per_rank) {
    if (count % v != 0) {
      return Status::InvalidArgument(
          fmt::format("--partition even: {} ({}) do not divide over the {} virtual stages of a "
                      "pipeline stage",
                      name, count, v));
    }
  }
  units.assign(p, per_middle);
  if (first > 0) units.front() = first;
  if (last > 0) units.back() = last;
  return units;
}

}  // namespace

Result<std::vector<StageLayers>> EvenPartition(int num_layers, ModelEnds ends, int ranks,
                                               const std::vector<int>& stage_rank,
                                               const EvenSplitOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  const int stages = static_cast<int>(stage_rank.size());
  PIPECAST_RETURN_IF_ERROR(CheckStageCount(stages, num_layers));
  if (options.account_for_embedding && !ends.embedding) {
    return Status::InvalidArgument(
        "--account-for-embedding: the model's first layer is not 'embedding', so there is no "
        "embedding to count");
  }
  if (options.account_for_loss && !ends.head) {
    return Status::InvalidArgument(
        "--account-for-loss: the model's last layer is not 'lm_head', so there is no head and "
        "loss to count");
  }
  if (ranks < 1 || stages % ranks != 0) {
    return Status::InvalidArgument(
        fmt::format("--partition even: {} virtual stages are no whole number per each of {} ranks",
                    stages, ranks));
  }
  const int v = stages / ranks;
  std::vector<int> per_rank(ranks, 0);
  for (int r : stage_rank) {
    if (r >= 0 && r < ranks) ++per_rank[r];
  }
  for (int r = 0; r < ranks; ++r) {
    if (per_rank[r] != v) {
      return Status::InvalidArgument(fmt::format(
          "--partition even: rank {} holds {} of the {} virtual stages, not {} as every rank must "
          "for Megatron-LM's split: give --partition as a list of layer ranges",
          r, per_rank[r], stages, v));
    }
  }
  const int decoder = num_layers - ends.embedding - ends.head;
  PIPECAST_ASSIGN_OR_RETURN(std::vector<int> units, RankUnits(decoder, ranks, v, options));
  std::vector<StageLayers> out;
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    const int r = stage_rank[s];
    if (r < 0 || r >= ranks) {
      return Status::InvalidArgument(
          fmt::format("--partition even: virtual stage {} is on rank {}, not one of the {} ranks",
                      s, r, ranks));
    }
    int layers = units[r] / v;
    // The embedding joins the first virtual stage and the head the last, counted among the
    // stage's layers only with the account-for options (Megatron-LM builds one decoder less).
    if (s == 0 && ends.embedding && !options.account_for_embedding) ++layers;
    if (s == stages - 1 && ends.head && !options.account_for_loss) ++layers;
    if (layers == 0) {
      return Status::InvalidArgument(fmt::format(
          "--partition even: virtual stage {} would hold no layer: use fewer stages", s));
    }
    out.push_back(StageLayers{next, next + layers - 1});
    next += layers;
  }
  return out;
}

}  // namespace pipecast
