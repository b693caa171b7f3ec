// The transport's security layer on real sockets: a CURVE ROUTER on an
// ephemeral loopback port, authenticated by a ZapHandler, and DEALER clients
// that are admitted or refused. Outcomes are awaited by bounded polling.

#include "transport/security.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "support/raw_tcp.hpp"

namespace st = swarmflow::transport;
using namespace std::chrono_literals;

namespace {

constexpr char kDomain[] = "swarmflow";
constexpr std::chrono::milliseconds kBudget = 5s;

struct Received {
  std::string payload;
  std::string user_id;
};

// A CURVE ROUTER bound to tcp://127.0.0.1:<ephemeral>, with its monitor.
class Server {
 public:
  Server(zmq::context_t& context, const st::KeyPair& keys, const st::SocketLimits& limits = {})
      : router_(context, zmq::socket_type::router) {
    st::make_curve_server(router_, keys, kDomain);
    st::apply_limits(router_, limits);
    monitor_ = std::make_unique<st::HandshakeMonitor>(context, router_);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  const std::string& endpoint() const { return endpoint_; }
  st::HandshakeMonitor& monitor() { return *monitor_; }
  const std::vector<Received>& received() const { return received_; }

  // Receives messages and drains monitor events until `done` holds (true) or
  // `budget` has passed (false).
  bool pump_until(const std::function<bool()>& done, std::chrono::milliseconds budget = kBudget) {
    const auto deadline = std::chrono::steady_clock::now() + budget;
    for (;;) {
      if (done()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitor_->socket().handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, 20ms);
      if ((items[0].revents & ZMQ_POLLIN) != 0) receive_all();
      if ((items[1].revents & ZMQ_POLLIN) != 0) monitor_->drain();
    }
  }

  bool has_received(const std::string& payload) const {
    for (const auto& r : received_) {
      if (r.payload == payload) return true;
    }
    return false;
  }

 private:
  void receive_all() {
    for (;;) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(router_, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
      Received r;
      r.payload = frames.back().to_string();
      try {
        r.user_id = frames.back().gets("User-Id");
      } catch (const zmq::error_t&) {
        r.user_id.clear();
      }
      received_.push_back(std::move(r));
    }
  }

  zmq::socket_t router_;
  std::unique_ptr<st::HandshakeMonitor> monitor_;  // destroyed before router_
  std::string endpoint_;
  std::vector<Received> received_;
};

// A DEALER connected to `endpoint`: CURVE with `keys` when given, else
// plaintext. A refused client is made with immediate = false, so that its
// messages are queued and would be sent if the connection were ever admitted.
zmq::socket_t connect_client(zmq::context_t& context, const std::string& endpoint, const st::KeyPair* keys,
                             const std::string& server_public, bool immediate = true) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  if (keys != nullptr) st::make_curve_client(socket, *keys, server_public);
  st::SocketLimits limits;
  limits.linger_ms = 0;
  limits.immediate = immediate;
  st::apply_limits(socket, limits);
  socket.set(zmq::sockopt::sndtimeo, static_cast<int>(kBudget.count()));
  socket.connect(endpoint);
  return socket;
}

bool send_text(zmq::socket_t& socket, const std::string& text) {
  return socket.send(zmq::buffer(text), zmq::send_flags::none).has_value();
}

// Sends a marker from an admitted client and waits for it: once it arrives,
// everything a refused client had queued earlier would have arrived too.
void expect_only_marker_arrives(zmq::context_t& context, Server& server, const st::KeyPair& client,
                                const st::KeyPair& server_keys) {
  auto good = connect_client(context, server.endpoint(), &client, server_keys.public_key);
  ASSERT_TRUE(send_text(good, "marker"));
  ASSERT_TRUE(server.pump_until([&] { return server.has_received("marker"); }));
  server.pump_until([] { return false; }, 100ms);
  ASSERT_EQ(server.received().size(), 1u);
  EXPECT_EQ(server.received()[0].payload, "marker");
}

struct Cluster {
  st::KeyPair server = st::generate_keypair();
  st::KeyPair client = st::generate_keypair();
  st::KeyPair stranger = st::generate_keypair();
};

// A directory under /tmp, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string name = "/tmp/swarmflow-security-test-XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

void write_text(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

}  // namespace

// -- admitted and refused peers -----------------------------------------------

TEST(SecurityTransport, ListedKeyIsAdmittedAndNamedAsUserId) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  Server server(context, keys.server);
  auto client = connect_client(context, server.endpoint(), &keys.client, keys.server.public_key);

  ASSERT_TRUE(send_text(client, "hello"));
  ASSERT_TRUE(server.pump_until([&] { return server.has_received("hello"); }));
  EXPECT_EQ(server.received()[0].user_id, keys.client.public_key);
  EXPECT_GE(zap.admitted(), 1u);
  EXPECT_EQ(zap.refused(), 0u);
  ASSERT_TRUE(server.pump_until([&] { return server.monitor().succeeded() >= 1; }));
  EXPECT_EQ(server.monitor().refused(), 0u);
}

TEST(SecurityTransport, PlaintextClientIsRefused) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  Server server(context, keys.server);
  auto plain = connect_client(context, server.endpoint(), nullptr, {}, false);
  ASSERT_TRUE(plain.send(zmq::str_buffer("plaintext"), zmq::send_flags::dontwait));

  ASSERT_TRUE(server.pump_until([&] { return server.monitor().failed_protocol() > 0; }));
  EXPECT_EQ(zap.refused(), 0u);  // refused by libzmq before ZAP is asked
  expect_only_marker_arrives(context, server, keys.client, keys.server);
}

TEST(SecurityTransport, UnknownClientKeyIsRefused) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  Server server(context, keys.server);
  auto stranger = connect_client(context, server.endpoint(), &keys.stranger, keys.server.public_key, false);
  ASSERT_TRUE(stranger.send(zmq::str_buffer("stranger"), zmq::send_flags::dontwait));

  ASSERT_TRUE(server.pump_until([&] { return zap.refused() > 0 && server.monitor().failed_auth() > 0; }));
  expect_only_marker_arrives(context, server, keys.client, keys.server);
}

TEST(SecurityTransport, ClientExpectingAnotherServerKeyIsRefused) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  Server server(context, keys.server);
  const st::KeyPair impostor = st::generate_keypair();
  auto misled = connect_client(context, server.endpoint(), &keys.client, impostor.public_key, false);
  ASSERT_TRUE(misled.send(zmq::str_buffer("misled"), zmq::send_flags::dontwait));

  ASSERT_TRUE(server.pump_until([&] { return server.monitor().failed_protocol() > 0; }));
  EXPECT_EQ(zap.admitted(), 0u);  // the server cannot read its HELLO: ZAP never sees it
  EXPECT_EQ(zap.refused(), 0u);
  expect_only_marker_arrives(context, server, keys.client, keys.server);
}

TEST(SecurityTransport, RevokedKeyIsRefusedOnItsNextHandshake) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key, keys.stranger.public_key});
  zap.revoke(keys.stranger.public_key);
  Server server(context, keys.server);
  auto revoked = connect_client(context, server.endpoint(), &keys.stranger, keys.server.public_key, false);
  ASSERT_TRUE(revoked.send(zmq::str_buffer("revoked"), zmq::send_flags::dontwait));

  ASSERT_TRUE(server.pump_until([&] { return zap.refused() > 0; }));
  expect_only_marker_arrives(context, server, keys.client, keys.server);
}

TEST(SecurityTransport, GarbageOverRawTcpIsRefused) {
  // libzmq reports no handshake event for bytes that are no ZMTP 3 greeting:
  // the connection is accepted and dropped, and the monitor's ledger finds it.
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  Server server(context, keys.server);
  ASSERT_TRUE(swarmflow::testing::send_raw_tcp(server.endpoint(), swarmflow::testing::garbage_bytes(1)));

  ASSERT_TRUE(server.pump_until([&] { return server.monitor().failed_greeting() > 0; }));
  EXPECT_EQ(server.monitor().refused(), server.monitor().failed_greeting());
  EXPECT_EQ(zap.refused(), 0u);
  expect_only_marker_arrives(context, server, keys.client, keys.server);
  EXPECT_EQ(server.monitor().failed_greeting(), 1u);  // the admitted client is not counted
}

TEST(SecurityTransport, WithoutZapHandlerEveryoneIsRefused) {
  // Fail closed: no handler on the context, and ZMQ_ZAP_ENFORCE_DOMAIN makes
  // libzmq refuse rather than admit any key (its default).
  const Cluster keys;
  zmq::context_t context;
  Server server(context, keys.server);
  auto client = connect_client(context, server.endpoint(), &keys.client, keys.server.public_key, false);
  ASSERT_TRUE(client.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait));

  ASSERT_TRUE(server.pump_until([&] { return server.monitor().failed_no_detail() > 0; }));
  server.pump_until([] { return false; }, 100ms);
  EXPECT_TRUE(server.received().empty());
  EXPECT_EQ(server.monitor().succeeded(), 0u);
}

TEST(SecurityTransport, MessageOverTheLimitDropsTheConnection) {
  const Cluster keys;
  zmq::context_t context;
  st::ZapHandler zap(context, kDomain, {keys.client.public_key});
  st::SocketLimits limits;
  limits.max_message_bytes = 4096;
  Server server(context, keys.server, limits);
  auto client = connect_client(context, server.endpoint(), &keys.client, keys.server.public_key);

  const std::string at_limit(4096, 'a');
  ASSERT_TRUE(send_text(client, at_limit));
  ASSERT_TRUE(server.pump_until([&] { return server.has_received(at_limit); }));
  const auto disconnects = server.monitor().disconnected();

  ASSERT_TRUE(send_text(client, std::string(4097, 'b')));
  ASSERT_TRUE(server.pump_until([&] { return server.monitor().disconnected() > disconnects; }));

  // The client notices the drop a little later than the server and then
  // reconnects; what it sends to the dead connection meanwhile is lost, so it
  // sends until one message arrives. The oversized one never does.
  bool arrived = false;
  for (int attempt = 0; attempt < 50 && !arrived; ++attempt) {
    ASSERT_TRUE(send_text(client, "after"));
    arrived = server.pump_until([&] { return server.has_received("after"); }, 100ms);
  }
  ASSERT_TRUE(arrived);
  EXPECT_EQ(server.received()[0].payload.size(), 4096u);
  for (const auto& r : server.received()) EXPECT_NE(r.payload.size(), 4097u);
}

TEST(SecurityTransport, LimitsAreApplied) {
  zmq::context_t context;
  zmq::socket_t plain(context, zmq::socket_type::router);
  const st::SocketLimits limits;
  st::apply_limits(plain, limits);
  EXPECT_EQ(plain.get(zmq::sockopt::maxmsgsize), limits.max_message_bytes);
  EXPECT_EQ(plain.get(zmq::sockopt::sndhwm), 1000);
  EXPECT_EQ(plain.get(zmq::sockopt::rcvhwm), 1000);
  EXPECT_EQ(plain.get(zmq::sockopt::linger), 200);
  EXPECT_EQ(plain.get(zmq::sockopt::immediate), 1);
  EXPECT_EQ(plain.get(zmq::sockopt::handshake_ivl), 2000);

  // Under CURVE libzmq counts encrypted frames; the overhead is added.
  zmq::socket_t curve(context, zmq::socket_type::router);
  st::make_curve_server(curve, st::generate_keypair(), kDomain);
  st::apply_limits(curve, limits);
  EXPECT_EQ(curve.get(zmq::sockopt::maxmsgsize), limits.max_message_bytes + st::kCurveFrameOverhead);
}

TEST(SecurityTransport, CurveSetupRefusesBadKeysAndEmptyDomain) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::router);
  const st::KeyPair good = st::generate_keypair();
  EXPECT_THROW(st::make_curve_server(socket, good, ""), std::invalid_argument);
  EXPECT_THROW(st::make_curve_server(socket, {good.public_key, "short"}, kDomain), std::invalid_argument);
  zmq::socket_t client(context, zmq::socket_type::dealer);
  // 32 characters: cppzmq would pass them to libzmq as a binary key.
  EXPECT_THROW(st::make_curve_client(client, good, std::string(32, 'a')), std::invalid_argument);
  EXPECT_THROW(st::make_curve_client(client, good, std::string(40, '~')), std::invalid_argument);
}

// -- the handshake ledger ------------------------------------------------------

namespace {

using LedgerClock = st::HandshakeLedger::Clock;
constexpr auto kLimit = std::chrono::seconds(3);

}  // namespace

TEST(HandshakeLedger, ConnectionWithAResultIsNotSilent) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(7, t0);
  ledger.result();  // succeeded or failed: counted by its own event
  EXPECT_EQ(ledger.disconnected(7), 0u);
  EXPECT_EQ(ledger.unsettled(), 0u);
}

TEST(HandshakeLedger, ConnectionClosedWithoutAResultIsSilent) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(7, t0);
  EXPECT_EQ(ledger.disconnected(7), 1u);
  EXPECT_EQ(ledger.disconnected(7), 0u);  // counted once
  EXPECT_EQ(ledger.unsettled(), 0u);
}

TEST(HandshakeLedger, AdmittedConnectionStaysOutOfLaterCounts) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(5, t0);
  ledger.result();
  ledger.accepted(6, t0);  // garbage while 5 stays connected
  EXPECT_EQ(ledger.disconnected(6), 1u);
  ledger.accepted(6, t0);  // the descriptor is used again
  ledger.result();
  EXPECT_EQ(ledger.disconnected(6), 0u);
  EXPECT_EQ(ledger.disconnected(5), 0u);
}

TEST(HandshakeLedger, OverlapIsSettledWhenEveryCandidateHasClosed) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(5, t0);
  ledger.accepted(6, t0);
  ledger.result();  // 5's or 6's
  EXPECT_EQ(ledger.disconnected(6), 0u);  // not known yet
  EXPECT_EQ(ledger.disconnected(5), 1u);  // two closed, one result: one was silent
  EXPECT_EQ(ledger.unsettled(), 0u);
}

TEST(HandshakeLedger, OverlapIsSettledWhenEveryCandidateHasAResult) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(5, t0);
  ledger.accepted(6, t0);
  ledger.result();
  EXPECT_EQ(ledger.disconnected(6), 0u);
  ledger.result();  // 5's: so the first was 6's
  EXPECT_EQ(ledger.unsettled(), 0u);
  EXPECT_EQ(ledger.disconnected(5), 0u);
}

TEST(HandshakeLedger, OverlapIsSettledByTheHandshakeLimit) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(kLimit);
  ledger.accepted(5, t0);
  ledger.accepted(6, t0);
  ledger.result();  // 5 is admitted and stays; 6 sent garbage
  EXPECT_EQ(ledger.disconnected(6), 0u);
  EXPECT_EQ(ledger.expire(t0 + kLimit - std::chrono::milliseconds(1)), 0u);
  // 5 is still open past the limit, so the result was its own.
  EXPECT_EQ(ledger.expire(t0 + kLimit), 1u);
  EXPECT_EQ(ledger.unsettled(), 0u);
  EXPECT_EQ(ledger.disconnected(5), 0u);
}

TEST(HandshakeLedger, WithoutALimitNothingExpires) {
  const auto t0 = LedgerClock::time_point{};
  st::HandshakeLedger ledger(LedgerClock::duration::zero());
  ledger.accepted(5, t0);
  ledger.accepted(6, t0);
  ledger.result();
  EXPECT_EQ(ledger.disconnected(6), 0u);
  EXPECT_EQ(ledger.expire(t0 + std::chrono::hours(1)), 0u);
  EXPECT_EQ(ledger.disconnected(5), 1u);
}

// -- the ZAP handler --------------------------------------------------------

TEST(ZapHandler, OnePerContext) {
  zmq::context_t context;
  st::ZapHandler first(context, kDomain);
  try {
    st::ZapHandler second(context, kDomain);
    FAIL() << "a second handler bound the ZAP endpoint";
  } catch (const zmq::error_t& e) {
    EXPECT_EQ(e.num(), EADDRINUSE);
  }
  zmq::context_t other;
  EXPECT_NO_THROW(st::ZapHandler(other, kDomain));
}

TEST(ZapHandler, RefusesBadConfiguration) {
  zmq::context_t context;
  EXPECT_THROW(st::ZapHandler(context, ""), std::invalid_argument);
  EXPECT_THROW(st::ZapHandler(context, kDomain, {"not a key"}), std::invalid_argument);
  st::ZapHandler zap(context, kDomain);
  EXPECT_FALSE(zap.allow(std::string(40, '~')));
  EXPECT_TRUE(zap.allow(st::generate_keypair().public_key));
}

TEST(ZapHandler, StartsAndStopsRepeatedly) {
  zmq::context_t context;
  for (int i = 0; i < 20; ++i) {
    st::ZapHandler zap(context, kDomain);
    EXPECT_EQ(zap.domain(), kDomain);
  }
}

// -- logging at a limited rate -------------------------------------------------

TEST(SecurityRateLimitedLog, LogsOncePerIntervalAndCountsTheRest) {
  st::RateLimitedLog log(1s);
  const auto t0 = st::RateLimitedLog::Clock::time_point{} + 100s;
  EXPECT_EQ(log.admit(t0), std::optional<std::uint64_t>(0));
  EXPECT_FALSE(log.admit(t0 + 100ms));
  EXPECT_FALSE(log.admit(t0 + 999ms));
  EXPECT_EQ(log.admit(t0 + 1s), std::optional<std::uint64_t>(2));
  EXPECT_FALSE(log.admit(t0 + 1500ms));
  EXPECT_EQ(log.admit(t0 + 5s), std::optional<std::uint64_t>(1));
  EXPECT_EQ(log.admit(t0 + 7s), std::optional<std::uint64_t>(0));
}

// -- key files --------------------------------------------------------------

TEST(Keys, GeneratedPairIsValid) {
  ASSERT_TRUE(st::curve_available());
  const st::KeyPair keys = st::generate_keypair();
  EXPECT_EQ(keys.public_key.size(), st::kZ85KeySize);
  EXPECT_TRUE(st::is_z85_key(keys.public_key));
  EXPECT_TRUE(st::is_z85_key(keys.secret_key));
  EXPECT_EQ(st::public_key_of(keys.secret_key), keys.public_key);
  EXPECT_NE(st::generate_keypair().public_key, keys.public_key);
}

TEST(Keys, FilesRoundTripWithPrivateModes) {
  const TempDir dir;
  const std::string path = dir.path() + "/unit-a.key";
  const st::KeyPair keys = st::generate_keypair();
  ASSERT_TRUE(st::write_keypair(path, keys).ok());
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(mode_of(path + ".pub"), 0644u);

  std::string error;
  const auto read = st::read_keypair(path, &error);
  ASSERT_TRUE(read) << error;
  EXPECT_EQ(read->public_key, keys.public_key);
  EXPECT_EQ(read->secret_key, keys.secret_key);
  EXPECT_EQ(st::read_public_key(path + ".pub", &error), keys.public_key) << error;
  EXPECT_EQ(st::read_public_key(path, &error), keys.public_key) << error;
  EXPECT_EQ(st::read_public_key(keys.public_key, &error), keys.public_key) << error;

  // The public file carries no secret.
  std::ifstream pub(path + ".pub");
  const std::string pub_text((std::istreambuf_iterator<char>(pub)), std::istreambuf_iterator<char>());
  EXPECT_EQ(pub_text.find(keys.secret_key), std::string::npos);
  EXPECT_FALSE(st::read_keypair(path + ".pub", &error));
  EXPECT_NE(error.find("no secret-key"), std::string::npos) << error;
}

TEST(Keys, WriteRefusesToOverwriteUnlessAsked) {
  const TempDir dir;
  const std::string path = dir.path() + "/unit-a.key";
  const st::KeyPair first = st::generate_keypair();
  const st::KeyPair second = st::generate_keypair();
  ASSERT_TRUE(st::write_keypair(path, first).ok());

  const swarmflow::Status refused = st::write_keypair(path, second);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("exists"), std::string::npos) << refused.message();
  EXPECT_EQ(st::read_keypair(path, nullptr)->secret_key, first.secret_key);

  // Only the .pub exists: still refused, and the secret file is not created.
  const std::string lone = dir.path() + "/unit-b.key";
  write_text(lone + ".pub", "x", 0644);
  EXPECT_FALSE(st::write_keypair(lone, second).ok());
  EXPECT_FALSE(std::filesystem::exists(lone));

  ASSERT_TRUE(st::write_keypair(path, second, true).ok());
  EXPECT_EQ(st::read_keypair(path, nullptr)->secret_key, second.secret_key);
  EXPECT_EQ(st::read_public_key(path + ".pub", nullptr), second.public_key);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()),
            3);  // no temporary files left beside them
}

TEST(Keys, BadKeysAreRefused) {
  const TempDir dir;
  const st::KeyPair keys = st::generate_keypair();
  const st::KeyPair other = st::generate_keypair();
  std::string error;

  EXPECT_FALSE(st::write_keypair(dir.path() + "/mixed.key", {other.public_key, keys.secret_key}).ok());
  EXPECT_FALSE(st::write_keypair(dir.path() + "/short.key", {"abc", "def"}).ok());

  EXPECT_FALSE(st::is_z85_key(keys.public_key.substr(1)));
  EXPECT_FALSE(st::is_z85_key(std::string(40, '~')));
  EXPECT_FALSE(st::is_z85_key(keys.public_key.substr(0, 39) + std::string(1, '\0')));
  EXPECT_FALSE(st::read_public_key("not-a-key-nor-a-file", &error));
  EXPECT_NE(error.find("40-character"), std::string::npos) << error;

  const std::string mismatched = dir.path() + "/mismatched.key";
  write_text(mismatched, "curve\n    public-key = \"" + other.public_key + "\"\n    secret-key = \"" +
                             keys.secret_key + "\"\n");
  EXPECT_FALSE(st::read_keypair(mismatched, &error));
  EXPECT_NE(error.find("does not belong"), std::string::npos) << error;

  const std::string truncated = dir.path() + "/truncated.key";
  write_text(truncated, "curve\n    secret-key = \"" + keys.secret_key.substr(0, 39) + "\"\n");
  EXPECT_FALSE(st::read_keypair(truncated, &error));
  EXPECT_NE(error.find("40 Z85"), std::string::npos) << error;

  const std::string wrong_section = dir.path() + "/metadata.key";
  write_text(wrong_section, "metadata\n    secret-key = \"" + keys.secret_key + "\"\n");
  EXPECT_FALSE(st::read_keypair(wrong_section, &error));

  const std::string bad_pub = dir.path() + "/bad.pub";
  write_text(bad_pub, "curve\n    public-key = \"" + std::string(40, '~') + "\"\n", 0644);
  EXPECT_FALSE(st::read_public_key(bad_pub, &error));
}

TEST(Keys, SecretFileReadableByOthersIsRefused) {
  const TempDir dir;
  const std::string path = dir.path() + "/unit-a.key";
  ASSERT_TRUE(st::write_keypair(path, st::generate_keypair()).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  std::string error;
  EXPECT_FALSE(st::read_keypair(path, &error));
  EXPECT_NE(error.find("chmod 600"), std::string::npos) << error;
}

// -- the ipc directory ------------------------------------------------------

class SecurityIpcDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("XDG_RUNTIME_DIR")) saved_ = old;
    ASSERT_EQ(::chmod(runtime_.path().c_str(), 0700), 0);
    ::setenv("XDG_RUNTIME_DIR", runtime_.path().c_str(), 1);
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("XDG_RUNTIME_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }

  TempDir runtime_;
  std::optional<std::string> saved_;
};

TEST_F(SecurityIpcDir, IsCreatedPrivateUnderTheRuntimeDir) {
  std::string dir;
  const swarmflow::Status status = st::make_private_ipc_dir(&dir);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(dir, runtime_.path() + "/swarmflow");
  EXPECT_EQ(mode_of(dir), 0700u);
  std::string again;
  ASSERT_TRUE(st::make_private_ipc_dir(&again).ok());
  EXPECT_EQ(again, dir);

  EXPECT_EQ(st::ipc_endpoint(dir, "unit-a"), "ipc://" + dir + "/unit-a");
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  EXPECT_NO_THROW(socket.bind(st::ipc_endpoint(dir, "unit-a")));
}

TEST_F(SecurityIpcDir, OpenModesAreRefused) {
  const std::string dir = runtime_.path() + "/swarmflow";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  const swarmflow::Status status = st::make_private_ipc_dir(nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("chmod 700"), std::string::npos) << status.message();
}

TEST_F(SecurityIpcDir, SymbolicLinkIsRefused) {
  const TempDir elsewhere;
  ASSERT_EQ(::chmod(elsewhere.path().c_str(), 0700), 0);
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), (runtime_.path() + "/swarmflow").c_str()), 0);
  const swarmflow::Status status = st::make_private_ipc_dir(nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("symbolic link"), std::string::npos) << status.message();
}
