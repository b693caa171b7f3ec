#pragma once
// The parsed and validated form of a pipeline definition (YAML).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <swarmflow/params.hpp>
#include <swarmflow/registry.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow::config {

/// 1-based position in the definition file.
struct SourceLoc {
  int line = 0;
  int column = 0;
};

/// What an edge does when the consumer has no credit left.
enum class Overflow { block, drop_oldest, drop_newest };
const char* to_string(Overflow overflow);

/// A header field that routes (`key:`) or matches (`join: {key:}`) envelopes.
enum class KeyField { stream, seq, part_id };
const char* to_string(KeyField field);

/// `join: {key, timeout_ms}`: the stage gets one envelope per input port with
/// the same key; a set still incomplete after timeout_ms is delivered flagged
/// partial, or dropped if the stage declares so. Either way it is counted.
struct JoinDecl {
  bool enabled = false;
  KeyField key = KeyField::seq;
  int timeout_ms = 1000;
  SourceLoc loc;
};

/// `inputs: {port: stage/port}` entry (a port fed by several producers,
/// `port: [a/out, b/out]`, has one entry per producer).
struct InputDecl {
  std::string port;        ///< input port of this stage
  std::string from_stage;  ///< producing stage id
  std::string from_port;   ///< producing output port
  SourceLoc loc;           ///< of the value `stage/port`
};

/// `queue: {capacity, overflow}`; applies to every input edge of the stage.
struct QueueDecl {
  int capacity = 8;
  Overflow overflow = Overflow::block;
};

/// One entry of `params:` as written.
struct ParamDecl {
  std::string name;
  ParamValue value;  ///< already converted to the declared kind
  SourceLoc loc;
};

/// One entry of `stages:`.
struct StageDecl {
  std::string id;
  std::string type;
  /// Its replicas: `replicas: N`, or max of `replicas: {min, max}`, of
  /// which min take work at the start and the others stand by until the
  /// placement adds them (docs/placement.md, "Adding and removing replicas").
  int replicas = 1;
  int min_replicas = 1;   ///< from `replicas: {min, max}`; equal to replicas otherwise
  int max_replicas = 1;
  SourceLoc replicas_loc;  ///< of the `replicas:` value
  std::vector<ParamDecl> params;
  std::vector<InputDecl> inputs;
  QueueDecl queue;
  bool keyed = false;     ///< `key: stream` or `key: part_id`
  KeyField key = KeyField::stream;  ///< the field keyed edges hash
  JoinDecl join;
  /// `fanout: all`: every envelope on this stage's inputs goes to each of its
  /// replicas (a copy each, sharing the payload) instead of to one; for
  /// replicas whose results a voter compares. `fanout: one` is the default.
  bool fanout_all = false;
  SourceLoc fanout_loc;   ///< of the `fanout:` key
  bool feedback = false;  ///< `feedback: true` allows this stage's inputs to close a cycle
  std::vector<std::string> pin_units;  ///< `placement: {units: [u1]}`: only these units may host it
  bool spread = false;                 ///< `placement: {spread: true}`: one replica per unit if possible
  SourceLoc loc;          ///< of the `- id:` entry
};

/// One compute unit. `units: N` yields N units named u0..u{N-1}.
struct UnitDecl {
  std::string id;
  std::string endpoint;    ///< empty = in this process
  int threads = 0;         ///< 0 = machine's cores
  double speed = 1.0;
  std::string public_key;  ///< CURVE public key (Z85 or a .pub file); required for tcp endpoints
};

/// `placement:` block.
struct PlacementDecl {
  std::string policy = "static";
  double rebalance_above = 0.85;
  int interval_ms = 250;
  /// A move must leave its target below rebalance_above - hysteresis.
  double hysteresis = 0.10;
  /// How long a condition must hold before anything moves.
  int sustain_ms = 500;
  /// After a move, nothing moves for this long.
  int cooldown_ms = 1000;
};

/// `transport:` block: the data plane between units (docs/pipelines.md).
/// Every unit reads the same file, so every unit has the same limits.
struct TransportDecl {
  /// The largest payload one message between units may carry; a larger one
  /// is refused by its receiver (ZMQ_MAXMSGSIZE, which disconnects the
  /// sender), so a producer keeps it in its own unit or drops it, counted.
  std::int64_t max_message_bytes = 64ll << 20;
  std::int64_t high_water_mark = 10000;  ///< messages queued per socket, each way
  std::int64_t linger_ms = 200;          ///< how long closing may wait for a dead peer
  /// Envelopes with payloads up to this size travel many to a frame.
  std::int64_t pack_below_bytes = 1024;
  /// `in_process: direct`: the units of one process hand each other their
  /// messages straight to the replicas' actors, not through ZeroMQ;
  /// `zeromq` (the default) sends them over inproc:// like a cluster's.
  bool in_process_direct = false;
};

/// `opencv: {threads}`: OpenCV's own worker threads (its `parallel_for_`)
/// while the run lasts, one setting of the whole process
/// (swarmflow/library_threads.hpp, docs/pipelines.md).
struct OpenCvDecl {
  /// 1 by default: the units' workers run OpenCV's loops themselves. 0 =
  /// `auto`: OpenCV's as the process has it (its default, a thread a core).
  int threads = 1;
  bool given = false;  ///< the file has `opencv:`
  SourceLoc loc;       ///< of the `threads` value, or of `opencv:`
};

/// `failure:` block: heartbeats on the control plane and the phi-accrual
/// failure detector that reads them (docs/design.md, "Failure detection").
/// The coordinator watches every unit process with these settings, and each
/// unit process watches the coordinator with them.
struct FailureDecl {
  int heartbeat_ms = 25;            ///< how often units and the coordinator send heartbeats
  double phi_threshold = 8;         ///< suspicion at which a peer is declared dead (10^-8 odds it is only late)
  double min_std_ms = 5;            ///< floor of the interval's standard deviation
  int acceptable_pause_ms = 200;    ///< added to the mean interval: a pause this long is not yet suspicious
  int window = 200;                 ///< intervals kept to estimate the mean and deviation
  /// A stateful replica on a unit process snapshots its state after this many
  /// inputs, or after snapshot_ms, whichever comes first (and when it idles);
  /// the inputs a snapshot covers are released only once it is stored.
  int snapshot_every = 64;
  int snapshot_ms = 100;
};

/// One step of `scenario:`: at `at_s` seconds into the run, unit `unit`
/// runs at `speed` (an emulated load change: `sim.*` stages scale their
/// service time by it).
struct ScenarioStep {
  double at_s = 0;
  std::string unit;
  double speed = 1.0;
  SourceLoc loc;
};

/// A whole pipeline definition.
struct PipelineSpec {
  std::string name;
  std::string file;  ///< path or name of the text it came from
  std::vector<UnitDecl> units;
  std::vector<StageDecl> stages;
  PlacementDecl placement;
  TransportDecl transport;
  OpenCvDecl opencv;
  FailureDecl failure;
  std::vector<ScenarioStep> scenario;  ///< in the order of the file
  std::string coordinator;      ///< endpoint, optional
  std::string coordinator_key;  ///< its CURVE public key (Z85 or a .pub file), for tcp
  std::vector<std::string> plugins;  ///< `plugins:`, each resolved against the file's folder

  const StageDecl* find_stage(const std::string& id) const;
};

/// Loads one plugin named by `plugins:` (already resolved) into the registry
/// the definition is checked against; an error becomes a diagnostic at the entry.
using PluginLoader = std::function<Status(const std::string& path)>;

/// Parses and validates a definition against the stage types of `registry`.
/// Returns nothing when there is any mistake; then `diagnostics` holds all of
/// them, each with file:line:col and a hint. The files `plugins:` names are
/// given to `load_plugin`, when there is one, before any stage is checked.
std::optional<PipelineSpec> load_pipeline_file(const std::string& path, const Registry& registry,
                                               std::vector<Diagnostic>& diagnostics,
                                               const PluginLoader& load_plugin = {});
std::optional<PipelineSpec> load_pipeline_string(const std::string& text, const std::string& name,
                                                 const Registry& registry,
                                                 std::vector<Diagnostic>& diagnostics,
                                                 const PluginLoader& load_plugin = {});

}  // namespace swarmflow::config
