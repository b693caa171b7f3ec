// Failover as replica cores see it, on a simulated clock: replays to a
// consumer placed anew, the end-of-stream mark again after them, duplicates
// from a producer placed anew dropped and acknowledged, lost producers
// counted as ended, and a replica that stays until all it sent is released.
// Cores are wired together by a small in-test dispatcher; no actors.

#include <gtest/gtest.h>

#include <array>
#include <deque>
#include <sstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/schema/blob_generated.h>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "runtime/replica_core.hpp"

namespace swarmflow::runtime {
namespace {

/// The simulated clock every core here reads.
std::int64_t g_now = 0;

/// What the recording sinks processed, in order: (stream, seq).
std::vector<std::pair<std::uint64_t, std::uint64_t>> g_processed;

/// Forwards its input.
class Pass final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    if (const Envelope* e = in.envelope(in_)) out.forward(out_, *e);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
};

/// What the counting sinks processed, in order: (stream, seq, count).
std::vector<std::array<std::uint64_t, 3>> g_counted;

/// Stateful: counts the envelopes of each stream and emits, for each, a blob
/// carrying the count so far (in Blob.seq). Its state is snapshotted.
class Tally final : public Stage {
 public:
  void setup(StageSpec& s) override {
    in_ = s.input<schema::Blob>("in");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    const Envelope* e = in.envelope(in_);
    if (e == nullptr) return {};
    const std::uint64_t n = ++counts_[e->header().stream];
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(schema::CreateBlob(fbb, e->header().stream, n), schema::BlobIdentifier());
    out.emit(out_, fbb);
    return {};
  }
  bool snapshot(std::string& state) const override {
    state.clear();
    for (const auto& [stream, n] : counts_) state += std::to_string(stream) + " " + std::to_string(n) + "\n";
    return true;
  }
  Status restore(const std::string& state) override {
    counts_.clear();
    std::istringstream in(state);
    std::uint64_t stream = 0;
    std::uint64_t n = 0;
    while (in >> stream >> n) counts_[stream] = n;
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
  OutputPort<schema::Blob> out_;
  std::map<std::uint64_t, std::uint64_t> counts_;
};

/// A sink that records (stream, seq, count) of Tally's outputs in g_counted.
class RecordCount final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in"); }
  Status process(Inputs& in, Outputs&, StageContext&) override {
    if (const auto* b = in.get(in_)) g_counted.push_back({in.envelope()->header().stream, in.envelope()->header().seq, b->seq()});
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
};

/// A sink that records what it processes in g_processed.
class Record final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in"); }
  Status process(Inputs& in, Outputs&, StageContext&) override {
    if (const Envelope* e = in.envelope(in_)) g_processed.emplace_back(e->header().stream, e->header().seq);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
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

/// An envelope with `bytes` of data: more than kMaxRemote goes to no other unit.
Envelope big_blob(std::uint64_t seq, std::size_t bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::uint8_t> data(bytes, 1);
  fbb.Finish(schema::CreateBlobDirect(fbb, 0, seq, &data), schema::BlobIdentifier());
  EnvelopeHeader h;
  h.seq = seq;
  return Envelope(h, Payload::from_builder(fbb));
}

constexpr std::size_t kMaxRemote = 4096;

/// A message between replicas, or a timer a core asked for.
struct Message {
  enum Kind { kDeliver, kAck, kEos, kTick, kStored } kind;
  int node, replica;            ///< to
  int from_node, from_replica;  ///< from
  int edge = -1;
  Envelope envelope;
  int credits = 0, released = 0, tick = 0;
  std::uint64_t snapshot = 0;  ///< kStored: its id
};

class Cluster;

/// One replica's effects: into the cluster's wire, and recorded.
struct Endpoint final : ReplicaEffects {
  Cluster* cluster = nullptr;
  int node = 0, replica = 0;
  bool left = false;
  std::string failure;
  /// Everything it did, in order: "d<edge>:<replica>:<seq>", "a<edge>:<replica>:<credits>/<released>",
  /// "e<edge>:<replica>", "finished".
  std::vector<std::string> trail;

  void deliver(int to_node, int to_replica, int edge, Envelope&& e) override;
  void ack(int to_node, int to_replica, int edge, int credits, int released, double) override;
  void end_of_stream(int to_node, int to_replica, int edge) override;
  void schedule(int kind, std::int64_t) override;
  void finished() override {
    left = true;
    trail.push_back("finished");
  }
  void failed(const std::string& message) override { failure = message; }
  void log(const std::string&) override {}
  void snapshot(ReplicaSnapshot&& s) override;

  int credits_to(int edge, int to_replica) const;
  int released_to(int edge, int to_replica) const;
};

/// A loaded pipeline and the cores of its replicas, wired by one FIFO of
/// messages (so messages between two replicas keep their order).
class Cluster {
 public:
  explicit Cluster(const std::string& yaml) {
    g_now = 1'000'000'000;
    g_processed.clear();
    register_builtin_stages(registry_);
    EXPECT_TRUE(registry_.add<Pass>("test.pass", "forwards").ok());
    EXPECT_TRUE(registry_.add<Record>("test.record", "records what it processes").ok());
    EXPECT_TRUE(registry_.add<Tally>("test.tally", "counts per stream").ok());
    EXPECT_TRUE(registry_.add<RecordCount>("test.record_count", "records counts").ok());
    g_counted.clear();
    std::vector<Diagnostic> diags;
    spec_ = config::load_pipeline_string(yaml, "failover.yaml", registry_, diags);
    EXPECT_TRUE(spec_.has_value()) << format_diagnostics(diags);
    if (spec_) graph = graph::Graph::build(*spec_, registry_);
  }

  int node(const std::string& id) const { return graph.find(id); }
  int edge(const std::string& from, const std::string& to) const {
    for (const auto& e : graph.edges) {
      if (graph.from_name(e) == from && graph.to_name(e) == to) return e.id;
    }
    return -1;
  }

  /// Makes (anew) the core of `replica` of stage `id`; a previous one is dropped.
  ReplicaCore& make(const std::string& id, int replica = 0, std::shared_ptr<const ReplicaSnapshot> restore = nullptr) {
    const int n = node(id);
    EXPECT_GE(n, 0) << id;
    Replica& r = replicas_[{n, replica}];
    r.core.reset();
    r.effects = std::make_unique<Endpoint>();
    r.effects->cluster = this;
    r.effects->node = n;
    r.effects->replica = replica;
    r.stats = std::make_unique<ReplicaStats>();
    r.edge_stats.clear();
    ReplicaSetup s;
    s.graph = &graph;
    s.registry = &registry_;
    s.node = n;
    s.replica = replica;
    s.stats = r.stats.get();
    s.in_stats.assign(graph.edges.size(), nullptr);
    s.out_stats.assign(graph.edges.size(), nullptr);
    for (const auto& e : graph.edges) {
      r.edge_stats.push_back(std::make_unique<EdgeSideStats>());
      s.in_stats[static_cast<std::size_t>(e.id)] = r.edge_stats.back().get();
      r.edge_stats.push_back(std::make_unique<EdgeSideStats>());
      s.out_stats[static_cast<std::size_t>(e.id)] = r.edge_stats.back().get();
    }
    r.subscribers.assign(graph.nodes[static_cast<std::size_t>(n)].spec.outputs().size(), {});
    s.subscribers = &r.subscribers;
    s.max_remote_payload_bytes = kMaxRemote;
    s.stop_requested = &stop_;
    s.clock = [] { return g_now; };
    s.snapshot_every = snapshot_every;
    s.restore = std::move(restore);
    r.core = std::make_unique<ReplicaCore>(std::move(s), *r.effects);
    return *r.core;
  }

  /// Stateful replicas snapshot after this many inputs (0: never).
  int snapshot_every = 0;
  /// The store off the units: the latest snapshot of each replica.
  std::map<std::pair<int, int>, std::shared_ptr<const ReplicaSnapshot>> stored;

  ReplicaCore& core(const std::string& id, int replica = 0) { return *at(id, replica).core; }
  Endpoint& effects(const std::string& id, int replica = 0) { return *at(id, replica).effects; }
  ReplicaStats& stats(const std::string& id, int replica = 0) { return *at(id, replica).stats; }
  const EdgeSideStats& out_stats(const std::string& id, int edge, int replica = 0) {
    return *at(id, replica).edge_stats[2 * static_cast<std::size_t>(edge) + 1];
  }

  /// The unit of replica `replica` of `id` died: it is made anew (and
  /// started), and what was on its way to or from it is lost.
  ReplicaCore& kill_and_replace(const std::string& id, int replica = 0, bool restore = false) {
    const int n = node(id);
    std::deque<Message> kept;
    for (auto& m : wire_) {
      if ((m.node == n && m.replica == replica) || (m.from_node == n && m.from_replica == replica)) continue;
      kept.push_back(std::move(m));
    }
    wire_ = std::move(kept);
    const auto it = stored.find({n, replica});
    ReplicaCore& fresh = make(id, replica, restore && it != stored.end() ? it->second : nullptr);
    fresh.start();
    return fresh;
  }

  void post(Message m) { wire_.push_back(std::move(m)); }
  bool idle() const { return wire_.empty(); }

  /// Hands over up to `limit` messages, oldest first; returns how many.
  int pump(int limit = 1'000'000) {
    int n = 0;
    for (; n < limit && !wire_.empty(); ++n) {
      Message m = std::move(wire_.front());
      wire_.pop_front();
      auto it = replicas_.find({m.node, m.replica});
      if (it == replicas_.end() || !it->second.core) continue;
      ReplicaCore& c = *it->second.core;
      switch (m.kind) {
        case Message::kDeliver: c.deliver(m.edge, m.from_replica, std::move(m.envelope)); break;
        case Message::kAck: c.ack(m.edge, m.from_replica, m.credits, m.released, 0); break;
        case Message::kEos: c.end_of_stream(m.edge, m.from_replica); break;
        case Message::kTick: c.tick(m.tick); break;
        case Message::kStored: c.snapshot_stored(m.snapshot); break;
      }
    }
    return n;
  }

  graph::Graph graph;

 private:
  struct Replica {
    std::unique_ptr<Endpoint> effects;
    std::unique_ptr<ReplicaStats> stats;
    std::vector<std::unique_ptr<EdgeSideStats>> edge_stats;  ///< per edge: in, out
    std::vector<std::vector<Runtime::Subscriber>> subscribers;
    std::unique_ptr<ReplicaCore> core;
  };
  Replica& at(const std::string& id, int replica) { return replicas_.at({node(id), replica}); }

  Registry registry_;
  std::optional<config::PipelineSpec> spec_;
  std::atomic<bool> stop_{false};
  std::map<std::pair<int, int>, Replica> replicas_;
  std::deque<Message> wire_;
};

void Endpoint::deliver(int to_node, int to_replica, int edge, Envelope&& e) {
  trail.push_back("d" + std::to_string(edge) + ":" + std::to_string(to_replica) + ":" +
                std::to_string(e.header().seq));
  cluster->post(Message{Message::kDeliver, to_node, to_replica, node, replica, edge, std::move(e), 0, 0, 0});
}

void Endpoint::ack(int to_node, int to_replica, int edge, int credits, int released, double) {
  trail.push_back("a" + std::to_string(edge) + ":" + std::to_string(to_replica) + ":" + std::to_string(credits) + "/" +
                std::to_string(released));
  cluster->post(Message{Message::kAck, to_node, to_replica, node, replica, edge, Envelope(), credits, released, 0});
}

void Endpoint::end_of_stream(int to_node, int to_replica, int edge) {
  trail.push_back("e" + std::to_string(edge) + ":" + std::to_string(to_replica));
  cluster->post(Message{Message::kEos, to_node, to_replica, node, replica, edge, Envelope(), 0, 0, 0});
}

/// Stored at once; the answer travels like any message (and is lost if
/// the replica's unit dies first).
void Endpoint::snapshot(ReplicaSnapshot&& s) {
  const std::uint64_t id = s.id;
  cluster->stored[{node, replica}] = std::make_shared<const ReplicaSnapshot>(std::move(s));
  Message m{Message::kStored, node, replica, node, replica, -1, Envelope(), 0, 0, 0};
  m.snapshot = id;
  cluster->post(std::move(m));
}

void Endpoint::schedule(int kind, std::int64_t) {
  cluster->post(Message{Message::kTick, node, replica, node, replica, -1, Envelope(), 0, 0, kind});
}

int Endpoint::credits_to(int edge, int to_replica) const {
  int n = 0;
  const std::string prefix = "a" + std::to_string(edge) + ":" + std::to_string(to_replica) + ":";
  for (const auto& line : trail) {
    if (line.rfind(prefix, 0) == 0) n += std::stoi(line.substr(prefix.size()));
  }
  return n;
}

int Endpoint::released_to(int edge, int to_replica) const {
  int n = 0;
  const std::string prefix = "a" + std::to_string(edge) + ":" + std::to_string(to_replica) + ":";
  for (const auto& line : trail) {
    if (line.rfind(prefix, 0) == 0) n += std::stoi(line.substr(line.find('/') + 1));
  }
  return n;
}

/// The lines of `log` from `from` on that start with `prefix`.
std::vector<std::string> lines(const std::vector<std::string>& log, std::size_t from, const std::string& prefix) {
  std::vector<std::string> v;
  for (std::size_t i = from; i < log.size(); ++i) {
    if (log[i].rfind(prefix, 0) == 0) v.push_back(log[i]);
  }
  return v;
}

PlacementChange moved_consumer(int edge, int replica, bool remote = false) {
  PlacementChange c;
  c.moved_consumers.emplace_back(edge, replica);
  c.remote_consumers.resize(static_cast<std::size_t>(edge) + 1);
  c.remote_consumers[static_cast<std::size_t>(edge)].assign(static_cast<std::size_t>(replica) + 1, false);
  c.remote_consumers[static_cast<std::size_t>(edge)][static_cast<std::size_t>(replica)] = remote;
  return c;
}

PlacementChange moved_producer(int edge, int replica) {
  PlacementChange c;
  c.moved_producers.emplace_back(edge, replica);
  return c;
}

// src -> mid -> sink; the test drives `mid` by hand (nothing is pumped).
const std::string kChain =
    "pipeline: failover\nstages:\n"
    "  - {id: src, type: sim.source, replicas: 2}\n"
    "  - {id: mid, type: test.pass, inputs: {in: src/out}, queue: {capacity: 4}}\n"
    "  - {id: sink, type: test.record, inputs: {in: mid/out}, queue: {capacity: 2}}\n";

TEST(FailoverCore, AReplicaThatEndedAnEdgeSendsTheMarkAgainAfterTheReplay) {
  Cluster c(kChain);
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  // Four sent to the sink (credits back, nothing released): its retention limit.
  for (std::uint64_t seq = 0; seq < 4; ++seq) {
    mid.deliver(in, 0, blob(seq));
    if (seq % 2 == 1) mid.ack(out, 0, 2, 0, 0);
  }
  mid.end_of_stream(in, 0);
  mid.end_of_stream(in, 1);
  EXPECT_TRUE(mid.has_finished());
  EXPECT_FALSE(mid.has_left());  // the sink has released nothing
  ASSERT_EQ(lines(fx.trail, 0, "e").size(), 1U);
  // The sink's unit dies: the four go again, two now (fresh credits), two
  // as credits return, and only then the mark.
  const std::size_t mark = fx.trail.size();
  mid.placement_changed(moved_consumer(out, 0, true));
  EXPECT_EQ(lines(fx.trail, mark, "d"), (std::vector<std::string>{"d1:0:0", "d1:0:1"}));
  EXPECT_TRUE(lines(fx.trail, mark, "e").empty());
  mid.ack(out, 0, 1, 0, 0);
  EXPECT_EQ(lines(fx.trail, mark, "d").size(), 3U);
  EXPECT_TRUE(lines(fx.trail, mark, "e").empty());
  mid.ack(out, 0, 1, 0, 0);
  EXPECT_EQ(lines(fx.trail, mark, "d"), (std::vector<std::string>{"d1:0:0", "d1:0:1", "d1:0:2", "d1:0:3"}));
  ASSERT_EQ(lines(fx.trail, mark, "e"), (std::vector<std::string>{"e1:0"}));
  EXPECT_EQ(fx.trail.back(), "e1:0");  // after the last replayed envelope
  EXPECT_EQ(mid.router(out)->replayed(), 4U);
  EXPECT_EQ(c.out_stats("mid", out).replayed.load(), 4U);
  EXPECT_FALSE(mid.has_left());
  mid.ack(out, 0, 2, 4, 0);
  EXPECT_TRUE(mid.has_left());
  EXPECT_EQ(fx.trail.back(), "finished");
}

TEST(FailoverCore, AReplicaLeavesOnlyOnceEverythingItSentIsReleased) {
  Cluster c(kChain);
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  mid.deliver(in, 0, blob(0));
  mid.deliver(in, 1, blob(1));
  mid.end_of_stream(in, 0);
  mid.end_of_stream(in, 1);
  EXPECT_TRUE(mid.has_finished());
  EXPECT_FALSE(mid.has_left());
  EXPECT_FALSE(fx.left);
  // Its credits went when it finished, and the mark; its releases wait
  // until the sink has credited what it made from them.
  EXPECT_EQ(fx.credits_to(in, 0) + fx.credits_to(in, 1), 2);
  EXPECT_EQ(fx.released_to(in, 0) + fx.released_to(in, 1), 0);
  EXPECT_EQ(lines(fx.trail, 0, "e"), (std::vector<std::string>{"e1:0"}));
  mid.ack(out, 0, 2, 1, 0);
  EXPECT_FALSE(fx.left);
  mid.ack(out, 0, 0, 1, 0);
  EXPECT_TRUE(fx.left);
  // Everything it had taken was released before it left.
  EXPECT_EQ(fx.released_to(in, 0) + fx.released_to(in, 1), 2);
  EXPECT_TRUE(mid.has_left());
}

TEST(FailoverCore, ANewPlacementTellsWhichConsumersAreOnOtherUnits) {
  Cluster c("pipeline: failover\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.pass, inputs: {in: src/out}, queue: {capacity: 8}}\n"
            "  - {id: sink, type: test.record, replicas: 2, inputs: {in: mid/out}, queue: {capacity: 8}}\n");
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  for (std::uint64_t seq = 0; seq < 4; ++seq) mid.deliver(in, 0, big_blob(seq, 2 * kMaxRemote));
  EXPECT_EQ(lines(fx.trail, 0, "d1:0:").size(), 2U);  // all in one unit: spread over both
  // Replica 0's unit died and it was placed on another unit: payloads too
  // large for the transport go only to replica 1 from now on.
  const std::size_t mark = fx.trail.size();
  mid.placement_changed(moved_consumer(out, 0, true));
  EXPECT_EQ(mid.router(out)->too_large(), 2U);  // its two could not be sent again there
  for (std::uint64_t seq = 4; seq < 8; ++seq) mid.deliver(in, 0, big_blob(seq, 2 * kMaxRemote));
  EXPECT_TRUE(lines(fx.trail, mark, "d1:0:").empty());
  EXPECT_EQ(lines(fx.trail, mark, "d1:1:").size(), 4U);
  // Back in this unit (the remote flags alone): replica 0 takes them again.
  PlacementChange back;
  back.remote_consumers.resize(static_cast<std::size_t>(out) + 1);
  back.remote_consumers[static_cast<std::size_t>(out)] = {false, false};
  mid.placement_changed(back);
  for (std::uint64_t seq = 8; seq < 10; ++seq) mid.deliver(in, 0, big_blob(seq, 2 * kMaxRemote));
  EXPECT_FALSE(lines(fx.trail, mark, "d1:0:").empty());  // the one with the most credit
}

TEST(FailoverCore, AMovedProducersDuplicatesAreDroppedCountedAndAcknowledged) {
  Cluster c(kChain);
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  for (std::uint64_t seq = 0; seq < 6; ++seq) {
    mid.deliver(in, 0, blob(seq, 7));
    mid.ack(out, 0, 1, 1, 0);  // the sink keeps up
  }
  ASSERT_EQ(lines(fx.trail, 0, "d").size(), 6U);
  const std::size_t mark = fx.trail.size();
  mid.placement_changed(moved_producer(in, 0));
  // The new incarnation sends 2..5 again (its input's replay), then more.
  for (std::uint64_t seq = 2; seq < 10; ++seq) {
    mid.deliver(in, 0, blob(seq, 7));
    mid.ack(out, 0, 1, 1, 0);
  }
  EXPECT_EQ(mid.duplicates_dropped(), 4U);
  EXPECT_EQ(c.stats("mid").counter("duplicates_dropped").load(), 4);
  EXPECT_EQ(lines(fx.trail, mark, "d"), (std::vector<std::string>{"d1:0:6", "d1:0:7", "d1:0:8", "d1:0:9"}));
  // Idle now, it returns what it still owes.
  mid.tick(ReplicaCore::kFlush);
  // All eight it sent were acknowledged, duplicates included: credit and release.
  int credits = 0;
  int released = 0;
  for (const auto& line : lines(fx.trail, mark, "a0:0:")) {
    credits += std::stoi(line.substr(5));
    released += std::stoi(line.substr(line.find('/') + 1));
  }
  EXPECT_EQ(credits, 8);
  EXPECT_EQ(released, 8);
  // Another stream's same sequence numbers are not duplicates.
  mid.deliver(in, 0, blob(3, 8));
  EXPECT_EQ(mid.duplicates_dropped(), 4U);
}

TEST(FailoverCore, WhatTheOldIncarnationLeftQueuedIsProcessedButNotAcknowledgedToTheNewOne) {
  Cluster c("pipeline: failover\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: mid, type: test.pass, inputs: {in: src/out}, queue: {capacity: 4}}\n"
            "  - {id: sink, type: test.record, inputs: {in: mid/out}, queue: {capacity: 1}}\n");
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  std::vector<Envelope> batch;
  for (std::uint64_t seq = 0; seq < 4; ++seq) batch.push_back(blob(seq));
  mid.deliver(in, 0, batch);
  // seq 0 sent, seq 1 waits for the sink's credit (block), 2 and 3 queued.
  ASSERT_EQ(mid.queued(), 2U);
  ASSERT_EQ(fx.credits_to(in, 0), 2);
  const std::size_t mark = fx.trail.size();
  mid.placement_changed(moved_producer(in, 0));
  EXPECT_EQ(mid.unreleased(), 0U);  // what it owed the old incarnation is forgotten
  for (int i = 0; i < 4 && mid.queued() + mid.router(out)->waiting() > 0; ++i) mid.ack(out, 0, 1, 1, 0);
  EXPECT_EQ(mid.queued(), 0U);
  EXPECT_EQ(lines(fx.trail, mark, "d").size(), 3U);  // 1, 2, 3: processed
  EXPECT_TRUE(lines(fx.trail, mark, "a0:").empty());  // but owed to no one
  // The new incarnation sends 0..5: 0..3 are duplicates (acknowledged), 4 and 5 new.
  for (std::uint64_t seq = 0; seq < 6; ++seq) {
    mid.deliver(in, 0, blob(seq));
    mid.ack(out, 0, 1, 1, 0);
  }
  mid.end_of_stream(in, 0);
  EXPECT_EQ(mid.duplicates_dropped(), 4U);
  int credits = 0;
  for (const auto& line : lines(fx.trail, mark, "a0:0:")) credits += std::stoi(line.substr(5));
  EXPECT_EQ(credits, 6);  // the new incarnation's six, not the old one's two
  EXPECT_TRUE(mid.has_finished());
}

TEST(FailoverCore, AReplicaThatHasEndedAcknowledgesAtOnceWhatAMovedProducerSendsAgain) {
  Cluster c(kChain);
  const int in = c.edge("src/out", "mid/in");
  const int out = c.edge("mid/out", "sink/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  for (std::uint64_t seq = 0; seq < 2; ++seq) mid.deliver(in, 0, blob(seq));
  mid.end_of_stream(in, 0);
  mid.end_of_stream(in, 1);
  ASSERT_TRUE(mid.has_finished());
  ASSERT_FALSE(mid.has_left());  // the sink has released nothing yet
  const std::size_t mark = fx.trail.size();
  mid.placement_changed(moved_producer(in, 0));
  mid.deliver(in, 0, blob(1));  // one envelope: below the ack threshold (2)
  EXPECT_EQ(mid.duplicates_dropped(), 1U);
  // Credited at once; released once what came before it is (the sink has
  // not credited mid's outputs yet).
  EXPECT_EQ(lines(fx.trail, mark, "a0:0:"), (std::vector<std::string>{"a0:0:1/0"}));
  mid.end_of_stream(in, 0);  // and its end again: nothing changes
  EXPECT_TRUE(lines(fx.trail, mark, "d").empty());
  EXPECT_TRUE(lines(fx.trail, mark, "e").empty());
  EXPECT_EQ(c.stats("mid").dead_letters.load(), 0U);
  // Something it never saw cannot be processed by a stopped stage: a dead
  // letter, acknowledged all the same.
  mid.deliver(in, 0, blob(5));
  EXPECT_EQ(c.stats("mid").dead_letters.load(), 1U);
  EXPECT_EQ(lines(fx.trail, mark, "a0:0:"), (std::vector<std::string>{"a0:0:1/0", "a0:0:1/0"}));
  EXPECT_TRUE(lines(fx.trail, mark, "d").empty());
  // The sink credits and releases both outputs: what the new incarnation
  // sent is released (what the old one sent is no longer owed), and the
  // replica leaves.
  mid.ack(out, 0, 2, 2, 0);
  EXPECT_EQ(fx.released_to(in, 0), 2);
  EXPECT_TRUE(mid.has_left());
}

TEST(FailoverCore, AnEndOfStreamSentAgainByANewIncarnationCountsOnce) {
  Cluster c(kChain);  // src has two replicas
  const int in = c.edge("src/out", "mid/in");
  ReplicaCore& mid = c.make("mid");
  mid.start();
  mid.end_of_stream(in, 0);
  mid.placement_changed(moved_producer(in, 0));
  mid.end_of_stream(in, 0);  // the new incarnation of replica 0 ends again
  EXPECT_FALSE(mid.has_finished());  // replica 1 has not ended
  mid.end_of_stream(in, 1);
  EXPECT_TRUE(mid.has_finished());
  EXPECT_TRUE(mid.has_left());  // it sent nothing, so nothing to wait for
}

TEST(FailoverCore, ALostProducerCountsAsEnded) {
  Cluster c(kChain);
  const int in = c.edge("src/out", "mid/in");
  ReplicaCore& mid = c.make("mid");
  Endpoint& fx = c.effects("mid");
  mid.start();
  mid.end_of_stream(in, 1);
  mid.deliver(in, 0, blob(0));  // below the ack threshold: its credit is still owed
  EXPECT_FALSE(mid.has_finished());
  PlacementChange lost;
  lost.lost_producers.emplace_back(in, 0);
  mid.placement_changed(lost);
  EXPECT_TRUE(mid.has_finished());
  mid.placement_changed(lost);  // counted once: nothing changes
  mid.end_of_stream(in, 0);
  EXPECT_TRUE(mid.has_finished());
  EXPECT_TRUE(lines(fx.trail, 0, "a0:0:").empty());  // nothing acknowledged to a lost replica
}

// -- a chain across a consumer's death ---------------------------------------

/// src (3 streams) -> mid (`mid_replicas`, keyed by stream when more than
/// one) -> sink (2 replicas, keyed by stream): the unit of mid's replica 0
/// dies after `kill_after` messages; it is made anew and its neighbours are
/// told. Returns what the run did, for the caller to check.
struct ChainRun {
  std::uint64_t replayed = 0;
  std::uint64_t duplicates = 0;
  bool all_left = true;
  std::string failure;
};

ChainRun run_chain_with_death(int kill_after, int mid_capacity, int mid_replicas) {
  Cluster c("pipeline: failover\nstages:\n"
            "  - {id: src, type: sim.source, params: {count: 60, streams: 3, payload_bytes: 8}}\n"
            "  - {id: mid, type: test.pass, replicas: " +
            std::to_string(mid_replicas) + (mid_replicas > 1 ? ", key: stream" : "") +
            ", inputs: {in: src/out}, queue: {capacity: " + std::to_string(mid_capacity) +
            "}}\n"
            "  - {id: sink, type: test.record, replicas: 2, key: stream, inputs: {in: mid/out}, "
            "queue: {capacity: 3}}\n");
  const int src_mid = c.edge("src/out", "mid/in");
  const int mid_sink = c.edge("mid/out", "sink/in");
  c.make("sink", 0).start();
  c.make("sink", 1).start();
  for (int r = 0; r < mid_replicas; ++r) c.make("mid", r).start();
  c.make("src").start();
  c.pump(kill_after);
  c.kill_and_replace("mid");
  c.core("src").placement_changed(moved_consumer(src_mid, 0));
  for (int r = 0; r < 2; ++r) c.core("sink", r).placement_changed(moved_producer(mid_sink, 0));
  c.pump();
  ChainRun run;
  run.replayed = c.core("src").router(src_mid)->replayed();
  for (int r = 0; r < 2; ++r) run.duplicates += c.core("sink", r).duplicates_dropped();
  run.all_left = c.core("src").has_left();
  for (int r = 0; r < mid_replicas; ++r) run.all_left = run.all_left && c.core("mid", r).has_left();
  for (int r = 0; r < 2; ++r) run.all_left = run.all_left && c.core("sink", r).has_left();
  run.failure = c.effects("src").failure;
  for (int r = 0; r < mid_replicas; ++r) run.failure += c.effects("mid", r).failure;
  EXPECT_TRUE(c.idle());
  return run;
}

TEST(FailoverCore, AChainDeliversEveryEnvelopeOnceAndInOrderAcrossAConsumersDeath) {
  std::uint64_t replayed = 0;
  std::uint64_t duplicates = 0;
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {2, 1}, {4, 1}, {2, 2}, {4, 2}};
  for (const auto& [capacity, replicas] : shapes) {
    for (int kill_after = 0; kill_after < 320; ++kill_after) {
      SCOPED_TRACE("mid: capacity " + std::to_string(capacity) + ", " + std::to_string(replicas) +
                   " replicas; its replica 0 dies after " + std::to_string(kill_after) + " messages");
      const ChainRun run = run_chain_with_death(kill_after, capacity, replicas);
      EXPECT_TRUE(run.failure.empty()) << run.failure;
      EXPECT_TRUE(run.all_left);
      replayed += run.replayed;
      duplicates += run.duplicates;
      // Each stream's envelopes reached the sink once, in order.
      std::map<std::uint64_t, std::vector<std::uint64_t>> by_stream;
      for (const auto& [stream, seq] : g_processed) by_stream[stream].push_back(seq);
      ASSERT_EQ(by_stream.size(), 3U);
      for (const auto& [stream, got] : by_stream) {
        std::vector<std::uint64_t> want(20);
        for (std::uint64_t i = 0; i < 20; ++i) want[i] = i;
        EXPECT_EQ(got, want) << "stream " << stream;
      }
    }
  }
  // The deaths did hit envelopes in flight: replays and duplicates happened.
  EXPECT_GT(replayed, 0U);
  EXPECT_GT(duplicates, 0U);
}

// -- a stateful stage across its unit's death ---------------------------------

/// src (3 streams of 20) -> tally (stateful, snapshots every `every` inputs
/// when `every` > 0) -> sink: tally's unit dies after `kill_after` messages
/// and its replica is made anew from its latest stored snapshot (when
/// `restore`). Returns what the sink saw, per stream: the counts, in order.
std::map<std::uint64_t, std::vector<std::uint64_t>> tally_with_death(int kill_after, int every, bool restore,
                                                                     std::uint64_t* duplicates, bool* all_left) {
  Cluster c("pipeline: failover\nstages:\n"
            "  - {id: src, type: sim.source, params: {count: 60, streams: 3, payload_bytes: 8}}\n"
            "  - {id: tally, type: test.tally, inputs: {in: src/out}, queue: {capacity: 4}}\n"
            "  - {id: sink, type: test.record_count, inputs: {in: tally/out}, queue: {capacity: 3}}\n");
  c.snapshot_every = every;
  const int src_tally = c.edge("src/out", "tally/in");
  const int tally_sink = c.edge("tally/out", "sink/in");
  c.make("sink").start();
  c.make("tally").start();
  c.make("src").start();
  c.pump(kill_after);
  c.kill_and_replace("tally", 0, restore);
  c.core("src").placement_changed(moved_consumer(src_tally, 0));
  c.core("sink").placement_changed(moved_producer(tally_sink, 0));
  c.pump();
  EXPECT_TRUE(c.idle());
  *duplicates += c.core("sink").duplicates_dropped() + c.core("tally").duplicates_dropped();
  *all_left = c.core("src").has_left() && c.core("tally").has_left() && c.core("sink").has_left();
  EXPECT_TRUE(c.effects("tally").failure.empty()) << c.effects("tally").failure;
  std::map<std::uint64_t, std::vector<std::uint64_t>> counts;
  for (const auto& [stream, seq, count] : g_counted) counts[stream].push_back(count);
  return counts;
}

TEST(FailoverCore, AStatefulStageRestoredFromItsSnapshotCountsAsIfItsUnitHadNotDied) {
  std::vector<std::uint64_t> want(20);
  for (std::uint64_t i = 0; i < 20; ++i) want[i] = i + 1;
  std::uint64_t duplicates = 0;
  for (int every : {1, 3, 64}) {
    for (int kill_after = 0; kill_after < 260; ++kill_after) {
      SCOPED_TRACE("snapshot every " + std::to_string(every) + " inputs; tally dies after " +
                   std::to_string(kill_after) + " messages");
      bool all_left = false;
      const auto counts = tally_with_death(kill_after, every, true, &duplicates, &all_left);
      EXPECT_TRUE(all_left);
      ASSERT_EQ(counts.size(), 3U);
      for (const auto& [stream, got] : counts) EXPECT_EQ(got, want) << "stream " << stream;
    }
  }
  EXPECT_GT(duplicates, 0U);  // deaths hit releases and outputs in flight
}

TEST(FailoverCore, WithoutItsSnapshotARestartedStatefulStageStartsEmpty) {
  // The check above can fail: restarted empty, the counts start again.
  std::uint64_t duplicates = 0;
  bool all_left = false;
  const auto counts = tally_with_death(60, 0, false, &duplicates, &all_left);
  std::uint64_t last = 0;
  for (const auto& [stream, got] : counts) last += got.empty() ? 0 : got.back();
  EXPECT_LT(last, 60U);
}

TEST(FailoverCore, AStatefulStagesInputsAreReleasedOnlyOnceASnapshotCoveringThemIsStored) {
  Cluster c(kChain);
  c.snapshot_every = 3;
  // kChain's mid is stateless: use a stateful one.
  Cluster t("pipeline: failover\nstages:\n"
            "  - {id: src, type: sim.source}\n"
            "  - {id: tally, type: test.tally, inputs: {in: src/out}, queue: {capacity: 8}}\n"
            "  - {id: sink, type: test.record_count, inputs: {in: tally/out}, queue: {capacity: 8}}\n");
  t.snapshot_every = 3;
  const int in = t.edge("src/out", "tally/in");
  const int out = t.edge("tally/out", "sink/in");
  ReplicaCore& tally = t.make("tally");
  tally.start();
  EXPECT_TRUE(tally.snapshots());
  for (std::uint64_t seq = 0; seq < 3; ++seq) tally.deliver(in, 0, blob(seq));
  tally.ack(out, 0, 3, 3, 0);  // the sink took all three
  // Credits came back, but no release: the snapshot is not stored yet.
  EXPECT_EQ(t.effects("tally").released_to(in, 0), 0);
  EXPECT_EQ(tally.snapshots_pending(), 1U);
  ASSERT_EQ(t.stored.size(), 1U);
  EXPECT_EQ(t.stored.begin()->second->state, "0 3\n");
  tally.snapshot_stored(t.stored.begin()->second->id);
  EXPECT_EQ(t.effects("tally").released_to(in, 0), 3);
  EXPECT_EQ(tally.snapshots_pending(), 0U);
  // A stateless stage is not held back: it takes no snapshot.
  ReplicaCore& mid = c.make("mid");
  mid.start();
  EXPECT_FALSE(mid.snapshots());
}

TEST(FailoverCore, ASourceRestartedFromItsSnapshotSendsEveryEnvelopeOnceAndInOrder) {
  // src (3 streams of 20, stateful: its position) -> sink; src's unit dies
  // after `kill_after` messages and it starts again from its latest stored
  // snapshot. What it sends again, the sink drops as duplicates.
  std::uint64_t duplicates = 0;
  std::uint64_t restored = 0;
  for (int every : {1, 4, 64}) {
    for (int kill_after = 0; kill_after < 200; ++kill_after) {
      SCOPED_TRACE("snapshot every " + std::to_string(every) + "; src dies after " + std::to_string(kill_after) +
                   " messages");
      Cluster c("pipeline: failover\nstages:\n"
                "  - {id: src, type: sim.source, params: {count: 60, streams: 3, payload_bytes: 8}}\n"
                "  - {id: sink, type: test.record, inputs: {in: src/out}, queue: {capacity: 4}}\n");
      c.snapshot_every = every;
      const int src_sink = c.edge("src/out", "sink/in");
      c.make("sink").start();
      c.make("src").start();
      EXPECT_TRUE(c.core("src").snapshots());
      c.pump(kill_after);
      c.kill_and_replace("src", 0, true);
      c.core("sink").placement_changed(moved_producer(src_sink, 0));
      c.pump();
      EXPECT_TRUE(c.idle());
      EXPECT_TRUE(c.core("sink").has_left());
      duplicates += c.core("sink").duplicates_dropped();
      restored += static_cast<std::uint64_t>(c.stats("src").counter("restored").load());
      std::map<std::uint64_t, std::vector<std::uint64_t>> by_stream;
      for (const auto& [stream, seq] : g_processed) by_stream[stream].push_back(seq);
      ASSERT_EQ(by_stream.size(), 3U);
      for (const auto& [stream, got] : by_stream) {
        std::vector<std::uint64_t> want(20);
        for (std::uint64_t i = 0; i < 20; ++i) want[i] = i;
        EXPECT_EQ(got, want) << "stream " << stream;
      }
    }
  }
  EXPECT_GT(duplicates, 0U);
  EXPECT_GT(restored, 300U);  // most deaths came after a stored snapshot
}

TEST(FailoverCore, ASourceStartedAgainWithoutItsSnapshotSendsWhatTheSinkAlreadyHad) {
  // The check above can fail: from the start again, late in the run, the
  // sink gets more than its duplicate detection remembers.
  const std::string yaml =
      "pipeline: failover\nstages:\n"
      "  - {id: src, type: sim.source, params: {count: 600, streams: 3, payload_bytes: 8}}\n"
      "  - {id: sink, type: test.record, inputs: {in: src/out}, queue: {capacity: 4}}\n";
  for (bool restore : {true, false}) {
    Cluster c(yaml);
    c.snapshot_every = 4;
    c.make("sink").start();
    c.make("src").start();
    c.pump(600);
    c.kill_and_replace("src", 0, restore);
    c.core("sink").placement_changed(moved_producer(c.edge("src/out", "sink/in"), 0));
    c.pump();
    if (restore) {
      EXPECT_EQ(g_processed.size(), 600U);
    } else {
      EXPECT_GT(g_processed.size(), 600U);
    }
  }
}

}  // namespace
}  // namespace swarmflow::runtime
