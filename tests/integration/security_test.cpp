// A secured cluster under attack: while a pipeline runs over three unit
// processes on tcp loopback, peers without the right keys (and garbage) try to
// connect to a unit and to the coordinator, an
// admitted peer floods a unit with malformed messages, and an admitted peer
// sends a message over the unit's size limit. The pipeline's results do not
// change, and every refusal and rejection is counted.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "support/process.hpp"
#include "support/raw_tcp.hpp"
#include "transport/security.hpp"
#include "transport/wire.hpp"

namespace {

using namespace swarmflow::testing;
namespace transport = swarmflow::transport;

std::string tcp(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

void keygen(const TempDir& dir, const std::string& name) {
  pid_t p = spawn_cli({"keygen", dir.file(name + ".key")}, dir.file("keygen.out"), dir.file("keygen.err"));
  ASSERT_EQ(wait_exit(p), 0) << slurp(dir.file("keygen.err"));
}

transport::KeyPair keys_of(const TempDir& dir, const std::string& name) {
  std::string error;
  auto k = transport::read_keypair(dir.file(name + ".key"), &error);
  EXPECT_TRUE(k.has_value()) << error;
  return k.value_or(transport::KeyPair{});
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

/// Sends `messages` (each a list of frames) from a DEALER set up by `setup`.
void send_from(zmq::context_t& ctx, const std::string& endpoint, const std::function<void(zmq::socket_t&)>& setup,
               const std::vector<std::vector<std::string>>& messages) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 1000);
  setup(s);
  s.connect(endpoint);
  for (const auto& frames : messages) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      s.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the handshake run its course
}

std::vector<std::vector<std::string>> malformed_messages(int n) {
  std::mt19937 rng(7);
  std::vector<std::vector<std::string>> out;
  std::string destination(transport::kDestinationSize, '\0');
  transport::encode_destination(transport::Destination{transport::FrameKind::deliver, 1, 0, 1},
                                reinterpret_cast<std::uint8_t*>(destination.data()));
  for (int i = 0; i < n; ++i) {
    std::string noise(1 + rng() % 200, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    switch (i % 6) {
      case 0: out.push_back({noise}); break;                             // wrong part count
      case 1: out.push_back({noise, noise, noise}); break;               // bad destination
      case 2: out.push_back({destination, noise, noise}); break;         // bad header
      case 3: out.push_back({destination, noise, noise, noise}); break;  // four parts
      case 4: out.push_back({"SFPK\x01" + noise}); break;                 // a pack's head, then noise
      default: {                                                          // a well-framed pack, bad record
        if (noise.size() == transport::kRecordHeaderSize || noise.size() == transport::kShortRecordHeaderSize) {
          noise.push_back('x');
        }
        transport::PackWriter pack;
        pack.add(transport::Destination{transport::FrameKind::deliver, 1, 0, 1},
                 reinterpret_cast<const std::uint8_t*>(noise.data()), noise.size(), nullptr, 0);
        out.push_back({std::string(reinterpret_cast<const char*>(pack.data()), pack.size())});
        break;
      }
    }
  }
  return out;
}

/// A pipeline over three unit processes on tcp loopback, each unit with its
/// own CURVE keys: u0 runs the coordinator and the source, u1 the work stage,
/// u2 the sinks. A fourth key pair, "stranger", is admitted by no unit. The
/// run is under way (the sink has written lines) when a test starts.
class SecuredCluster : public ::testing::Test {
 protected:
  static constexpr std::chrono::seconds kBudget{120};

  void SetUp() override {
    for (const char* k : {"u0", "u1", "u2", "stranger"}) ASSERT_NO_FATAL_FAILURE(keygen(dir_, k));
    u1_endpoint_ = tcp(free_port());
    coordinator_endpoint_ = tcp(free_port());
    lines_ = dir_.file("lines.jsonl");
    report_ = dir_.file("report.json");
    const std::string file = dir_.write(
        "secured.yaml",
        "pipeline: secured\n"
        "coordinator: \"" + coordinator_endpoint_ + "\"\n"
        "coordinator_key: u0.key.pub\n"
        "units:\n"
        "  - {id: u0, endpoint: \"" + tcp(free_port()) + "\", public_key: u0.key.pub}\n"
        "  - {id: u1, endpoint: \"" + u1_endpoint_ + "\", public_key: u1.key.pub}\n"
        "  - {id: u2, endpoint: \"" + tcp(free_port()) + "\", public_key: u2.key.pub}\n"
        "stages:\n"
        "  - {id: source, type: sim.source, params: {count: 0, streams: 2}, placement: {units: [u0]}}\n"
        "  - {id: work, type: sim.work, inputs: {in: source/out}, params: {service_us: 200}, placement: {units: [u1]}}\n"
        "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u2]}}\n"
        "  - {id: dump, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + lines_ + "\", flush: true},\n"
        "     placement: {units: [u2]}}\n");
    u1_ = spawn_cli({"unit", file, "--id", "u1", "--secret-key", dir_.file("u1.key")}, dir_.file("u1.out"),
                    dir_.file("u1.err"));
    u2_ = spawn_cli({"unit", file, "--id", "u2", "--secret-key", dir_.file("u2.key")}, dir_.file("u2.out"),
                    dir_.file("u2.err"));
    coordinator_ = spawn_cli(
        {"run", file, "--quiet", "--units", "u0", "--secret-key", dir_.file("u0.key"), "--report", report_},
        dir_.file("c.out"), dir_.file("c.err"));
    ASSERT_NO_FATAL_FAILURE(wait_for_lines(20));
  }

  /// A test that failed half-way leaves no process behind.
  void TearDown() override {
    for (pid_t* p : {&coordinator_, &u1_, &u2_}) {
      if (*p <= 0) continue;
      kill(*p, SIGKILL);
      waitpid(*p, nullptr, 0);
    }
  }

  /// Waits until the dump sink has written `n` lines; fails if the
  /// coordinator exits first.
  void wait_for_lines(int n) {
    const auto deadline = std::chrono::steady_clock::now() + kBudget;
    while (count_lines(lines_) < n) {
      int status = 0;
      ASSERT_EQ(waitpid(coordinator_, &status, WNOHANG), 0) << slurp(dir_.file("c.err"));
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the sink has not written " << n << " lines";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// Stops the run (SIGINT to the coordinator), waits for every process and
  /// returns the coordinator's report.
  nlohmann::json stop() {
    kill(coordinator_, SIGINT);
    const int coordinator_exit = wait_exit(std::exchange(coordinator_, -1));
    const int u1_exit = wait_exit(std::exchange(u1_, -1));
    const int u2_exit = wait_exit(std::exchange(u2_, -1));
    EXPECT_EQ(coordinator_exit, 0) << slurp(dir_.file("c.err"));
    EXPECT_EQ(u1_exit, 0) << slurp(dir_.file("u1.err"));
    EXPECT_EQ(u2_exit, 0) << slurp(dir_.file("u2.err"));
    return nlohmann::json::parse(slurp(report_));
  }

  /// The invariants at the sinks: everything produced arrived once, nothing
  /// lost, and every edge accounts for what it sent.
  static void expect_results_unchanged(const nlohmann::json& r) {
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump(2);
    const auto produced = r["stages"]["source"]["processed"].get<std::int64_t>();
    EXPECT_GT(produced, 0);
    EXPECT_EQ(r["sinks"]["sink"]["received"].get<std::int64_t>(), produced);
    EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
    EXPECT_EQ(r["sinks"]["sink"]["duplicate"], 0);
    EXPECT_EQ(r["stages"]["work"]["processed"].get<std::int64_t>(), produced);
    for (const auto& e : r["edges"]) {
      EXPECT_EQ(e["sent"].get<std::uint64_t>(),
                e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>());
    }
  }

  TempDir dir_;
  std::string u1_endpoint_;
  std::string coordinator_endpoint_;
  std::string lines_;
  std::string report_;
  pid_t u1_ = -1;
  pid_t u2_ = -1;
  pid_t coordinator_ = -1;
};

TEST_F(SecuredCluster, AttacksDoNotChangeResultsAndAreCounted) {
  const transport::KeyPair u0 = keys_of(dir_, "u0");
  const transport::KeyPair u1_keys = keys_of(dir_, "u1");
  const transport::KeyPair u2_keys = keys_of(dir_, "u2");
  const transport::KeyPair stranger = keys_of(dir_, "stranger");
  zmq::context_t ctx;
  const auto junk = malformed_messages(400);
  // A plaintext peer.
  send_from(ctx, u1_endpoint_, [](zmq::socket_t& s) { s.set(zmq::sockopt::routing_id, "u2"); }, junk);
  // A peer whose key is not listed.
  send_from(ctx, u1_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, stranger, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  // A peer that expects another server key.
  send_from(ctx, u1_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u0.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  // An admitted peer flooding malformed messages, and one with an unknown unit id.
  send_from(ctx, u1_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  send_from(ctx, u1_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "intruder");
  }, {{"hello"}});

  // The same refused peers, and garbage, at the coordinator's control socket.
  ASSERT_TRUE(send_raw_tcp(coordinator_endpoint_, garbage_bytes(11)));
  const std::vector<std::vector<std::string>> heartbeat_like = {{"u2"}};
  send_from(ctx, coordinator_endpoint_, [](zmq::socket_t& s) { s.set(zmq::sockopt::routing_id, "u2"); },
            heartbeat_like);
  send_from(ctx, coordinator_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, stranger, u0.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, heartbeat_like);
  send_from(ctx, coordinator_endpoint_, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, heartbeat_like);

  const auto r = stop();
  expect_results_unchanged(r);
  const auto& unit = r["units"]["u1"];
  EXPECT_GE(unit["refused_handshakes"].get<std::uint64_t>(), 3U) << unit.dump(2);
  EXPECT_GE(r["coordinator"]["refused_handshakes"].get<std::uint64_t>(), 4U) << r["coordinator"].dump(2);
  EXPECT_NE(slurp(dir_.file("c.err")).find("refused"), std::string::npos) << "refusals are logged";
  EXPECT_EQ(unit["rejected"].get<std::uint64_t>(), junk.size()) << unit.dump(2);
  EXPECT_GE(unit["unknown_peer"].get<std::uint64_t>(), 1U) << unit.dump(2);
  EXPECT_NE(slurp(dir_.file("u1.err")).find("dropped"), std::string::npos) << "rejections are logged";
}

/// Counts the handshakes and disconnections of one socket, from its ZeroMQ
/// socket monitor.
class ConnectionEvents : public zmq::monitor_t {
 public:
  int handshakes() const { return handshakes_; }
  int disconnects() const { return disconnects_; }

  /// Handles events until `done` holds (true) or `budget` has passed (false).
  bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds budget) {
    const auto deadline = std::chrono::steady_clock::now() + budget;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      check_event(20);
    }
    return true;
  }
  /// Handles the events already queued.
  void drain() {
    while (check_event(0)) {
    }
  }

 private:
  void on_event_handshake_succeeded(const zmq_event_t&, const char*) override { ++handshakes_; }
  void on_event_disconnected(const zmq_event_t&, const char*) override { ++disconnects_; }

  int handshakes_ = 0;
  int disconnects_ = 0;
};

/// Sends a deliver message from `peer` as a unit would send it: a destination
/// (the work stage), a valid header naming a Blob, and `payload` as its third
/// frame.
void send_deliver(zmq::socket_t& peer, zmq::message_t payload) {
  std::string destination(transport::kDestinationSize, '\0');
  transport::encode_destination(transport::Destination{transport::FrameKind::deliver, 1, 0, 1},
                                reinterpret_cast<std::uint8_t*>(destination.data()));
  transport::WireHeader header;
  header.edge = 0;
  header.envelope.stream = 0;
  header.envelope.seq = 1;
  header.payload_id = "SFBL";
  flatbuffers::FlatBufferBuilder fbb;
  transport::encode_header(header, fbb);
  peer.send(zmq::buffer(destination), zmq::send_flags::sndmore);
  peer.send(zmq::buffer(fbb.GetBufferPointer(), fbb.GetSize()), zmq::send_flags::sndmore);
  peer.send(std::move(payload), zmq::send_flags::none);
}

zmq::message_t filled(std::size_t size, std::uint8_t byte) {
  zmq::message_t m(size);
  std::memset(m.data(), byte, size);
  return m;
}

// The issue "units across processes": a message one byte over the size limit
// disconnects its sender, on a running unit. The unit's ROUTER has
// ZMQ_MAXMSGSIZE = max_payload_bytes + max_header_bytes (WireLimits'
// defaults; a unit cannot be given others), plus kCurveFrameOverhead that
// apply_limits adds because libzmq compares the limit with the encrypted
// frame: so a frame of exactly `limit` bytes, as sent, is admitted, and one of
// `limit + 1` is not.
TEST_F(SecuredCluster, MessageOneByteOverTheLimitDisconnectsItsSender) {
  const transport::WireLimits defaults;
  const std::size_t limit = defaults.max_payload_bytes + defaults.max_header_bytes;

  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);  // admitted: u2's keys and unit id
  peer.set(zmq::sockopt::linger, 0);
  transport::make_curve_client(peer, keys_of(dir_, "u2"), keys_of(dir_, "u1").public_key);
  peer.set(zmq::sockopt::routing_id, "u2");
  ConnectionEvents events;  // destroyed before `peer`: it stops monitoring it
  events.init(peer, "inproc://oversize-peer-events", ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
  peer.connect(u1_endpoint_);
  ASSERT_TRUE(events.wait_until([&] { return events.handshakes() == 1; }, kBudget));

  // At the limit: libzmq lets it through, verification drops it (its payload
  // is above max_payload_bytes) and counts it.
  send_deliver(peer, filled(limit, 0x5A));
  // One byte over: libzmq drops the connection; the unit never sees it.
  send_deliver(peer, filled(limit + 1, 0x5A));
  ASSERT_TRUE(events.wait_until([&] { return events.disconnects() == 1; }, kBudget))
      << "the sender of an oversized message was not disconnected";

  // The peer is still admitted: it reconnects, and a well-formed message with
  // a Blob payload that fails its Verifier is counted as before.
  ASSERT_TRUE(events.wait_until([&] { return events.handshakes() == 2; }, kBudget));
  zmq::message_t garbage = filled(16, 0xFF);
  std::memcpy(static_cast<char*>(garbage.data()) + 4, "SFBL", 4);
  send_deliver(peer, std::move(garbage));
  // Let the pipeline run on a while, so that u1 reads what was sent.
  ASSERT_NO_FATAL_FAILURE(wait_for_lines(count_lines(lines_) + 200));
  events.drain();
  EXPECT_EQ(events.disconnects(), 1);
  EXPECT_EQ(events.handshakes(), 2);

  const auto r = stop();
  expect_results_unchanged(r);
  const auto& unit = r["units"]["u1"];
  EXPECT_EQ(unit["rejected"].get<std::uint64_t>(), 2U) << unit.dump(2);
  EXPECT_EQ(unit["rejected_by_reason"], (nlohmann::json{{"payload_size", 1}, {"payload_invalid", 1}}))
      << unit.dump(2);
  EXPECT_EQ(unit["unknown_peer"].get<std::uint64_t>(), 0U) << unit.dump(2);
}

}  // namespace
