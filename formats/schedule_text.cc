// Schedule text and PyTorch's schedule CSV (formats/schedule_text.h): reading them. The text is
// cut into tokens (compute actions, communication actions, overlapped pairs), each rank's line
// is checked against the stage owners it implies, the communication actions against the
// schedule's transfers, and what the file held besides compute is counted for
// ScheduleTextNotes. Writing is in schedule_text_write.cc.
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

#include "base/terminal_text.h"
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
  int line = 0;        // 1-based line in the file
  int column = 0;      // 1-based cell of a comma-separated line (PyTorch's CSV); 0 otherwise
  char direction = 0;  // 'a' or 'b' for a bidirectional schedule's `a0F3`, else 0
};

// A communication or sharding action of PyTorch's compute_comms format, e.g. `1SEND_F3`,
// `0UNSHARD`: checked against the compute actions, not replayed (docs/formats.md).
enum class CommKind { kSendF, kRecvF, kSendB, kRecvB, kUnshard, kReshard, kReduceGrad };
struct CommToken {
  CommKind kind = CommKind::kSendF;
  int stage = 0;
  int microbatch = -1;  // -1: none written (UNSHARD, RESHARD, REDUCE_GRAD)
  std::string text;
  int line = 0;
  int column = 0;
  int after = 0;  // compute tokens of its rank before it
};

// The non-blank lines of the file; line i is rank i.
struct RankLine {
  int line = 0;
  std::vector<Token> tokens;
  std::vector<CommToken> comms;
};

// "file:3: token '0X1'" or, in a comma-separated line, "file:3: column 5: token '0X1'".
std::string Where(const std::string& origin, int line, int column, std::string_view text) {
  if (column > 0) {
    return fmt::format("{}:{}: column {}: token '{}'", origin, line, column, Excerpt(text));
  }
  return fmt::format("{}:{}: token '{}'", origin, line, Excerpt(text));
}
std::string Where(const std::string& origin, const Token& t) {
  return Where(origin, t.line, t.column, t.text);
}
std::string Where(const std::string& origin, const CommToken& t) {
  return Where(origin, t.line, t.column, t.text);
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool IsSeparator(char c) { return IsBlank(c) || c == ','; }

// PyTorch's communication and sharding actions, as _ComputationType spells them. Longest
// first where one name starts another.
struct CommName {
  std::string_view name;
  CommKind kind;
  bool microbatch;  // takes a micro-batch index
};
constexpr CommName kCommNames[] = {
    {"SEND_F", CommKind::kSendF, true},
    {"RECV_F", CommKind::kRecvF, true},
    {"SEND_B", CommKind::kSendB, true},
    {"RECV_B", CommKind::kRecvB, true},
    {"UNSHARD", CommKind::kUnshard, false},
    {"RESHARD", CommKind::kReshard, false},
    {"REDUCE_GRAD", CommKind::kReduceGrad, false},
};

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
                                               Excerpt(token.substr(begin)), what, after,
                                               kTokenForm));
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
Status ParseToken(std::string_view token, Action* action, char* direction) {
  size_t pos = 0;
  // A bidirectional schedule's direction: `a0F3`, `b3B1` (docs/formats.md).
  *direction = 0;
  if (token.size() > 1 && (token[0] == 'a' || token[0] == 'b') && IsDigit(token[1])) {
    *direction = token[0];
    pos = 1;
  }
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
        fmt::format("unexpected '{}' after the micro-batch number, expected {}",
                    Excerpt(token.substr(pos)), kTokenForm));
  }
  return Status::Ok();
}

// Parses `<stage><NAME>[<microbatch>]` for PyTorch's communication names; false when the
// token names none of them (then it is a compute token).
Result<bool> ParseCommToken(std::string_view token, CommToken* comm) {
  size_t pos = 0;
  while (pos < token.size() && IsDigit(token[pos])) ++pos;
  if (pos == 0) return false;
  std::string_view rest = token.substr(pos);
  for (const CommName& name : kCommNames) {
    if (rest.substr(0, name.name.size()) != name.name) continue;
    size_t p = 0;
    PIPECAST_RETURN_IF_ERROR(ParseIndex(token, &p, "stage", "", &comm->stage));
    comm->kind = name.kind;
    p = pos + name.name.size();
    if (name.microbatch) {
      PIPECAST_RETURN_IF_ERROR(ParseIndex(
          token, &p, "micro-batch", fmt::format(" after '{}'", name.name), &comm->microbatch));
    } else if (p < token.size()) {
      // PyTorch writes these without a micro-batch; an index, if any, is accepted and unused.
      int unused = 0;
      PIPECAST_RETURN_IF_ERROR(
          ParseIndex(token, &p, "micro-batch", fmt::format(" after '{}'", name.name), &unused));
    }
    if (p != token.size()) {
      return Status::InvalidArgument(fmt::format("unexpected '{}' after '{}', expected <stage>{}{}",
                                                 Excerpt(token.substr(p)),
                                                 Excerpt(token.substr(0, pos + name.name.size())),
                                                 name.name, name.microbatch ? "<microbatch>" : ""));
    }
    return true;
  }
  OpKind unused_kind;
  if (rest.size() > 1 && !KindFromLetter(rest[0], &unused_kind) && rest[0] >= 'A' &&
      rest[0] <= 'Z' && rest[1] >= 'A' && rest[1] <= 'Z') {
    return Status::InvalidArgument(fmt::format(
        "unknown action '{}', expected F, B, I, W or one of PyTorch's SEND_F, RECV_F, SEND_B, "
        "RECV_B, UNSHARD, RESHARD, REDUCE_GRAD",
        Excerpt(rest.substr(0, rest.find_first_of("0123456789")))));
  }
  return false;
}

// Parses `(<forward>;<backward>)OVERLAP_F_B` into its two halves.
Status ParseOverlapToken(std::string_view token, Action* first, Action* second,
                         char* first_direction, char* second_direction) {
  const size_t close = token.find(')');
  if (close == std::string_view::npos) {
    return Status::InvalidArgument(
        "missing ')', expected an overlapped pair such as (0F7;7B3)OVERLAP_F_B");
  }
  if (token.substr(close + 1) != kOverlapPairName) {
    return Status::InvalidArgument(
        fmt::format("'{}' after ')', expected OVERLAP_F_B as in (0F7;7B3)OVERLAP_F_B",
                    Excerpt(token.substr(close + 1))));
  }
  std::string_view inside = token.substr(1, close - 1);
  const size_t semi = inside.find(';');
  if (semi == std::string_view::npos || inside.find(';', semi + 1) != std::string_view::npos) {
    const auto parts = 1 + std::count(inside.begin(), inside.end(), ';');
    return Status::InvalidArgument(fmt::format(
        "'({})' holds {} action{}, expected two separated by ';' (a forward, then a backward)",
        inside, parts, parts == 1 ? "" : "s"));
  }
  PIPECAST_RETURN_IF_ERROR(
      ParseToken(inside.substr(0, semi), first, first_direction).WithPrefix("first half"));
  PIPECAST_RETURN_IF_ERROR(
      ParseToken(inside.substr(semi + 1), second, second_direction).WithPrefix("second half"));
  if (first->kind != OpKind::kForward ||
      (second->kind != OpKind::kBackward && second->kind != OpKind::kBackwardInput)) {
    return Status::InvalidArgument(
        "an overlapped pair is a forward then a backward (B or I), as in (0F7;7B3)OVERLAP_F_B");
  }
  first->overlapped = true;
  second->overlapped = true;
  return Status::Ok();
}

// Splits the text into non-blank lines of tokens; syntax errors only.
Result<std::vector<RankLine>> Tokenize(std::string_view text, const std::string& origin) {
  std::vector<RankLine> ranks;
  int line_no = 0;
  size_t line_begin = 0;
  while (line_begin < text.size()) {
    // A line ends at "\n", "\r\n" or a lone "\r" (old Mac line ends), as Python's csv reader
    // and universal newlines read them: PyTorch's CSV may come from any of them.
    size_t line_end = text.find_first_of("\r\n", line_begin);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    line_begin = line_end + 1;
    if (line_end + 1 < text.size() && text[line_end] == '\r' && text[line_end + 1] == '\n') {
      ++line_begin;
    }
    ++line_no;
    line = line.substr(0, line.find('#'));
    if (line_no == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line = line.substr(3);  // UTF-8 BOM
    // A line with commas is a CSV row (PyTorch's _dump_csv): one action per cell, empty cells
    // are idle steps, and errors name the cell's column.
    const bool csv = line.find(',') != std::string_view::npos;

    RankLine rank{line_no, {}, {}};
    size_t pos = 0;
    int column = 1;
    while (pos < line.size()) {
      while (pos < line.size() && IsSeparator(line[pos])) {
        if (line[pos] == ',') ++column;
        ++pos;
      }
      size_t end = pos;
      while (end < line.size() && !IsSeparator(line[end])) ++end;
      if (end == pos) break;
      std::string_view text = line.substr(pos, end - pos);
      pos = end;
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        text = text.substr(1, text.size() - 2);  // a quoted CSV cell
      }
      const int col = csv ? column : 0;
      const std::string where = Where(origin, line_no, col, text);
      if (!text.empty() && text.front() == '(') {
        Token first{{}, std::string(text), line_no, col};
        Token second = first;
        PIPECAST_RETURN_IF_ERROR(ParseOverlapToken(text, &first.action, &second.action,
                                                   &first.direction, &second.direction)
                                     .WithPrefix(where));
        rank.tokens.push_back(std::move(first));
        rank.tokens.push_back(std::move(second));
        continue;
      }
      CommToken comm;
      Result<bool> is_comm = ParseCommToken(text, &comm);
      if (!is_comm.ok()) return is_comm.status().WithPrefix(where);
      if (*is_comm) {
        comm.text = std::string(text);
        comm.line = line_no;
        comm.column = col;
        comm.after = static_cast<int>(rank.tokens.size());
        rank.comms.push_back(std::move(comm));
        continue;
      }
      Token token{{}, std::string(text), line_no, col};
      PIPECAST_RETURN_IF_ERROR(
          ParseToken(token.text, &token.action, &token.direction).WithPrefix(where));
      rank.tokens.push_back(std::move(token));
    }
    // A row of only communication actions still is a rank (of no compute, which the checks
    // below refuse by name); a blank row is not.
    if (!rank.tokens.empty() || !rank.comms.empty()) ranks.push_back(std::move(rank));
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
        return Status::InvalidArgument(
            fmt::format("{}: stage {}'s forwards are on rank {} (line {}) and rank {} "
                        "(line {}), expected all of a stage's actions on one rank",
                        Where(origin, token), token.action.stage, it->second.first,
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
        return Status::InvalidArgument(
            fmt::format("{} is on rank {}, expected rank {} (line {}), which holds stage "
                        "{}'s forwards",
                        Where(origin, token), r, want, ranks[want].line, token.action.stage));
      }
    }
  }
  return stage_rank;
}

// Rejects an action written twice, with both lines; and a stage missing the
// forward of some micro-batch. The full completeness check is
// ValidateSchedule's; this one runs first so that a large index cannot make
// it allocate stages x micro-batches tables the text does not fill.
Status CheckForwardsAndRepeats(const std::vector<RankLine>& ranks, const Schedule& shape,
                               const std::string& origin) {
  const int num_stages = shape.num_stages;
  const int num_microbatches = shape.num_microbatches;
  std::map<std::tuple<int, OpKind, int>, int> seen;  // action -> line
  std::vector<std::vector<int>> forwards(num_stages);
  for (const RankLine& rank : ranks) {
    for (const Token& token : rank.tokens) {
      const Action& a = token.action;
      auto [it, inserted] = seen.try_emplace({a.stage, a.kind, a.microbatch}, token.line);
      if (!inserted) {
        return Status::InvalidArgument(
            fmt::format("{} repeats the action of line {}, expected each "
                        "action once",
                        Where(origin, token), it->second));
      }
      if (a.kind == OpKind::kForward) forwards[a.stage].push_back(a.microbatch);
    }
  }
  for (int s = 0; s < num_stages; ++s) {
    std::sort(forwards[s].begin(), forwards[s].end());
    // The micro-batches of its path: [first, first + count).
    const int count = shape.MicrobatchesThrough(s);
    const int first = shape.OnPath(s, 0) ? 0 : num_microbatches - count;
    int missing = first + static_cast<int>(forwards[s].size());
    for (int m = 0; m < static_cast<int>(forwards[s].size()); ++m) {
      if (forwards[s][m] != first + m) {
        missing = first + m;
        break;
      }
    }
    if (shape.bidirectional && missing < first + count) {
      const bool b = first > 0;
      return Status::InvalidArgument(fmt::format(
          "{}: direction {}'s stage {} has no forward of its micro-batch {} (its largest "
          "micro-batch index is {}), expected every stage to run every micro-batch of its "
          "direction",
          origin, b ? 'b' : 'a', b ? s - shape.num_ranks : s, missing - first, count - 1));
    }
    if (!shape.bidirectional && missing < num_microbatches) {
      return Status::InvalidArgument(fmt::format(
          "{}: stage {} has no forward of micro-batch {} (the largest micro-batch index is "
          "{}, so micro-batches 0..{} exist), expected every stage to run every micro-batch",
          origin, s, missing, num_microbatches - 1, num_microbatches - 1));
    }
  }
  return Status::Ok();
}

// The first and last compute token of the op holding token i of `rank` (an
// overlapped pair, forward then backward, is one op).
int OpStart(const RankLine& rank, int i) {
  const Action& a = rank.tokens[i].action;
  return a.overlapped && a.kind != OpKind::kForward ? i - 1 : i;
}
int OpEnd(const RankLine& rank, int i) {
  const Action& a = rank.tokens[i].action;
  return a.overlapped && a.kind == OpKind::kForward ? i + 1 : i;
}

// Counts a sharding action (unshard, reshard, reduce-grad) into *info; false
// for a transfer.
bool CountSharding(CommKind kind, ScheduleTextInfo* info) {
  switch (kind) {
    case CommKind::kUnshard:
      ++info->unshards;
      return true;
    case CommKind::kReshard:
      ++info->reshards;
      return true;
    case CommKind::kReduceGrad:
      ++info->reduce_grads;
      return true;
    default:
      return false;
  }
}

// CheckComms' walk: its inputs, where each compute op sits, and the
// transfers seen so far.
struct CommCheck {
  const std::vector<RankLine>& ranks;
  const std::vector<int>& stage_rank;
  int num_microbatches;
  const std::string& origin;
  ScheduleTextInfo* info;
  // Per rank: (stage, kind, micro-batch) -> index in its compute tokens.
  std::vector<std::map<std::tuple<int, OpKind, int>, int>> index;
  std::map<std::tuple<CommKind, int, int>, const CommToken*> seen;

  CommCheck(const std::vector<RankLine>& ranks_in, const std::vector<int>& stage_rank_in,
            int num_microbatches_in, const std::string& origin_in, ScheduleTextInfo* info_in)
      : ranks(ranks_in),
        stage_rank(stage_rank_in),
        num_microbatches(num_microbatches_in),
        origin(origin_in),
        info(info_in),
        index(ranks_in.size()) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      for (size_t i = 0; i < ranks[r].tokens.size(); ++i) {
        const Action& a = ranks[r].tokens[i].action;
        index[r][{a.stage, a.kind, a.microbatch}] = static_cast<int>(i);
      }
    }
  }

  // Action c on rank r names a stage that exists and is this rank's.
  Status CheckPlace(int r, const CommToken& c) const {
    const int n = static_cast<int>(stage_rank.size());
    const std::string where = Where(origin, c);
    if (c.stage >= n) {
      return Status::InvalidArgument(
          fmt::format("{}: stage {} does not exist (the forwards name stages 0..{}), expected "
                      "a stage of this rank",
                      where, c.stage, n - 1));
    }
    if (stage_rank[c.stage] != r) {
      return Status::InvalidArgument(fmt::format(
          "{} is on rank {}, expected rank {} (line {}), which holds stage {}'s forwards", where, r,
          stage_rank[c.stage], ranks[stage_rank[c.stage]].line, c.stage));
    }
    return Status::Ok();
  }

  // Transfer c on rank r: its micro-batch exists, it crosses to a neighbour
  // stage on another rank, it is written once, and it comes after the op
  // whose output it sends (before the op whose input it receives).
  Status CheckTransfer(int r, const CommToken& c) {
    const int n = static_cast<int>(stage_rank.size());
    const std::string where = Where(origin, c);
    if (c.microbatch >= num_microbatches) {
      return Status::InvalidArgument(
          fmt::format("{}: micro-batch {} does not exist (the forwards name 0..{})", where,
                      c.microbatch, num_microbatches - 1));
    }
    const bool forward = c.kind == CommKind::kSendF || c.kind == CommKind::kRecvF;
    const bool send = c.kind == CommKind::kSendF || c.kind == CommKind::kSendB;
    // The neighbour stage the transfer goes to or comes from.
    const int peer = (forward == send) ? c.stage + 1 : c.stage - 1;
    if (peer < 0 || peer >= n || stage_rank[peer] == r) {
      const std::string whom = peer < 0 || peer >= n
                                   ? fmt::format("{} no stage (it is the {} stage)",
                                                 send ? "to" : "from", peer < 0 ? "first" : "last")
                                   : fmt::format("within rank {} (stage {} is on it too)", r, peer);
      return Status::InvalidArgument(
          fmt::format("{}: stage {} {} {} {}, so there is nothing to {}: remove the action", where,
                      c.stage, send ? "sends" : "receives", forward ? "activations" : "gradients",
                      whom, send ? "send" : "receive"));
    }
    if (!seen.try_emplace({c.kind, c.stage, c.microbatch}, &c).second) {
      const CommToken* first = seen[{c.kind, c.stage, c.microbatch}];
      return Status::InvalidArgument(fmt::format(
          "{} repeats the action of line {}, expected each action once", where, first->line));
    }
    // The compute op that produces (send) or consumes (receive) the data.
    int found = -1;
    std::string op;
    for (OpKind k : forward ? std::vector<OpKind>{OpKind::kForward}
                            : std::vector<OpKind>{OpKind::kBackward, OpKind::kBackwardInput}) {
      auto it = index[r].find({c.stage, k, c.microbatch});
      if (it != index[r].end()) found = it->second;
    }
    op = fmt::format("{}{}{}", c.stage, forward ? "F" : "B (or I)", c.microbatch);
    if (found < 0) {
      return Status::InvalidArgument(
          fmt::format("{}: this rank runs no {}, expected the op whose data it {}", where, op,
                      send ? "sends" : "receives"));
    }
    if (send) {
      ++info->sends;
      if (c.after <= OpEnd(ranks[r], found)) {
        return Status::InvalidArgument(
            fmt::format("{} comes before {}, which produces what it sends: move it after that op",
                        where, ranks[r].tokens[found].text));
      }
      if (c.after > OpEnd(ranks[r], found) + 1) {
        if (info->late_sends++ == 0) info->first_late_send = where;
      }
    } else {
      ++info->receives;
      if (c.after > OpStart(ranks[r], found)) {
        return Status::InvalidArgument(
            fmt::format("{} comes after {}, which needs what it receives: move it before that op",
                        where, ranks[r].tokens[found].text));
      }
    }
    return Status::Ok();
  }

  // With any transfer written, every one is: PyTorch's runtime waits forever
  // on a missing one.
  Status CheckEveryTransfer() const {
    const int n = static_cast<int>(stage_rank.size());
    for (int s = 0; s + 1 < n; ++s) {
      if (stage_rank[s] == stage_rank[s + 1]) continue;
      for (int mb = 0; mb < num_microbatches; ++mb) {
        const std::tuple<CommKind, int, int> need[] = {{CommKind::kSendF, s, mb},
                                                       {CommKind::kRecvF, s + 1, mb},
                                                       {CommKind::kSendB, s + 1, mb},
                                                       {CommKind::kRecvB, s, mb}};
        for (const auto& key : need) {
          if (seen.count(key)) continue;
          const auto [kind, stage, m] = key;
          std::string_view name;
          for (const CommName& cn : kCommNames) {
            if (cn.kind == kind) name = cn.name;
          }
          const int r = stage_rank[stage];
          return Status::InvalidArgument(fmt::format(
              "{}: {}{}{} is missing from rank {} (line {}): a file with SEND/RECV actions needs "
              "one for every transfer between ranks (or none at all)",
              origin, stage, name, m, r, ranks[r].line));
        }
      }
    }
    return Status::Ok();
  }
};

// Checks PyTorch's communication and sharding actions against the compute actions and the
// stage owners (docs/formats.md), and counts them into *info.
Status CheckComms(const std::vector<RankLine>& ranks, const std::vector<int>& stage_rank,
                  int num_microbatches, const std::string& origin, ScheduleTextInfo* info) {
  CommCheck check(ranks, stage_rank, num_microbatches, origin, info);
  bool transfers = false;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const CommToken& c : ranks[r].comms) {
      PIPECAST_RETURN_IF_ERROR(check.CheckPlace(static_cast<int>(r), c));
      if (CountSharding(c.kind, info)) continue;
      transfers = true;
      PIPECAST_RETURN_IF_ERROR(check.CheckTransfer(static_cast<int>(r), c));
    }
  }
  if (!transfers) return Status::Ok();
  return check.CheckEveryTransfer();
}

}  // namespace

std::vector<std::string> ScheduleTextNotes(const ScheduleTextInfo& info, int zero_level) {
  std::vector<std::string> notes;
  if (info.sends + info.receives > 0) {
    notes.push_back(fmt::format(
        "{} SEND and {} RECV actions checked against the compute order; pipecast starts each "
        "transfer when its producer ends and serialises a link's transfers in that order "
        "(docs/simulator.md), so their places in the file do not change the times",
        info.sends, info.receives));
    if (info.late_sends > 0) {
      notes.push_back(fmt::format(
          "{} SEND actions sit later than right after their producer (first: {}): PyTorch "
          "starts those transfers later than simulated",
          info.late_sends, info.first_late_send));
    }
  }
  const int sharding = info.unshards + info.reshards + info.reduce_grads;
  if (sharding > 0) {
    const std::string what = fmt::format("{} UNSHARD, {} RESHARD and {} REDUCE_GRAD actions",
                                         info.unshards, info.reshards, info.reduce_grads);
    if (zero_level >= 3) {
      notes.push_back(fmt::format(
          "{}: the run shards parameters (ZeRO-3), whose model gathers a stage's parameters "
          "before each F and B (or I) and reduce-scatters its gradients after each backward "
          "(docs/simulator.md); that model stands in for them, their places are not replayed",
          what));
    } else {
      notes.push_back(fmt::format(
          "{} ignored: the run does not shard parameters (give --zero 3 to model them)", what));
    }
  }
  if (info.overlapped_pairs > 0) {
    notes.push_back(fmt::format(
        "{} overlapped F&B pairs (OVERLAP_F_B): each starts when both halves' inputs are there "
        "and lasts F + B less the tensor-parallel communication each half hides behind the "
        "other's compute, times --overlap-factor (docs/simulator.md, \"Overlapped F&B\")",
        info.overlapped_pairs));
  }
  return notes;
}

// A bidirectional schedule's text names each op's direction, its stage in that direction and
// its micro-batch there (`b3F0`); this maps them to virtual stages and micro-batches
// (sim/schedule.h): direction b's stage k is p + k, its micro-batch j is m/2 + j, m/2 being
// the micro-batches of one direction. *bidirectional: whether the text had directions. A text
// gives every op a direction or none.
Status ResolveDirections(std::vector<RankLine>& ranks, const std::string& origin,
                         bool* bidirectional) {
  const Token* with = nullptr;
  const Token* without = nullptr;
  int half = 0;
  const int p = static_cast<int>(ranks.size());
  for (const RankLine& rank : ranks) {
    for (const Token& t : rank.tokens) {
      const Token*& first = t.direction != 0 ? with : without;  // the first of each, for errors
      if (first == nullptr) first = &t;
      if (t.direction != 0 && t.action.stage >= p) {
        return Status::InvalidArgument(fmt::format(
            "{}: direction {} has stages 0..{} on a bidirectional schedule of {} ranks (one line "
            "each), expected a stage below {}",
            Where(origin, t), t.direction, p - 1, p, p));
      }
      half = std::max(half, t.action.microbatch + 1);
    }
  }
  *bidirectional = with != nullptr;
  if (with == nullptr) return Status::Ok();
  if (without != nullptr) {
    return Status::InvalidArgument(fmt::format(
        "{} has no direction but {} has one: a bidirectional schedule names every op's "
        "direction, a (entering at rank 0) or b (entering at the last rank), as in a0F3",
        Where(origin, *without), Where(origin, *with)));
  }
  for (const RankLine& rank : ranks) {
    if (!rank.comms.empty()) {
      return Status::InvalidArgument(fmt::format(
          "{}: SEND, RECV and sharding actions are not read in a bidirectional schedule: "
          "remove them (transfers follow from the compute order)",
          Where(origin, rank.comms.front())));
    }
  }
  for (RankLine& rank : ranks) {
    for (Token& t : rank.tokens) {
      if (t.direction != 'b') continue;
      t.action.stage += p;
      t.action.microbatch += half;
    }
  }
  return Status::Ok();
}

Result<Schedule> ParseScheduleText(const std::string& text, const std::string& origin,
                                   ScheduleTextInfo* info) {
  PIPECAST_ASSIGN_OR_RETURN(std::vector<RankLine> ranks, Tokenize(text, origin));
  bool bidirectional = false;
  PIPECAST_RETURN_IF_ERROR(ResolveDirections(ranks, origin, &bidirectional));
  PIPECAST_ASSIGN_OR_RETURN(std::vector<int> stage_rank, StageOwners(ranks, origin));

  Schedule schedule;
  schedule.name = "custom";
  schedule.num_ranks = static_cast<int>(ranks.size());
  schedule.num_stages = static_cast<int>(stage_rank.size());
  schedule.stage_rank = std::move(stage_rank);
  int max_microbatch = 0;
  for (const RankLine& rank : ranks) {
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
  schedule.bidirectional = bidirectional;
  if (bidirectional && schedule.num_stages != 2 * schedule.num_ranks) {
    // Without both directions' last stages the paths are not defined: say so before the
    // per-stage checks.
    return ValidateSchedule(schedule).WithPrefix(origin);
  }
  PIPECAST_RETURN_IF_ERROR(CheckForwardsAndRepeats(ranks, schedule, origin));
  ScheduleTextInfo local;
  if (info == nullptr) info = &local;
  *info = ScheduleTextInfo{};
  PIPECAST_RETURN_IF_ERROR(
      CheckComms(ranks, schedule.stage_rank, schedule.num_microbatches, origin, info));
  PIPECAST_RETURN_IF_ERROR(ValidateSchedule(schedule).WithPrefix(origin));
  for (const std::vector<Action>& list : schedule.actions) {
    for (const Action& a : list)
      info->overlapped_pairs += a.overlapped && a.kind == OpKind::kForward;
  }
  return schedule;
}

Result<Schedule> LoadScheduleText(const std::string& path, ScheduleTextInfo* info) {
  PIPECAST_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseScheduleText(text, path, info);
}

}  // namespace pipecast
