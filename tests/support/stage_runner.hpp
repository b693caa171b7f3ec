#pragma once
// Drives one stage without actors, as MediaPipe's CalculatorRunner does:
// set parameters, feed envelopes on named ports, collect outputs per port.

#include <atomic>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/stage.hpp>

namespace swarmflow::testing {

class StageRunner final : public StageContext {
 public:
  /// Runs `stage` (already constructed) and calls its setup.
  explicit StageRunner(std::unique_ptr<Stage> stage, std::string id = "stage")
      : id_(std::move(id)), stage_(std::move(stage)) {
    stage_->setup(spec_);
  }
  /// Instantiates `type` from `registry`.
  StageRunner(const Registry& registry, const std::string& type, std::string id = "stage")
      : StageRunner(make(registry, type), std::move(id)) {}

  Status set(const std::string& name, const ParamValue& value) { return spec_.set(name, value); }
  Status start() { return stage_->start(*this); }
  void stop() { stage_->stop(*this); }

  /// One step with `envelope` on input `port`.
  Status feed(const std::string& port, const Envelope& envelope) {
    int index = spec_.input_index(port);
    if (index < 0) throw std::invalid_argument("no input port " + port);
    Inputs in;
    in.reset(index, &envelope);
    return step(in, envelope.header());
  }
  /// One step with a joined set, as a host delivers it for a stage with
  /// `join:`: `by_port` names the envelope on each input (a missing input
  /// is absent from the set); `partial` flags a set incomplete at its deadline.
  Status feed_joined(const std::map<std::string, const Envelope*>& by_port, bool partial = false) {
    std::vector<const Envelope*> set(spec_.inputs().size(), nullptr);
    for (const auto& [port, envelope] : by_port) {
      const int index = spec_.input_index(port);
      if (index < 0) throw std::invalid_argument("no input port " + port);
      set[static_cast<std::size_t>(index)] = envelope;
    }
    Inputs in;
    in.reset_joined(&set, partial);
    return step(in, in.envelope() != nullptr ? in.envelope()->header() : EnvelopeHeader{});
  }
  /// One step with `envelope` on input `port`, sent by replica `replica` of stage `from`.
  Status feed_from(const std::string& port, const Envelope& envelope, const std::string& from, int replica) {
    int index = spec_.input_index(port);
    if (index < 0) throw std::invalid_argument("no input port " + port);
    producer_ = from;
    Inputs in;
    in.reset(index, &envelope);
    in.set_producer(&producer_, replica);
    return step(in, envelope.header());
  }
  /// One step of a source, or the call back of a stage that asked for one (defer_until).
  Status pull() {
    Inputs in;
    return step(in, EnvelopeHeader{});
  }
  /// Pulls a source until end of stream (or `max_steps`); returns the last status.
  Status pull_all(int max_steps = 1000000) {
    Status s;
    for (int i = 0; i < max_steps; ++i) {
      s = pull();
      if (!s.ok()) return s;
    }
    return s;
  }

  /// Calls the stage without input as long as it asks to be called again
  /// (defer_until), at most `max_steps` times; a set clock (`set_now_ns`)
  /// moves on to each time asked for. Returns the last status.
  Status run_deferred(int max_steps = 1000000) {
    Status s;
    for (int i = 0; i < max_steps && deferred_until_ > 0; ++i) {
      if (now_ns_ != 0 && deferred_until_ > now_ns_) now_ns_ = deferred_until_;
      s = pull();
      if (!s.ok()) return s;
    }
    return s;
  }

  /// Everything emitted on output `port` so far.
  const std::vector<Envelope>& output(const std::string& port) { return outputs_[port]; }
  const StageSpec& spec() const { return spec_; }
  Stage& stage() { return *stage_; }
  std::int64_t counter_value(const std::string& name) { return counter(name).load(); }

  // -- StageContext ---------------------------------------------------------
  const std::string& stage_id() const override { return id_; }
  int replica() const override { return replica_; }
  int replica_count() const override { return 1; }
  std::int64_t now_ns() const override { return now_ns_ != 0 ? now_ns_ : steady_now_ns(); }
  double speed() const override { return 1.0; }
  bool stop_requested() const override { return stop_requested_; }
  void defer_until(std::int64_t t_ns) override { deferred_until_ = t_ns; }
  void set_live(bool live) override { live_ = live; }
  int producers(int port) const override {
    auto it = producers_.find(port);
    return it == producers_.end() ? -1 : it->second;
  }
  std::atomic<std::int64_t>& counter(std::string_view name) override {
    auto& slot = counters_[std::string(name)];
    if (!slot) slot = std::make_unique<std::atomic<std::int64_t>>(0);
    return *slot;
  }

  /// Test controls.
  void set_now_ns(std::int64_t t) { now_ns_ = t; }
  void set_stop_requested(bool v) { stop_requested_ = v; }
  void set_replica(int r) { replica_ = r; }
  void set_producers(const std::string& port, int n) { producers_[spec_.input_index(port)] = n; }
  std::int64_t deferred_until() const { return deferred_until_; }
  bool live() const { return live_; }

 private:
  static std::unique_ptr<Stage> make(const Registry& registry, const std::string& type) {
    const StageType* t = registry.find(type);
    if (t == nullptr) throw std::invalid_argument("unknown stage type " + type);
    return t->make();
  }

  Status step(Inputs& in, const EnvelopeHeader& base) {
    Outputs out;
    out.reset(base);
    deferred_until_ = 0;
    Status s = stage_->process(in, out, *this);
    if (s.ok()) {
      for (auto& item : out.items()) {
        outputs_[spec_.outputs().at(static_cast<std::size_t>(item.port)).name].push_back(item.envelope);
      }
    }
    return s;
  }

  std::string id_;
  std::string producer_;
  StageSpec spec_;
  std::map<std::string, std::vector<Envelope>> outputs_;
  std::map<std::string, std::unique_ptr<std::atomic<std::int64_t>>> counters_;
  std::map<int, int> producers_;
  std::int64_t now_ns_ = 0;
  std::int64_t deferred_until_ = 0;
  bool stop_requested_ = false;
  bool live_ = false;
  int replica_ = 0;
  // Last, so that it is destroyed first: a stage may use its counters (or
  // run threads that do) until it is gone.
  std::unique_ptr<Stage> stage_;
};

}  // namespace swarmflow::testing
