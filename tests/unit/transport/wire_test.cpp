#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/control_generated.h>
#include <swarmflow/schema/envelope_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "transport/wire.hpp"

namespace swarmflow::transport {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes finished(flatbuffers::FlatBufferBuilder& fbb) {
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Bytes destination_bytes(FrameKind kind) {
  Destination d;
  d.kind = kind;
  d.node = 0x01020304;
  d.replica = 5;
  d.epoch = 0xA0B0C0D0;
  Bytes out(kDestinationSize);
  encode_destination(d, out.data());
  return out;
}

WireHeader deliver_header(const std::string& payload_id) {
  WireHeader h;
  h.edge = 2;
  h.from_replica = 1;
  h.epoch = 7;
  h.envelope.stream = 11;
  h.envelope.seq = 42;
  h.envelope.capture_ns = -5;
  h.envelope.confidence = 0.25F;
  h.envelope.vote_key = 99;
  h.envelope.add_hop(100);
  h.envelope.add_hop(200);
  h.payload_id = payload_id;
  return h;
}

Bytes header_bytes(const WireHeader& h) {
  flatbuffers::FlatBufferBuilder fbb;
  encode_header(h, fbb);
  return finished(fbb);
}

Bytes blob_bytes(std::size_t size) {
  flatbuffers::FlatBufferBuilder fbb;
  Bytes data(size, 0x5A);
  fbb.Finish(schema::CreateBlob(fbb, 11, 42, fbb.CreateVector(data)), schema::BlobIdentifier());
  return finished(fbb);
}

Bytes frame_bytes() {
  flatbuffers::FlatBufferBuilder fbb;
  Bytes pixels(4 * 2 * 3, 7);
  fbb.Finish(schema::CreateFrameDirect(fbb, schema::PixelFormat::BGR, 4, 2, 12, 0, "cam", 1, &pixels),
             schema::FrameIdentifier());
  return finished(fbb);
}

Bytes tokens_bytes() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::int32_t> ids{1, 2};
  std::vector<flatbuffers::Offset<flatbuffers::String>> pieces{fbb.CreateString("a"), fbb.CreateString("b")};
  fbb.Finish(schema::CreateTokensDirect(fbb, &ids, &pieces, 0), schema::TokensIdentifier());
  return finished(fbb);
}

Bytes vision_bytes() {
  flatbuffers::FlatBufferBuilder fbb;
  schema::Box box(1, 2, 3, 4);
  std::vector<flatbuffers::Offset<schema::Defect>> defects{schema::CreateDefectDirect(fbb, "pit", &box, 0.5F)};
  fbb.Finish(schema::CreateVisionResultsDirect(fbb, "cam", 1, 2, &defects), schema::VisionResultsIdentifier());
  return finished(fbb);
}

Bytes control_bytes() {
  flatbuffers::FlatBufferBuilder fbb;
  auto beat = schema::CreateHeartbeatDirect(fbb, "u1", 5, 1);
  fbb.Finish(schema::CreateControl(fbb, schema::ControlBody::Heartbeat, beat.Union()), schema::ControlIdentifier());
  return finished(fbb);
}

/// A message under test: its frames, and how many times the payload was adopted.
struct Message {
  std::vector<Bytes> frames;
  int adopted = 0;

  std::optional<Inbound> decode(Rejection* why, const WireLimits& limits = {}) {
    std::vector<FrameView> views;
    for (const auto& f : frames) views.push_back(FrameView{f.empty() ? nullptr : f.data(), f.size()});
    return decode_message(views.data(), views.size(), limits, why, [this]() {
      ++adopted;
      return Payload::copy_of(frames[2].data(), frames[2].size());
    });
  }

  Rejection rejection(const WireLimits& limits = {}) {
    Rejection why = Rejection::none;
    const auto in = decode(&why, limits);
    EXPECT_EQ(in.has_value(), why == Rejection::none);
    if (why != Rejection::none) {
      EXPECT_EQ(adopted, 0) << "payload adopted before every check passed";
    }
    return why;
  }
};

Message deliver_message(const std::string& payload_id, Bytes payload) {
  return Message{{destination_bytes(FrameKind::deliver), header_bytes(deliver_header(payload_id)), std::move(payload)}};
}

Message blob_message() { return deliver_message("SFBL", blob_bytes(16)); }

WireHeader ack_header() {
  WireHeader h;
  h.edge = 3;
  h.from_replica = 2;
  h.epoch = 9;
  h.credits = 4;
  h.released = 3;
  h.service_ns = 1250.5;
  return h;
}

Message ack_message() {
  return Message{{destination_bytes(FrameKind::ack), header_bytes(ack_header()), {}}};
}

// -- destination -----------------------------------------------------------------

TEST(WireDestination, RoundTripsInLittleEndian) {
  const Bytes b = destination_bytes(FrameKind::ack);
  const Bytes expected{1, 2, 0, 0, 0x04, 0x03, 0x02, 0x01, 5, 0, 0, 0, 0xD0, 0xC0, 0xB0, 0xA0};
  EXPECT_EQ(b, expected);
  const auto d = decode_destination(b.data(), b.size());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->kind, FrameKind::ack);
  EXPECT_EQ(d->node, 0x01020304U);
  EXPECT_EQ(d->replica, 5U);
  EXPECT_EQ(d->epoch, 0xA0B0C0D0U);
}

TEST(WireDestination, RejectsWrongSizeVersionKindAndReservedBytes) {
  const Bytes good = destination_bytes(FrameKind::eos);
  EXPECT_FALSE(decode_destination(good.data(), good.size() - 1).has_value());
  Bytes longer = good;
  longer.push_back(0);
  EXPECT_FALSE(decode_destination(longer.data(), longer.size()).has_value());
  EXPECT_FALSE(decode_destination(nullptr, 0).has_value());
  for (std::size_t i : {0, 1, 2, 3}) {
    for (std::uint8_t v : {7, 9, 255}) {
      Bytes b = good;
      b[i] = v;
      EXPECT_FALSE(decode_destination(b.data(), b.size()).has_value()) << "byte " << i << " = " << int(v);
    }
  }
}

// -- header ------------------------------------------------------------------------

TEST(WireHeaderFrame, DeliverHeaderRoundTrips) {
  const WireHeader h = deliver_header("SFBL");
  const Bytes b = header_bytes(h);
  Rejection why = Rejection::payload_size;
  const auto d = decode_header(b.data(), b.size(), WireLimits{}, &why);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(why, Rejection::none);
  EXPECT_EQ(d->edge, 2U);
  EXPECT_EQ(d->from_replica, 1U);
  EXPECT_EQ(d->epoch, 7U);
  EXPECT_EQ(d->envelope.stream, 11U);
  EXPECT_EQ(d->envelope.seq, 42U);
  EXPECT_EQ(d->envelope.capture_ns, -5);
  EXPECT_FLOAT_EQ(d->envelope.confidence, 0.25F);
  EXPECT_EQ(d->envelope.vote_key, 99U);
  ASSERT_EQ(d->envelope.hop_count, 2);
  EXPECT_EQ(d->envelope.hop_ns[0], 100);
  EXPECT_EQ(d->envelope.hop_ns[1], 200);
  EXPECT_EQ(d->envelope.sent_ns, 0);
  EXPECT_EQ(d->payload_id, "SFBL");
}

TEST(WireHeaderFrame, SendTimeRoundTrips) {
  WireHeader h = deliver_header("SFBL");
  h.envelope.sent_ns = 250;
  const Bytes b = header_bytes(h);
  const auto d = decode_header(b.data(), b.size(), WireLimits{}, nullptr);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->envelope.sent_ns, 250);
  EXPECT_EQ(d->envelope.hop_ns[1], 200);
}

TEST(WireHeaderFrame, FullHopTraceRoundTrips) {
  WireHeader h = deliver_header("SFBL");
  h.envelope = EnvelopeHeader{};
  for (std::size_t i = 0; i < kMaxHops; ++i) h.envelope.add_hop(static_cast<std::int64_t>(i) * 10);
  const Bytes b = header_bytes(h);
  const auto d = decode_header(b.data(), b.size(), WireLimits{}, nullptr);
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->envelope.hop_count, kMaxHops);
  EXPECT_EQ(d->envelope.hop_ns[kMaxHops - 1], static_cast<std::int64_t>(kMaxHops - 1) * 10);
}

TEST(WireHeaderFrame, DecodesFromAMisalignedBuffer) {
  const Bytes b = header_bytes(deliver_header("SFBL"));
  std::vector<std::uint64_t> storage(b.size() / 8 + 2);
  auto* odd = reinterpret_cast<std::uint8_t*>(storage.data()) + 1;
  std::memcpy(odd, b.data(), b.size());
  const auto d = decode_header(odd, b.size(), WireLimits{}, nullptr);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->envelope.seq, 42U);
}

TEST(WireHeaderFrame, RejectsNonFiniteConfidenceAndNegativeServiceTime) {
  WireHeader h = deliver_header("SFBL");
  h.envelope.confidence = std::numeric_limits<float>::quiet_NaN();
  Bytes b = header_bytes(h);
  Rejection why = Rejection::none;
  EXPECT_FALSE(decode_header(b.data(), b.size(), WireLimits{}, &why).has_value());
  EXPECT_EQ(why, Rejection::header_invalid);

  WireHeader a = ack_header();
  a.service_ns = -1;
  b = header_bytes(a);
  EXPECT_FALSE(decode_header(b.data(), b.size(), WireLimits{}, &why).has_value());
  EXPECT_EQ(why, Rejection::header_invalid);
}

// -- round trips of whole messages ---------------------------------------------------

TEST(WireMessage, DeliverRoundTripsForEveryBuiltInPayloadType) {
  const std::vector<std::pair<std::string, Bytes>> payloads{
      {"SFBL", blob_bytes(100)}, {"SFFR", frame_bytes()},   {"SFTK", tokens_bytes()},
      {"SFVR", vision_bytes()},  {"SFCT", control_bytes()},
  };
  for (const auto& [id, payload] : payloads) {
    SCOPED_TRACE(id);
    Message m = deliver_message(id, payload);
    Rejection why = Rejection::part_count;
    const auto in = m.decode(&why);
    ASSERT_TRUE(in.has_value()) << to_string(why);
    EXPECT_EQ(why, Rejection::none);
    EXPECT_EQ(m.adopted, 1);
    EXPECT_EQ(in->destination.kind, FrameKind::deliver);
    EXPECT_EQ(in->destination.node, 0x01020304U);
    EXPECT_EQ(in->header.envelope.seq, 42U);
    EXPECT_EQ(in->header.payload_id, id);
    ASSERT_TRUE(in->payload);
    EXPECT_EQ(in->payload->identifier(), id);
    ASSERT_EQ(in->payload->size(), payload.size());
    EXPECT_EQ(std::memcmp(in->payload->data(), payload.data(), payload.size()), 0);
  }
}

TEST(WireMessage, AckRoundTripsWithoutAdoptingAPayload) {
  Message m = ack_message();
  Rejection why = Rejection::part_count;
  const auto in = m.decode(&why);
  ASSERT_TRUE(in.has_value()) << to_string(why);
  EXPECT_EQ(m.adopted, 0);
  EXPECT_FALSE(in->payload);
  EXPECT_EQ(in->destination.kind, FrameKind::ack);
  EXPECT_EQ(in->header.edge, 3U);
  EXPECT_EQ(in->header.from_replica, 2U);
  EXPECT_EQ(in->header.credits, 4U);
  EXPECT_EQ(in->header.released, 3U);
  EXPECT_DOUBLE_EQ(in->header.service_ns, 1250.5);
}

TEST(WireMessage, EosRoundTripsWithoutAdoptingAPayload) {
  WireHeader h;
  h.edge = 1;
  h.from_replica = 6;
  h.epoch = 2;
  Message m{{destination_bytes(FrameKind::eos), header_bytes(h), {}}};
  Rejection why = Rejection::part_count;
  const auto in = m.decode(&why);
  ASSERT_TRUE(in.has_value()) << to_string(why);
  EXPECT_EQ(m.adopted, 0);
  EXPECT_FALSE(in->payload);
  EXPECT_EQ(in->destination.kind, FrameKind::eos);
  EXPECT_EQ(in->header.from_replica, 6U);
  EXPECT_EQ(in->header.epoch, 2U);
}

// -- one test per rejection ------------------------------------------------------------

TEST(WireReject, TruncatedDestination) {
  Message m = blob_message();
  m.frames[0].pop_back();
  EXPECT_EQ(m.rejection(), Rejection::destination);
}

TEST(WireReject, BadVersion) {
  Message m = blob_message();
  m.frames[0][0] = kWireVersion + 1;
  EXPECT_EQ(m.rejection(), Rejection::destination);
}

TEST(WireReject, BadKind) {
  Message m = blob_message();
  m.frames[0][1] = 0;
  EXPECT_EQ(m.rejection(), Rejection::destination);
  m.frames[0][1] = 7;  // past owed (6)
  EXPECT_EQ(m.rejection(), Rejection::destination);
}

TEST(WireReject, NonZeroReservedBytes) {
  Message m = blob_message();
  m.frames[0][2] = 1;
  EXPECT_EQ(m.rejection(), Rejection::destination);
}

TEST(WireReject, TwoFrames) {
  Message m = blob_message();
  m.frames.pop_back();
  EXPECT_EQ(m.rejection(), Rejection::part_count);
}

TEST(WireReject, FourFrames) {
  Message m = blob_message();
  m.frames.push_back(m.frames[2]);
  EXPECT_EQ(m.rejection(), Rejection::part_count);
}

TEST(WireReject, EmptyHeader) {
  Message m = blob_message();
  m.frames[1].clear();
  EXPECT_EQ(m.rejection(), Rejection::header_size);
}

TEST(WireReject, OversizeHeader) {
  Message m = blob_message();
  WireLimits limits;
  limits.max_header_bytes = m.frames[1].size() - 1;
  EXPECT_EQ(m.rejection(limits), Rejection::header_size);
  limits.max_header_bytes = m.frames[1].size();
  EXPECT_EQ(m.rejection(limits), Rejection::none);
}

TEST(WireReject, WrongHeaderIdentifier) {
  Message m = blob_message();
  std::memcpy(m.frames[1].data() + 4, "SFBL", 4);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, HeaderTooShortForAnIdentifier) {
  Message m = blob_message();
  m.frames[1].resize(7);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, HeaderRootOffsetOutOfTheBuffer) {
  Message m = blob_message();
  const auto size = static_cast<std::uint32_t>(m.frames[1].size());
  flatbuffers::WriteScalar<flatbuffers::uoffset_t>(m.frames[1].data(), size + 64);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, HeaderFieldOffsetOutOfTheBuffer) {
  // Point the root table's vtable far outside the buffer.
  Message m = blob_message();
  auto& h = m.frames[1];
  const auto root = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(h.data());
  flatbuffers::WriteScalar<flatbuffers::soffset_t>(h.data() + root, -100000);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, HeaderOverTheTableLimit) {
  Message m = blob_message();
  WireLimits limits;
  limits.max_tables = 0;
  EXPECT_EQ(m.rejection(limits), Rejection::header_invalid);
}

TEST(WireReject, TooManyHops) {
  // Built by hand: encode_header itself never writes more than kMaxHops.
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::int64_t> hops(kMaxHops + 1, 1);
  fbb.Finish(schema::CreateEnvelopeHeaderDirect(fbb, 1, 0, 0, 1, 1, 0, 1.0F, 0, &hops, "SFBL"),
             schema::EnvelopeHeaderIdentifier());
  Message m = blob_message();
  m.frames[1] = finished(fbb);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, HopTraceNotAlignedForItsElements) {
  // Found by the fuzzer: the Verifier checks a vector's length field for
  // 4-byte alignment only. Point hop_ns 4 bytes further on, at its own
  // first element, whose lower half reads as length 1 over misaligned data.
  WireHeader h = deliver_header("SFBL");
  h.envelope = EnvelopeHeader{};
  h.envelope.add_hop(1);
  h.envelope.add_hop(77);
  Message m = blob_message();
  m.frames[1] = header_bytes(h);
  auto* table = flatbuffers::GetMutableRoot<flatbuffers::Table>(m.frames[1].data());
  const auto field = table->GetOptionalFieldOffset(schema::EnvelopeHeader::VT_HOP_NS);
  ASSERT_NE(field, 0);
  auto* offset = reinterpret_cast<std::uint8_t*>(table) + field;
  flatbuffers::WriteScalar(offset, flatbuffers::ReadScalar<flatbuffers::uoffset_t>(offset) + 4);
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, DeliverWithoutPayloadId) {
  Message m = blob_message();
  m.frames[1] = header_bytes(deliver_header(""));
  EXPECT_EQ(m.rejection(), Rejection::header_invalid);
}

TEST(WireReject, PayloadIdNotFourCharacters) {
  for (const char* id : {"SFB", "SFBLX"}) {
    Message m = blob_message();
    m.frames[1] = header_bytes(deliver_header(id));
    EXPECT_EQ(m.rejection(), Rejection::header_invalid) << id;
  }
}

TEST(WireReject, PayloadOfUnknownType) {
  Message m = deliver_message("ZZZZ", blob_bytes(16));
  EXPECT_EQ(m.rejection(), Rejection::payload_type);
}

TEST(WireReject, APayloadRefusedAfterItsHeaderPassedKeepsTheHeaderForTheAck) {
  Message m = deliver_message("ZZZZ", blob_bytes(16));
  std::vector<FrameView> views;
  for (const auto& f : m.frames) views.push_back(FrameView{f.data(), f.size()});
  Rejection why = Rejection::none;
  Inbound refused;
  refused.destination.kind = FrameKind::eos;
  EXPECT_FALSE(decode_message(views.data(), views.size(), WireLimits{}, &why, nullptr, &refused).has_value());
  EXPECT_EQ(why, Rejection::payload_type);
  EXPECT_EQ(refused.destination.kind, FrameKind::deliver);
  EXPECT_EQ(refused.destination.replica, 5U);
  EXPECT_EQ(refused.header.edge, 2U);
  EXPECT_EQ(refused.header.from_replica, 1U);
  EXPECT_EQ(refused.header.envelope.seq, 42U);
  EXPECT_EQ(refused.payload, nullptr);

  // A header that fails leaves nothing to acknowledge.
  Message bad = blob_message();
  bad.frames[1] = header_bytes(deliver_header(""));
  views.clear();
  for (const auto& f : bad.frames) views.push_back(FrameView{f.data(), f.size()});
  Inbound untouched;
  untouched.destination.kind = FrameKind::eos;
  EXPECT_FALSE(decode_message(views.data(), views.size(), WireLimits{}, &why, nullptr, &untouched).has_value());
  EXPECT_EQ(why, Rejection::header_invalid);
  EXPECT_EQ(untouched.destination.kind, FrameKind::eos);
}

TEST(WireReject, PayloadIdentifierDiffersFromPayloadId) {
  Message m = deliver_message("SFFR", blob_bytes(16));
  EXPECT_EQ(m.rejection(), Rejection::payload_type);
}

TEST(WireReject, HeaderIdentifierIsNotAPayloadType) {
  Message m = deliver_message("SFEH", header_bytes(deliver_header("SFBL")));
  EXPECT_EQ(m.rejection(), Rejection::payload_type);
}

TEST(WireReject, CorruptedBlobPayload) {
  Message m = blob_message();
  auto& p = m.frames[2];
  // The data vector's length, made larger than the buffer.
  const auto root = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(p.data());
  const auto* blob = flatbuffers::GetRoot<schema::Blob>(p.data());
  const auto vec = static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(blob->data()) - p.data());
  ASSERT_GT(vec, root);
  flatbuffers::WriteScalar<flatbuffers::uoffset_t>(p.data() + vec, 1U << 20);
  EXPECT_EQ(m.rejection(), Rejection::payload_invalid);
}

TEST(WireReject, PayloadOverMaxPayloadBytes) {
  Message m = deliver_message("SFBL", blob_bytes(1000));
  WireLimits limits;
  limits.max_payload_bytes = m.frames[2].size() - 1;
  EXPECT_EQ(m.rejection(limits), Rejection::payload_size);
  limits.max_payload_bytes = m.frames[2].size();
  EXPECT_EQ(m.rejection(limits), Rejection::none);
}

TEST(WireReject, EmptyPayloadOnDeliver) {
  Message m = blob_message();
  m.frames[2].clear();
  EXPECT_EQ(m.rejection(), Rejection::payload_size);
}

TEST(WireReject, NonEmptyPayloadOnAck) {
  Message m = ack_message();
  m.frames[2] = blob_bytes(8);
  EXPECT_EQ(m.rejection(), Rejection::payload_size);
}

TEST(WireReject, NonEmptyPayloadOnEos) {
  Message m = ack_message();
  m.frames[0] = destination_bytes(FrameKind::eos);
  m.frames[2] = {0};
  EXPECT_EQ(m.rejection(), Rejection::payload_size);
}

TEST(WireReject, ChecksRunInTheDocumentedOrder) {
  // Everything is wrong; the earliest check names the reason.
  Message m = blob_message();
  m.frames[1].clear();
  m.frames[2].clear();
  EXPECT_EQ(m.rejection(), Rejection::header_size);
  m.frames[0].pop_back();
  EXPECT_EQ(m.rejection(), Rejection::destination);
  m.frames.pop_back();
  EXPECT_EQ(m.rejection(), Rejection::part_count);
}

TEST(WireReject, AdoptedPayloadMustBeTheFrame) {
  Message m = blob_message();
  std::vector<FrameView> views;
  for (const auto& f : m.frames) views.push_back(FrameView{f.data(), f.size()});
  Rejection why = Rejection::none;
  EXPECT_FALSE(decode_message(views.data(), views.size(), WireLimits{}, &why, [] { return PayloadPtr{}; }));
  EXPECT_EQ(why, Rejection::payload_invalid);
}

// -- payload verification and types ------------------------------------------------------

TEST(WirePayload, VerifiesAMisalignedPayload) {
  const Bytes b = blob_bytes(40);
  std::vector<std::uint64_t> storage(b.size() / 8 + 2);
  auto* odd = reinterpret_cast<std::uint8_t*>(storage.data()) + 3;
  std::memcpy(odd, b.data(), b.size());
  EXPECT_EQ(verify_payload("SFBL", odd, b.size(), WireLimits{}), Rejection::none);
  EXPECT_FALSE(is_wire_aligned(odd));
}

TEST(WirePayload, ShortPayloadHasNoIdentifier) {
  const Bytes b{8, 0, 0, 0, 'S', 'F'};
  EXPECT_EQ(verify_payload("SFBL", b.data(), b.size(), WireLimits{}), Rejection::payload_type);
}

TEST(WirePayload, BuiltInTypesAreKnownAndTheHeaderIsNot) {
  for (const char* id : {"SFBL", "SFFR", "SFTK", "SFVR", "SFCT", "SFBQ", "SFUS", "SFPR", "SFCO", "SFVD"}) {
    EXPECT_NE(PayloadTypes::find(id), nullptr) << id;
  }
  EXPECT_EQ(PayloadTypes::find("SFEH"), nullptr);
  EXPECT_EQ(PayloadTypes::find("SFB"), nullptr);
}

TEST(WirePayload, RegisteredCustomTypeIsAccepted) {
  // A custom schema: here a Blob written under the application's own identifier.
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(schema::CreateBlob(fbb, 1, 2), "APP1");
  const Bytes payload = finished(fbb);
  EXPECT_EQ(deliver_message("APP1", payload).rejection(), Rejection::payload_type);

  PayloadTypes::add("APP1", [](flatbuffers::Verifier& v) { return v.VerifyBuffer<schema::Blob>("APP1"); });
  ASSERT_NE(PayloadTypes::find("APP1"), nullptr);
  Message m = deliver_message("APP1", payload);
  Rejection why = Rejection::part_count;
  const auto in = m.decode(&why);
  ASSERT_TRUE(in.has_value()) << to_string(why);
  EXPECT_EQ(in->payload->identifier(), "APP1");
  EXPECT_EQ(in->payload->root<schema::Blob>()->seq(), 2U);
}

TEST(WirePayload, AddRefusesBadIdentifiers) {
  auto any = [](flatbuffers::Verifier&) { return true; };
  EXPECT_THROW(PayloadTypes::add("ABC", any), std::invalid_argument);
  EXPECT_THROW(PayloadTypes::add("ABCDE", any), std::invalid_argument);
  EXPECT_THROW(PayloadTypes::add(std::string("AB\0D", 4), any), std::invalid_argument);
  EXPECT_THROW(PayloadTypes::add("SFEH", any), std::invalid_argument);
  EXPECT_THROW(PayloadTypes::add("APP2", PayloadTypes::Verify{}), std::invalid_argument);
}

TEST(WireRejection, EveryReasonHasAName) {
  EXPECT_STREQ(to_string(Rejection::none), "none");
  EXPECT_STREQ(to_string(Rejection::part_count), "part_count");
  EXPECT_STREQ(to_string(Rejection::destination), "destination");
  EXPECT_STREQ(to_string(Rejection::header_size), "header_size");
  EXPECT_STREQ(to_string(Rejection::header_invalid), "header_invalid");
  EXPECT_STREQ(to_string(Rejection::payload_size), "payload_size");
  EXPECT_STREQ(to_string(Rejection::payload_type), "payload_type");
  EXPECT_STREQ(to_string(Rejection::payload_invalid), "payload_invalid");
}

// -- packs ---------------------------------------------------------------------

Bytes record_header_bytes(const WireHeader& h) {
  Bytes out(kRecordHeaderSize);
  out.resize(encode_record_header(h, out.data()));
  return out;
}

/// A pack frame in 8-byte-aligned memory, as ZeroMQ's own messages are.
struct AlignedPack {
  std::vector<std::uint64_t> words;
  FrameView view() const { return FrameView{reinterpret_cast<const std::uint8_t*>(words.data()), size}; }
  std::size_t size = 0;
};

AlignedPack aligned(const PackWriter& w) {
  AlignedPack p;
  p.size = w.size();
  p.words.resize((p.size + 7) / 8);
  std::memcpy(p.words.data(), w.data(), p.size);
  return p;
}

TEST(WirePack, RecordHeaderRoundTripsEveryField) {
  WireHeader h = deliver_header("SFBL");
  h.envelope.part_id = 1234;
  h.credits = 3;
  h.released = 4;
  h.service_ns = 12.5;
  for (int i = 2; i < static_cast<int>(kMaxHops); ++i) h.envelope.add_hop(300 + i);
  const Bytes b = record_header_bytes(h);
  Rejection why = Rejection::part_count;
  const auto back = decode_record_header(b.data(), b.size(), &why);
  ASSERT_TRUE(back.has_value()) << to_string(why);
  EXPECT_EQ(why, Rejection::none);
  EXPECT_EQ(back->edge, 2U);
  EXPECT_EQ(back->from_replica, 1U);
  EXPECT_EQ(back->epoch, 7U);
  EXPECT_EQ(back->envelope.stream, 11U);
  EXPECT_EQ(back->envelope.seq, 42U);
  EXPECT_EQ(back->envelope.capture_ns, -5);
  EXPECT_FLOAT_EQ(back->envelope.confidence, 0.25F);
  EXPECT_EQ(back->envelope.vote_key, 99U);
  EXPECT_EQ(back->envelope.part_id, 1234U);
  ASSERT_EQ(back->envelope.hop_count, kMaxHops);
  EXPECT_EQ(back->envelope.hop_ns[0], 100);
  EXPECT_EQ(back->envelope.hop_ns[kMaxHops - 1], 300 + static_cast<int>(kMaxHops) - 1);
  EXPECT_EQ(back->payload_id, "SFBL");
  EXPECT_EQ(back->credits, 3U);
  EXPECT_EQ(back->released, 4U);
  EXPECT_DOUBLE_EQ(back->service_ns, 12.5);
  EXPECT_EQ(back->envelope.sent_ns, 0);
  EXPECT_EQ(b.size(), kShortRecordHeaderSize) << "no send time, no bytes for it";
  // Any alignment will do: the header is copied out, not read in place.
  Bytes shifted(b.size() + 1);
  std::memcpy(shifted.data() + 1, b.data(), b.size());
  EXPECT_TRUE(decode_record_header(shifted.data() + 1, b.size(), &why).has_value());
}

TEST(WirePack, RecordHeaderWithASendTimeIsTheLongOneAndTheShortOneStillReads) {
  WireHeader h = deliver_header("SFBL");
  h.envelope.sent_ns = 250;
  const Bytes timed = record_header_bytes(h);
  ASSERT_EQ(timed.size(), kRecordHeaderSize);
  const auto back = decode_record_header(timed.data(), timed.size(), nullptr);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->envelope.sent_ns, 250);
  EXPECT_EQ(back->envelope.hop_ns[1], 200);
  // The same record without its last field is one from a sender without send times.
  const auto shorter = decode_record_header(timed.data(), kShortRecordHeaderSize, nullptr);
  ASSERT_TRUE(shorter.has_value());
  EXPECT_EQ(shorter->envelope.sent_ns, 0);
  EXPECT_EQ(shorter->envelope.seq, 42U);
  EXPECT_EQ(shorter->envelope.hop_ns[1], 200);
}

TEST(WirePack, RecordHeaderRejectsBadSizeAndFields) {
  Rejection why = Rejection::none;
  WireHeader timed = deliver_header("SFBL");
  timed.envelope.sent_ns = 1;
  const Bytes good = record_header_bytes(timed);
  for (const std::size_t size : {kShortRecordHeaderSize - 8, kShortRecordHeaderSize + 4, kRecordHeaderSize + 8}) {
    Bytes b = good;
    b.resize(size);
    EXPECT_FALSE(decode_record_header(b.data(), b.size(), &why).has_value()) << size;
    EXPECT_EQ(why, Rejection::header_size);
  }
  WireHeader nan = deliver_header("SFBL");
  nan.envelope.confidence = std::numeric_limits<float>::quiet_NaN();
  Bytes b = record_header_bytes(nan);
  EXPECT_FALSE(decode_record_header(b.data(), b.size(), &why).has_value());
  EXPECT_EQ(why, Rejection::header_invalid);
  WireHeader negative = deliver_header("SFBL");
  negative.service_ns = -1;
  b = record_header_bytes(negative);
  EXPECT_FALSE(decode_record_header(b.data(), b.size(), &why).has_value());
  EXPECT_EQ(why, Rejection::header_invalid);
}

TEST(WirePack, RecordsRoundTripInOrderAsViewsOfTheFrame) {
  PackWriter w;
  const Bytes blob = blob_bytes(64);
  const Bytes tokens = tokens_bytes();
  const Bytes blob_h = record_header_bytes(deliver_header("SFBL"));
  const Bytes tokens_h = record_header_bytes(deliver_header("SFTK"));
  WireHeader ack;
  ack.credits = 9;
  const Bytes ack_h = record_header_bytes(ack);
  w.add(Destination{FrameKind::deliver, 3, 1, 7}, blob_h.data(), blob_h.size(), blob.data(), blob.size());
  w.add(Destination{FrameKind::ack, 4, 0, 7}, ack_h.data(), ack_h.size(), nullptr, 0);
  w.add(Destination{FrameKind::deliver, 3, 2, 7}, tokens_h.data(), tokens_h.size(), tokens.data(), tokens.size());
  ASSERT_EQ(w.records(), 3U);
  EXPECT_EQ(w.size(), kPackHeadSize + pack_record_size(kShortRecordHeaderSize, blob.size()) +
                          pack_record_size(kShortRecordHeaderSize, 0) +
                          pack_record_size(kShortRecordHeaderSize, tokens.size()));

  const AlignedPack p = aligned(w);
  std::vector<std::array<FrameView, 3>> records;
  ASSERT_EQ(split_pack(p.view(), WireLimits{}, &records), Rejection::none);
  ASSERT_EQ(records.size(), 3U);
  const std::vector<FrameKind> kinds{FrameKind::deliver, FrameKind::ack, FrameKind::deliver};
  for (std::size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(is_wire_aligned(records[i][1].data));
    if (records[i][2].size > 0) {
      EXPECT_TRUE(is_wire_aligned(records[i][2].data));
    }
    Rejection why = Rejection::part_count;
    const auto r = records[i];
    const auto in = decode_record(r, WireLimits{}, &why, [&r, &p]() {
      return Payload::wrap(r[2].data, r[2].size, std::make_shared<AlignedPack>(p));
    });
    ASSERT_TRUE(in.has_value()) << to_string(why);
    EXPECT_EQ(in->destination.kind, kinds[i]);
    if (kinds[i] == FrameKind::deliver) {
      ASSERT_TRUE(in->payload);
      // The payload is the frame's own bytes, not a copy of them.
      EXPECT_EQ(in->payload->data(), r[2].data);
    } else {
      EXPECT_FALSE(in->payload);
      EXPECT_EQ(in->header.credits, 9U);
    }
  }
  EXPECT_EQ(records[0][2].size, blob.size());
  EXPECT_EQ(std::memcmp(records[2][2].data, tokens.data(), tokens.size()), 0);

  w.clear();
  EXPECT_EQ(w.records(), 0U);
  EXPECT_EQ(w.size(), 0U);
}

TEST(WirePack, FramingErrorsRefuseTheWholePack) {
  PackWriter w;
  const Bytes blob = blob_bytes(8);
  const Bytes h = record_header_bytes(deliver_header("SFBL"));
  for (int i = 0; i < 3; ++i) w.add(Destination{}, h.data(), h.size(), blob.data(), blob.size());
  std::vector<std::array<FrameView, 3>> records;
  AlignedPack p = aligned(w);
  ASSERT_EQ(split_pack(p.view(), WireLimits{}, &records), Rejection::none);

  WireLimits two;
  two.max_pack_records = 2;
  EXPECT_EQ(split_pack(p.view(), two, &records), Rejection::part_count);
  EXPECT_TRUE(records.empty());

  AlignedPack cut = p;
  cut.size -= 8;
  EXPECT_EQ(split_pack(cut.view(), WireLimits{}, &records), Rejection::part_count);
  EXPECT_TRUE(records.empty()) << "no record of a malformed pack is handed on";

  AlignedPack empty;
  EXPECT_EQ(split_pack(empty.view(), WireLimits{}, &records), Rejection::part_count);
  EXPECT_FALSE(is_pack(empty.view()));
}

}  // namespace
}  // namespace swarmflow::transport
