#pragma once
// The control plane: heartbeats, load reports, placement plans and the end
// of a run, between units and the coordinator. Its sockets are never shared
// with data. Every inbound control message is verified before it is read.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include <swarmflow/status.hpp>
#include <swarmflow/schema/control_generated.h>

#include "transport/wire.hpp"

namespace zmq {
class context_t;
}

namespace swarmflow::transport {

/// The Control table of a verified buffer, or null when the buffer is not a
/// well-formed control message within `limits`.
const schema::Control* verify_control(const std::uint8_t* data, std::size_t size, const WireLimits& limits);

/// A finished control message.
using ControlBuffer = flatbuffers::DetachedBuffer;

/// Builds a control message around a body made by `make_body`.
template <class MakeBody>
ControlBuffer make_control(MakeBody&& make_body) {
  flatbuffers::FlatBufferBuilder fbb(256);
  auto [type, body] = make_body(fbb);
  fbb.Finish(schema::CreateControl(fbb, type, body), schema::ControlIdentifier());
  return fbb.Release();
}

/// Settings of the coordinator's control socket.
struct ControlServerConfig {
  std::string endpoint;
  WireLimits limits;
  int linger_ms = 200;
  /// CURVE for tcp: the coordinator's keys; empty = plaintext.
  std::string public_key;
  std::string secret_key;
  /// Units that get a heartbeat every heartbeat_ms, sent by the server
  /// thread itself, so that they can tell when the coordinator is gone.
  std::vector<std::string> heartbeat_to;
  int heartbeat_ms = 25;
};

/// The coordinator's side of the control plane: a ROUTER on its own thread,
/// which also sends the coordinator's heartbeats. On tcp it is a CURVE
/// server: the context's ZapHandler (made before start()) admits the units'
/// keys, and a HandshakeMonitor counts refusals.
class ControlServer {
 public:
  /// Called on the server thread with the sender's unit id and a verified message.
  using Handler = std::function<void(const std::string& unit_id, const schema::Control& message)>;

  /// The same, with the bytes of the verified message as they arrived (for
  /// a handler that hands them on to another thread).
  using BytesHandler = std::function<void(const std::string& unit_id, const schema::Control& message,
                                          const std::uint8_t* data, std::size_t size)>;

  ControlServer(zmq::context_t& context, ControlServerConfig config, Handler handler);
  ControlServer(zmq::context_t& context, ControlServerConfig config, BytesHandler handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  Status start();
  void stop();
  /// Queues a message for unit `unit_id`. Thread-safe.
  void send(const std::string& unit_id, ControlBuffer message);
  std::string bound_endpoint() const;
  /// Messages dropped because they failed verification.
  std::uint64_t rejected() const;
  /// Peers refused in the handshake on a tcp (CURVE) endpoint: plaintext,
  /// another server key, a key the ZAP handler does not admit, garbage.
  /// Counted by the socket's HandshakeMonitor, logged at a limited rate.
  /// Thread-safe; 0 on ipc and inproc endpoints.
  std::uint64_t refused_handshakes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swarmflow::transport
