// The replica core on a simulated clock: credits and releases, overflow,
// retries with backoff and dead letters, join deadlines, end of stream and
// paced sources, with every effect recorded and no actors or sleeps.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <stdexcept>

#include <swarmflow/registry.hpp>
#include <swarmflow/schema/blob_generated.h>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "runtime/replica_core.hpp"

namespace swarmflow::runtime {
namespace {

constexpr std::int64_t kMs = 1'000'000;

/// The simulated clock every core and test stage here reads.
std::int64_t g_now = 0;

/// Forwards its input; a step takes `service_ms` of simulated time.
class Pass final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
    s.param(service_ms_, "service_ms", "simulated time per step", 0, {0.0, 1e6});
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    g_now += service_ms_ * kMs;
    if (const Envelope* e = in.envelope(in_)) out.forward(out_, *e);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::int64_t service_ms_ = 0;
};

/// Throws on every envelope whose sequence number is `poison`.
class Flaky final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
    s.param(poison_, "poison", "sequence number that always fails", 0, {0.0, {}});
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    const Envelope* e = in.envelope(in_);
    if (e->header().seq == static_cast<std::uint64_t>(poison_)) throw std::runtime_error("poisoned");
    out.forward(out_, *e);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::int64_t poison_ = 0;
};

/// Joins `a` and `b` and passes `a` on; counts partial sets.
class Pair final : public Stage {
 public:
  void setup(StageSpec& s) override {
    a_ = s.input<schema::Blob>("a");
    b_ = s.input<schema::Blob>("b");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    if (const Envelope* a = in.envelope(a_)) out.forward(out_, *a);
    return {};
  }

 private:
  InputPort<schema::Blob> a_;
  InputPort<schema::Blob> b_;
  OutputPort<schema::Blob> out_;
};

/// A source that cannot produce: after each (re)start one step returns ok
/// with nothing, the next fails.
class BrokenSource final : public Stage {
 public:
  void setup(StageSpec& s) override { out_ = s.output<schema::Blob>("out"); }
  Status start(StageContext&) override {
    calls_ = 0;
    return {};
  }
  Status process(Inputs&, Outputs&, StageContext&) override {
    if (calls_++ == 0) return {};
    return Status::error("cannot decode");
  }

 private:
  OutputPort<schema::Blob> out_;
  int calls_ = 0;
};

/// Keeps what it is given and passes it on, `per_step` at a time, in steps
/// of its own `step_ms` apart (a batch it works through between inputs).
class Holder final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
    s.param(step_ms_, "step_ms", "simulated time between its own steps", 5, {0.0, 1e6});
    s.param(per_step_, "per_step", "envelopes passed on per step", 1, {1.0, 1e6});
  }
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override {
    if (const Envelope* e = in.envelope(in_)) {
      held_.push_back(*e);
      ++inputs_;
    } else {
      ++empty_steps_;
      for (std::int64_t k = 0; k < per_step_ && !held_.empty(); ++k) {
        out.forward(out_, held_.front());
        held_.erase(held_.begin());
      }
    }
    if (!held_.empty()) ctx.defer_until(ctx.now_ns() + step_ms_ * kMs);
    return {};
  }
  static inline int inputs_ = 0;
  static inline int empty_steps_ = 0;

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::int64_t step_ms_ = 5;
  std::int64_t per_step_ = 1;
  std::vector<Envelope> held_;
};

/// Asks to be called back at `seq` ms from now for each input (0: cancels).
class Asker final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs&, StageContext& ctx) override {
    if (const Envelope* e = in.envelope(in_)) {
      const auto ms = static_cast<std::int64_t>(e->header().seq);
      ctx.defer_until(ms == 0 ? 0 : ctx.now_ns() + ms * kMs);
    }
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
};

/// Holds each input and emits it `wait_ms` later, when called back.
class Later final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
    s.param(wait_ms_, "wait_ms", "how long each input is held", 10, {0.0, 1e6});
  }
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override {
    if (const Envelope* e = in.envelope(in_)) held_.push_back({ctx.now_ns() + wait_ms_ * kMs, *e});
    while (!held_.empty() && held_.front().first <= ctx.now_ns()) {
      out.forward(out_, held_.front().second);
      held_.erase(held_.begin());
    }
    if (!held_.empty()) ctx.defer_until(held_.front().first);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::int64_t wait_ms_ = 10;
  std::vector<std::pair<std::int64_t, Envelope>> held_;
};

/// Forwards its input after `service_ms / speed` of simulated time: it
/// applies its unit's speed itself, as `sim.*` stages do.
class SpeedAware final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
    s.param(service_ms_, "service_ms", "simulated time per step at speed 1", 0, {0.0, 1e6});
  }
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override {
    g_now += static_cast<std::int64_t>(static_cast<double>(service_ms_ * kMs) / ctx.speed());
    if (const Envelope* e = in.envelope(in_)) out.forward(out_, *e);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::int64_t service_ms_ = 0;
};

/// Emits, for each input, a Blob whose stream is its producer's replica.
class WhoSent final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    EXPECT_EQ(in.producer_stage(), "src");
    EnvelopeHeader h = out.base_header();
    h.stream = static_cast<std::uint64_t>(in.producer_replica());
    out.forward(out_, in.envelope()->with_header(h));
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
};

struct Recorder final : ReplicaEffects {
  struct Sent {
    int node, replica, edge;
    Envelope envelope;
  };
  struct Ack {
    int node, replica, edge, credits, released;
  };
  struct Timer {
    int kind;
    std::int64_t at_ns;
  };
  std::vector<Sent> sent;
  std::vector<Ack> acks;
  std::vector<std::pair<int, int>> eos;  // (replica, edge)
  std::vector<Timer> timers;
  std::vector<Timer> flushes;
  bool done = false;
  std::string failure;
  std::vector<std::string> logs;

  void deliver(int node, int replica, int edge, Envelope&& e) override {
    sent.push_back(Sent{node, replica, edge, std::move(e)});
  }
  void ack(int node, int replica, int edge, int credits, int released, double) override {
    acks.push_back(Ack{node, replica, edge, credits, released});
  }
  void end_of_stream(int, int replica, int edge) override { eos.emplace_back(replica, edge); }
  void schedule(int kind, std::int64_t at_ns) override {
    // Idle flushes are recorded apart: tests about other timers read `timers`.
    (kind == ReplicaCore::kFlush ? flushes : timers).push_back(Timer{kind, at_ns});
  }
  void finished() override { done = true; }
  void failed(const std::string& message) override { failure = message; }
  void log(const std::string& line) override { logs.push_back(line); }
  void snapshot(ReplicaSnapshot&&) override {}
  std::vector<std::int64_t> holds;
  /// A held thread: the simulated clock moves on by it.
  void hold(std::int64_t ns) override {
    holds.push_back(ns);
    g_now += ns;
  }

  int credits_returned() const {
    int n = 0;
    for (const auto& a : acks) n += a.credits;
    return n;
  }
  int released() const {
    int n = 0;
    for (const auto& a : acks) n += a.released;
    return n;
  }
};

/// A loaded pipeline with the statistics one replica of each stage needs.
struct Harness {
  Registry registry;
  std::optional<config::PipelineSpec> spec;
  graph::Graph graph;
  std::vector<std::unique_ptr<ReplicaStats>> stats;
  std::vector<std::unique_ptr<EdgeSideStats>> in_stats;
  std::vector<std::unique_ptr<EdgeSideStats>> out_stats;
  std::vector<std::vector<Runtime::Subscriber>> subscribers;
  std::atomic<bool> stop{false};
  Recorder effects;
  std::unique_ptr<ReplicaCore> core;

  explicit Harness(const std::string& yaml, const std::string& stage, bool hop_figures = true,
                   const std::atomic<double>* speed = nullptr) {
    g_now = 1000 * kMs;
    register_builtin_stages(registry);
    EXPECT_TRUE(registry.add<Pass>("test.pass", "forwards").ok());
    EXPECT_TRUE(registry.add<Flaky>("test.flaky", "fails on one envelope").ok());
    EXPECT_TRUE(registry.add<Pair>("test.pair", "joins a and b").ok());
    EXPECT_TRUE(registry.add<Holder>("test.holder", "passes on what it holds in steps of its own").ok());
    EXPECT_TRUE(registry.add<Asker>("test.asker", "asks to be called back").ok());
    EXPECT_TRUE(registry.add<Later>("test.later", "emits each input later").ok());
    EXPECT_TRUE(registry.add<SpeedAware>("test.speed_aware", "applies its unit's speed itself").ok());
    EXPECT_TRUE(registry.add<WhoSent>("test.who_sent", "tells who sent each input").ok());
    EXPECT_TRUE(registry.add<BrokenSource>("test.broken_source", "cannot produce").ok());
    std::vector<Diagnostic> diags;
    spec = config::load_pipeline_string(yaml, "core.yaml", registry, diags);
    EXPECT_TRUE(spec.has_value()) << format_diagnostics(diags);
    if (!spec) return;
    graph = graph::Graph::build(*spec, registry);
    const int node = graph.find(stage);
    EXPECT_GE(node, 0);
    ReplicaSetup s;
    s.graph = &graph;
    s.registry = &registry;
    s.node = node;
    s.replica = 0;
    stats.push_back(std::make_unique<ReplicaStats>());
    s.stats = stats.back().get();
    s.in_stats.assign(graph.edges.size(), nullptr);
    s.out_stats.assign(graph.edges.size(), nullptr);
    for (const auto& e : graph.edges) {
      in_stats.push_back(std::make_unique<EdgeSideStats>());
      out_stats.push_back(std::make_unique<EdgeSideStats>());
      s.in_stats[static_cast<std::size_t>(e.id)] = in_stats.back().get();
      s.out_stats[static_cast<std::size_t>(e.id)] = out_stats.back().get();
    }
    subscribers.resize(graph.nodes[static_cast<std::size_t>(node)].spec.outputs().size());
    s.subscribers = &subscribers;
    s.stop_requested = &stop;
    s.clock = [] { return g_now; };
    s.speed_now = speed;
    s.hop_figures = hop_figures;
    core = std::make_unique<ReplicaCore>(std::move(s), effects);
  }

  int edge(const std::string& from, const std::string& to) const {
    for (const auto& e : graph.edges) {
      if (graph.from_name(e) == from && graph.to_name(e) == to) return e.id;
    }
    return -1;
  }
};

Envelope blob(std::uint64_t seq, std::uint64_t stream = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(schema::CreateBlob(fbb, stream, seq), schema::BlobIdentifier());
  EnvelopeHeader h;
  h.stream = stream;
  h.seq = seq;
  h.capture_ns = g_now;
  return Envelope(h, Payload::from_builder(fbb));
}

const std::string kChain =
    "pipeline: core\nstages:\n"
    "  - {id: src, type: sim.source}\n"
    "  - {id: mid, type: test.pass, inputs: {in: src/out}, queue: {capacity: 4}}\n"
    "  - {id: sink, type: sim.sink, inputs: {in: mid/out}, queue: {capacity: 2, overflow: OVERFLOW}}\n";

std::string chain(const std::string& overflow) {
  std::string s = kChain;
  s.replace(s.find("OVERFLOW"), 8, overflow);
  return s;
}

TEST(ReplicaCore, CreditsReturnInBatchesAndReleasesWaitUntilTheOutputsAreAcceptedDownstream) {
  Harness h(chain("drop_oldest"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  h.core->deliver(in, 0, blob(0));
  EXPECT_EQ(h.effects.sent.size(), 1U);
  EXPECT_TRUE(h.effects.acks.empty());  // threshold is half the capacity: 2
  h.core->deliver(in, 0, blob(1));
  ASSERT_EQ(h.effects.acks.size(), 1U);
  EXPECT_EQ(h.effects.acks[0].credits, 2);
  // Both outputs were sent, but the sink has not processed them: if its unit
  // died now they would have to be made again, so the inputs stay held.
  EXPECT_EQ(h.effects.acks[0].released, 0);
  EXPECT_EQ(h.core->unreleased(), 2U);
  // The sink has no credit left: the next two outputs wait in the router.
  h.core->deliver(in, 0, blob(2));
  h.core->deliver(in, 0, blob(3));
  EXPECT_EQ(h.effects.sent.size(), 2U);
  ASSERT_EQ(h.effects.acks.size(), 2U);
  EXPECT_EQ(h.effects.acks[1].credits, 2);
  EXPECT_EQ(h.effects.acks[1].released, 0);
  EXPECT_EQ(h.core->unreleased(), 4U);
  // The sink credits the first two: the waiting outputs go, and the first
  // two inputs are released on their own (a batch), without more credits.
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_EQ(h.effects.sent.size(), 4U);
  ASSERT_EQ(h.effects.acks.size(), 3U);
  EXPECT_EQ(h.effects.acks[2].credits, 0);
  EXPECT_EQ(h.effects.acks[2].released, 2);
  EXPECT_EQ(h.core->unreleased(), 2U);
  // The last two are credited: released too.
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_EQ(h.effects.released(), 4);
  EXPECT_EQ(h.core->unreleased(), 0U);
  for (std::size_t i = 0; i < h.effects.sent.size(); ++i) EXPECT_EQ(h.effects.sent[i].envelope.header().seq, i);
}

TEST(ReplicaCore, ASlowedUnitTakesOneOverItsSpeedAsLongOverEveryStep) {
  std::atomic<double> speed{0.25};
  const std::string yaml =
      "pipeline: core\nstages:\n"
      "  - {id: src, type: sim.source}\n"
      "  - {id: mid, type: test.pass, params: {service_ms: 4}, inputs: {in: src/out}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n";
  Harness h(yaml, "mid", true, &speed);
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  const std::int64_t t0 = g_now;
  h.core->deliver(in, 0, blob(0));
  // 4 ms of work at a quarter of the speed: 12 ms more held, counted busy.
  ASSERT_EQ(h.effects.holds.size(), 1U);
  EXPECT_EQ(h.effects.holds[0], 12 * kMs);
  EXPECT_EQ(g_now - t0, 16 * kMs);
  EXPECT_EQ(h.stats[0]->busy_ns.load(), 16 * kMs);
  // At nominal speed or faster, nothing is held (work cannot be sped up).
  speed = 1.0;
  h.core->deliver(in, 0, blob(1));
  speed = 2.0;
  h.core->deliver(in, 0, blob(2));
  EXPECT_EQ(h.effects.holds.size(), 1U);
  EXPECT_EQ(h.stats[0]->busy_ns.load(), 24 * kMs);
  // The speed is read at every step: a unit slowed again holds again.
  speed = 0.5;
  h.core->deliver(in, 0, blob(3));
  ASSERT_EQ(h.effects.holds.size(), 2U);
  EXPECT_EQ(h.effects.holds[1], 4 * kMs);
}

TEST(ReplicaCore, AStageThatReadsItsUnitsSpeedAppliesItItself) {
  std::atomic<double> speed{0.25};
  const std::string yaml =
      "pipeline: core\nstages:\n"
      "  - {id: src, type: sim.source}\n"
      "  - {id: mid, type: test.speed_aware, params: {service_ms: 4}, inputs: {in: src/out}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n";
  Harness h(yaml, "mid", true, &speed);
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  const std::int64_t t0 = g_now;
  h.core->deliver(in, 0, blob(0));
  EXPECT_TRUE(h.effects.holds.empty());
  EXPECT_EQ(g_now - t0, 16 * kMs);  // once, not twice
}

/// `e` as its producer sent it at `sent_ns`.
Envelope sent_at(Envelope e, std::int64_t sent_ns) {
  EnvelopeHeader h = e.header();
  h.sent_ns = sent_ns;
  return std::move(e).with_header(h);
}

TEST(ReplicaCore, OneEnvelopeInSixteenLeavesWithItsSendTimeTakenAfterItsWaitForCredit) {
  Harness h(chain("block"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  // Every input carries its producer's send time: no output inherits it.
  const std::int64_t first_step_end = g_now;
  for (std::uint64_t seq = 0; seq < 14; ++seq) {
    h.core->deliver(in, 0, sent_at(blob(seq), 7));
    h.core->ack(out, 0, 1, 1, 0);
    g_now += kMs;
  }
  h.core->deliver(in, 0, sent_at(blob(14), 7));
  h.core->deliver(in, 0, sent_at(blob(15), 7));  // the sink's two credits are spent
  h.core->deliver(in, 0, sent_at(blob(16), 7));  // the 17th waits for credit
  ASSERT_EQ(h.effects.sent.size(), 16U);
  g_now += 5 * kMs;
  const std::int64_t credited = g_now;
  h.core->ack(out, 0, 1, 1, 0);
  ASSERT_EQ(h.effects.sent.size(), 17U);
  for (std::size_t i = 0; i < h.effects.sent.size(); ++i) {
    const EnvelopeHeader& sent = h.effects.sent[i].envelope.header();
    ASSERT_EQ(sent.seq, i);
    if (i == 0) {
      EXPECT_EQ(sent.sent_ns, first_step_end) << "sent as its step ended";
    } else if (i == kHopSampleEvery) {
      EXPECT_EQ(sent.sent_ns, credited) << "sent when the credit came, not when its step ended";
    } else {
      EXPECT_EQ(sent.sent_ns, 0) << i;
    }
  }

  // Without hop figures nothing is stamped, and nothing inherited goes on.
  Harness off(chain("block"), "mid", false);
  off.core->start();
  off.core->deliver(off.edge("src/out", "mid/in"), 0, sent_at(blob(0), 7));
  ASSERT_EQ(off.effects.sent.size(), 1U);
  EXPECT_EQ(off.effects.sent[0].envelope.header().sent_ns, 0);
}

TEST(ReplicaCore, AnIdleReplicaReturnsWhatItOwesAfterAShortWhile) {
  Harness h(chain("block"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  h.core->deliver(in, 0, blob(0));  // below the ack threshold
  EXPECT_TRUE(h.effects.acks.empty());
  ASSERT_EQ(h.effects.flushes.size(), 1U);
  EXPECT_EQ(h.effects.flushes[0].at_ns, g_now + ReplicaCore::kIdleFlushNs);
  h.core->tick(ReplicaCore::kFlush);
  ASSERT_EQ(h.effects.acks.size(), 1U);
  EXPECT_EQ(h.effects.acks[0].credits, 1);
  EXPECT_EQ(h.effects.acks[0].released, 0);  // its output is not credited yet
  h.core->ack(out, 0, 1, 1, 0);
  ASSERT_EQ(h.effects.flushes.size(), 2U);  // a release is owed now
  h.core->tick(ReplicaCore::kFlush);
  ASSERT_EQ(h.effects.acks.size(), 2U);
  EXPECT_EQ(h.effects.acks[1].released, 1);
}

TEST(ReplicaCore, AnIdleReplicaWhoseStepsAreSlowReturnsWhatItOwesAtOnce) {
  // Steps of 2 ms: what feeds it comes slower still once it runs dry, so
  // it does not wait the idle flush's millisecond to gather more acks.
  std::string yaml = chain("block");
  yaml.replace(yaml.find("type: test.pass,"), 16, "type: test.pass, params: {service_ms: 2},");
  Harness h(yaml, "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  h.core->deliver(in, 0, blob(0));  // below the ack threshold
  ASSERT_EQ(h.effects.acks.size(), 1U) << "returned with the step's end, not after a timer";
  EXPECT_EQ(h.effects.acks[0].credits, 1);
  EXPECT_EQ(h.effects.acks[0].released, 0);  // its output is not credited yet
  EXPECT_TRUE(h.effects.flushes.empty());
  h.core->ack(out, 0, 1, 1, 0);
  ASSERT_EQ(h.effects.acks.size(), 2U) << "the release follows the sink's ack at once";
  EXPECT_EQ(h.effects.acks[1].released, 1);
  EXPECT_TRUE(h.effects.flushes.empty());
  // Nothing owed, nothing more sent.
  h.core->deliver(in, 0, blob(1));
  h.core->deliver(in, 0, blob(2));
  EXPECT_EQ(h.effects.credits_returned(), 3);
}

TEST(ReplicaCore, AnIdleReplicaFedFurtherApartThanTheWaitReturnsWhatItOwesAtOnce) {
  // Fast steps, but its inputs come 5 ms apart (one frame's results at a
  // time): the wait would gather nothing more, so after the second
  // delivery it returns what it owes with the step's end, no timer.
  Harness h(chain("block"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  h.core->deliver(in, 0, blob(0));
  ASSERT_EQ(h.effects.flushes.size(), 1U) << "no gap known yet: it waits";
  h.core->tick(ReplicaCore::kFlush);
  ASSERT_EQ(h.effects.acks.size(), 1U);
  h.core->ack(out, 0, 1, 1, 0);
  ASSERT_EQ(h.effects.flushes.size(), 2U);
  h.core->tick(ReplicaCore::kFlush);
  ASSERT_EQ(h.effects.acks.size(), 2U);
  g_now += 5 * kMs;
  h.core->deliver(in, 0, blob(1));
  ASSERT_EQ(h.effects.acks.size(), 3U) << "returned with the step's end, not after a timer";
  EXPECT_EQ(h.effects.acks[2].credits, 1);
  EXPECT_EQ(h.effects.flushes.size(), 2U);
  h.core->ack(out, 0, 1, 1, 0);
  ASSERT_EQ(h.effects.acks.size(), 4U) << "the release follows the sink's ack at once";
  EXPECT_EQ(h.effects.acks[3].released, 1);
  EXPECT_EQ(h.effects.flushes.size(), 2U);

  // Fed closer together than the wait, it gathers again.
  g_now += ReplicaCore::kIdleFlushNs / 4;
  h.core->deliver(in, 0, blob(2));
  EXPECT_EQ(h.effects.acks.size(), 4U);
  EXPECT_EQ(h.effects.flushes.size(), 3U);
}

TEST(ReplicaCore, DropOldestDropsAtTheProducerAndReleasesWhatItDropped) {
  Harness h(chain("drop_oldest"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  for (std::uint64_t seq = 0; seq < 8; ++seq) h.core->deliver(in, 0, blob(seq));
  // 2 sent against the sink's credits, 2 wait (its capacity), 4 dropped oldest first.
  EXPECT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.core->router(out)->waiting(), 2U);
  EXPECT_EQ(h.out_stats[static_cast<std::size_t>(out)]->dropped.load(), 4U);
  EXPECT_EQ(h.effects.credits_returned(), 8);
  h.core->ack(out, 0, 2, 2, 0);
  ASSERT_EQ(h.effects.sent.size(), 4U);
  EXPECT_EQ(h.effects.sent[2].envelope.header().seq, 6U);  // the freshest two got through
  EXPECT_EQ(h.effects.sent[3].envelope.header().seq, 7U);
  EXPECT_EQ(h.effects.released(), 6);  // the dropped ones too; 6 and 7 wait for the sink
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_EQ(h.effects.released(), 8);
}

TEST(ReplicaCore, BlockStopsTakingInputUntilTheOutputLeaves) {
  Harness h(chain("block"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  std::vector<Envelope> batch;
  for (std::uint64_t seq = 0; seq < 4; ++seq) batch.push_back(blob(seq));
  h.core->deliver(in, 0, batch);
  // Two sent, the third waits, the fourth stays queued, unprocessed.
  EXPECT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.core->queued(), 1U);
  EXPECT_EQ(h.stats[0]->processed.load(), 3U);
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_EQ(h.effects.sent.size(), 4U);
  EXPECT_EQ(h.core->queued(), 0U);
  EXPECT_EQ(h.out_stats[static_cast<std::size_t>(out)]->dropped.load(), 0U);
}

std::string holder_chain(const std::string& params) {
  return "pipeline: core\nstages:\n"
         "  - {id: src, type: sim.source}\n"
         "  - {id: mid, type: test.holder, inputs: {in: src/out}, queue: {capacity: 8}, params: " + params + "}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: mid/out}, queue: {capacity: 2, overflow: block}}\n";
}

int wakes(const Recorder& r) {
  int n = 0;
  for (const auto& t : r.timers) n += t.kind == ReplicaCore::kWake ? 1 : 0;
  return n;
}

TEST(ReplicaCore, AStageWithWorkInHandIsCalledAgainWithoutInputWhenItAsks) {
  Holder::inputs_ = Holder::empty_steps_ = 0;
  Harness h(holder_chain("{step_ms: 5, per_step: 2}"), "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  std::vector<Envelope> batch;
  for (std::uint64_t seq = 0; seq < 3; ++seq) batch.push_back(blob(seq));
  h.core->deliver(in, 0, batch);
  // All three inputs were taken before its own step, which is asked for once.
  EXPECT_EQ(Holder::inputs_, 3);
  EXPECT_TRUE(h.effects.sent.empty());
  ASSERT_EQ(wakes(h.effects), 1);
  EXPECT_EQ(h.effects.timers.back().at_ns, g_now + 5 * kMs);
  EXPECT_EQ(h.core->wake_at(), g_now + 5 * kMs);
  // Early: nothing happens.
  h.core->tick(ReplicaCore::kWake);
  EXPECT_EQ(Holder::empty_steps_, 0);
  g_now += 5 * kMs;
  h.core->tick(ReplicaCore::kWake);
  EXPECT_EQ(Holder::empty_steps_, 1);
  ASSERT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.effects.sent[0].envelope.header().seq, 0U);
  EXPECT_EQ(h.effects.sent[1].envelope.header().seq, 1U);
  EXPECT_EQ(h.core->wake_at(), g_now + 5 * kMs);
}

TEST(ReplicaCore, AStageWithWorkInHandFinishesItBeforeItsEndOfStreamPassesOn) {
  Holder::inputs_ = Holder::empty_steps_ = 0;
  Harness h(holder_chain("{step_ms: 1, per_step: 1}"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  for (std::uint64_t seq = 0; seq < 4; ++seq) h.core->deliver(in, 0, blob(seq));
  h.core->end_of_stream(in, 0);
  EXPECT_FALSE(h.core->has_finished());
  EXPECT_TRUE(h.effects.eos.empty());
  for (int k = 0; k < 3; ++k) {
    g_now += kMs;
    h.core->tick(ReplicaCore::kWake);
  }
  // The sink's queue holds two: the third output waits for credit, and the
  // fourth step is not made while it does, even when it is due.
  EXPECT_EQ(Holder::empty_steps_, 3);
  EXPECT_EQ(h.effects.sent.size(), 2U);
  g_now += kMs;
  h.core->tick(ReplicaCore::kWake);
  EXPECT_EQ(Holder::empty_steps_, 3);
  EXPECT_FALSE(h.core->has_finished());
  h.core->ack(out, 0, 2, 2, 0);  // the credit lets the third go and calls it at once
  EXPECT_EQ(Holder::empty_steps_, 4);
  ASSERT_EQ(h.effects.sent.size(), 4U);
  EXPECT_EQ(h.effects.sent[3].envelope.header().seq, 3U);
  EXPECT_TRUE(h.core->has_finished());
  ASSERT_EQ(h.effects.eos.size(), 1U);
  EXPECT_EQ(h.effects.eos[0], std::make_pair(0, out));
}

TEST(ReplicaCore, TheLastCallBackAStepAsksForStandsAndZeroCancelsIt) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.asker, inputs: {in: src/out}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n",
            "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  h.core->deliver(in, 0, blob(30));
  EXPECT_EQ(h.core->wake_at(), g_now + 30 * kMs);
  h.core->deliver(in, 0, blob(50));  // later: it stands
  EXPECT_EQ(h.core->wake_at(), g_now + 50 * kMs);
  h.core->deliver(in, 0, blob(0));  // cancels
  EXPECT_EQ(h.core->wake_at(), 0);
  h.core->end_of_stream(in, 0);
  EXPECT_TRUE(h.core->has_finished());  // nothing in hand
}

TEST(ReplicaCore, AFailingEnvelopeIsRetriedWithDoublingBackoffThenDeadLettered) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.flaky, inputs: {in: src/out}, params: {poison: 0}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n",
            "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  const std::int64_t t0 = g_now;
  h.core->deliver(in, 0, blob(0));
  h.core->deliver(in, 0, blob(1));
  ASSERT_EQ(h.effects.timers.size(), 1U);
  EXPECT_EQ(h.effects.timers[0].kind, ReplicaCore::kResume);
  EXPECT_EQ(h.effects.timers[0].at_ns, t0 + 1 * kMs);
  EXPECT_TRUE(h.effects.sent.empty());  // seq 1 waits behind the retried one
  g_now = h.effects.timers.back().at_ns;
  h.core->tick(ReplicaCore::kResume);
  ASSERT_EQ(h.effects.timers.size(), 2U);
  EXPECT_EQ(h.effects.timers[1].at_ns, g_now + 2 * kMs);
  g_now = h.effects.timers.back().at_ns;
  h.core->tick(ReplicaCore::kResume);
  // Third failure: a dead letter; the stage is restarted once more and the
  // next envelope waits out one more backoff.
  EXPECT_EQ(h.stats[0]->dead_letters.load(), 1U);
  EXPECT_EQ(h.stats[0]->errors.load(), 3U);
  EXPECT_EQ(h.stats[0]->restarts.load(), 3U);
  ASSERT_EQ(h.effects.timers.size(), 3U);
  g_now = h.effects.timers.back().at_ns;
  h.core->tick(ReplicaCore::kResume);
  ASSERT_EQ(h.effects.sent.size(), 1U);
  EXPECT_EQ(h.effects.sent[0].envelope.header().seq, 1U);
  h.core->end_of_stream(in, 0);
  EXPECT_TRUE(h.core->has_finished());
  h.core->ack(h.edge("mid/out", "sink/in"), 0, 1, 1, 0);  // the sink releases what it got
  EXPECT_TRUE(h.effects.done);
  EXPECT_EQ(h.effects.credits_returned(), 2);  // the dead letter's credit came back too
  EXPECT_EQ(h.effects.released(), 2);
  EXPECT_TRUE(h.effects.failure.empty());
}

TEST(ReplicaCore, AnIncompleteJoinExpiresAtItsDeadlineOnTheSimulatedClock) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: a, type: sim.source}\n"
            "  - {id: b, type: sim.source}\n"
            "  - {id: pair, type: test.pair, inputs: {a: a/out, b: b/out}, join: {key: seq, timeout_ms: 50}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: pair/out}}\n",
            "pair");
  const int ea = h.edge("a/out", "pair/a");
  const int eb = h.edge("b/out", "pair/b");
  h.core->start();
  const std::int64_t t0 = g_now;
  h.core->deliver(ea, 0, blob(0));
  h.core->deliver(ea, 0, blob(1));
  h.core->deliver(eb, 0, blob(1));  // completes seq 1
  ASSERT_EQ(h.effects.sent.size(), 1U);
  EXPECT_EQ(h.effects.sent[0].envelope.header().seq, 1U);
  // seq 0 holds the releases of everything after it.
  EXPECT_EQ(h.effects.released(), 0);
  ASSERT_FALSE(h.effects.timers.empty());
  EXPECT_EQ(h.effects.timers[0].kind, ReplicaCore::kJoin);
  g_now = t0 + 49 * kMs;
  h.core->tick(ReplicaCore::kJoin);
  EXPECT_EQ(h.effects.sent.size(), 1U);  // not due yet
  g_now = t0 + 50 * kMs;
  h.core->tick(ReplicaCore::kJoin);
  ASSERT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.effects.sent[1].envelope.header().seq, 0U);
  EXPECT_EQ(h.stats[0]->counter("join_partial").load(), 1);
  EXPECT_EQ(h.stats[0]->counter("join_complete").load(), 1);
  h.core->end_of_stream(ea, 0);
  h.core->end_of_stream(eb, 0);
  EXPECT_TRUE(h.core->has_finished());
  h.core->ack(h.edge("pair/out", "sink/in"), 0, 2, 2, 0);
  EXPECT_TRUE(h.effects.done);
  EXPECT_EQ(h.effects.released(), 3);
}

TEST(ReplicaCore, EndOfStreamWaitsForWaitingOutputsThenPassesTheMarkOn) {
  Harness h(chain("block"), "mid");
  const int in = h.edge("src/out", "mid/in");
  const int out = h.edge("mid/out", "sink/in");
  h.core->start();
  for (std::uint64_t seq = 0; seq < 3; ++seq) h.core->deliver(in, 0, blob(seq));
  h.core->end_of_stream(in, 0);
  EXPECT_FALSE(h.effects.done);
  EXPECT_TRUE(h.effects.eos.empty());
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_TRUE(h.core->has_finished());
  ASSERT_EQ(h.effects.eos.size(), 1U);
  EXPECT_EQ(h.effects.eos[0], std::make_pair(0, out));
  // It stays until the sink has released the last one too.
  EXPECT_FALSE(h.effects.done);
  h.core->ack(out, 0, 1, 1, 0);
  EXPECT_TRUE(h.effects.done);
  EXPECT_EQ(h.effects.credits_returned(), 3);
  EXPECT_EQ(h.effects.released(), 3);
}

TEST(ReplicaCore, APacedSourceAsksToBeCalledWhenItsNextEnvelopeIsDue) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source, params: {count: 3, rate_hz: 100}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: src/out}}\n",
            "src");
  const std::int64_t t0 = g_now;
  h.core->start();
  ASSERT_EQ(h.effects.sent.size(), 1U);
  ASSERT_EQ(h.effects.timers.size(), 1U);
  EXPECT_EQ(h.effects.timers[0].kind, ReplicaCore::kPull);
  EXPECT_EQ(h.effects.timers[0].at_ns, t0 + 10 * kMs);
  g_now = t0 + 10 * kMs;
  h.core->tick(ReplicaCore::kPull);
  EXPECT_EQ(h.effects.sent.size(), 2U);
  g_now = t0 + 20 * kMs;
  h.core->tick(ReplicaCore::kPull);
  EXPECT_EQ(h.effects.sent.size(), 3U);
  g_now = t0 + 30 * kMs;
  h.core->tick(ReplicaCore::kPull);
  EXPECT_TRUE(h.core->has_finished());
  EXPECT_EQ(h.effects.eos.size(), 1U);
  h.core->ack(h.edge("src/out", "sink/in"), 0, 3, 3, 0);
  EXPECT_TRUE(h.effects.done);
}

/// Runs the timers the core asked for, in time order, until it asks for none.
void run_timers(Harness& h, int limit) {
  for (int i = 0; i < limit && !h.effects.timers.empty() && !h.effects.done; ++i) {
    const Recorder::Timer next = h.effects.timers.front();
    h.effects.timers.erase(h.effects.timers.begin());
    g_now = std::max(g_now, next.at_ns);
    h.core->tick(next.kind);
  }
}

TEST(ReplicaCore, ASourceThatCannotProduceFailsTheRunEvenIfEachRestartFirstReturnsOk) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: test.broken_source}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: src/out}}\n",
            "src");
  h.core->start();
  run_timers(h, 100);
  EXPECT_NE(h.effects.failure.find("source 'src' failed 3 times in a row: cannot decode"), std::string::npos)
      << h.effects.failure;
  EXPECT_EQ(h.stats[0]->errors.load(), 3U);
  EXPECT_EQ(h.stats[0]->restarts.load(), 2U);
  EXPECT_TRUE(h.effects.done);  // ends its stream so the rest of the run drains
}

TEST(ReplicaCore, AStageThatKeepsFailingFailsTheRunAfterFiveDeadLettersInARow) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.flaky, inputs: {in: src/out}, params: {poison: 7}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n",
            "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  // Four poisoned envelopes, then a good one: the streak starts again.
  for (int i = 0; i < 4; ++i) h.core->deliver(in, 0, blob(7));
  h.core->deliver(in, 0, blob(1));
  run_timers(h, 100);
  EXPECT_EQ(h.stats[0]->dead_letters.load(), 4U);
  EXPECT_TRUE(h.effects.failure.empty()) << h.effects.failure;
  ASSERT_EQ(h.effects.sent.size(), 1U);
  for (int i = 0; i < 5; ++i) h.core->deliver(in, 0, blob(7));
  run_timers(h, 100);
  EXPECT_EQ(h.stats[0]->dead_letters.load(), 9U);
  EXPECT_NE(h.effects.failure.find("stage 'mid' keeps failing: 5 envelopes in a row"), std::string::npos)
      << h.effects.failure;
  EXPECT_NE(h.effects.failure.find("poisoned"), std::string::npos) << h.effects.failure;
  // From now on what arrives is counted, not processed.
  h.core->deliver(in, 0, blob(2));
  EXPECT_EQ(h.stats[0]->dead_letters.load(), 10U);
  EXPECT_EQ(h.effects.sent.size(), 1U);
}

const std::string kCycle =
    "pipeline: core\nstages:\n"
    "  - {id: src, type: sim.source}\n"
    "  - {id: a, type: test.pass, inputs: {in: [src/out, b/out]}, feedback: true, queue: {capacity: 4}}\n"
    "  - {id: b, type: test.pass, inputs: {in: a/out}}\n"
    "  - {id: sink, type: sim.sink, inputs: {in: b/out}}\n";

TEST(ReplicaCore, EndOfStreamDoesNotWaitOnAFeedbackEdge) {
  Harness h(kCycle, "a");
  const int in = h.edge("src/out", "a/in");
  const int back = h.edge("b/out", "a/in");
  const int out = h.edge("a/out", "b/in");
  ASSERT_TRUE(h.graph.edges[static_cast<std::size_t>(back)].feedback);
  ASSERT_FALSE(h.graph.edges[static_cast<std::size_t>(in)].feedback);
  h.core->start();
  h.core->deliver(in, 0, blob(0));
  h.core->deliver(back, 0, blob(0));  // once round the cycle: processed
  EXPECT_EQ(h.effects.sent.size(), 2U);
  // The source ends; b, the feedback producer, has not (it cannot before a does).
  h.core->end_of_stream(in, 0);
  EXPECT_TRUE(h.core->has_finished());
  ASSERT_EQ(h.effects.eos.size(), 1U);
  EXPECT_EQ(h.effects.eos[0], std::make_pair(0, out));
  // What still circulates is acknowledged and counted, not processed.
  const int credits = h.effects.credits_returned();
  h.core->deliver(back, 0, blob(1));
  EXPECT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.stats[0]->counter("feedback_after_end").load(), 1);
  EXPECT_EQ(h.stats[0]->dead_letters.load(), 0U);
  EXPECT_EQ(h.effects.credits_returned(), credits + 1);
  // It leaves once b has released what it was sent.
  EXPECT_FALSE(h.effects.done);
  h.core->ack(out, 0, 2, 2, 0);
  EXPECT_TRUE(h.effects.done);
}

TEST(ReplicaCore, AFeedbackEdgeNeverBlocksItsProducer) {
  Harness h(kCycle, "b");
  const int back = h.edge("b/out", "a/in");
  EXPECT_EQ(h.graph.edges[static_cast<std::size_t>(back)].overflow, config::Overflow::drop_oldest);
  EXPECT_EQ(h.graph.edges[static_cast<std::size_t>(h.edge("src/out", "a/in"))].overflow, config::Overflow::block);
}


TEST(ReplicaCore, AStageWithInputsIsCalledBackWhenItAsksAndDoesNotEndBefore) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.later, inputs: {in: src/out}, params: {wait_ms: 10}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n",
            "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  const std::int64_t t0 = g_now;
  h.core->deliver(in, 0, blob(0));
  g_now += 4 * kMs;
  h.core->deliver(in, 0, blob(1));
  EXPECT_TRUE(h.effects.sent.empty());
  // One call back, for the earliest: the first input's time.
  ASSERT_EQ(h.effects.timers.size(), 1U);
  EXPECT_EQ(h.effects.timers[0].kind, ReplicaCore::kWake);
  EXPECT_EQ(h.effects.timers[0].at_ns, t0 + 10 * kMs);
  // The source ends: the replica stays, something is still due.
  h.core->end_of_stream(in, 0);
  EXPECT_FALSE(h.core->has_finished());
  // A timer that comes early changes nothing but asks again.
  h.core->tick(ReplicaCore::kWake);
  EXPECT_TRUE(h.effects.sent.empty());
  g_now = t0 + 10 * kMs;
  h.core->tick(ReplicaCore::kWake);
  ASSERT_EQ(h.effects.sent.size(), 1U);
  EXPECT_EQ(h.effects.sent[0].envelope.header().seq, 0U);
  EXPECT_FALSE(h.core->has_finished());
  EXPECT_EQ(h.effects.timers.back().at_ns, t0 + 14 * kMs);
  g_now = t0 + 14 * kMs;
  h.core->tick(ReplicaCore::kWake);
  ASSERT_EQ(h.effects.sent.size(), 2U);
  EXPECT_EQ(h.effects.sent[1].envelope.header().seq, 1U);
  // Nothing more is due: it ends.
  EXPECT_TRUE(h.core->has_finished());
}


TEST(ReplicaCore, AStepKnowsWhichReplicaOfWhichStageSentItsEnvelope) {
  Harness h("pipeline: core\nstages:\n"
            "  - {id: src, type: sim.source, replicas: 3}\n"
            "  - {id: mid, type: test.who_sent, inputs: {in: src/out}}\n"
            "  - {id: sink, type: sim.sink, inputs: {in: mid/out}}\n",
            "mid");
  const int in = h.edge("src/out", "mid/in");
  h.core->start();
  h.core->deliver(in, 2, blob(0));
  h.core->deliver(in, 0, blob(1));
  h.core->deliver(in, 1, blob(2));
  ASSERT_EQ(h.effects.sent.size(), 3U);
  EXPECT_EQ(h.effects.sent[0].envelope.header().stream, 2U);
  EXPECT_EQ(h.effects.sent[1].envelope.header().stream, 0U);
  EXPECT_EQ(h.effects.sent[2].envelope.header().stream, 1U);
}

}  // namespace
}  // namespace swarmflow::runtime
