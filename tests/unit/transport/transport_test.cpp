// Two units' transports in one process, over inproc://: what one queues, the
// other receives, in order, whole, and (where promised) without a copy.

#include "transport/transport.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <swarmflow/schema/blob_generated.h>

namespace swarmflow::transport {
namespace {

PayloadPtr blob(std::uint64_t seq, std::size_t bytes) {
  flatbuffers::FlatBufferBuilder fbb(bytes + 256);
  std::uint8_t* data = nullptr;
  auto v = fbb.CreateUninitializedVector(bytes, &data);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(seq + i);
  fbb.Finish(schema::CreateBlob(fbb, 1, seq, v), schema::BlobIdentifier());
  return Payload::from_builder(fbb);
}

/// What a transport's handler was given, and a way to wait for it.
class Received {
 public:
  void add(Inbound&& in) {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_.push_back(std::move(in));
    changed_.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return messages_.size() >= n; });
  }
  std::vector<Inbound> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(messages_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Inbound> messages_;
};

/// Units u0 and u1 on inproc endpoints of their own.
struct Pair {
  explicit Pair(std::size_t pack_below_bytes) {
    static int next = 0;
    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(next++);
    const std::vector<Peer> peers{{"u0", "inproc://transport-test-u0-" + tag, ""},
                                  {"u1", "inproc://transport-test-u1-" + tag, ""}};
    for (int u = 0; u < 2; ++u) {
      TransportConfig c;
      c.unit_id = peers[static_cast<std::size_t>(u)].unit_id;
      c.endpoint = peers[static_cast<std::size_t>(u)].endpoint;
      c.peers = peers;
      c.pack_below_bytes = pack_below_bytes;
      Received* into = &received[u];
      units.push_back(std::make_unique<Transport>(process_context(), c, [into](Inbound&& in) { into->add(std::move(in)); }));
    }
    for (auto& t : units) started = started && t->start().ok();
  }

  std::vector<std::unique_ptr<Transport>> units;
  Received received[2];
  bool started = true;
};

WireHeader deliver_header(std::uint64_t seq) {
  WireHeader h;
  h.edge = 3;
  h.from_replica = 0;
  h.envelope.stream = 1;
  h.envelope.seq = seq;
  h.envelope.part_id = 100 + seq;
  h.envelope.add_hop(static_cast<std::int64_t>(seq) * 10);
  h.payload_id = "SFBL";
  return h;
}

TEST(Transport, SmallAndLargeEnvelopesArriveInOrderAndWhole) {
  Pair p(1024);
  ASSERT_TRUE(p.started);
  // Mixed sizes: runs of packed records broken by envelopes sent on their own.
  std::vector<OutboundMessage> batch;
  std::vector<PayloadPtr> sent;
  for (std::uint64_t seq = 0; seq < 300; ++seq) {
    const std::size_t bytes = seq % 50 == 7 ? 100000 : 64;
    sent.push_back(blob(seq, bytes));
    batch.push_back(OutboundMessage{1, Destination{FrameKind::deliver, 2, 0, 0}, deliver_header(seq), sent.back()});
    if (batch.size() == 40) p.units[0]->send(batch);
  }
  p.units[0]->send(batch);
  WireHeader eos;
  eos.edge = 3;
  p.units[0]->send_eos(1, 2, 0, eos);

  ASSERT_TRUE(p.received[1].wait_for(301));
  const auto got = p.received[1].take();
  ASSERT_EQ(got.size(), 301U);
  for (std::uint64_t seq = 0; seq < 300; ++seq) {
    SCOPED_TRACE(seq);
    const Inbound& in = got[seq];
    ASSERT_EQ(in.destination.kind, FrameKind::deliver);
    EXPECT_EQ(in.destination.node, 2U);
    EXPECT_EQ(in.header.envelope.seq, seq);
    EXPECT_EQ(in.header.envelope.part_id, 100 + seq);
    ASSERT_EQ(in.header.envelope.hop_count, 1);
    EXPECT_EQ(in.header.envelope.hop_ns[0], static_cast<std::int64_t>(seq) * 10);
    ASSERT_TRUE(in.payload);
    ASSERT_EQ(in.payload->size(), sent[seq]->size());
    EXPECT_EQ(std::memcmp(in.payload->data(), sent[seq]->data(), sent[seq]->size()), 0);
    if (sent[seq]->size() > 1024) {
      EXPECT_EQ(in.payload->data(), sent[seq]->data()) << "a large payload crosses without a copy";
    }
  }
  EXPECT_EQ(got.back().destination.kind, FrameKind::eos) << "end of stream after every envelope before it";
  // The sender counts a message once ZeroMQ took it, which may be a moment
  // after the receiver already has it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p.units[0]->counters().sent.load() < 301U && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(p.units[0]->counters().sent.load(), 301U);
  EXPECT_EQ(p.units[1]->counters().received.load(), 301U);
  EXPECT_EQ(p.units[1]->counters().rejected_total(), 0U);
}

TEST(Transport, PackingNothingSendsEverySmallPayloadWithoutACopy) {
  Pair p(0);
  ASSERT_TRUE(p.started);
  std::vector<OutboundMessage> batch;
  std::vector<PayloadPtr> sent;
  for (std::uint64_t seq = 0; seq < 50; ++seq) {
    sent.push_back(blob(seq, 64));
    batch.push_back(OutboundMessage{1, Destination{FrameKind::deliver, 2, 0, 0}, deliver_header(seq), sent.back()});
  }
  p.units[0]->send(batch);
  ASSERT_TRUE(p.received[1].wait_for(50));
  const auto got = p.received[1].take();
  ASSERT_EQ(got.size(), 50U);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].payload->data(), sent[i]->data()) << i;
  }
}

TEST(Transport, AcksGoBackOnTheConnectionTheSenderOpened) {
  Pair p(1024);
  ASSERT_TRUE(p.started);
  // u0 must have connected to u1 before u1 can answer it.
  p.units[0]->send_deliver(1, 2, 0, deliver_header(0), blob(0, 64));
  ASSERT_TRUE(p.received[1].wait_for(1));
  for (std::uint32_t i = 0; i < 20; ++i) {
    WireHeader ack;
    ack.edge = 3;
    ack.credits = i;
    ack.released = i;
    ack.service_ns = 1000.0 * i;
    p.units[1]->send_ack(0, 1, 0, ack);
  }
  ASSERT_TRUE(p.received[0].wait_for(20));
  const auto acks = p.received[0].take();
  ASSERT_EQ(acks.size(), 20U);
  for (std::uint32_t i = 0; i < 20; ++i) {
    EXPECT_EQ(acks[i].destination.kind, FrameKind::ack);
    // Named by the connection they came back on: u1 (peer 1) sent them, so
    // that a fenced unit's acks can be told from its replacement's.
    EXPECT_EQ(acks[i].sender, 1);
    EXPECT_EQ(acks[i].header.credits, i);
    EXPECT_DOUBLE_EQ(acks[i].header.service_ns, 1000.0 * i);
    EXPECT_FALSE(acks[i].payload);
  }
}

}  // namespace
}  // namespace swarmflow::transport
