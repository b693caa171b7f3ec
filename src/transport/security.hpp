#pragma once
// The security layer of the transport: CURVE key pairs and their files, the
// ZAP handler that admits only the cluster's units, the limits every socket
// gets, a monitor that counts refused handshakes, and the private directory
// that holds ipc:// sockets. See docs/security.md.
//
// Order of use on a unit (the transport thread does this):
//   1. create the zmq::context_t;
//   2. construct one ZapHandler on it with the public keys of the cluster;
//   3. for each socket: apply_limits, make_curve_server / make_curve_client,
//      then a HandshakeMonitor on server sockets, then bind / connect;
//   4. at shutdown: close the sockets (monitors first), then the ZapHandler,
//      then the context.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include <swarmflow/status.hpp>

namespace swarmflow::transport {

// -- keys ---------------------------------------------------------------------

/// Length of a CURVE key in Z85 text (32 bytes of key).
constexpr std::size_t kZ85KeySize = 40;

/// A CURVE key pair, both halves as 40-character Z85 text.
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

/// True when libzmq was built with CURVE (libsodium).
bool curve_available();

/// True when `key` is exactly 40 characters that decode as Z85.
bool is_z85_key(const std::string& key);

/// The public key that belongs to a Z85 secret key; nothing when `secret_key`
/// is not a valid key.
std::optional<std::string> public_key_of(const std::string& secret_key);

/// A fresh key pair from zmq_curve_keypair. Throws zmq::error_t (ENOTSUP) when
/// libzmq has no CURVE support.
KeyPair generate_keypair();

/// Writes the key pair as two text files in czmq's zcert format: `path` holds
/// both keys (mode 0600) and `path + ".pub"` the public key only (mode 0644).
/// Refuses, writing nothing, when either file exists unless `overwrite`; an
/// overwrite replaces each file atomically (write aside, then rename).
Status write_keypair(const std::string& path, const KeyPair& keys, bool overwrite = false);

/// Reads a secret key file written by write_keypair. Refuses a file that group
/// or others may read or write, keys that are not Z85, and a public key that
/// does not belong to the secret key. On failure sets `*error` (if given).
std::optional<KeyPair> read_keypair(const std::string& path, std::string* error);

/// A public key given either literally (40 Z85 characters) or as the path of
/// a key file (".pub" or secret; only its public key is read). On failure
/// sets `*error` (if given).
std::optional<std::string> read_public_key(const std::string& path_or_z85, std::string* error);

// -- logging at a limited rate ---------------------------------------------

/// Decides which of a stream of events is logged: at most one per `interval`,
/// the next logged line carrying how many were suppressed since the last one.
/// Fed with explicit time so it is testable without sleeping; not thread-safe.
class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimitedLog(Clock::duration interval = std::chrono::seconds(1)) : interval_(interval) {}

  /// Records one event at `now`. Returns the number of events suppressed
  /// since the last logged one when this event is to be logged, else nothing.
  std::optional<std::uint64_t> admit(Clock::time_point now);

 private:
  Clock::duration interval_;
  std::optional<Clock::time_point> last_;
  std::uint64_t suppressed_ = 0;
};

// -- ZAP ------------------------------------------------------------------

/// The ZAP (RFC 27) handler of one zmq::context_t: it admits CURVE clients
/// whose public key is on the allowlist (the cluster's unit list) and refuses
/// everything else.
///
/// libzmq asks for authentication on the fixed endpoint inproc://zeromq.zap.01
/// of the socket's context, so there is one handler per context, shared by
/// every socket and unit in it; it cannot live on any one unit's transport
/// thread without making the others' handshakes wait on that thread's work, so
/// it runs on its own thread. The constructor binds the endpoint before it
/// returns, so a CURVE socket created afterwards is always authenticated.
/// Sockets made by make_curve_server also set ZMQ_ZAP_ENFORCE_DOMAIN, so a
/// handshake that finds no handler is refused rather than admitted.
///
/// Replies: 200 for a CURVE client with a listed key in this handler's
/// domain; 400 for an unknown key, another domain, or any other mechanism;
/// 500 for a malformed request. The reply's user id is the client's Z85
/// public key, so a received message's "User-Id" property names its sender.
/// Refusals are counted and logged to stderr at most once per second.
///
/// Destroy it after the CURVE sockets of its context are closed: once it is
/// gone, their handshakes fail (enforced domain) until a new one is made.
class ZapHandler {
 public:
  /// The endpoint libzmq sends ZAP requests to.
  static constexpr const char* kEndpoint = "inproc://zeromq.zap.01";

  /// Binds kEndpoint on `context` and starts serving. `domain` is the ZAP
  /// domain the CURVE sockets use (non-empty). Throws std::invalid_argument
  /// for an empty domain or a key that is not 40-character Z85, and
  /// zmq::error_t (EADDRINUSE) when the context already has a handler.
  /// `context` must outlive the handler.
  ZapHandler(zmq::context_t& context, std::string domain, const std::vector<std::string>& allowed = {});
  /// Stops the thread (promptly, through a pipe) and closes the endpoint.
  ~ZapHandler();

  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  /// Adds a Z85 public key to the allowlist; false (and no change) when the
  /// key is not valid. Thread-safe; applies to handshakes from now on.
  bool allow(const std::string& public_key_z85);
  /// Removes a key. Connections already admitted stay open.
  void revoke(const std::string& public_key_z85);

  const std::string& domain() const { return domain_; }
  /// Requests answered 200.
  std::uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  /// Requests answered 400 or 500.
  std::uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void run();
  void serve_one();
  bool is_allowed(const std::string& key_binary) const;

  std::string domain_;
  mutable std::mutex mutex_;
  std::unordered_set<std::string> allowed_;  ///< 32-byte binary keys
  zmq::socket_t socket_;                     ///< REP on kEndpoint, used by thread_
  zmq::socket_t stop_receiver_;              ///< PAIR, used by thread_
  zmq::socket_t stop_sender_;                ///< PAIR, used by the destructor
  std::string stop_endpoint_;
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> refused_{0};
  RateLimitedLog log_;  ///< used by thread_
  std::thread thread_;
};

// -- socket options -------------------------------------------------------

/// What a peer can make a unit hold, and how long things may take. Apply
/// before bind/connect: most options only affect connections made later.
struct SocketLimits {
  /// ZMQ_MAXMSGSIZE: the largest frame a peer may send; a larger one drops the
  /// connection. Payload limit (64 MiB) plus room for the header frame. Under
  /// CURVE, libzmq counts the encrypted frame, so apply_limits adds
  /// kCurveFrameOverhead when the socket already uses CURVE.
  std::int64_t max_message_bytes = (std::int64_t{64} << 20) + (std::int64_t{64} << 10);
  /// ZMQ_SNDHWM / ZMQ_RCVHWM: messages queued per peer in each direction.
  int send_hwm = 1000;
  int recv_hwm = 1000;
  /// ZMQ_LINGER: how long close waits to flush pending messages to a peer.
  int linger_ms = 200;
  /// ZMQ_IMMEDIATE: queue messages only on completed connections.
  bool immediate = true;
  /// ZMQ_HANDSHAKE_IVL: a peer that has not finished its handshake within this
  /// time is dropped.
  int handshake_ivl_ms = 2000;
};

/// Bytes CURVE adds to each frame on the wire (command name, nonce, MAC, flags).
constexpr std::int64_t kCurveFrameOverhead = 33;

/// Sets the options of `limits` on `socket`. Call after make_curve_server /
/// make_curve_client (so the CURVE overhead is counted) and before bind/connect.
void apply_limits(zmq::socket_t& socket, const SocketLimits& limits);

/// Makes `socket` a CURVE server with the key pair `server`, authenticated by
/// the ZapHandler of `zap_domain` (non-empty), with ZMQ_ZAP_ENFORCE_DOMAIN so
/// that a missing handler refuses instead of admitting. Call before bind.
/// Throws std::invalid_argument for an invalid key or empty domain, and
/// zmq::error_t when libzmq refuses an option.
void make_curve_server(zmq::socket_t& socket, const KeyPair& server, const std::string& zap_domain);

/// Makes `socket` a CURVE client with the key pair `client`, that accepts only
/// a server holding the secret key of `server_public`. Call before connect.
/// Throws like make_curve_server.
void make_curve_client(zmq::socket_t& socket, const KeyPair& client, const std::string& server_public);

// -- handshake monitor ----------------------------------------------------

/// Finds the connections of a server socket that ended without any handshake
/// result. libzmq reports no handshake event for a peer whose first bytes are
/// not a ZMTP 3 greeting (garbage, a ZMTP 1.0 peer) or that hangs up before
/// its greeting: its connection is only accepted and then disconnected. Those
/// two events name the connection (by descriptor); handshake results do not.
///
/// A connection that closes with no handshake result since it was accepted
/// was refused silently. When handshakes overlap, a result cannot be given to
/// one connection: the overlapping ones wait as candidates until it is clear,
/// that is until every candidate has closed, until there are as many results
/// as candidates, or until a candidate has been open for `handshake_limit`
/// (libzmq ends every handshake by then, so it had its result).
///
/// It relies on the events of one connection arriving in order (accepted,
/// result, disconnected), which libzmq guarantees when the context has one
/// I/O thread, as swarmflow's contexts do.
///
/// Pure: fed with the monitor's events and explicit time; not thread-safe.
class HandshakeLedger {
 public:
  using Clock = std::chrono::steady_clock;

  /// `handshake_limit`: how long after being accepted a connection that is
  /// still open must have had its handshake result; zero = no such limit.
  explicit HandshakeLedger(Clock::duration handshake_limit) : limit_(handshake_limit) {}

  /// A connection `fd` was accepted.
  void accepted(int fd, Clock::time_point now);
  /// A handshake succeeded or failed, on a connection libzmq does not name.
  void result();
  /// Connection `fd` ended. Returns how many connections are now known to
  /// have ended without a handshake result (this one, or earlier candidates).
  std::uint64_t disconnected(int fd);
  /// Settles candidates open for longer than the limit (and forgets any other
  /// connection open that long: it must have had its result); returns like
  /// disconnected().
  std::uint64_t expire(Clock::time_point now);

  /// Connections whose handshake result is not yet known (for tests).
  std::size_t unsettled() const { return fresh_.size() + candidates_.size() + closed_candidates_; }

 private:
  std::uint64_t settle();

  Clock::duration limit_;
  /// Open, accepted after the last result: no result can be theirs yet.
  std::unordered_map<int, Clock::time_point> fresh_;
  /// Open, with some result since they were accepted that may be theirs.
  std::unordered_map<int, Clock::time_point> candidates_;
  std::uint64_t closed_candidates_ = 0;  ///< candidates that ended since
  std::uint64_t results_ = 0;            ///< results that belong to candidates
};

/// Counts the handshakes of one server socket, through zmq_socket_monitor.
/// ZAP sees only CURVE clients that proved they hold the server key; a
/// plaintext peer, or one that expects another server key, is refused earlier
/// by libzmq, and this monitor is where such refusals are counted and logged
/// (at most once per second). So are connections that end before any
/// handshake result (garbage bytes; see HandshakeLedger). It also counts
/// disconnects, which is how an oversized message shows: libzmq drops the
/// connection.
///
/// Threading: made, used and destroyed by the thread that owns the server
/// socket (zmq_socket_monitor acts on that socket). That thread polls
/// socket() for ZMQ_POLLIN along with its other sockets and calls drain()
/// when it is readable. The counters may be read from any thread.
/// Events queue without limit until drained (a bounded queue would block
/// libzmq's I/O thread when full), so drain whenever socket() is readable.
/// Destroy the monitor before the server socket.
class HandshakeMonitor {
 public:
  /// Starts monitoring `server` (a socket of `context`); throws zmq::error_t
  /// when libzmq refuses. Create it before the socket binds and after its
  /// ZMQ_HANDSHAKE_IVL is set (apply_limits).
  HandshakeMonitor(zmq::context_t& context, zmq::socket_t& server);
  /// Stops monitoring (while `server` is still open) and closes socket().
  ~HandshakeMonitor();

  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;

  /// The PAIR socket events arrive on; poll it for ZMQ_POLLIN.
  zmq::socket_t& socket() { return events_; }
  /// Reads and counts every event waiting, without blocking.
  void drain();

  /// Handshakes refused for any reason (the sum of the four below).
  std::uint64_t refused() const {
    return failed_protocol() + failed_auth() + failed_no_detail() + failed_greeting();
  }
  /// Protocol errors: a plaintext peer (mechanism mismatch), a peer that
  /// expects another server key (cryptographic error), a malformed handshake.
  std::uint64_t failed_protocol() const { return failed_protocol_.load(std::memory_order_relaxed); }
  /// Refused by the ZAP handler (unknown key).
  std::uint64_t failed_auth() const { return failed_auth_.load(std::memory_order_relaxed); }
  /// Other failures, such as no ZAP handler, or a handshake timeout.
  std::uint64_t failed_no_detail() const { return failed_no_detail_.load(std::memory_order_relaxed); }
  /// Connections that ended before any handshake result: bytes that are not
  /// a ZMTP 3 greeting (garbage), or a peer that hung up at once.
  std::uint64_t failed_greeting() const { return failed_greeting_.load(std::memory_order_relaxed); }
  std::uint64_t succeeded() const { return succeeded_.load(std::memory_order_relaxed); }
  std::uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }
  /// Connections that ended, after a refused handshake or not.
  std::uint64_t disconnected() const { return disconnected_.load(std::memory_order_relaxed); }

 private:
  void log_failure(std::uint16_t event, std::uint32_t value, const std::string& endpoint);
  void count_greeting_failures(std::uint64_t n);

  void* server_;  ///< the monitored socket's handle
  zmq::socket_t events_;
  std::atomic<std::uint64_t> failed_protocol_{0};
  std::atomic<std::uint64_t> failed_auth_{0};
  std::atomic<std::uint64_t> failed_no_detail_{0};
  std::atomic<std::uint64_t> failed_greeting_{0};
  std::atomic<std::uint64_t> succeeded_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> disconnected_{0};
  HandshakeLedger ledger_;
  std::string endpoint_;  ///< of the last event, for log lines
  RateLimitedLog log_;
};

// -- ipc ------------------------------------------------------------------

/// Makes (or checks) the directory that holds this user's ipc:// sockets:
/// $XDG_RUNTIME_DIR/swarmflow when XDG_RUNTIME_DIR names a directory owned by
/// this user, else /tmp/swarmflow-<uid>; mode 0700. An existing directory must
/// be a real directory (not a symbolic link) owned by this user with no group
/// or other permissions; otherwise this fails and says why. Sets `*dir`.
Status make_private_ipc_dir(std::string* dir);

/// "ipc://<dir>/<name>". Linux limits the path to 107 bytes.
std::string ipc_endpoint(const std::string& dir, const std::string& name);

/// Checks that the directory of an `ipc://` endpoint is private to this user
/// (creating it with mode 0700 when missing), so no other user can connect to
/// or replace the socket. Called before every ipc bind.
Status check_ipc_endpoint(const std::string& endpoint);

}  // namespace swarmflow::transport
