#include "graph/graph.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace swarmflow::graph {

namespace {

/// The strongly connected component of every node (Tarjan's algorithm with an
/// explicit stack, so that no chain is too long for it). Two nodes share a
/// component exactly when each reaches the other.
std::vector<int> components(const Graph& g) {
  const std::size_t n = g.nodes.size();
  const int unvisited = -1;
  std::vector<int> order(n, unvisited);
  std::vector<int> low(n, 0);
  std::vector<int> component(n, -1);
  std::vector<bool> on_stack(n, false);
  std::vector<int> stack;                     // Tarjan's stack of open nodes
  std::vector<std::pair<int, std::size_t>> path;  // (node, next out-edge to follow)
  int counter = 0;
  int components = 0;
  auto open = [&](int v) {
    const auto i = static_cast<std::size_t>(v);
    order[i] = low[i] = counter++;
    stack.push_back(v);
    on_stack[i] = true;
    path.emplace_back(v, 0);
  };
  for (std::size_t root = 0; root < n; ++root) {
    if (order[root] != unvisited) continue;
    open(static_cast<int>(root));
    while (!path.empty()) {
      auto& [v, k] = path.back();
      const auto vi = static_cast<std::size_t>(v);
      const auto& out = g.nodes[vi].out_edges;
      if (k < out.size()) {
        const int w = g.edges[static_cast<std::size_t>(out[k++])].to_node;
        const auto wi = static_cast<std::size_t>(w);
        if (order[wi] == unvisited) {
          open(w);  // invalidates v and k; the loop reads them afresh
        } else if (on_stack[wi]) {
          low[vi] = std::min(low[vi], order[wi]);
        }
        continue;
      }
      const int done = v;
      path.pop_back();
      const auto di = static_cast<std::size_t>(done);
      if (!path.empty()) {
        const auto pi = static_cast<std::size_t>(path.back().first);
        low[pi] = std::min(low[pi], low[di]);
      }
      if (low[di] != order[di]) continue;
      int w = 0;
      do {
        w = stack.back();
        stack.pop_back();
        on_stack[static_cast<std::size_t>(w)] = false;
        component[static_cast<std::size_t>(w)] = components;
      } while (w != done);
      ++components;
    }
  }
  return component;
}

/// Text inside a DOT double-quoted string.
std::string dot_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string replicas_text(const config::StageDecl& decl) {
  if (decl.min_replicas != decl.max_replicas) {
    return " x" + std::to_string(decl.min_replicas) + ".." + std::to_string(decl.max_replicas);
  }
  return decl.replicas > 1 ? " x" + std::to_string(decl.replicas) : std::string();
}

}  // namespace

Graph Graph::build(const config::PipelineSpec& spec, const Registry& registry) {
  Graph g;
  g.nodes.resize(spec.stages.size());
  for (std::size_t i = 0; i < spec.stages.size(); ++i) {
    Node& node = g.nodes[i];
    node.index = static_cast<int>(i);
    node.decl = &spec.stages[i];
    registry.describe(node.decl->type, node.spec);
    g.ids_.emplace(node.decl->id, node.index);
  }
  for (std::size_t to = 0; to < g.nodes.size(); ++to) {
    const config::StageDecl& consumer = *g.nodes[to].decl;
    for (const auto& input : consumer.inputs) {
      const int from = g.find(input.from_stage);
      if (from < 0) continue;
      const Node& producer = g.nodes[static_cast<std::size_t>(from)];
      Edge edge;
      edge.id = static_cast<int>(g.edges.size());
      edge.from_node = from;
      edge.from_port = producer.spec.output_index(input.from_port);
      edge.to_node = static_cast<int>(to);
      edge.to_port = g.nodes[to].spec.input_index(input.port);
      if (edge.from_port < 0 || edge.to_port < 0) continue;
      edge.type = producer.spec.outputs()[static_cast<std::size_t>(edge.from_port)].type;
      edge.capacity = consumer.queue.capacity;
      edge.overflow = consumer.queue.overflow;
      edge.keyed = consumer.keyed;
      edge.key = consumer.key;
      edge.fanout_all = consumer.fanout_all;
      g.nodes[static_cast<std::size_t>(from)].out_edges.push_back(edge.id);
      g.nodes[to].in_edges.push_back(edge.id);
      g.edges.push_back(std::move(edge));
    }
  }
  // An edge into a `feedback: true` stage is a feedback edge when it closes a
  // cycle (its consumer reaches its producer: both are in one component);
  // the stage's other inputs stay ordinary forward edges.
  const std::vector<int> component = components(g);
  for (auto& edge : g.edges) {
    const bool feedback_stage = g.nodes[static_cast<std::size_t>(edge.to_node)].decl->feedback;
    edge.feedback = feedback_stage && component[static_cast<std::size_t>(edge.to_node)] ==
                                          component[static_cast<std::size_t>(edge.from_node)];
    // A cycle of blocking edges can fill and stop for good (each producer
    // waits for credit from a consumer that waits for it): a feedback edge
    // never blocks its producer, it keeps the newest and drops the oldest.
    if (edge.feedback && edge.overflow == config::Overflow::block) edge.overflow = config::Overflow::drop_oldest;
  }
  return g;
}

int Graph::find(const std::string& stage_id) const {
  auto it = ids_.find(stage_id);
  return it == ids_.end() ? -1 : it->second;
}

std::string Graph::from_name(const Edge& edge) const {
  const Node& node = nodes[static_cast<std::size_t>(edge.from_node)];
  return node.decl->id + "/" + node.spec.outputs()[static_cast<std::size_t>(edge.from_port)].name;
}

std::string Graph::to_name(const Edge& edge) const {
  const Node& node = nodes[static_cast<std::size_t>(edge.to_node)];
  return node.decl->id + "/" + node.spec.inputs()[static_cast<std::size_t>(edge.to_port)].name;
}

std::string Graph::to_dot(const std::string& name) const {
  std::string out = "digraph \"" + dot_escape(name) + "\" {\n";
  out += "  rankdir=LR;\n";
  out += "  node [shape=box];\n";
  for (const auto& node : nodes) {
    const auto& decl = *node.decl;
    out += "  \"" + dot_escape(decl.id) + "\" [label=\"" + dot_escape(decl.id) + "\\n" +
           dot_escape(decl.type) + replicas_text(decl) + "\"];\n";
  }
  for (const auto& edge : edges) {
    const Node& from = nodes[static_cast<std::size_t>(edge.from_node)];
    const Node& to = nodes[static_cast<std::size_t>(edge.to_node)];
    std::string label = dot_escape(from.spec.outputs()[static_cast<std::size_t>(edge.from_port)].name) +
                        " -> " + dot_escape(to.spec.inputs()[static_cast<std::size_t>(edge.to_port)].name) +
                        "\\n" + dot_escape(edge.type) + "\\nqueue " + std::to_string(edge.capacity) + ", " +
                        config::to_string(edge.overflow);
    if (edge.keyed) label += std::string(", keyed by ") + config::to_string(edge.key);
    if (edge.fanout_all) label += ", to every replica";
    out += "  \"" + dot_escape(from.decl->id) + "\" -> \"" + dot_escape(to.decl->id) + "\" [label=\"" +
           label + "\"" + (edge.feedback ? ", style=dashed" : "") + "];\n";
  }
  out += "}\n";
  return out;
}

}  // namespace swarmflow::graph
