#include "transport/control.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "transport/security.hpp"
#include "transport/transport.hpp"

namespace swarmflow::transport {

const schema::Control* verify_control(const std::uint8_t* data, std::size_t size, const WireLimits& limits) {
  if (data == nullptr || size < 8 || size > limits.max_header_bytes + limits.max_payload_bytes) return nullptr;
  if (!flatbuffers::BufferHasIdentifier(data, schema::ControlIdentifier())) return nullptr;
  flatbuffers::Verifier verifier(data, size, limits.max_depth, limits.max_tables);
  if (!schema::VerifyControlBuffer(verifier)) return nullptr;
  const schema::Control* c = schema::GetControl(data);
  if (c->body_type() == schema::ControlBody::NONE) return nullptr;
  return c;
}

namespace {

void free_detached(void*, void* hint) { delete static_cast<flatbuffers::DetachedBuffer*>(hint); }

}  // namespace

struct ControlServer::Impl {
  Impl(zmq::context_t& ctx, ControlServerConfig cfg, BytesHandler h)
      : context(ctx), config(std::move(cfg)), handler(std::move(h)), router(ctx, zmq::socket_type::router) {}

  zmq::context_t& context;
  ControlServerConfig config;
  BytesHandler handler;
  zmq::socket_t router;
  /// Counts and logs refused handshakes on a tcp (CURVE) router; declared
  /// after it, so it is destroyed first.
  std::unique_ptr<HandshakeMonitor> monitor;
  std::atomic<std::uint64_t> refused_handshakes{0};
  std::string bound;
  int wake_fd = -1;
  std::mutex mutex;
  std::deque<std::pair<std::string, ControlBuffer>> queue;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> rejected{0};
  std::int64_t next_heartbeat_ns = 0;  // server thread only
  /// By unit id: the sent_ns of its last heartbeat and when it arrived here,
  /// echoed in the next heartbeat to it (the clock-offset exchange). Server
  /// thread only.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> heard;
  std::thread thread;

  void flush() {
    std::deque<std::pair<std::string, ControlBuffer>> batch;
    {
      std::lock_guard<std::mutex> lock(mutex);
      batch.swap(queue);
    }
    for (auto& [unit, buffer] : batch) send_now(unit, std::move(buffer));
  }

  void send_now(const std::string& unit, ControlBuffer buffer) {
    try {
      if (!router.send(zmq::buffer(unit), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
      auto* held = new flatbuffers::DetachedBuffer(std::move(buffer));
      zmq::message_t m(held->data(), held->size(), free_detached, held);
      router.send(m, zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      // The unit is not (or no longer) connected; it will ask again or be declared dead.
    }
  }

  /// Sends the coordinator's heartbeat to every unit when one is due.
  void heartbeat() {
    if (config.heartbeat_to.empty()) return;
    const std::int64_t now = steady_now_ns();
    if (now < next_heartbeat_ns) return;
    next_heartbeat_ns = now + static_cast<std::int64_t>(config.heartbeat_ms) * 1'000'000;
    for (const auto& unit : config.heartbeat_to) {
      const auto echo = heard.find(unit);
      const std::int64_t echo_sent = echo == heard.end() ? 0 : echo->second.first;
      const std::int64_t echo_received = echo == heard.end() ? 0 : echo->second.second;
      const std::int64_t sent = steady_now_ns();
      send_now(unit, make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
                 auto body = schema::CreateHeartbeat(fbb, fbb.CreateString("coordinator"), sent, 0,
                                                     static_cast<std::int64_t>(::getpid()), echo_sent, echo_received);
                 return std::make_pair(schema::ControlBody::Heartbeat, body.Union());
               }));
    }
  }

  /// How long the thread may sleep: never past the next heartbeat.
  long poll_timeout_ms() const {
    if (config.heartbeat_to.empty()) return 100;
    const std::int64_t until = next_heartbeat_ns - steady_now_ns();
    return std::min<long>(100, std::max<long>(0, static_cast<long>((until + 999'999) / 1'000'000)));
  }

  void receive() {
    for (int n = 0; n < 256; ++n) {
      std::vector<zmq::message_t> parts;
      bool more = true;
      while (more) {
        zmq::message_t part;
        if (!router.recv(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) return;
        more = part.more();
        if (parts.size() < 3) parts.push_back(std::move(part));
      }
      if (parts.size() != 2) {
        rejected.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const auto* c = verify_control(static_cast<const std::uint8_t*>(parts[1].data()), parts[1].size(), config.limits);
      if (c == nullptr) {
        rejected.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (c->body_type() == schema::ControlBody::Heartbeat && !config.heartbeat_to.empty()) {
        heard[std::string(static_cast<const char*>(parts[0].data()), parts[0].size())] = {
            c->body_as_Heartbeat()->sent_ns(), steady_now_ns()};
      }
      handler(std::string(static_cast<const char*>(parts[0].data()), parts[0].size()), *c,
              static_cast<const std::uint8_t*>(parts[1].data()), parts[1].size());
    }
  }

  void drain_monitor() {
    monitor->drain();
    refused_handshakes.store(monitor->refused(), std::memory_order_relaxed);
  }

  void run() {
    while (!stopping.load()) {
      std::array<zmq_pollitem_t, 3> items{{{router.handle(), 0, ZMQ_POLLIN, 0},
                                           {nullptr, wake_fd, ZMQ_POLLIN, 0},
                                           {monitor ? monitor->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}}};
      zmq::poll(items.data(), monitor ? items.size() : items.size() - 1, std::chrono::milliseconds(poll_timeout_ms()));
      if ((items[1].revents & ZMQ_POLLIN) != 0) {
        std::uint64_t v = 0;
        [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
      }
      flush();
      heartbeat();
      if ((items[0].revents & ZMQ_POLLIN) != 0) receive();
      if (monitor && (items[2].revents & ZMQ_POLLIN) != 0) drain_monitor();
    }
    flush();
    if (monitor) {
      drain_monitor();
      monitor.reset();  // before its socket
    }
    router.close();
  }
};

ControlServer::ControlServer(zmq::context_t& context, ControlServerConfig config, Handler handler)
    : ControlServer(context, std::move(config),
                    BytesHandler([handler = std::move(handler)](const std::string& unit_id, const schema::Control& message,
                                                                const std::uint8_t*, std::size_t) {
                      handler(unit_id, message);
                    })) {}

ControlServer::ControlServer(zmq::context_t& context, ControlServerConfig config, BytesHandler handler)
    : impl_(std::make_unique<Impl>(context, std::move(config), std::move(handler))) {}

ControlServer::~ControlServer() { stop(); }

Status ControlServer::start() {
  Impl& s = *impl_;
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));
  if (s.config.endpoint.rfind("ipc://", 0) == 0) {
    if (Status ipc = check_ipc_endpoint(s.config.endpoint); !ipc.ok()) return ipc;
  }
  const bool is_tcp = s.config.endpoint.rfind("tcp://", 0) == 0;
  try {
    if (is_tcp) {
      if (s.config.secret_key.empty()) {
        return Status::error("coordinator: a tcp endpoint uses CURVE and there is no secret key",
                             StatusCode::failed_precondition);
      }
      make_curve_server(s.router, KeyPair{s.config.public_key, s.config.secret_key}, kZapDomain);
    }
    SocketLimits limits;
    limits.max_message_bytes =
        static_cast<std::int64_t>(s.config.limits.max_header_bytes + s.config.limits.max_payload_bytes);
    limits.linger_ms = s.config.linger_ms;
    apply_limits(s.router, limits);
    s.router.set(zmq::sockopt::router_mandatory, 1);
    // Every CURVE server socket has a handshake monitor, in place before the
    // first peer can connect.
    if (is_tcp) s.monitor = std::make_unique<HandshakeMonitor>(s.context, s.router);
    s.router.bind(s.config.endpoint);
    s.bound = s.router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status::error("coordinator: cannot bind " + s.config.endpoint + ": " + e.what(), StatusCode::unavailable);
  } catch (const std::invalid_argument& e) {
    return Status::error(std::string("coordinator: ") + e.what(), StatusCode::invalid_argument);
  }
  s.thread = std::thread([this] { impl_->run(); });
  return {};
}

void ControlServer::stop() {
  Impl& s = *impl_;
  if (s.thread.joinable()) {
    s.stopping.store(true);
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(s.wake_fd, &one, sizeof one);
    s.thread.join();
  }
  if (s.wake_fd >= 0) {
    ::close(s.wake_fd);
    s.wake_fd = -1;
  }
}

void ControlServer::send(const std::string& unit_id, ControlBuffer message) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.emplace_back(unit_id, std::move(message));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(impl_->wake_fd, &one, sizeof one);
}

std::string ControlServer::bound_endpoint() const { return impl_->bound; }
std::uint64_t ControlServer::rejected() const { return impl_->rejected.load(); }
std::uint64_t ControlServer::refused_handshakes() const { return impl_->refused_handshakes.load(); }

}  // namespace swarmflow::transport
