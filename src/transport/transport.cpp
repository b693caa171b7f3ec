#include "transport/transport.hpp"

#include <swarmflow/log.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include "transport/control.hpp"
#include "transport/security.hpp"

namespace swarmflow::transport {

std::uint64_t TransportCounters::rejected_total() const {
  std::uint64_t total = 0;
  for (const auto& r : rejected) total += r.load(std::memory_order_relaxed);
  return total;
}

zmq::context_t& process_context() {
  // Never destroyed: terminating a context waits for every socket, and at exit
  // that must not hang on a socket someone forgot.
  static auto* context = new zmq::context_t(1);
  return *context;
}

void admit_public_keys(const std::vector<std::string>& keys) {
  // One ZAP handler per context, for the life of the process (like the context).
  static auto* handler = new ZapHandler(process_context(), kZapDomain);
  for (const auto& k : keys) handler->allow(k);
}

namespace {

/// Most messages read per socket per wake-up, so one busy peer cannot starve others.
constexpr int kReceiveBatch = 256;
/// Frames kept of one message; the rest are read and discarded.
constexpr std::size_t kMaxFrames = 4;
/// A pack is sent once it holds this many bytes or records. Received
/// payloads are views of their pack, so one envelope still in flight keeps its
/// whole pack: at most this many bytes each.
constexpr std::size_t kMaxPackBytes = 64u << 10;
constexpr std::size_t kMaxPackRecords = 512;

void free_detached(void*, void* hint) { delete static_cast<flatbuffers::DetachedBuffer*>(hint); }
void free_pack(void* data, void*) { std::free(data); }
void free_payload(void*, void* hint) { delete static_cast<PayloadPtr*>(hint); }

/// A message ready for its socket: every frame made, the routing frame first
/// on the ROUTER. Kept whole while the socket cannot take it.
struct Built {
  std::vector<zmq::message_t> parts;
  std::uint32_t envelopes = 0;
};

}  // namespace

struct Transport::Impl {
  Impl(zmq::context_t& ctx, TransportConfig cfg, Handler h, TransportCounters& c)
      : context(ctx), config(std::move(cfg)), handler(std::move(h)), counters(c), router(ctx, zmq::socket_type::router) {
    dealers.resize(config.peers.size());
    lanes = std::vector<Lane>(config.peers.size() * 2);  // made in place: a Lane cannot be copied
  }

  zmq::context_t& context;
  TransportConfig config;
  Handler handler;
  TransportCounters& counters;

  zmq::socket_t router;
  std::vector<std::unique_ptr<zmq::socket_t>> dealers;  // by unit index; made on first use
  std::string bound;
  int wake_fd = -1;

  std::mutex mutex;
  std::vector<OutboundMessage> queue;  // guarded by mutex
  std::vector<OutboundMessage> taken;  // transport thread: the last batch taken from queue
  /// Transport thread only: one lane per (unit, socket), the DEALER to that
  /// unit or the ROUTER's connection from it, so that one dead or slow peer
  /// holds up nobody else. Messages wait in their lane while its socket
  /// cannot take them; packs are filled per lane.
  struct Lane {
    std::deque<Built> waiting;
    PackWriter pack;
    std::uint32_t packed = 0;  // envelopes in `pack`
  };
  std::vector<Lane> lanes;
  std::size_t retrying = 0;  // messages waiting in all lanes
  flatbuffers::FlatBufferBuilder header_builder{256};
  std::vector<std::array<FrameView, 3>> records;  // of the pack being read
  std::vector<Payload::Range> pack_ranges;         // its payloads
  std::vector<PayloadPtr> pack_views;              // and their views
  std::atomic<bool> stopping{false};
  std::thread thread;

  /// Counts refused handshakes on a tcp ROUTER (plaintext, wrong keys).
  std::unique_ptr<HandshakeMonitor> monitor;

  // -- control plane
  std::unique_ptr<zmq::socket_t> control;
  ControlHandler control_handler;
  std::function<void()> burst_end;
  std::function<void()> tick;
  std::deque<flatbuffers::DetachedBuffer> control_queue;  // guarded by mutex
  std::atomic<std::uint32_t> epoch{0};
  std::int64_t next_heartbeat_ns = 0;

  std::int64_t last_log_ns = 0;
  std::uint64_t suppressed = 0;

  static bool is_tcp(const std::string& endpoint) { return endpoint.rfind("tcp://", 0) == 0; }

  KeyPair keys() const { return KeyPair{config.public_key, config.secret_key}; }

  /// The control plane's limits: always the defaults, whatever the data
  /// plane's (a placement plan grows with the replicas, not with payloads).
  static const WireLimits& control_limits() {
    static const WireLimits defaults;
    return defaults;
  }

  /// Limits of every data and control socket; call after any CURVE option.
  void configure(zmq::socket_t& s, const WireLimits& wire) {
    SocketLimits limits;
    limits.max_message_bytes = static_cast<std::int64_t>(wire.max_payload_bytes + wire.max_header_bytes);
    limits.send_hwm = config.send_hwm;
    limits.recv_hwm = config.recv_hwm;
    limits.linger_ms = config.linger_ms;
    apply_limits(s, limits);
  }

  /// The DEALER to unit `unit`, made on first use; CURVE when it is on tcp.
  zmq::socket_t& dealer(int unit) {
    auto& d = dealers[static_cast<std::size_t>(unit)];
    if (!d) {
      const Peer& peer = config.peers[static_cast<std::size_t>(unit)];
      d = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      if (is_tcp(peer.endpoint)) make_curve_client(*d, keys(), peer.public_key);
      configure(*d, config.limits);
      d->set(zmq::sockopt::routing_id, config.unit_id);
      d->connect(peer.endpoint);
    }
    return *d;
  }

  void push(std::vector<OutboundMessage>& messages) {
    if (messages.empty()) return;
    bool was_empty = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      was_empty = queue.empty() && control_queue.empty();
      if (queue.empty()) {
        queue.swap(messages);
      } else {
        queue.insert(queue.end(), std::make_move_iterator(messages.begin()), std::make_move_iterator(messages.end()));
      }
    }
    messages.clear();
    if (was_empty) wake();
  }

  void push(OutboundMessage&& m) {
    bool was_empty = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      was_empty = queue.empty() && control_queue.empty();
      queue.push_back(std::move(m));
    }
    if (was_empty) wake();
  }

  void wake() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  static std::size_t lane_of(const OutboundMessage& m) {
    // Acks and drained marks go back the way acks go (a drained mark follows its replica's last acks).
    const bool back = m.destination.kind == FrameKind::ack || m.destination.kind == FrameKind::drained;
    return static_cast<std::size_t>(m.unit) * 2 + (back ? 1 : 0);
  }

  /// A new message for lane `lane`, with the ROUTER's routing frame when it
  /// goes back to a unit that connected to us (acks).
  Built start_message(std::size_t lane) const {
    Built b;
    b.parts.reserve(5);
    if (lane % 2 == 1) {
      const std::string& id = config.peers[lane / 2].unit_id;
      b.parts.emplace_back(id.data(), id.size());
    }
    return b;
  }

  /// Ends the lane's pack (if any) as one message in its queue.
  void close_pack(std::size_t lane) {
    Lane& l = lanes[lane];
    if (l.packed == 0) return;
    Built b = start_message(lane);
    const std::size_t size = l.pack.size();
    b.parts.emplace_back(l.pack.take(), size, free_pack, nullptr);  // ZeroMQ frees it when sent
    b.envelopes = l.packed;
    l.packed = 0;
    l.waiting.push_back(std::move(b));
    ++retrying;
  }

  /// Most bytes of one message a peer accepts (its ZMQ_MAXMSGSIZE).
  std::size_t max_message_bytes() const { return config.limits.max_payload_bytes + config.limits.max_header_bytes; }

  /// Turns a queued message into frames: into its lane's pack when it is
  /// small, else (after the pack, to keep the lane's order) a message of its
  /// own whose payload ZeroMQ takes without a copy.
  void build(OutboundMessage& m) {
    const std::size_t lane = lane_of(m);
    Lane& l = lanes[lane];
    const std::size_t payload_size = m.payload ? m.payload->size() : 0;
    const std::size_t record = pack_record_size(kRecordHeaderSize, payload_size);  // at most
    const std::size_t pack_limit = std::min(kMaxPackBytes, max_message_bytes());
    const bool small = !m.payload || payload_size <= config.pack_below_bytes;
    if (small && kPackHeadSize + record <= pack_limit) {
      if (l.packed > 0 && (l.pack.size() + record > pack_limit || l.packed >= kMaxPackRecords)) close_pack(lane);
      alignas(8) std::uint8_t header[kRecordHeaderSize];
      const std::size_t header_size = encode_record_header(m.header, header);
      l.pack.add(m.destination, header, header_size, m.payload ? m.payload->data() : nullptr, payload_size);
      ++l.packed;
      return;
    }
    close_pack(lane);
    encode_header(m.header, header_builder);
    const std::uint8_t* header = header_builder.GetBufferPointer();
    const std::size_t header_size = header_builder.GetSize();
    Built b = start_message(lane);
    zmq::message_t dest(kDestinationSize);
    encode_destination(m.destination, static_cast<std::uint8_t*>(dest.data()));
    b.parts.push_back(std::move(dest));
    b.parts.emplace_back(header, header_size);
    if (m.payload) {
      auto* ref = new PayloadPtr(std::move(m.payload));
      b.parts.emplace_back(const_cast<std::uint8_t*>((*ref)->data()), (*ref)->size(), free_payload, ref);
    } else {
      b.parts.emplace_back();
    }
    b.envelopes = 1;
    l.waiting.push_back(std::move(b));
    ++retrying;
  }

  /// Sends one built message; false when the socket cannot take it now.
  bool send_now(std::size_t lane, Built& b) {
    const bool ack = lane % 2 == 1;
    zmq::socket_t& socket = ack ? router : dealer(static_cast<int>(lane / 2));
    try {
      // The first part decides: once it is accepted, ZeroMQ queues the rest
      // of the multipart message atomically.
      const std::size_t last = b.parts.size() - 1;
      if (!socket.send(b.parts[0], last == 0 ? zmq::send_flags::dontwait
                                             : zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return false;
      }
      for (std::size_t i = 1; i <= last; ++i) {
        socket.send(b.parts[i], i == last ? zmq::send_flags::none : zmq::send_flags::sndmore);
      }
      counters.sent.fetch_add(b.envelopes, std::memory_order_relaxed);
      return true;
    } catch (const zmq::error_t& e) {
      // EHOSTUNREACH: the peer that should get these acks is gone.
      counters.send_failed.fetch_add(b.envelopes, std::memory_order_relaxed);
      log(std::string("send failed: ") + e.what());
      return true;
    }
  }

  void send_control_now(flatbuffers::DetachedBuffer buffer) {
    auto* held = new flatbuffers::DetachedBuffer(std::move(buffer));
    zmq::message_t m(held->data(), held->size(), free_detached, held);
    try {
      if (!control->send(m, zmq::send_flags::dontwait)) counters.send_failed.fetch_add(1, std::memory_order_relaxed);
    } catch (const zmq::error_t&) {
      counters.send_failed.fetch_add(1, std::memory_order_relaxed);
    }
  }

  /// How long the thread may sleep: soon when messages wait for a socket,
  /// and never past the next heartbeat.
  long poll_timeout_ms() const {
    long timeout = retrying == 0 ? 100 : 1;
    if (control) {
      const std::int64_t until = next_heartbeat_ns - steady_now_ns();
      timeout = std::min<long>(timeout, std::max<long>(0, static_cast<long>((until + 999'999) / 1'000'000)));
    }
    return timeout;
  }

  void heartbeat() {
    const std::int64_t now = steady_now_ns();
    if (now < next_heartbeat_ns) return;
    next_heartbeat_ns = now + static_cast<std::int64_t>(config.heartbeat_ms) * 1'000'000;
    const std::uint32_t e = epoch.load();
    const std::string& id = config.unit_id;
    send_control_now(make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
      auto body = schema::CreateHeartbeat(fbb, fbb.CreateString(id), now, e, static_cast<std::int64_t>(::getpid()));
      return std::make_pair(schema::ControlBody::Heartbeat, body.Union());
    }));
  }

  void receive_control() {
    for (int n = 0; n < 64; ++n) {
      std::vector<zmq::message_t> parts;
      bool more = true;
      while (more) {
        zmq::message_t part;
        if (!control->recv(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) return;
        more = part.more();
        if (parts.size() < 2) parts.push_back(std::move(part));
      }
      const schema::Control* c = parts.size() == 1 ? verify_control(static_cast<const std::uint8_t*>(parts[0].data()),
                                                                    parts[0].size(), control_limits())
                                                   : nullptr;
      if (c == nullptr) {
        counters.control_rejected.fetch_add(1, std::memory_order_relaxed);
        log("malformed control message dropped");
        continue;
      }
      if (control_handler) control_handler(*c);
    }
  }

  void flush_outgoing() {
    std::deque<flatbuffers::DetachedBuffer> control_batch;
    {
      std::lock_guard<std::mutex> lock(mutex);
      taken.swap(queue);  // both keep their capacity from one flush to the next
      control_batch.swap(control_queue);
    }
    if (control) {
      for (auto& c : control_batch) send_control_now(std::move(c));
      heartbeat();
    }
    for (auto& m : taken) build(m);
    taken.clear();
    for (std::size_t lane = 0; lane < lanes.size(); ++lane) close_pack(lane);
    if (retrying == 0) return;
    for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
      auto& waiting = lanes[lane].waiting;
      while (!waiting.empty() && send_now(lane, waiting.front())) {
        waiting.pop_front();
        --retrying;
      }
    }
  }

  /// Reads up to kReceiveBatch messages from `socket`. ROUTER messages start
  /// with the sender's routing id; a DEALER is connected to one peer
  /// (`peer`), which sent what arrives on it (acks).
  void receive(zmq::socket_t& socket, bool from_router, int peer = -1) {
    receive_burst(socket, from_router, peer);
    if (burst_end) burst_end();
  }

  void receive_burst(zmq::socket_t& socket, bool from_router, int peer) {
    for (int n = 0; n < kReceiveBatch; ++n) {
      std::array<zmq::message_t, kMaxFrames + 1> frames;
      std::size_t count = 0;
      bool more = true;
      bool any = false;
      while (more) {
        zmq::message_t part;
        auto got = socket.recv(part, any ? zmq::recv_flags::none : zmq::recv_flags::dontwait);
        if (!got) return;  // nothing more now
        any = true;
        more = part.more();
        if (count < frames.size()) frames[count] = std::move(part);
        ++count;  // frames beyond the array are read and dropped
      }
      handle(frames, count, from_router, peer);
    }
  }

  void handle(std::array<zmq::message_t, kMaxFrames + 1>& frames, std::size_t count, bool from_router, int peer) {
    std::size_t first = 0;
    int sender = peer;
    if (from_router) {
      const std::string_view id(static_cast<const char*>(frames[0].data()), frames[0].size());
      for (std::size_t p = 0; p < config.peers.size() && sender < 0; ++p) {
        if (config.peers[p].unit_id == id) sender = static_cast<int>(p);
      }
      if (sender < 0) {
        counters.unknown_peer.fetch_add(1, std::memory_order_relaxed);
        log("message from an unknown peer dropped");
        return;
      }
      first = 1;
    }
    const std::size_t parts = count - first;
    if (parts == 1) {
      handle_pack(frames[first], sender);
      return;
    }
    std::array<FrameView, kMaxFrames> views{};
    const std::size_t kept = std::min(parts, kMaxFrames);
    for (std::size_t i = 0; i < kept; ++i) {
      views[i] = FrameView{static_cast<const std::uint8_t*>(frames[first + i].data()), frames[first + i].size()};
    }
    Rejection why = Rejection::none;
    auto adopt = [&]() -> PayloadPtr {
      zmq::message_t& m = frames[first + 2];
      const auto* data = static_cast<const std::uint8_t*>(m.data());
      // FlatBuffers wants its buffer aligned; large messages are, tiny ones may not be.
      if (!is_wire_aligned(data)) return Payload::copy_of(data, m.size());
      auto holder = std::make_shared<zmq::message_t>(std::move(m));
      return Payload::wrap(static_cast<const std::uint8_t*>(holder->data()), holder->size(), holder);
    };
    Inbound refused = not_refused();
    auto inbound = decode_message(views.data(), parts, config.limits, &why, adopt, &refused);
    if (!inbound) {
      reject(why);
      hand_over_refused(refused, sender);
      return;
    }
    counters.received.fetch_add(1, std::memory_order_relaxed);
    inbound->sender = sender;
    handler(std::move(*inbound));
  }

  /// A pack: its framing is checked first, then each record on its own; a
  /// record that fails is dropped and counted, the others are delivered.
  /// Payloads are views of the frame (of one aligned copy of it, when ZeroMQ
  /// placed it at an address FlatBuffers cannot read in place).
  void handle_pack(zmq::message_t& frame, int sender) {
    std::shared_ptr<const void> owner;
    FrameView pack{static_cast<const std::uint8_t*>(frame.data()), frame.size()};
    if (is_wire_aligned(pack.data)) {
      owner = std::make_shared<zmq::message_t>(std::move(frame));
    } else {
      PayloadPtr copy = Payload::copy_of(pack.data, pack.size);
      pack.data = copy->data();
      owner = std::move(copy);
    }
    const Rejection framing = split_pack(pack, config.limits, &records);
    if (framing != Rejection::none) {
      reject(framing);
      return;
    }
    // Every record's payload as a view of the frame, made at once; a record
    // that fails its checks just drops its view unread.
    pack_ranges.clear();
    for (const auto& record : records) pack_ranges.push_back(Payload::Range{record[2].data, record[2].size});
    pack_views.clear();
    Payload::wrap_views(pack_ranges.data(), pack_ranges.size(), std::move(owner), &pack_views);
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& record = records[i];
      Rejection why = Rejection::none;
      auto adopt = [this, i]() -> PayloadPtr { return std::move(pack_views[i]); };
      Inbound refused = not_refused();
      auto inbound = decode_record(record, config.limits, &why, adopt, &refused);
      if (!inbound) {
        reject(why);
        hand_over_refused(refused, sender);
        continue;
      }
      counters.received.fetch_add(1, std::memory_order_relaxed);
      inbound->sender = sender;
      handler(std::move(*inbound));
    }
    pack_views.clear();  // views of refused records: the frame need not outlive the others
  }

  static Inbound not_refused() {
    Inbound in;
    in.destination.kind = FrameKind::eos;  // filled in (as a deliver) only when refused
    return in;
  }

  /// A deliver refused for its payload alone goes on without one: its
  /// consumer counts it as refused and acknowledges it in its turn.
  void hand_over_refused(Inbound& refused, int sender) {
    if (refused.destination.kind != FrameKind::deliver || sender < 0) return;
    refused.sender = sender;
    handler(std::move(refused));
  }

  void reject(Rejection why) {
    counters.rejected[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed);
    log(std::string("inbound message dropped: ") + to_string(why));
  }

  void run() {
    std::vector<zmq_pollitem_t> items;
    while (!stopping.load()) {
      items.clear();
      items.push_back({router.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
      const std::size_t monitor_index = items.size();
      if (monitor) items.push_back({monitor->socket().handle(), 0, ZMQ_POLLIN, 0});
      const std::size_t control_index = items.size();
      if (control) items.push_back({control->handle(), 0, ZMQ_POLLIN, 0});
      std::vector<int> dealer_units;
      for (std::size_t u = 0; u < dealers.size(); ++u) {
        if (!dealers[u]) continue;
        items.push_back({dealers[u]->handle(), 0, ZMQ_POLLIN, 0});
        dealer_units.push_back(static_cast<int>(u));
      }
      zmq::poll(items, std::chrono::milliseconds(poll_timeout_ms()));
      if ((items[1].revents & ZMQ_POLLIN) != 0) {
        std::uint64_t v = 0;
        [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof v);
      }
      flush_outgoing();
      if (tick) tick();
      if ((items[0].revents & ZMQ_POLLIN) != 0) receive(router, true);
      if (monitor && (items[monitor_index].revents & ZMQ_POLLIN) != 0) {
        monitor->drain();
        counters.auth_refused.store(monitor->refused(), std::memory_order_relaxed);
      }
      if (control && (items[control_index].revents & ZMQ_POLLIN) != 0) receive_control();
      const std::size_t first_dealer = control ? control_index + 1 : control_index;
      for (std::size_t i = 0; i < dealer_units.size(); ++i) {
        if ((items[first_dealer + i].revents & ZMQ_POLLIN) != 0) {
          receive(*dealers[static_cast<std::size_t>(dealer_units[i])], false, dealer_units[i]);
        }
      }
    }
    flush_outgoing();
    monitor.reset();  // before its socket
    router.close();
    for (auto& d : dealers) {
      if (d) d->close();
    }
    if (control) control->close();
  }

  void log(const std::string& message) {
    const std::int64_t now = steady_now_ns();
    if (last_log_ns != 0 && now - last_log_ns < 1'000'000'000) {
      ++suppressed;
      return;
    }
    if (suppressed > 0) {
      swarmflow::log::warn("unit %s: %s (%llu similar suppressed)", config.unit_id.c_str(), message.c_str(),
                static_cast<unsigned long long>(suppressed));
    } else {
      swarmflow::log::warn("unit %s: %s", config.unit_id.c_str(), message.c_str());
    }
    last_log_ns = now;
    suppressed = 0;
  }
};

Transport::Transport(zmq::context_t& context, TransportConfig config, Handler handler)
    : impl_(std::make_unique<Impl>(context, std::move(config), std::move(handler), counters_)) {}

Transport::~Transport() { stop(); }

Status Transport::start() {
  Impl& s = *impl_;
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));
  if (s.config.endpoint.rfind("ipc://", 0) == 0) {
    if (Status ipc = check_ipc_endpoint(s.config.endpoint); !ipc.ok()) return ipc;
  }
  try {
    // A tcp endpoint is a CURVE server whose clients the process's ZAP
    // handler admits by key; it exists before this bind (see security.hpp).
    if (Impl::is_tcp(s.config.endpoint)) {
      if (s.config.secret_key.empty()) {
        return Status::error("unit " + s.config.unit_id + ": tcp endpoints use CURVE and this unit has no secret key",
                             StatusCode::failed_precondition);
      }
      make_curve_server(s.router, s.keys(), kZapDomain);
    }
    s.configure(s.router, s.config.limits);
    s.router.set(zmq::sockopt::router_mandatory, 1);
    if (Impl::is_tcp(s.config.endpoint)) s.monitor = std::make_unique<HandshakeMonitor>(s.context, s.router);
    s.router.bind(s.config.endpoint);
    s.bound = s.router.get(zmq::sockopt::last_endpoint);
    if (!s.config.control_endpoint.empty()) {
      s.control = std::make_unique<zmq::socket_t>(s.context, zmq::socket_type::dealer);
      if (Impl::is_tcp(s.config.control_endpoint)) {
        make_curve_client(*s.control, s.keys(), s.config.coordinator_public_key);
      }
      s.configure(*s.control, Impl::control_limits());
      s.control->set(zmq::sockopt::routing_id, s.config.unit_id);
      s.control->connect(s.config.control_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return Status::error("unit " + s.config.unit_id + ": cannot bind " + s.config.endpoint + ": " + e.what(),
                         StatusCode::unavailable);
  } catch (const std::invalid_argument& e) {
    return Status::error("unit " + s.config.unit_id + ": " + e.what(), StatusCode::invalid_argument);
  }
  s.thread = std::thread([this] { impl_->run(); });
  return {};
}

void Transport::stop() {
  Impl& s = *impl_;
  if (!s.thread.joinable()) {
    if (s.wake_fd >= 0) ::close(s.wake_fd), s.wake_fd = -1;
    return;
  }
  s.stopping.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(s.wake_fd, &one, sizeof one);
  s.thread.join();
  ::close(s.wake_fd);
  s.wake_fd = -1;
}

std::string Transport::bound_endpoint() const { return impl_->bound; }

void Transport::on_control(ControlHandler handler) { impl_->control_handler = std::move(handler); }

void Transport::on_burst_end(std::function<void()> done) { impl_->burst_end = std::move(done); }
void Transport::on_tick(std::function<void()> tick) { impl_->tick = std::move(tick); }

void Transport::set_epoch(std::uint32_t epoch) {
  impl_->epoch.store(epoch);
  // What came early for this epoch is handed on at the next tick: now.
  impl_->wake();
}

void Transport::send_control(flatbuffers::DetachedBuffer message) {
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    was_empty = impl_->queue.empty() && impl_->control_queue.empty();
    impl_->control_queue.push_back(std::move(message));
  }
  if (was_empty) impl_->wake();
}

void Transport::send(std::vector<OutboundMessage>& messages) { impl_->push(messages); }

void Transport::send_deliver(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header,
                             PayloadPtr payload) {
  impl_->push(OutboundMessage{unit, Destination{FrameKind::deliver, node, replica, header.epoch}, header,
                              std::move(payload)});
}

void Transport::send_eos(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header) {
  impl_->push(OutboundMessage{unit, Destination{FrameKind::eos, node, replica, header.epoch}, header, nullptr});
}

void Transport::send_ack(int unit, std::uint32_t node, std::uint32_t replica, const WireHeader& header) {
  impl_->push(OutboundMessage{unit, Destination{FrameKind::ack, node, replica, header.epoch}, header, nullptr});
}

}  // namespace swarmflow::transport
