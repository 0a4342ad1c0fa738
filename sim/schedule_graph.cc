#include "sim/schedule_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>

namespace pipecast {

namespace {

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

struct Node {
  int rank;
  Action action;
};

// Records DFS tree parents and the first back edge, which closes a cycle.
class CycleVisitor : public boost::default_dfs_visitor {
 public:
  CycleVisitor(std::vector<Vertex>* parent, Edge* back, bool* found)
      : parent_(parent), back_(back), found_(found) {}
  void tree_edge(Edge e, const Graph& g) const {
    (*parent_)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(Edge e, const Graph&) const {
    if (!*found_) {
      *back_ = e;
      *found_ = true;
    }
  }

 private:
  std::vector<Vertex>* parent_;
  Edge* back_;
  bool* found_;
};

}  // namespace

std::vector<DependencyEdge> FindDependencyCycle(const Schedule& s) {
  std::vector<Node> nodes;
  const int64_t cells = int64_t{s.num_stages} * s.num_microbatches;
  auto cell = [&](int stage, int mb) { return int64_t{stage} * s.num_microbatches + mb; };
  std::vector<int> f(cells, -1), bi(cells, -1), w(cells, -1);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.actions[r]) {
      const int id = static_cast<int>(nodes.size());
      nodes.push_back(Node{r, a});
      const int64_t c = cell(a.stage, a.microbatch);
      (a.kind == OpKind::kForward ? f : a.kind == OpKind::kBackwardWeight ? w : bi)[c] = id;
    }
  }
  Graph g(nodes.size());
  int id = 0;
  for (int r = 0; r < s.num_ranks; ++r, ++id) {
    for (size_t i = 1; i < s.actions[r].size(); ++i, ++id) boost::add_edge(id, id + 1, g);
  }
  for (size_t v = 0; v < nodes.size(); ++v) {
    const Action& a = nodes[v].action;
    const int64_t c = cell(a.stage, a.microbatch);
    if (a.kind == OpKind::kForward) {
      if (!s.IsFirstStage(a.stage)) boost::add_edge(f[cell(a.stage - 1, a.microbatch)], v, g);
      // An overlapped pair starts when its backward half's inputs are there too (the next node).
      if (a.overlapped && v + 1 < nodes.size()) {
        const Action& b = nodes[v + 1].action;
        boost::add_edge(f[cell(b.stage, b.microbatch)], v, g);
        if (!s.IsLastStage(b.stage)) {
          boost::add_edge(bi[cell(b.stage + 1, b.microbatch)], v, g);
        }
      }
    } else if (a.kind == OpKind::kBackwardWeight) {
      boost::add_edge(bi[c], v, g);
    } else {
      boost::add_edge(f[c], v, g);
      if (!s.IsLastStage(a.stage)) boost::add_edge(bi[cell(a.stage + 1, a.microbatch)], v, g);
    }
  }
  std::vector<Vertex> parent(nodes.size());
  for (size_t v = 0; v < parent.size(); ++v) parent[v] = v;
  Edge back;
  bool found = false;
  boost::depth_first_search(g, boost::visitor(CycleVisitor(&parent, &back, &found)));
  if (!found) return {};
  // The back edge u -> v closes the tree path v -> ... -> u.
  const Vertex u = boost::source(back, g), v = boost::target(back, g);
  std::vector<Vertex> path = {u};
  while (path.back() != v) path.push_back(parent[path.back()]);
  std::reverse(path.begin(), path.end());  // v ... u
  path.push_back(v);
  std::vector<DependencyEdge> cycle;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const Node& from = nodes[path[i]];
    const Node& to = nodes[path[i + 1]];
    const bool order = from.rank == to.rank && path[i + 1] == path[i] + 1;
    cycle.push_back(DependencyEdge{from.action, from.rank, to.action, to.rank, order});
  }
  return cycle;
}

std::string DescribeCycle(const std::vector<DependencyEdge>& cycle) {
  std::string out;
  for (const DependencyEdge& e : cycle) {
    out +=
        fmt::format("\n  {} (rank {}) {} {}", ActionName(e.to), e.to_rank,
                    e.stream_order ? "runs after" : "waits for the output of", ActionName(e.from));
    if (!e.stream_order)
      out += fmt::format(" (rank {})", e.from_rank);
    else
      out += fmt::format(" on rank {}'s list", e.from_rank);
  }
  return out;
}

Status NeverFinishes(const Schedule& schedule, const std::vector<int64_t>& next) {
  std::string stuck;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    if (next[r] < static_cast<int64_t>(schedule.actions[r].size())) {
      stuck += fmt::format("{}rank {} at {}", stuck.empty() ? "" : ", ", r,
                           ActionName(schedule.actions[r][next[r]]));
    }
  }
  return Status::FailedPrecondition(fmt::format(
      "schedule '{}' can never finish: stuck are {}; these ops wait on each other in a cycle:{}"
      "\nreorder the ranks' action lists so that every op's inputs are produced first",
      schedule.name, stuck, DescribeCycle(FindDependencyCycle(schedule))));
}

}  // namespace pipecast
