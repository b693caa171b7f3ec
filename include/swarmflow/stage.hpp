#pragma once
/// \file stage.hpp
/// The unit of work of a pipeline. A stage declares its typed ports and
/// parameters in `setup`, opens resources in `start`, does one step in
/// `process` and releases resources in `stop`. One replica is driven by one
/// actor at a time, so a stage needs no locks of its own.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/params.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow {

/// A named input or output of a stage; `type` is the fully qualified name of
/// the FlatBuffers root table it carries.
struct PortInfo {
  std::string name;
  std::string type;
  std::string description;
  bool optional = false;  ///< an input that may be left unconnected
};

/// Port type that accepts any payload (for inspection stages such as io.jsonl).
struct AnyPayload {
  static constexpr const char* GetFullyQualifiedName() { return "*"; }
};

/// Typed handle of an input port, returned by `StageSpec::input`.
template <class T>
class InputPort {
 public:
  InputPort() = default;
  int index() const { return index_; }

 private:
  friend class StageSpec;
  explicit InputPort(int index) : index_(index) {}
  int index_ = -1;
};

/// Typed handle of an output port, returned by `StageSpec::output`.
template <class T>
class OutputPort {
 public:
  OutputPort() = default;
  int index() const { return index_; }

 private:
  friend class StageSpec;
  explicit OutputPort(int index) : index_(index) {}
  int index_ = -1;
};

/// `StageSpec::frame_size`: frames on output `port` are `width` x `height`
/// pixels, as the parameters of those names set them, when both are nonzero.
struct FrameSizeDecl {
  int port = -1;
  std::string width;
  std::string height;
};

/// `StageSpec::frame_region`: the region the parameters `x`, `y`, `width`,
/// `height` name (a width or height of 0 = to the edge) must lie inside the
/// frames on input `port`.
struct FrameRegionDecl {
  int port = -1;
  std::string x;
  std::string y;
  std::string width;
  std::string height;
};

/// What a stage declares in `setup`: ports and parameters, nothing else. The
/// loader uses it to check a pipeline without running it; `swarmflow describe`
/// prints it.
class StageSpec {
 public:
  /// Declares an input port carrying root table T (generated with name strings).
  template <class T>
  InputPort<T> input(std::string name, std::string description = {}) {
    return InputPort<T>(add_input(std::move(name), T::GetFullyQualifiedName(), std::move(description)));
  }
  /// Declares an input port that a pipeline may leave unconnected.
  template <class T>
  InputPort<T> optional_input(std::string name, std::string description = {}) {
    const int index = add_input(std::move(name), T::GetFullyQualifiedName(), std::move(description));
    inputs_.back().optional = true;
    return InputPort<T>(index);
  }
  /// For a stage whose inputs are joined (`join:` in the pipeline): sets whose
  /// deadline passes incomplete are dropped (and counted) instead of being
  /// delivered flagged as partial.
  void drop_partial_joins() { drop_partial_joins_ = true; }
  bool drops_partial_joins() const { return drop_partial_joins_; }
  /// For a stage that needs its inputs together in one step (a frame and
  /// what to draw on it): a pipeline that connects two or more of its inputs
  /// without `join:` is refused when it is loaded, since each step would see
  /// one input alone.
  void require_join() { require_join_ = true; }
  bool requires_join() const { return require_join_; }

  /// For a stage whose output frames have the size its parameters say:
  /// frames on `port` are `width_param` x `height_param` pixels whenever both
  /// are nonzero. The loader uses it to check regions downstream.
  template <class T>
  void frame_size(const OutputPort<T>& port, std::string width_param, std::string height_param) {
    frame_sizes_.push_back(FrameSizeDecl{port.index(), std::move(width_param), std::move(height_param)});
  }
  /// For a stage that reads a region of its input frames (a crop): the
  /// region its parameters `x`, `y`, `width`, `height` name must lie inside
  /// the frames on `port`. Where the producer of those frames declares their
  /// size (`frame_size`), a region outside them is refused when the pipeline
  /// is loaded, at the parameter that puts it there.
  template <class T>
  void frame_region(const InputPort<T>& port, std::string x, std::string y, std::string width, std::string height) {
    frame_regions_.push_back(
        FrameRegionDecl{port.index(), std::move(x), std::move(y), std::move(width), std::move(height)});
  }
  /// For a stage that passes on envelopes of one of its inputs (a voter
  /// forwards the winning candidate): output `out`, declared with
  /// AnyPayload, carries what input `in` receives. The loader then checks
  /// the consumers of `out` against the type of what feeds `in`.
  template <class O, class I>
  void passes_type(const OutputPort<O>& out, const InputPort<I>& in) {
    pass_through_.emplace_back(out.index(), in.index());
  }
  /// (output, input) pairs declared with passes_type.
  const std::vector<std::pair<int, int>>& pass_through() const { return pass_through_; }
  const std::vector<FrameSizeDecl>& frame_sizes() const { return frame_sizes_; }
  const std::vector<FrameRegionDecl>& frame_regions() const { return frame_regions_; }

  /// Declares an output port carrying root table T.
  template <class T>
  OutputPort<T> output(std::string name, std::string description = {}) {
    return OutputPort<T>(add_output(std::move(name), T::GetFullyQualifiedName(), std::move(description)));
  }

  /// Declares a parameter bound to `field`, which is set to the default now and
  /// to the configured value before `start`.
  void param(bool& field, std::string name, std::string description, bool default_value);
  void param(std::int64_t& field, std::string name, std::string description,
             std::int64_t default_value, ParamRange range = {});
  void param(double& field, std::string name, std::string description, double default_value,
             ParamRange range = {});
  void param(std::string& field, std::string name, std::string description,
             std::string default_value, std::vector<std::string> choices = {});

  /// Sets a declared parameter. Integers are accepted for numbers. Fails with a
  /// message fit for a user when the name is unknown, the type is wrong, or the
  /// value is out of range.
  Status set(const std::string& name, const ParamValue& value);

  const std::vector<PortInfo>& inputs() const { return inputs_; }
  const std::vector<PortInfo>& outputs() const { return outputs_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  /// Index of an input/output port by name, or -1.
  int input_index(std::string_view name) const;
  int output_index(std::string_view name) const;
  const ParamInfo* find_param(std::string_view name) const;

 private:
  int add_input(std::string name, std::string type, std::string description);
  int add_output(std::string name, std::string type, std::string description);
  void add_param(ParamInfo info, void* field);

  std::vector<PortInfo> inputs_;
  std::vector<PortInfo> outputs_;
  std::vector<ParamInfo> params_;
  std::vector<void*> fields_;
  bool drop_partial_joins_ = false;
  bool require_join_ = false;
  std::vector<FrameSizeDecl> frame_sizes_;
  std::vector<FrameRegionDecl> frame_regions_;
  std::vector<std::pair<int, int>> pass_through_;
};

/// The input of one step. Usually one envelope and the port it came on; for
/// a stage whose inputs are joined, one envelope per port of a matched set
/// (some missing when the set is partial).
class Inputs {
 public:
  /// The port of this step's envelope (for a joined set, its first present
  /// port), or -1 in a source.
  int port() const { return port_; }
  /// This step's envelope (for a joined set, the first present); null in a source.
  const Envelope* envelope() const { return envelope_; }
  /// The payload on `port` in this step, else null.
  template <class T>
  const T* get(const InputPort<T>& port) const {
    const Envelope* e = at(port.index());
    return e != nullptr ? e->as<T>() : nullptr;
  }
  /// The envelope on `port` in this step, else null.
  template <class T>
  const Envelope* envelope(const InputPort<T>& port) const {
    return at(port.index());
  }
  /// True for a joined set that was incomplete at its deadline.
  bool partial() const { return partial_; }
  /// Who sent this step's envelope: the producing stage's id and the index
  /// of its replica, as the runtime delivered it (the wire carries the
  /// producer replica of every envelope). A voter tells the candidates of
  /// replicas apart by it. Empty and -1 in a source, a joined set and a
  /// call back.
  std::string_view producer_stage() const {
    return producer_stage_ != nullptr ? std::string_view(*producer_stage_) : std::string_view();
  }
  int producer_replica() const { return producer_replica_; }
  /// Used by the host, after `reset`: names the producer of the envelope.
  void set_producer(const std::string* stage, int replica) {
    producer_stage_ = stage;
    producer_replica_ = replica;
  }

  /// Used by the host: one envelope on one port.
  void reset(int port, const Envelope* envelope) {
    port_ = port;
    envelope_ = envelope;
    joined_ = nullptr;
    partial_ = false;
    producer_stage_ = nullptr;
    producer_replica_ = -1;
  }
  /// Used by the host: a joined set, `by_port[i]` null where missing.
  void reset_joined(const std::vector<const Envelope*>* by_port, bool partial) {
    joined_ = by_port;
    partial_ = partial;
    port_ = -1;
    envelope_ = nullptr;
    producer_stage_ = nullptr;
    producer_replica_ = -1;
    for (std::size_t i = 0; i < by_port->size(); ++i) {
      if ((*by_port)[i] != nullptr) {
        port_ = static_cast<int>(i);
        envelope_ = (*by_port)[i];
        break;
      }
    }
  }

 private:
  const Envelope* at(int port) const {
    if (joined_ != nullptr) {
      return port >= 0 && static_cast<std::size_t>(port) < joined_->size() ? (*joined_)[static_cast<std::size_t>(port)]
                                                                           : nullptr;
    }
    return (envelope_ != nullptr && port_ == port) ? envelope_ : nullptr;
  }

  int port_ = -1;
  const Envelope* envelope_ = nullptr;
  const std::vector<const Envelope*>* joined_ = nullptr;
  bool partial_ = false;
  const std::string* producer_stage_ = nullptr;
  int producer_replica_ = -1;
};

/// Where a step puts what it produced. Nothing leaves until the step returns
/// ok; the output of a failed step is discarded.
class Outputs {
 public:
  struct Item {
    int port;
    Envelope envelope;
  };

  /// Emits `payload` on `port` with the header of this step's input envelope
  /// (stream, sequence, capture time carry through the pipeline).
  template <class T>
  void emit(const OutputPort<T>& port, PayloadPtr payload) {
    items_.push_back(Item{port.index(), Envelope(base_, std::move(payload))});
  }
  /// Emits `payload` under an explicit header; sources use this.
  template <class T>
  void emit(const OutputPort<T>& port, PayloadPtr payload, const EnvelopeHeader& header) {
    items_.push_back(Item{port.index(), Envelope(header, std::move(payload))});
  }
  /// Takes the finished buffer out of `builder` and emits it (no copy).
  template <class T>
  void emit(const OutputPort<T>& port, flatbuffers::FlatBufferBuilder& builder) {
    emit(port, Payload::from_builder(builder));
  }
  /// Passes an envelope on unchanged (same payload, same header).
  template <class T>
  void forward(const OutputPort<T>& port, const Envelope& envelope) {
    items_.push_back(Item{port.index(), envelope});
  }
  /// The header outputs inherit by default.
  const EnvelopeHeader& base_header() const { return base_; }

  /// Used by the host.
  void reset(const EnvelopeHeader& base) {
    base_ = base;
    items_.clear();
  }
  std::vector<Item>& items() { return items_; }

 private:
  EnvelopeHeader base_;
  std::vector<Item> items_;
};

/// What a stage may ask of the replica that hosts it.
class StageContext {
 public:
  virtual ~StageContext() = default;
  /// The stage's id in the pipeline.
  virtual const std::string& stage_id() const = 0;
  /// This replica's index, 0-based, and the number of replicas of the stage.
  virtual int replica() const = 0;
  virtual int replica_count() const = 0;
  /// Steady-clock time in nanoseconds.
  virtual std::int64_t now_ns() const = 0;
  /// The unit's speed factor (1 = nominal). Below 1 the runtime holds the
  /// replica's thread after each step for as long again as 1/speed asks, so
  /// every stage runs slower on a slowed unit; a stage that reads the speed
  /// in a step applies it itself (`sim.*` stages scale their work by it,
  /// faster too) and is not held.
  virtual double speed() const = 0;
  /// True once the run is stopping; a source should return end of stream.
  virtual bool stop_requested() const = 0;
  /// A source that is not due yet calls this and returns ok without output;
  /// the host calls it again at `t_ns` (steady clock) instead of at once.
  ///
  /// Any other stage that keeps work in hand between its inputs (requests
  /// it decodes a step at a time, votes it waits on until a deadline) calls
  /// it from `process` to be called again at `t_ns` (or at once, if that is
  /// not later than now) with no input: `inputs.envelope()` is null and
  /// outputs carry whatever header the stage gives them. Inputs that arrive
  /// before then are processed first, so each call sees all of them. The
  /// call waits while the stage's outputs have no credit. A replica with
  /// work in hand does not finish at the end of its inputs: the stage calls
  /// defer_until again until its work is done. The last call in a step
  /// stands (a step that does not call it leaves the time asked for before);
  /// `defer_until(0)` cancels; a restarted stage has none.
  virtual void defer_until(std::int64_t t_ns) = 0;
  /// Marks a source as live: it produces on its own clock (a camera), so when
  /// flow control has no credit its envelopes are dropped and counted rather
  /// than waited for. Call in `start`.
  virtual void set_live(bool live) = 0;
  /// How many producer replicas feed input `port` (the replicas of every
  /// stage connected to it, summed), or -1 when the host cannot tell. A
  /// voter takes the number of voters from it.
  virtual int producers(int /*port*/) const { return -1; }
  /// A named counter of this replica, summed over replicas in the run report.
  /// The reference stays valid for the replica's lifetime, across restarts.
  virtual std::atomic<std::int64_t>& counter(std::string_view name) = 0;
  /// Records `value` in the replica's histogram `name` (in the stage's own
  /// unit: ms, tokens, ...). The run report gives, per stage and summed over
  /// its replicas, the count, mean, p50 and p99 under `histograms`; the
  /// percentiles are of the values kept to two significant digits (within
  /// 5 %; integers below 100 exactly; 0 for zero and below). It is kept
  /// as counters named `hist.<name>.<bucket>` and `hist.<name>.sum_milli`,
  /// so it survives restarts and failovers like any counter.
  void observe(std::string_view name, double value);
};

/// Base class of every stage.
class Stage {
 public:
  virtual ~Stage() = default;
  /// Declares ports and parameters; does nothing else.
  virtual void setup(StageSpec& spec) = 0;
  /// Opens resources. If it fails, nothing else is called.
  virtual Status start(StageContext& /*context*/) { return {}; }
  /// One step. A source (no inputs) produces and returns ok, or returns end of
  /// stream when done. Errors and exceptions restart the stage with backoff.
  virtual Status process(Inputs& inputs, Outputs& outputs, StageContext& context) = 0;
  /// Releases resources.
  virtual void stop(StageContext& /*context*/) {}
  /// A stage that keeps state across envelopes writes it to `out` and
  /// returns true; a stateless one returns false (the default). A stateful
  /// replica on a unit process is snapshotted every `failure.snapshot_every`
  /// inputs and kept off its unit; if the unit dies, the replica placed
  /// elsewhere is given the latest snapshot through `restore` after `start`
  /// and before its first envelope, and the inputs after it are replayed.
  /// Called between steps, never during one.
  virtual bool snapshot(std::string& /*out*/) const { return false; }
  /// Takes the state `snapshot` wrote; an error fails the run. A stage that
  /// took over work in hand calls `defer_until` on the context `start` gave
  /// it, to be called again and go on with it.
  virtual Status restore(const std::string& /*state*/) { return Status::error("restore not supported"); }

  // -- state kept per key (docs/placement.md "Keys with state") ----------
  /// A stateful stage whose state is kept per key, where each key's
  /// envelopes read and change only that key's state, names the header
  /// field its state is keyed by: "stream", "part_id" or "seq". Where that
  /// is the stage's `key:`, the placement may hand single keys to another
  /// replica, each with its state (take_key here, give_key there). Null
  /// (the default): its keys stay with their replica, which moves whole.
  virtual const char* state_key() const { return nullptr; }
  /// Writes the state of key `key` to `out` and forgets it: the key goes to
  /// another replica, and its envelopes no longer come here. False when it
  /// keeps nothing for the key. Between steps, after every envelope of the
  /// key sent here was processed.
  virtual bool take_key(std::uint64_t /*key*/, std::string& /*out*/) { return false; }
  /// Takes over key `key` with the state take_key wrote on another replica,
  /// before the key's next envelope. An error fails the run. Between steps.
  virtual Status give_key(std::uint64_t /*key*/, const std::string& /*state*/) {
    return Status::error("give_key not supported");
  }
};

}  // namespace swarmflow
