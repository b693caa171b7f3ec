#pragma once
// The validated graph: stages with their declared ports, and typed edges.

#include <string>
#include <unordered_map>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/stage.hpp>

#include "config/pipeline_spec.hpp"

namespace swarmflow::graph {

/// A stage of the graph with its declared ports and parameters.
struct Node {
  int index = 0;
  const config::StageDecl* decl = nullptr;  ///< points into the PipelineSpec
  StageSpec spec;                           ///< from the type's setup()
  std::vector<int> in_edges;                ///< edge ids, any order
  std::vector<int> out_edges;               ///< edge ids, any order
  bool source() const { return spec.inputs().empty(); }
  bool sink() const { return spec.outputs().empty(); }
};

/// Output port -> input port.
struct Edge {
  int id = 0;
  int from_node = 0;
  int from_port = 0;  ///< output port index of the producer
  int to_node = 0;
  int to_port = 0;    ///< input port index of the consumer
  std::string type;   ///< fully qualified root table name
  int capacity = 8;
  config::Overflow overflow = config::Overflow::block;
  bool keyed = false;
  config::KeyField key = config::KeyField::stream;  ///< what keyed routing hashes
  bool feedback = false;
  bool fanout_all = false;  ///< each envelope goes to every consumer replica (`fanout: all`)
};

/// Nodes in the order of `spec.stages`, edges in the order of their declaration.
struct Graph {
  std::vector<Node> nodes;
  std::vector<Edge> edges;

  /// Builds the graph of a validated spec. The spec must outlive the graph.
  static Graph build(const config::PipelineSpec& spec, const Registry& registry);
  /// Node index by stage id, or -1.
  int find(const std::string& stage_id) const;
  /// `stage/port` of an edge's producer and consumer.
  std::string from_name(const Edge& edge) const;
  std::string to_name(const Edge& edge) const;
  /// Graphviz DOT: one node per stage (type and replicas), one edge per
  /// connection labelled with ports, type and queue.
  std::string to_dot(const std::string& name) const;

 private:
  std::unordered_map<std::string, int> ids_;  ///< stage id -> node index
};

}  // namespace swarmflow::graph
