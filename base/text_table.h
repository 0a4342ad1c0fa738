// TextTable: columns of text for the tools' human output (the simulator's
// summary, the planner's explanation and check). Numbers right-aligned, text
// left-aligned, two spaces apart, no trailing blanks. A value type; not
// synchronised.
#ifndef PIPECAST_BASE_TEXT_TABLE_H_
#define PIPECAST_BASE_TEXT_TABLE_H_

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/units.h"

namespace pipecast {

// "12.3%" for 0.123: how every tool prints a ratio.
inline std::string PercentText(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }
// "1 GPU", "8 GPUs": a count with its noun in the right number.
inline std::string Count(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// "79.77" (GiB, two decimals): how every tool prints a memory size.
inline std::string GiBText(Bytes bytes) { return fmt::format("{:.2f}", ToGiB(bytes)); }

class TextTable {
 public:
  enum Align { kLeft, kRight };

  void AddColumn(std::string header, Align align) {
    headers_.push_back(std::move(header));
    aligns_.push_back(align);
  }
  // REQUIRES: one cell per column.
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  // Every line starts with `indent`.
  std::string Render(const std::string& indent = "") const {
    std::vector<size_t> width(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) {
      width[c] = headers_[c].size();
      for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
    }
    std::string out = RenderRow(headers_, width, indent);
    for (const auto& row : rows_) out += RenderRow(row, width, indent);
    return out;
  }

 private:
  std::string RenderRow(const std::vector<std::string>& row, const std::vector<size_t>& width,
                        const std::string& indent) const {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      line += aligns_[c] == kRight ? fmt::format("{:>{}}", row[c], width[c])
                                   : fmt::format("{:<{}}", row[c], width[c]);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    return line + "\n";
  }

  std::vector<std::string> headers_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace pipecast

#endif  // PIPECAST_BASE_TEXT_TABLE_H_
