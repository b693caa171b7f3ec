#include "graph/graph.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace swarmflow::graph {

namespace {

/// True when `target` can be reached from `start` along the edges.
bool reaches(const Graph& g, int start, int target) {
  std::vector<bool> seen(g.nodes.size(), false);
  std::vector<int> todo{start};
  seen[static_cast<std::size_t>(start)] = true;
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    if (v == target) return true;
    for (int id : g.nodes[static_cast<std::size_t>(v)].out_edges) {
      const int w = g.edges[static_cast<std::size_t>(id)].to_node;
      if (!seen[static_cast<std::size_t>(w)]) {
        seen[static_cast<std::size_t>(w)] = true;
        todo.push_back(w);
      }
    }
  }
  return false;
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
      g.nodes[static_cast<std::size_t>(from)].out_edges.push_back(edge.id);
      g.nodes[to].in_edges.push_back(edge.id);
      g.edges.push_back(std::move(edge));
    }
  }
  // An edge into a `feedback: true` stage is a feedback edge when it closes a
  // cycle; the stage's other inputs stay ordinary forward edges.
  for (auto& edge : g.edges) {
    const bool feedback_stage = g.nodes[static_cast<std::size_t>(edge.to_node)].decl->feedback;
    edge.feedback = feedback_stage && reaches(g, edge.to_node, edge.from_node);
  }
  return g;
}

int Graph::find(const std::string& stage_id) const {
  for (const auto& node : nodes) {
    if (node.decl->id == stage_id) return node.index;
  }
  return -1;
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
    out += "  \"" + dot_escape(from.decl->id) + "\" -> \"" + dot_escape(to.decl->id) + "\" [label=\"" +
           label + "\"" + (edge.feedback ? ", style=dashed" : "") + "];\n";
  }
  out += "}\n";
  return out;
}

}  // namespace swarmflow::graph
