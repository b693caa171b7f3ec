// A secured cluster under attack: while a pipeline runs over three unit
// processes on tcp loopback, peers without the right keys try to connect and
// an admitted peer floods a unit with malformed messages. The pipeline's
// results do not change, and every refusal and rejection is counted.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "support/process.hpp"
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
    switch (i % 4) {
      case 0: out.push_back({noise}); break;                             // wrong part count
      case 1: out.push_back({noise, noise, noise}); break;               // bad destination
      case 2: out.push_back({destination, noise, noise}); break;         // bad header
      default: out.push_back({destination, noise, noise, noise}); break;  // four parts
    }
  }
  return out;
}

TEST(SecuredCluster, AttacksDoNotChangeResultsAndAreCounted) {
  TempDir dir;
  for (const char* k : {"u0", "u1", "u2", "stranger"}) keygen(dir, k);
  const std::string u1_endpoint = tcp(free_port());
  const std::string lines = dir.file("lines.jsonl");
  const std::string file = dir.write(
      "secured.yaml",
      "pipeline: secured\n"
      "coordinator: \"" + tcp(free_port()) + "\"\n"
      "coordinator_key: u0.key.pub\n"
      "units:\n"
      "  - {id: u0, endpoint: \"" + tcp(free_port()) + "\", public_key: u0.key.pub}\n"
      "  - {id: u1, endpoint: \"" + u1_endpoint + "\", public_key: u1.key.pub}\n"
      "  - {id: u2, endpoint: \"" + tcp(free_port()) + "\", public_key: u2.key.pub}\n"
      "stages:\n"
      "  - {id: source, type: sim.source, params: {count: 0, streams: 2}, placement: {units: [u0]}}\n"
      "  - {id: work, type: sim.work, inputs: {in: source/out}, params: {service_us: 200}, placement: {units: [u1]}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u2]}}\n"
      "  - {id: dump, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + lines + "\", flush: true},\n"
      "     placement: {units: [u2]}}\n");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--secret-key", dir.file("u1.key")}, dir.file("u1.out"),
                       dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2", "--secret-key", dir.file("u2.key")}, dir.file("u2.out"),
                       dir.file("u2.err"));
  const std::string report = dir.file("report.json");
  pid_t coordinator = spawn_cli(
      {"run", file, "--quiet", "--units", "u0", "--secret-key", dir.file("u0.key"), "--report", report},
      dir.file("c.out"), dir.file("c.err"));
  while (count_lines(lines) < 20) {
    int status = 0;
    ASSERT_EQ(waitpid(coordinator, &status, WNOHANG), 0) << slurp(dir.file("c.err"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  const transport::KeyPair u0 = keys_of(dir, "u0");
  const transport::KeyPair u1_keys = keys_of(dir, "u1");
  const transport::KeyPair u2_keys = keys_of(dir, "u2");
  const transport::KeyPair stranger = keys_of(dir, "stranger");
  zmq::context_t ctx;
  const auto junk = malformed_messages(400);
  // A plaintext peer.
  send_from(ctx, u1_endpoint, [](zmq::socket_t& s) { s.set(zmq::sockopt::routing_id, "u2"); }, junk);
  // A peer whose key is not listed.
  send_from(ctx, u1_endpoint, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, stranger, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  // A peer that expects another server key.
  send_from(ctx, u1_endpoint, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u0.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  // An admitted peer flooding malformed messages, and one with an unknown unit id.
  send_from(ctx, u1_endpoint, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "u2");
  }, junk);
  send_from(ctx, u1_endpoint, [&](zmq::socket_t& s) {
    transport::make_curve_client(s, u2_keys, u1_keys.public_key);
    s.set(zmq::sockopt::routing_id, "intruder");
  }, {{"hello"}});

  kill(coordinator, SIGINT);
  ASSERT_EQ(wait_exit(coordinator), 0) << slurp(dir.file("c.err"));
  EXPECT_EQ(wait_exit(u1), 0) << slurp(dir.file("u1.err"));
  EXPECT_EQ(wait_exit(u2), 0) << slurp(dir.file("u2.err"));

  const auto r = nlohmann::json::parse(slurp(report));
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  const auto produced = r["stages"]["source"]["processed"].get<std::int64_t>();
  EXPECT_GT(produced, 0);
  EXPECT_EQ(r["sinks"]["sink"]["received"].get<std::int64_t>(), produced);
  EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
  EXPECT_EQ(r["sinks"]["sink"]["duplicate"], 0);
  EXPECT_EQ(r["stages"]["work"]["processed"].get<std::int64_t>(), produced);
  for (const auto& e : r["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>());
  }
  const auto& unit = r["units"]["u1"];
  EXPECT_GE(unit["refused_handshakes"].get<std::uint64_t>(), 3U) << unit.dump(2);
  EXPECT_EQ(unit["rejected"].get<std::uint64_t>(), junk.size()) << unit.dump(2);
  EXPECT_GE(unit["unknown_peer"].get<std::uint64_t>(), 1U) << unit.dump(2);
  EXPECT_NE(slurp(dir.file("u1.err")).find("dropped"), std::string::npos) << "rejections are logged";
}

}  // namespace
