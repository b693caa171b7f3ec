// The coordinator's control socket on tcp loopback: a CURVE ROUTER whose
// context's ZapHandler admits one unit. Peers that must not get in (plaintext,
// another server key, a key not admitted, garbage) are refused and counted,
// and the admitted unit still gets through afterwards. Outcomes are awaited by
// bounded polling.

#include "transport/control.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "support/raw_tcp.hpp"
#include "transport/security.hpp"
#include "transport/transport.hpp"

namespace st = swarmflow::transport;
namespace schema = swarmflow::schema;
using namespace std::chrono_literals;

namespace {

constexpr std::chrono::milliseconds kBudget = 20s;

/// Polls `done` until it holds (true) or `budget` has passed (false).
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds budget = kBudget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

st::ControlBuffer heartbeat(const std::string& unit_id) {
  return st::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::Heartbeat,
                          schema::CreateHeartbeat(fbb, fbb.CreateString(unit_id), 0, 0, 0).Union());
  });
}

class ControlServerSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    // The ZAP handler exists before the server binds (fail closed).
    zap_ = std::make_unique<st::ZapHandler>(context_, st::kZapDomain, std::vector<std::string>{unit_.public_key});
    st::ControlServerConfig config;
    config.endpoint = "tcp://127.0.0.1:*";
    config.public_key = coordinator_.public_key;
    config.secret_key = coordinator_.secret_key;
    config.linger_ms = 0;
    server_ = std::make_unique<st::ControlServer>(
        context_, config, [this](const std::string& unit_id, const schema::Control& message) {
          std::lock_guard<std::mutex> lock(mutex_);
          if (message.body_type() == schema::ControlBody::Heartbeat) heard_.push_back(unit_id);
        });
    const swarmflow::Status started = server_->start();
    ASSERT_TRUE(started.ok()) << started.message();
    endpoint_ = server_->bound_endpoint();
  }

  /// Sockets close before the ZAP handler, and that before the context.
  void TearDown() override {
    server_.reset();
    zap_.reset();
  }

  /// A DEALER named `routing_id`: CURVE with `keys` expecting the server key
  /// `server_public` when `keys` is given, else plaintext. Messages wait for
  /// a connection (immediate off), so a refused peer's would arrive if it
  /// were ever let in.
  zmq::socket_t client(const std::string& routing_id, const st::KeyPair* keys, const std::string& server_public) {
    zmq::socket_t socket(context_, zmq::socket_type::dealer);
    if (keys != nullptr) st::make_curve_client(socket, *keys, server_public);
    st::SocketLimits limits;
    limits.linger_ms = 0;
    limits.immediate = false;
    st::apply_limits(socket, limits);
    socket.set(zmq::sockopt::routing_id, routing_id);
    socket.connect(endpoint_);
    return socket;
  }

  static void send_heartbeat(zmq::socket_t& socket, const std::string& unit_id) {
    const st::ControlBuffer message = heartbeat(unit_id);
    ASSERT_TRUE(socket.send(zmq::const_buffer(message.data(), message.size()), zmq::send_flags::dontwait));
  }

  std::size_t heard_from(const std::string& unit_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t n = 0;
    for (const auto& u : heard_) n += u == unit_id ? 1 : 0;
    return n;
  }

  /// Waits until at least `n` handshakes have been refused.
  void expect_refused(std::uint64_t n) {
    ASSERT_TRUE(wait_until([&] { return server_->refused_handshakes() >= n; }))
        << "refused handshakes: " << server_->refused_handshakes();
  }

  /// The admitted unit gets through; nothing from `intruder` ever did.
  void expect_admitted_unit_gets_through(const std::string& intruder) {
    auto unit = client("u1", &unit_, coordinator_.public_key);
    send_heartbeat(unit, "u1");
    ASSERT_TRUE(wait_until([&] { return heard_from("u1") >= 1; }));
    EXPECT_EQ(heard_from(intruder), 0u);
  }

  zmq::context_t context_;
  st::KeyPair coordinator_ = st::generate_keypair();
  st::KeyPair unit_ = st::generate_keypair();
  std::unique_ptr<st::ZapHandler> zap_;
  std::unique_ptr<st::ControlServer> server_;
  std::string endpoint_;
  std::mutex mutex_;
  std::vector<std::string> heard_;
};

}  // namespace

TEST_F(ControlServerSecurity, AdmittedUnitIsNotCounted) {
  expect_admitted_unit_gets_through("intruder");
  EXPECT_EQ(server_->refused_handshakes(), 0u);
  EXPECT_EQ(zap_->refused(), 0u);
}

TEST_F(ControlServerSecurity, PlaintextPeerIsRefusedAndCounted) {
  auto plain = client("intruder", nullptr, {});
  send_heartbeat(plain, "intruder");
  expect_refused(1);
  EXPECT_EQ(zap_->refused(), 0u);  // refused by libzmq before ZAP is asked
  expect_admitted_unit_gets_through("intruder");
}

TEST_F(ControlServerSecurity, PeerExpectingAnotherServerKeyIsRefusedAndCounted) {
  const st::KeyPair impostor = st::generate_keypair();
  auto misled = client("intruder", &unit_, impostor.public_key);
  send_heartbeat(misled, "intruder");
  expect_refused(1);
  EXPECT_EQ(zap_->admitted(), 0u);  // the server cannot read its HELLO
  expect_admitted_unit_gets_through("intruder");
}

TEST_F(ControlServerSecurity, ClientKeyNotAdmittedIsRefusedAndCounted) {
  const st::KeyPair stranger = st::generate_keypair();
  auto peer = client("intruder", &stranger, coordinator_.public_key);
  send_heartbeat(peer, "intruder");
  expect_refused(1);
  EXPECT_GE(zap_->refused(), 1u);
  expect_admitted_unit_gets_through("intruder");
}

TEST_F(ControlServerSecurity, GarbageOverRawTcpIsRefusedAndCounted) {
  ASSERT_TRUE(swarmflow::testing::send_raw_tcp(endpoint_, swarmflow::testing::garbage_bytes(3)));
  expect_refused(1);
  const auto before = server_->refused_handshakes();
  expect_admitted_unit_gets_through("intruder");
  EXPECT_EQ(server_->refused_handshakes(), before);  // the unit's handshake is not a refusal
}

TEST_F(ControlServerSecurity, EveryKindIsCountedAndTheUnitStillGetsIn) {
  const st::KeyPair stranger = st::generate_keypair();
  const st::KeyPair impostor = st::generate_keypair();
  auto plain = client("intruder", nullptr, {});
  auto misled = client("intruder", &unit_, impostor.public_key);
  auto peer = client("intruder", &stranger, coordinator_.public_key);
  for (auto* s : {&plain, &misled, &peer}) send_heartbeat(*s, "intruder");
  for (unsigned seed = 0; seed < 3; ++seed) {
    ASSERT_TRUE(swarmflow::testing::send_raw_tcp(endpoint_, swarmflow::testing::garbage_bytes(seed)));
  }
  expect_refused(6);
  expect_admitted_unit_gets_through("intruder");
}

TEST(ControlServer, WithoutCurveThereIsNoHandshakeToRefuse) {
  zmq::context_t context;
  st::ControlServerConfig config;
  config.endpoint = "inproc://swarmflow-control-test";
  st::ControlServer server(context, config, [](const std::string&, const schema::Control&) {});
  ASSERT_TRUE(server.start().ok());
  EXPECT_EQ(server.refused_handshakes(), 0u);
  server.stop();
}
