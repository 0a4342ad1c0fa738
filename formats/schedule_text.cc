#include "formats/schedule_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/file_util.h"

namespace pipecast {
namespace {

constexpr std::string_view kTokenForm = "<stage><kind><microbatch> such as 0F3";
// Largest stage or micro-batch index accepted: far beyond any real pipeline,
// and small enough that `index + 1` and per-index tables stay safe.
constexpr int kMaxIndex = 999'999;

// One action as written, with where it was written, for error messages.
struct Token {
  Action action;
  std::string text;
  int line = 0;  // 1-based line in the file
};

// The non-blank lines of the file; line i is rank i.
struct RankLine {
  int line = 0;
  std::vector<Token> tokens;
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSeparator(char c) { return c == ' ' || c == '\t' || c == ',' || c == '\r'; }

bool KindFromLetter(char c, OpKind* kind) {
  switch (c) {
    case 'F':
      *kind = OpKind::kForward;
      return true;
    case 'B':
      *kind = OpKind::kBackward;
      return true;
    case 'I':
      *kind = OpKind::kBackwardInput;
      return true;
    case 'W':
      *kind = OpKind::kBackwardWeight;
      return true;
    default:
      return false;
  }
}

// Reads a non-negative decimal index at `*pos`, advancing it. `what` names the
// field in errors ("stage", "micro-batch"); `after` says where it was expected.
Status ParseIndex(std::string_view token, size_t* pos, std::string_view what,
                  std::string_view after, int* value) {
  size_t begin = *pos;
  if (begin < token.size() && token[begin] == '-') {
    return Status::InvalidArgument(fmt::format("negative {} number, expected an index >= 0", what));
  }
  size_t end = begin;
  while (end < token.size() && IsDigit(token[end])) ++end;
  if (end == begin) {
    if (begin == token.size()) {
      return Status::InvalidArgument(
          fmt::format("missing {} number{}, expected {}", what, after, kTokenForm));
    }
    return Status::InvalidArgument(fmt::format("'{}' where the {} number belongs{}, expected {}",
                                               token.substr(begin), what, after, kTokenForm));
  }
  auto [ptr, ec] = std::from_chars(token.data() + begin, token.data() + end, *value);
  if (ec != std::errc() || ptr != token.data() + end || *value > kMaxIndex) {
    return Status::InvalidArgument(
        fmt::format("{} number too large, expected an index of at most {}", what, kMaxIndex));
  }
  *pos = end;
  return Status::Ok();
}

// Parses `<stage><kind><microbatch>`; the error says what is wrong, without
// the location (the caller adds it).
Status ParseToken(std::string_view token, Action* action) {
  size_t pos = 0;
  PIPECAST_RETURN_IF_ERROR(ParseIndex(token, &pos, "stage", "", &action->stage));
  if (pos == token.size()) {
    return Status::InvalidArgument("missing kind after the stage number, expected F, B, I or W");
  }
  char letter = token[pos];
  if (!KindFromLetter(letter, &action->kind)) {
    bool lower = letter == 'f' || letter == 'b' || letter == 'i' || letter == 'w';
    return Status::InvalidArgument(fmt::format("unknown kind '{}', expected F, B, I or W{}", letter,
                                               lower ? " (upper case)" : ""));
  }
  ++pos;
  std::string after = fmt::format(" after '{}'", letter);
  PIPECAST_RETURN_IF_ERROR(ParseIndex(token, &pos, "micro-batch", after, &action->microbatch));
  if (pos != token.size()) {
    return Status::InvalidArgument(
        fmt::format("unexpected '{}' after the micro-batch number, expected {}", token.substr(pos),
                    kTokenForm));
  }
  return Status::Ok();
}

// Splits the text into non-blank lines of tokens; syntax errors only.
Result<std::vector<RankLine>> Tokenize(std::string_view text, const std::string& origin) {
  std::vector<RankLine> ranks;
  int line_no = 0;
  size_t line_begin = 0;
  while (line_begin < text.size()) {
    size_t line_end = text.find('\n', line_begin);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    line_begin = line_end + 1;
    ++line_no;
    line = line.substr(0, line.find('#'));

    RankLine rank{line_no, {}};
    size_t pos = 0;
    while (pos < line.size()) {
      while (pos < line.size() && IsSeparator(line[pos])) ++pos;
      size_t end = pos;
      while (end < line.size() && !IsSeparator(line[end])) ++end;
      if (end == pos) break;
      Token token{{}, std::string(line.substr(pos, end - pos)), line_no};
      Status st = ParseToken(token.text, &token.action);
      if (!st.ok()) {
        return st.WithPrefix(fmt::format("{}:{}: token '{}'", origin, line_no, token.text));
      }
      rank.tokens.push_back(std::move(token));
      pos = end;
    }
    if (!rank.tokens.empty()) ranks.push_back(std::move(rank));
  }
  if (ranks.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: no actions, expected one line of actions per rank such as '0F0 0F1 0B0 0B1'", origin));
  }
  return ranks;
}

// Finds each stage's owner (the rank holding its forwards) and checks that
// every stage has one and that every action sits on its stage's owner.
Result<std::vector<int>> StageOwners(const std::vector<RankLine>& ranks,
                                     const std::string& origin) {
  std::map<int, std::pair<int, const Token*>> owner;  // stage -> (rank, first forward)
  int max_stage = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const Token& token : ranks[r].tokens) {
      max_stage = std::max(max_stage, token.action.stage);
      if (token.action.kind != OpKind::kForward) continue;
      auto [it, inserted] = owner.try_emplace(token.action.stage, r, &token);
      if (!inserted && it->second.first != r) {
        return Status::InvalidArgument(fmt::format(
            "{}:{}: token '{}': stage {}'s forwards are on rank {} (line {}) and rank {} "
            "(line {}), expected all of a stage's actions on one rank",
            origin, token.line, token.text, token.action.stage, it->second.first,
            it->second.second->line, r, token.line));
      }
    }
  }
  for (int s = 0; s <= max_stage; ++s) {
    if (owner.count(s) == 0) {
      return Status::InvalidArgument(
          fmt::format("{}: stage {} has no forward (the largest stage index is {}, so stages 0..{} "
                      "exist), expected its forwards on the rank that owns it",
                      origin, s, max_stage, max_stage));
    }
  }
  std::vector<int> stage_rank(max_stage + 1);
  for (const auto& [stage, where] : owner) stage_rank[stage] = where.first;

  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const Token& token : ranks[r].tokens) {
      int want = stage_rank[token.action.stage];
      if (want != r) {
        return Status::InvalidArgument(fmt::format(
            "{}:{}: token '{}' is on rank {}, expected rank {} (line {}), which holds stage "
            "{}'s forwards",
            origin, token.line, token.text, r, want, ranks[want].line, token.action.stage));
      }
    }
  }
  return stage_rank;
}

// Rejects an action written twice, with both lines; and a stage missing the
// forward of some micro-batch. The full completeness check is
// ValidateSchedule's; this one runs first so that a large index cannot make
// it allocate stages x micro-batches tables the text does not fill.
Status CheckForwardsAndRepeats(const std::vector<RankLine>& ranks, int num_stages,
                               int num_microbatches, const std::string& origin) {
  std::map<std::tuple<int, OpKind, int>, int> seen;  // action -> line
  std::vector<std::vector<int>> forwards(num_stages);
  for (const RankLine& rank : ranks) {
    for (const Token& token : rank.tokens) {
      const Action& a = token.action;
      auto [it, inserted] = seen.try_emplace({a.stage, a.kind, a.microbatch}, token.line);
      if (!inserted) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: token '{}' repeats the action of line {}, expected each "
                        "action once",
                        origin, token.line, token.text, it->second));
      }
      if (a.kind == OpKind::kForward) forwards[a.stage].push_back(a.microbatch);
    }
  }
  for (int s = 0; s < num_stages; ++s) {
    std::sort(forwards[s].begin(), forwards[s].end());
    int missing = static_cast<int>(forwards[s].size());
    for (int m = 0; m < static_cast<int>(forwards[s].size()); ++m) {
      if (forwards[s][m] != m) {
        missing = m;
        break;
      }
    }
    if (missing < num_microbatches) {
      return Status::InvalidArgument(fmt::format(
          "{}: stage {} has no forward of micro-batch {} (the largest micro-batch index is "
          "{}, so micro-batches 0..{} exist), expected every stage to run every micro-batch",
          origin, s, missing, num_microbatches - 1, num_microbatches - 1));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Schedule> ParseScheduleText(const std::string& text, const std::string& origin) {
  Result<std::vector<RankLine>> ranks = Tokenize(text, origin);
  if (!ranks.ok()) return ranks.status();
  Result<std::vector<int>> stage_rank = StageOwners(*ranks, origin);
  if (!stage_rank.ok()) return stage_rank.status();

  Schedule schedule;
  schedule.name = "custom";
  schedule.num_ranks = static_cast<int>(ranks->size());
  schedule.num_stages = static_cast<int>(stage_rank->size());
  schedule.stage_rank = std::move(*stage_rank);
  int max_microbatch = 0;
  for (const RankLine& rank : *ranks) {
    std::vector<Action>& actions = schedule.actions.emplace_back();
    actions.reserve(rank.tokens.size());
    for (const Token& token : rank.tokens) {
      actions.push_back(token.action);
      max_microbatch = std::max(max_microbatch, token.action.microbatch);
      if (token.action.kind == OpKind::kBackwardInput ||
          token.action.kind == OpKind::kBackwardWeight) {
        schedule.split_backward = true;
      }
    }
  }
  schedule.num_microbatches = max_microbatch + 1;
  PIPECAST_RETURN_IF_ERROR(
      CheckForwardsAndRepeats(*ranks, schedule.num_stages, schedule.num_microbatches, origin));
  PIPECAST_RETURN_IF_ERROR(ValidateSchedule(schedule).WithPrefix(origin));
  return schedule;
}

Result<Schedule> LoadScheduleText(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseScheduleText(*text, path);
}

std::string ScheduleToText(const Schedule& schedule) {
  std::string out;
  for (const std::vector<Action>& actions : schedule.actions) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i > 0) out += ' ';
      out += ActionName(actions[i]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace pipecast
