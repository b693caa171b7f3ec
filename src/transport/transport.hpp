#pragma once
// The data plane of one unit: one thread that owns all of the unit's data
// sockets. A ROUTER bound at the unit's endpoint receives envelopes and
// end-of-stream marks and sends acks back on the same connection; one DEALER
// per peer unit sends envelopes and end-of-stream marks and receives the acks.
// Anything may queue a message from any thread; the thread sends it. Every
// inbound message is verified (wire.hpp) before it is handed on; what fails is
// dropped and counted.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/status.hpp>

#include <swarmflow/schema/control_generated.h>

#include "transport/wire.hpp"

namespace zmq {
class context_t;
}

namespace swarmflow::transport {

/// The ZeroMQ context of this process, shared by all its units (inproc://
/// endpoints work only within one context).
zmq::context_t& process_context();

/// Lets CURVE clients with these public keys (Z85) connect to this process's
/// tcp sockets. Starts the process's ZAP handler on first use, which must be
/// before any CURVE socket binds: without a handler libzmq would admit any key.
void admit_public_keys(const std::vector<std::string>& keys);

/// The ZAP domain of every CURVE socket of swarmflow.
constexpr const char* kZapDomain = "swarmflow";

/// Another unit as this one sees it.
struct Peer {
  std::string unit_id;
  std::string endpoint;    ///< its data-plane endpoint
  std::string public_key;  ///< Z85 CURVE key, for tcp endpoints
};

/// Settings of one unit's data plane.
struct TransportConfig {
  std::string unit_id;
  std::string endpoint;      ///< where this unit's ROUTER binds
  std::vector<Peer> peers;   ///< every unit of the pipeline, this one included, by unit index
  WireLimits limits;
  int send_hwm = 10000;      ///< messages; credits bound what is really queued
  int recv_hwm = 10000;
  int linger_ms = 200;       ///< how long close() may wait for a dead peer
  /// Keys for tcp endpoints (CURVE); empty = plaintext (in-process and ipc only).
  std::string public_key;
  std::string secret_key;
  /// The coordinator's control endpoint; empty = no control plane (all units
  /// in one process). Heartbeats go there every heartbeat_ms (the pipeline's
  /// `failure.heartbeat_ms`) from this thread, so a busy actor system cannot
  /// delay them.
  std::string control_endpoint;
  std::string coordinator_public_key;
  int heartbeat_ms = 25;
  /// Envelopes whose payload is at most this many bytes, and every ack and
  /// end-of-stream mark, travel packed many to a frame (their payload is
  /// copied once into the pack); larger payloads go to ZeroMQ without a copy.
  /// 0 packs nothing but acks and end-of-stream marks.
  std::size_t pack_below_bytes = 1024;
};

/// One message for another unit: where it goes, its header, and (deliver)
/// its payload.
struct OutboundMessage {
  int unit = 0;
  Destination destination;
  WireHeader header;
  PayloadPtr payload;
};

/// Counters of one unit's data plane; all monotonic.
struct TransportCounters {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> send_failed{0};  ///< peer gone or queue full when sending
  std::atomic<std::uint64_t> unknown_peer{0};
  std::atomic<std::uint64_t> control_rejected{0};
  std::atomic<std::uint64_t> auth_refused{0};  ///< handshakes refused (plaintext, wrong or unknown key)
  std::array<std::atomic<std::uint64_t>, 8> rejected{};  ///< by Rejection

  std::uint64_t rejected_total() const;
};

/// One unit's data-plane thread and sockets.
class Transport {
 public:
  /// Called on the transport thread for every verified inbound message.
  using Handler = std::function<void(Inbound&&)>;
  /// Called on the transport thread for every verified control message.
  using ControlHandler = std::function<void(const schema::Control&)>;

  Transport(zmq::context_t& context, TransportConfig config, Handler handler);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /// Binds and connects, then starts the thread. Fails when the endpoint
  /// cannot be bound.
  Status start();
  /// Where control messages from the coordinator go; set before start.
  void on_control(ControlHandler handler);
  /// Called on the transport thread after each burst of inbound messages
  /// (so the handler can pass them on in batches); set before start.
  void on_burst_end(std::function<void()> done);
  /// Called on the transport thread once per turn of its loop (at least every
  /// 100 ms, and whenever something is sent): for work that waits on state
  /// other threads change. Set before start().
  void on_tick(std::function<void()> tick);
  /// Queues a control message for the coordinator. Thread-safe.
  void send_control(flatbuffers::DetachedBuffer message);
  /// The placement epoch heartbeats carry.
  void set_epoch(std::uint32_t epoch);
  /// Stops the thread and closes the sockets (waiting at most linger_ms).
  void stop();

  /// Queues messages, in order, and empties `messages`; one lock and at most
  /// one wake-up for all of them. Thread-safe.
  void send(std::vector<OutboundMessage>& messages);
  /// Queues an envelope for replica `node/replica` on unit `unit`. A payload
  /// above pack_below_bytes is handed to ZeroMQ without a copy. Thread-safe.
  void send_deliver(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header,
                    PayloadPtr payload);
  /// Queues an end-of-stream mark. Thread-safe.
  void send_eos(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header);
  /// Queues an ack for producer `node/replica` on unit `unit`; it travels back
  /// on the connection that unit opened to us. Thread-safe.
  void send_ack(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header);

  const TransportCounters& counters() const { return counters_; }
  /// The endpoint actually bound (resolves tcp port 0 / `*`).
  std::string bound_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  TransportCounters counters_;
};

}  // namespace swarmflow::transport
