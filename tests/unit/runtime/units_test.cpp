// Several units in one process: each its own actor system, envelopes between
// them over the inproc transport (or, with `transport: {in_process: direct}`,
// straight to the replicas' actors), with the same guarantees as inside one
// unit.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <stdlib.h>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/stage.hpp>

namespace swarmflow {
namespace {

std::int64_t counter(const StageReport* s, const std::string& name) {
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

void expect_conservation(const RunReport& r) {
  for (const auto& e : r.edges) {
    EXPECT_EQ(e.sent, e.delivered + e.dropped) << e.from << " -> " << e.to;
  }
}

RunReport run(const std::string& yaml) {
  Runtime rt;
  std::vector<Diagnostic> diags;
  Status s = rt.load_string(yaml, "units.yaml", &diags);
  EXPECT_TRUE(s.ok()) << format_diagnostics(diags);
  s = rt.run();
  EXPECT_TRUE(s.ok()) << s.message();
  return rt.report();
}

TEST(Units, ChainAcrossThreeUnitsMatchesOneUnit) {
  const std::string stages =
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 3000, streams: 6}}\n"
      "  - {id: work, type: sim.work, replicas: 3, key: stream, inputs: {in: src/out},\n"
      "     placement: {spread: true}, params: {service_us: 10}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}}\n";
  RunReport one = run("pipeline: one\nunits: 1\n" + stages);
  RunReport three = run("pipeline: three\nunits: 3\n" + stages);
  for (const RunReport* r : {&one, &three}) {
    const StageReport* sink = r->stage("sink");
    EXPECT_EQ(counter(sink, "received"), 3000);
    EXPECT_EQ(counter(sink, "lost"), 0);
    EXPECT_EQ(counter(sink, "duplicate"), 0);
    EXPECT_EQ(counter(sink, "reordered"), 0);
    expect_conservation(*r);
  }
  ASSERT_EQ(three.units.size(), 3U);
  std::uint64_t crossed = 0;
  int hosted = 0;
  for (const auto& u : three.units) {
    EXPECT_GT(u.replicas, 0) << u.id << " hosts nothing";
    EXPECT_EQ(u.rejected, 0U);
    crossed += u.received;
    hosted += u.replicas;
  }
  EXPECT_EQ(hosted, 5);
  EXPECT_GT(crossed, 0U);
}

/// The payload addresses a run of `yaml` shows on src/out (made on u0) and
/// on work/out (work, on u1, passes its input on).
struct Addresses {
  std::set<const void*> sent;
  std::set<const void*> arrived;
  RunReport report;
};

Addresses payload_addresses(const std::string& yaml) {
  Addresses a;
  Runtime rt;
  std::vector<Diagnostic> diags;
  EXPECT_TRUE(rt.load_string(yaml, "zc.yaml", &diags).ok()) << format_diagnostics(diags);
  std::mutex m;
  std::vector<Envelope> keep;  // no address reuse while the run lasts
  EXPECT_TRUE(rt.subscribe("src/out", [&](const Envelope& e) {
                  std::lock_guard<std::mutex> lock(m);
                  keep.push_back(e);
                  a.sent.insert(e.payload()->data());
                }).ok());
  EXPECT_TRUE(rt.subscribe("work/out", [&](const Envelope& e) {
                  std::lock_guard<std::mutex> lock(m);
                  a.arrived.insert(e.payload()->data());
                }).ok());
  EXPECT_TRUE(rt.run().ok());
  a.report = rt.report();
  return a;
}

std::string crossing_pipeline(const std::string& transport, int payload_bytes, int count) {
  return "pipeline: zc\nunits: 2\n" + transport + "stages:\n"
         "  - {id: src, type: sim.source, params: {count: " + std::to_string(count) +
         ", payload_bytes: " + std::to_string(payload_bytes) + "},\n"
         "     placement: {units: [u0]}}\n"
         "  - {id: work, type: sim.work, inputs: {in: src/out}, placement: {units: [u1]}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u1]}}\n";
}

TEST(Units, PayloadCrossesUnitsInProcessWithoutACopy) {
  const Addresses a = payload_addresses(crossing_pipeline("", 65536, 200));
  ASSERT_EQ(a.report.units.size(), 2U);
  EXPECT_EQ(a.report.units[1].received, 200U + 1U);  // 200 envelopes and one end-of-stream mark
  EXPECT_EQ(a.sent.size(), 200U);
  EXPECT_EQ(a.sent, a.arrived) << "the bytes that reached unit u1 are the ones unit u0 made";
}

TEST(Units, PackBelowBytesFromThePipelineFileReachesTheTransport) {
  // Packed payloads are copied into their pack; with packing off even
  // 64-byte payloads cross without a copy.
  const Addresses a = payload_addresses(crossing_pipeline("transport: {pack_below_bytes: 0}\n", 64, 100));
  EXPECT_EQ(a.sent.size(), 100U);
  EXPECT_EQ(a.sent, a.arrived);
}

// -- transport: {in_process: direct} ------------------------------------------

const std::string kDirect = "transport: {in_process: direct}\n";

TEST(Units, InProcessDirectCrossesThreeUnitsLikeTheTransportWithoutIt) {
  const std::string stages =
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 3000, streams: 6}}\n"
      "  - {id: work, type: sim.work, replicas: 3, key: stream, inputs: {in: src/out},\n"
      "     placement: {spread: true}, params: {service_us: 10}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}}\n";
  RunReport r = run("pipeline: direct\nunits: 3\n" + kDirect + stages);
  ASSERT_TRUE(r.ok) << r.error;
  const StageReport* sink = r.stage("sink");
  EXPECT_EQ(counter(sink, "received"), 3000);
  EXPECT_EQ(counter(sink, "lost"), 0);
  EXPECT_EQ(counter(sink, "duplicate"), 0);
  EXPECT_EQ(counter(sink, "reordered"), 0);
  expect_conservation(r);
  ASSERT_EQ(r.units.size(), 3U);
  int hosted = 0;
  for (const auto& u : r.units) {
    EXPECT_GT(u.replicas, 0) << u.id << " hosts nothing";
    EXPECT_EQ(u.sent, 0U) << u.id << ": nothing went through the transport";
    EXPECT_EQ(u.received, 0U) << u.id;
    hosted += u.replicas;
  }
  EXPECT_EQ(hosted, 5);
}

TEST(Units, InProcessDirectHandsOverEvenSmallPayloadsWithoutACopy) {
  // Through the transport a 64-byte payload is copied into its pack; handed
  // over directly it is the same bytes.
  const Addresses a = payload_addresses(crossing_pipeline(kDirect, 64, 100));
  ASSERT_EQ(a.report.units.size(), 2U);
  EXPECT_EQ(a.report.units[1].received, 0U);
  EXPECT_EQ(a.sent.size(), 100U);
  EXPECT_EQ(a.sent, a.arrived);
}

TEST(Units, InProcessDirectKeepsTheTransportsSizeLimitBetweenUnits) {
  // As if the units were processes: a pipeline behaves the same when they
  // are split up later.
  RunReport r = run("pipeline: big\nunits: 2\ntransport: {max_message_bytes: 65536, in_process: direct}\nstages:\n"
                    "  - {id: src, type: sim.source, params: {count: 12, payload_bytes: 65536},\n"
                    "     placement: {units: [u0]}}\n"
                    "  - {id: sink, type: sim.sink, inputs: {in: src/out}, placement: {units: [u1]}}\n");
  ASSERT_TRUE(r.ok) << r.error;
  const EdgeReport* e = r.edge("src/out", "sink/in");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->sent, 12U);
  EXPECT_EQ(e->too_large, 12U);
  EXPECT_EQ(e->delivered, 0U);
}

TEST(Units, InProcessDirectSlowConsumerOnAnotherUnitKeepsItsQueueBounded) {
  for (const std::string policy : {"block", "drop_oldest"}) {
    RunReport r = run("pipeline: of\nunits: 2\n" + kDirect + "stages:\n"
                      "  - {id: src, type: sim.source, params: {count: 500, rate_hz: 20000}, placement: {units: [u0]}}\n"
                      "  - {id: sink, type: sim.sink, inputs: {in: src/out}, params: {service_us: 300},\n"
                      "     placement: {units: [u1]}, queue: {capacity: 4, overflow: " + policy + "}}\n");
    expect_conservation(r);
    const EdgeReport* e = r.edge("src/out", "sink/in");
    ASSERT_NE(e, nullptr);
    EXPECT_LE(e->peak_in_flight, 4U) << policy;
    EXPECT_GT(e->dropped, 0U) << policy;
    EXPECT_EQ(static_cast<std::uint64_t>(counter(r.stage("sink"), "received")) + e->dropped, 500U) << policy;
  }
}

/// Envelopes of `ArrivalProbe` that reached `ArrivalCounter`, on another unit.
std::atomic<int> g_arrived{0};

/// A source of 64 KiB Blobs that, from its second step on, waits (at most
/// 10 s) until the first has reached its consumer: all of its steps are one
/// pull, one handler of its host. `waited_out` counts the waits that ended
/// without it.
class ArrivalProbe final : public Stage {
 public:
  static std::atomic<int> waited_out;
  void setup(StageSpec& s) override { out_ = s.output<schema::Blob>("out"); }
  Status process(Inputs&, Outputs& out, StageContext&) override {
    if (made_ == 3) return Status::end_of_stream();
    if (made_ > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (g_arrived.load() == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (g_arrived.load() == 0) waited_out.fetch_add(1);
    }
    flatbuffers::FlatBufferBuilder fbb(70000);
    auto data = fbb.CreateVector(std::vector<std::uint8_t>(65536, 7));
    fbb.Finish(schema::CreateBlob(fbb, 0, static_cast<std::uint64_t>(made_), data), schema::BlobIdentifier());
    EnvelopeHeader h;
    h.seq = static_cast<std::uint64_t>(made_++);
    out.emit(out_, Payload::from_builder(fbb), h);
    return {};
  }

 private:
  OutputPort<schema::Blob> out_;
  int made_ = 0;
};
std::atomic<int> ArrivalProbe::waited_out{0};

class ArrivalCounter final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in"); }
  Status process(Inputs& in, Outputs&, StageContext&) override {
    if (in.get(in_) != nullptr) g_arrived.fetch_add(1);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
};

TEST(Units, InProcessDirectSendsALargePayloadBeforeItsHandlerEnds) {
  // Held until the source's pull ends, the first payload could not arrive
  // while the source waits for it (as it does through the transport).
  g_arrived = 0;
  ArrivalProbe::waited_out = 0;
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<ArrivalProbe>("test.arrival_probe", "waits for its first payload to arrive").ok());
  ASSERT_TRUE(rt.registry().add<ArrivalCounter>("test.arrival_counter", "counts arrivals").ok());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string("pipeline: early\nunits: 2\n" + kDirect + "stages:\n"
                             "  - {id: src, type: test.arrival_probe, placement: {units: [u0]}}\n"
                             "  - {id: sink, type: test.arrival_counter, inputs: {in: src/out}, queue: {capacity: 4},\n"
                             "     placement: {units: [u1]}}\n",
                             "early.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  EXPECT_EQ(g_arrived.load(), 3);
  EXPECT_EQ(ArrivalProbe::waited_out.load(), 0) << "the first payload waited for the source's handler to end";
  EXPECT_EQ(rt.report().units[1].received, 0U);
}

TEST(Units, APayloadTooLargeForTheTransportIsDroppedAndCountedNotLost) {
  // Over max_message_bytes the receiving unit would refuse the message and
  // drop the connection; the producer drops it instead, counted, and the
  // run ends as usual.
  RunReport r = run("pipeline: big\nunits: 2\ntransport: {max_message_bytes: 65536}\nstages:\n"
                    "  - {id: src, type: sim.source, params: {count: 12, payload_bytes: 65536},\n"
                    "     placement: {units: [u0]}}\n"
                    "  - {id: sink, type: sim.sink, inputs: {in: src/out}, placement: {units: [u1]}}\n");
  ASSERT_TRUE(r.ok) << r.error;
  const EdgeReport* e = r.edge("src/out", "sink/in");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->sent, 12U);
  EXPECT_EQ(e->dropped, 12U);
  EXPECT_EQ(e->too_large, 12U);
  EXPECT_EQ(e->delivered, 0U);
  EXPECT_EQ(counter(r.stage("sink"), "received"), 0);
  for (const auto& u : r.units) EXPECT_EQ(u.rejected, 0U) << u.id << ": nothing too large was sent";
}

TEST(Units, APayloadTooLargeForTheTransportStaysWithAReplicaInItsUnit) {
  // One sink replica on each unit: every large payload goes to the one in
  // the producer's unit; the other gets only the end-of-stream mark.
  RunReport r = run("pipeline: big\nunits: 2\ntransport: {max_message_bytes: 65536}\nstages:\n"
                    "  - {id: src, type: sim.source, params: {count: 40, payload_bytes: 65536},\n"
                    "     placement: {units: [u0]}}\n"
                    "  - {id: sink, type: sim.sink, replicas: 2, inputs: {in: src/out}, placement: {spread: true}}\n");
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.units.size(), 2U);
  EXPECT_EQ(r.units[0].replicas, 2) << "the source and one sink replica";
  EXPECT_EQ(r.units[1].replicas, 1);
  const EdgeReport* e = r.edge("src/out", "sink/in");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->delivered, 40U);
  EXPECT_EQ(e->dropped, 0U);
  EXPECT_EQ(counter(r.stage("sink"), "received"), 40);
  EXPECT_EQ(counter(r.stage("sink"), "reordered"), 0);
  EXPECT_EQ(r.units[1].received, 1U) << "only the end-of-stream mark crossed";
}

/// A source of Blobs under an identifier no unit has registered ("ODDP"),
/// on an output of any type: another unit's transport refuses every one.
class UnknownTypeSource final : public Stage {
 public:
  void setup(StageSpec& s) override {
    out_ = s.output<AnyPayload>("out");
    s.param(count_, "count", "envelopes to make", 10, {1, 1000000});
  }
  Status process(Inputs&, Outputs& out, StageContext&) override {
    if (made_ >= count_) return Status::end_of_stream();
    flatbuffers::FlatBufferBuilder fbb;
    auto data = fbb.CreateVector(std::vector<std::uint8_t>(16, 1));
    fbb.Finish(schema::CreateBlob(fbb, 0, static_cast<std::uint64_t>(made_), data), "ODDP");
    EnvelopeHeader h;
    h.seq = static_cast<std::uint64_t>(made_++);
    out.emit(out_, Payload::from_builder(fbb), h);
    return {};
  }

 private:
  OutputPort<AnyPayload> out_;
  std::int64_t count_ = 0;
  std::int64_t made_ = 0;
};

class AnyInput final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<AnyPayload>("in"); }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<AnyPayload> in_;
};

class RefusedOnArrival : public ::testing::TestWithParam<std::string> {};

TEST_P(RefusedOnArrival, PayloadsStillReturnTheirCredit) {
  // Ten times the queue's capacity, all refused by u1's transport: without
  // their acks the source would run out of credit after four and the run
  // would never end. Packed records and messages of their own alike.
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<UnknownTypeSource>("test.unknown_type_source", "unregistered payloads").ok());
  ASSERT_TRUE(rt.registry().add<AnyInput>("test.any_input", "takes anything").ok());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string("pipeline: refused\nunits: 2\n" + GetParam() + "stages:\n"
                             "  - {id: src, type: test.unknown_type_source, params: {count: 40},\n"
                             "     placement: {units: [u0]}}\n"
                             "  - {id: sink, type: test.any_input, inputs: {in: src/out}, queue: {capacity: 4},\n"
                             "     placement: {units: [u1]}}\n",
                             "refused.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  RunReport r = rt.report();
  const EdgeReport* e = r.edge("src/out", "sink/in");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->sent, 40U);
  EXPECT_EQ(e->refused, 40U);
  EXPECT_EQ(e->dropped, 40U);
  EXPECT_EQ(e->delivered, 0U);
  EXPECT_EQ(r.stage("sink")->processed, 0U);
  ASSERT_EQ(r.units.size(), 2U);
  EXPECT_EQ(r.units[1].rejected, 40U);
  EXPECT_EQ(r.units[1].rejected_by_reason["payload_type"], 40U);
}

INSTANTIATE_TEST_SUITE_P(Packing, RefusedOnArrival,
                         ::testing::Values("", "transport: {pack_below_bytes: 0}\n"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("Packed") : std::string("Unpacked");
                         });

class CrossUnitOverflow : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossUnitOverflow, SlowRemoteConsumerKeepsQueuesBoundedAndCountsDrops) {
  RunReport r = run("pipeline: of\nunits: 2\nstages:\n"
                    "  - {id: src, type: sim.source, params: {count: 500, rate_hz: 20000}, placement: {units: [u0]}}\n"
                    "  - {id: sink, type: sim.sink, inputs: {in: src/out}, params: {service_us: 300},\n"
                    "     placement: {units: [u1]}, queue: {capacity: 4, overflow: " + GetParam() + "}}\n");
  expect_conservation(r);
  const EdgeReport* e = r.edge("src/out", "sink/in");
  ASSERT_NE(e, nullptr);
  EXPECT_LE(e->peak_in_flight, 4U);
  EXPECT_GT(e->dropped, 0U);
  EXPECT_EQ(static_cast<std::uint64_t>(counter(r.stage("sink"), "received")) + e->dropped, 500U);
}

INSTANTIATE_TEST_SUITE_P(Policies, CrossUnitOverflow, ::testing::Values("block", "drop_oldest", "drop_newest"));

}  // namespace
}  // namespace swarmflow

namespace swarmflow {
namespace {

std::string ipc_pipeline(const std::string& dir) {
  return "pipeline: ipc\nunits:\n"
         "  - {id: u0, endpoint: \"ipc://" + dir + "/u0\"}\n"
         "  - {id: u1, endpoint: \"ipc://" + dir + "/u1\"}\n"
         "stages:\n"
         "  - {id: src, type: sim.source, params: {count: 1000, streams: 2}, placement: {units: [u0]}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: src/out}, placement: {units: [u1]}}\n";
}

TEST(Units, IpcEndpointsInAPrivateDirectory) {
  char tmpl[] = "/tmp/swarmflow-ipc-XXXXXX";
  const std::string dir = mkdtemp(tmpl);  // mode 0700
  RunReport r = run(ipc_pipeline(dir));
  EXPECT_EQ(counter(r.stage("sink"), "received"), 1000);
  EXPECT_EQ(counter(r.stage("sink"), "lost"), 0);
  EXPECT_GT(r.units[1].received, 0U);
  std::filesystem::remove_all(dir);
}

TEST(Units, IpcEndpointInADirectoryOthersCanEnterIsRefused) {
  char tmpl[] = "/tmp/swarmflow-ipc-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::filesystem::permissions(dir, std::filesystem::perms::group_read | std::filesystem::perms::group_exec,
                               std::filesystem::perm_options::add);
  Runtime rt;
  ASSERT_TRUE(rt.load_string(ipc_pipeline(dir), "ipc.yaml").ok());
  Status s = rt.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("only this user can enter"), std::string::npos) << s.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace swarmflow
