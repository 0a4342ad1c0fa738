// Reading the HTML report back in tests: the SVG and HTML elements it draws,
// with their attributes, by a plain scan of start tags. The report writes
// every attribute as name="value" with escaped values, so no HTML parser is
// needed. Test-only; not part of the library.
#ifndef PIPECAST_TESTING_HTML_TEST_UTIL_H_
#define PIPECAST_TESTING_HTML_TEST_UTIL_H_

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/units.h"

namespace pipecast::test_util {

struct HtmlElement {
  std::string tag;
  std::map<std::string, std::string> attrs;

  bool HasClass(const std::string& name) const {
    auto it = attrs.find("class");
    if (it == attrs.end()) return false;
    const std::string padded = " " + it->second + " ";
    return padded.find(" " + name + " ") != std::string::npos;
  }
  const std::string& Attr(const std::string& name) const {
    static const std::string kNone;
    auto it = attrs.find(name);
    return it == attrs.end() ? kNone : it->second;
  }
  int Int(const std::string& name) const { return std::stoi(Attr(name)); }
  int64_t Int64(const std::string& name) const { return std::stoll(Attr(name)); }
  // A *-us attribute back to integer ns (the report writes three decimals).
  TimeNs Ns(const std::string& name) const {
    return static_cast<TimeNs>(std::llround(std::stod(Attr(name)) * 1000.0));
  }
};

// Every start tag named `tag` whose class list holds `cls` (any when empty),
// in document order. A hand scan rather than std::regex, whose backtracking
// recurses per character on long attributes such as a polyline's points.
inline std::vector<HtmlElement> FindElements(const std::string& html, const std::string& tag,
                                             const std::string& cls = "") {
  std::vector<HtmlElement> out;
  const std::string open = "<" + tag;
  for (size_t at = html.find(open); at != std::string::npos; at = html.find(open, at + 1)) {
    size_t i = at + open.size();
    if (i >= html.size() || !(html[i] == ' ' || html[i] == '>' || html[i] == '/')) continue;
    const size_t end = html.find('>', i);
    if (end == std::string::npos) break;
    HtmlElement e;
    e.tag = tag;
    while (i < end) {
      while (i < end && (html[i] == ' ' || html[i] == '/')) ++i;
      const size_t eq = html.find('=', i);
      if (eq == std::string::npos || eq >= end || html[eq + 1] != '"') break;
      const size_t close = html.find('"', eq + 2);
      e.attrs[html.substr(i, eq - i)] = html.substr(eq + 2, close - eq - 2);
      i = close + 1;
    }
    if (cls.empty() || e.HasClass(cls)) out.push_back(std::move(e));
  }
  return out;
}

// `html` without the zoomed copies of the timeline (<svg
// class="timeline-zoomed">, drawn only when the 1x chart merges ops), so that
// element counts are about the one chart.
inline std::string WithoutZoomedCopies(const std::string& html) {
  std::string out = html;
  const std::string open = "<svg class=\"timeline-zoomed\"";
  for (size_t at = out.find(open); at != std::string::npos; at = out.find(open, at)) {
    out.erase(at, out.find("</svg>", at) + 6 - at);
  }
  return out;
}

}  // namespace pipecast::test_util

#endif  // PIPECAST_TESTING_HTML_TEST_UTIL_H_
