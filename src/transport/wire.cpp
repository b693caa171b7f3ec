#include "transport/wire.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/completion_generated.h>
#include <swarmflow/schema/consensus_generated.h>
#include <swarmflow/schema/control_generated.h>
#include <swarmflow/schema/envelope_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/prompt_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/quality_generated.h>
#include <swarmflow/schema/ultrasound_generated.h>
#include <swarmflow/schema/vision_generated.h>

namespace swarmflow::transport {
namespace {

// -- little-endian helpers ---------------------------------------------------

void put_u32(std::uint8_t* out, std::uint32_t v) {
  out[0] = static_cast<std::uint8_t>(v);
  out[1] = static_cast<std::uint8_t>(v >> 8);
  out[2] = static_cast<std::uint8_t>(v >> 16);
  out[3] = static_cast<std::uint8_t>(v >> 24);
}

std::uint32_t get_u32(const std::uint8_t* in) {
  return static_cast<std::uint32_t>(in[0]) | (static_cast<std::uint32_t>(in[1]) << 8) |
         (static_cast<std::uint32_t>(in[2]) << 16) | (static_cast<std::uint32_t>(in[3]) << 24);
}

bool is_kind(std::uint8_t k) {
  return k == static_cast<std::uint8_t>(FrameKind::deliver) || k == static_cast<std::uint8_t>(FrameKind::ack) ||
         k == static_cast<std::uint8_t>(FrameKind::eos) || k == static_cast<std::uint8_t>(FrameKind::drain) ||
         k == static_cast<std::uint8_t>(FrameKind::drained) || k == static_cast<std::uint8_t>(FrameKind::owed);
}

// -- alignment -----------------------------------------------------------------

/// Bytes that FlatBuffers may read as scalars of up to 8 bytes: either the
/// caller's, when suitably aligned, or an aligned copy of them.
class AlignedView {
 public:
  AlignedView(const std::uint8_t* data, std::size_t size) : data_(data) {
    if (!is_wire_aligned(data)) {
      copy_.resize((size + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t));
      std::memcpy(copy_.data(), data, size);
      data_ = reinterpret_cast<const std::uint8_t*>(copy_.data());
    }
  }
  const std::uint8_t* data() const { return data_; }

 private:
  std::vector<std::uint64_t> copy_;
  const std::uint8_t* data_;
};

/// The largest buffer a Verifier accepts (it asserts on anything larger).
constexpr std::size_t kMaxFlatBuffer = FLATBUFFERS_MAX_BUFFER_SIZE - 1;
/// Root offset plus file identifier.
constexpr std::size_t kMinIdentifiedBuffer = sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength;

bool valid_identifier(std::string_view id) {
  if (id.size() != flatbuffers::kFileIdentifierLength) return false;
  for (char c : id) {
    if (c == '\0') return false;
  }
  return true;
}

void set(Rejection* why, Rejection r) {
  if (why != nullptr) *why = r;
}

// -- payload type registry -----------------------------------------------------

class TypeTable {
 public:
  TypeTable() {
    insert(schema::BlobIdentifier(), [](flatbuffers::Verifier& v) { return schema::VerifyBlobBuffer(v); });
    insert(schema::FrameIdentifier(), [](flatbuffers::Verifier& v) { return schema::VerifyFrameBuffer(v); });
    insert(schema::TokensIdentifier(), [](flatbuffers::Verifier& v) { return schema::VerifyTokensBuffer(v); });
    insert(schema::VisionResultsIdentifier(),
           [](flatbuffers::Verifier& v) { return schema::VerifyVisionResultsBuffer(v); });
    insert(schema::ControlIdentifier(), [](flatbuffers::Verifier& v) { return schema::VerifyControlBuffer(v); });
    insert(schema::BatchReportIdentifier(),
           [](flatbuffers::Verifier& v) { return schema::VerifyBatchReportBuffer(v); });
    insert(schema::UltrasoundResultsIdentifier(),
           [](flatbuffers::Verifier& v) { return schema::VerifyUltrasoundResultsBuffer(v); });
    insert(schema::PromptIdentifier(), [](flatbuffers::Verifier& v) { return schema::VerifyPromptBuffer(v); });
    insert(schema::CompletionIdentifier(),
           [](flatbuffers::Verifier& v) { return schema::VerifyCompletionBuffer(v); });
    insert(schema::VoteDecisionIdentifier(),
           [](flatbuffers::Verifier& v) { return schema::VerifyVoteDecisionBuffer(v); });
  }

  // A replaced verifier stays alive (in `functions_`), so a pointer that find()
  // handed out earlier never dangles.
  void insert(const std::string& id, PayloadTypes::Verify verify) {
    std::lock_guard<std::mutex> lock(mutex_);
    functions_.push_back(std::move(verify));
    by_id_[id] = &functions_.back();
    generation_.fetch_add(1, std::memory_order_release);
  }

  // Every inbound envelope looks its type up, so each thread keeps the types
  // it has seen in a small cache, emptied whenever a type is added.
  const PayloadTypes::Verify* find(std::string_view id) const {
    struct Cached {
      std::uint32_t key;
      const PayloadTypes::Verify* verify;
    };
    thread_local std::uint64_t seen = 0;
    thread_local std::array<Cached, 8> cache{};
    thread_local std::size_t cached = 0;
    if (id.size() != flatbuffers::kFileIdentifierLength) return nullptr;
    std::uint32_t key = 0;
    std::memcpy(&key, id.data(), sizeof key);
    const std::uint64_t now = generation_.load(std::memory_order_acquire);
    if (now != seen) {
      seen = now;
      cached = 0;
    }
    for (std::size_t i = 0; i < cached; ++i) {
      if (cache[i].key == key) return cache[i].verify;
    }
    const PayloadTypes::Verify* found = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = by_id_.find(id);
      if (it != by_id_.end()) found = it->second;
    }
    if (found != nullptr && cached < cache.size()) cache[cached++] = Cached{key, found};
    return found;
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<std::uint64_t> generation_{1};
  std::deque<PayloadTypes::Verify> functions_;
  std::map<std::string, const PayloadTypes::Verify*, std::less<>> by_id_;
};

TypeTable& type_table() {
  static TypeTable table;
  return table;
}

}  // namespace

bool is_wire_aligned(const void* data) {
  return reinterpret_cast<std::uintptr_t>(data) % kWireAlignment == 0;
}

const char* to_string(Rejection r) {
  switch (r) {
    case Rejection::none: return "none";
    case Rejection::part_count: return "part_count";
    case Rejection::destination: return "destination";
    case Rejection::header_size: return "header_size";
    case Rejection::header_invalid: return "header_invalid";
    case Rejection::payload_size: return "payload_size";
    case Rejection::payload_type: return "payload_type";
    case Rejection::payload_invalid: return "payload_invalid";
  }
  return "unknown";
}

// -- destination ---------------------------------------------------------------

void encode_destination(const Destination& d, std::uint8_t* out) {
  out[0] = kWireVersion;
  out[1] = static_cast<std::uint8_t>(d.kind);
  out[2] = 0;
  out[3] = 0;
  put_u32(out + 4, d.node);
  put_u32(out + 8, d.replica);
  put_u32(out + 12, d.epoch);
}

std::optional<Destination> decode_destination(const std::uint8_t* data, std::size_t size) {
  if (size != kDestinationSize) return std::nullopt;
  if (data[0] != kWireVersion) return std::nullopt;
  if (!is_kind(data[1])) return std::nullopt;
  if (data[2] != 0 || data[3] != 0) return std::nullopt;
  Destination d;
  d.kind = static_cast<FrameKind>(data[1]);
  d.node = get_u32(data + 4);
  d.replica = get_u32(data + 8);
  d.epoch = get_u32(data + 12);
  return d;
}

// -- header --------------------------------------------------------------------

void encode_header(const WireHeader& h, flatbuffers::FlatBufferBuilder& builder) {
  builder.Clear();
  const std::size_t hops = std::min<std::size_t>(h.envelope.hop_count, kMaxHops);
  flatbuffers::Offset<flatbuffers::Vector<std::int64_t>> hop_ns;
  if (hops > 0) hop_ns = builder.CreateVector(h.envelope.hop_ns.data(), hops);
  flatbuffers::Offset<flatbuffers::String> payload_id;
  if (!h.payload_id.empty()) payload_id = builder.CreateString(h.payload_id);

  schema::EnvelopeHeaderBuilder b(builder);
  b.add_edge(h.edge);
  b.add_from_replica(h.from_replica);
  b.add_epoch(h.epoch);
  b.add_stream(h.envelope.stream);
  b.add_seq(h.envelope.seq);
  b.add_capture_ns(h.envelope.capture_ns);
  b.add_confidence(h.envelope.confidence);
  b.add_vote_key(h.envelope.vote_key);
  b.add_part_id(h.envelope.part_id);
  b.add_sent_ns(h.envelope.sent_ns);
  if (hops > 0) b.add_hop_ns(hop_ns);
  if (!h.payload_id.empty()) b.add_payload_id(payload_id);
  b.add_credits(h.credits);
  b.add_released(h.released);
  b.add_service_ns(h.service_ns);
  schema::FinishEnvelopeHeaderBuffer(builder, b.Finish());
}

std::optional<WireHeader> decode_header(const std::uint8_t* data, std::size_t size, const WireLimits& limits,
                                        Rejection* why) {
  if (size == 0 || size > limits.max_header_bytes || size > kMaxFlatBuffer) {
    set(why, Rejection::header_size);
    return std::nullopt;
  }
  if (size < kMinIdentifiedBuffer ||
      !flatbuffers::BufferHasIdentifier(data, schema::EnvelopeHeaderIdentifier())) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }
  const AlignedView bytes(data, size);
  flatbuffers::Verifier verifier(bytes.data(), size, limits.max_depth, limits.max_tables);
  if (!schema::VerifyEnvelopeHeaderBuffer(verifier)) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }
  const auto* fb = schema::GetEnvelopeHeader(bytes.data());
  const auto* hop_ns = fb->hop_ns();
  const auto* payload_id = fb->payload_id();
  // The 2.0.8 Verifier checks a vector's length field only for 4-byte
  // alignment; 8-byte elements are read in place, so they must be aligned.
  if ((hop_ns != nullptr && (hop_ns->size() > kMaxHops || !is_wire_aligned(hop_ns->Data()))) ||
      (payload_id != nullptr && payload_id->size() != 0 && !valid_identifier(payload_id->string_view())) ||
      !std::isfinite(fb->confidence()) || !std::isfinite(fb->service_ns()) || fb->service_ns() < 0) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }

  WireHeader h;
  h.edge = fb->edge();
  h.from_replica = fb->from_replica();
  h.epoch = fb->epoch();
  h.envelope.stream = fb->stream();
  h.envelope.seq = fb->seq();
  h.envelope.capture_ns = fb->capture_ns();
  h.envelope.confidence = fb->confidence();
  h.envelope.vote_key = fb->vote_key();
  h.envelope.part_id = fb->part_id();
  h.envelope.sent_ns = fb->sent_ns();
  if (hop_ns != nullptr) {
    h.envelope.hop_count = static_cast<std::uint8_t>(hop_ns->size());
    for (flatbuffers::uoffset_t i = 0; i < hop_ns->size(); ++i) h.envelope.hop_ns[i] = hop_ns->Get(i);
  }
  if (payload_id != nullptr) h.payload_id = payload_id->str();
  h.credits = fb->credits();
  h.released = fb->released();
  h.service_ns = fb->service_ns();
  set(why, Rejection::none);
  return h;
}

// -- record header -------------------------------------------------------------

static_assert(sizeof(schema::RecordHeader) == kRecordHeaderSize, "RecordHeader's layout changed");

namespace {

std::uint32_t identifier_bits(std::string_view id) {
  if (id.size() != flatbuffers::kFileIdentifierLength) return 0;
  return get_u32(reinterpret_cast<const std::uint8_t*>(id.data()));
}

}  // namespace

std::size_t encode_record_header(const WireHeader& h, std::uint8_t* out) {
  const std::size_t hops = std::min<std::size_t>(h.envelope.hop_count, kMaxHops);
  std::array<std::int64_t, kMaxHops> hop_ns{};
  std::copy_n(h.envelope.hop_ns.begin(), hops, hop_ns.begin());
  const schema::RecordHeader r(h.edge, h.from_replica, h.epoch, identifier_bits(h.payload_id), h.credits, h.released,
                               h.envelope.stream, h.envelope.seq, h.envelope.capture_ns, h.envelope.vote_key,
                               h.envelope.part_id, h.service_ns, h.envelope.confidence,
                               static_cast<std::uint8_t>(hops), 0, 0,
                               flatbuffers::span<const std::int64_t, kMaxHops>(hop_ns.data(), kMaxHops),
                               h.envelope.sent_ns);
  std::memcpy(out, &r, sizeof r);
  return h.envelope.sent_ns != 0 ? kRecordHeaderSize : kShortRecordHeaderSize;
}

std::optional<WireHeader> decode_record_header(const std::uint8_t* data, std::size_t size, Rejection* why) {
  if (size != kRecordHeaderSize && size != kShortRecordHeaderSize) {
    set(why, Rejection::header_size);
    return std::nullopt;
  }
  schema::RecordHeader r;  // zero: a short header has no send time
  std::memcpy(&r, data, size);  // a copy, so that any alignment will do
  const std::uint32_t id = r.payload_id();
  std::uint8_t id_bytes[4];
  put_u32(id_bytes, id);
  bool ok = r.hop_count() <= kMaxHops && r.reserved_a() == 0 && r.reserved_b() == 0 &&
            (id == 0 || (id_bytes[0] != 0 && id_bytes[1] != 0 && id_bytes[2] != 0 && id_bytes[3] != 0)) &&
            std::isfinite(r.confidence()) && std::isfinite(r.service_ns()) && r.service_ns() >= 0;
  const auto* hops = r.hop_ns();
  for (std::size_t i = r.hop_count(); ok && i < kMaxHops; ++i) ok = hops->Get(static_cast<flatbuffers::uoffset_t>(i)) == 0;
  if (!ok) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }
  WireHeader h;
  h.edge = r.edge();
  h.from_replica = r.from_replica();
  h.epoch = r.epoch();
  h.envelope.stream = r.stream();
  h.envelope.seq = r.seq();
  h.envelope.capture_ns = r.capture_ns();
  h.envelope.confidence = r.confidence();
  h.envelope.vote_key = r.vote_key();
  h.envelope.part_id = r.part_id();
  h.envelope.sent_ns = r.sent_ns();
  h.envelope.hop_count = r.hop_count();
  for (std::size_t i = 0; i < h.envelope.hop_count; ++i) {
    h.envelope.hop_ns[i] = hops->Get(static_cast<flatbuffers::uoffset_t>(i));
  }
  if (id != 0) h.payload_id.assign(reinterpret_cast<const char*>(id_bytes), sizeof id_bytes);
  h.credits = r.credits();
  h.released = r.released();
  h.service_ns = r.service_ns();
  set(why, Rejection::none);
  return h;
}

// -- payload -------------------------------------------------------------------

void PayloadTypes::add(const std::string& identifier, Verify verify) {
  if (!valid_identifier(identifier)) {
    throw std::invalid_argument("payload type identifier must be 4 non-NUL characters: \"" + identifier + "\"");
  }
  if (identifier == schema::EnvelopeHeaderIdentifier()) {
    throw std::invalid_argument("\"SFEH\" is the envelope header, not a payload type");
  }
  if (!verify) throw std::invalid_argument("payload type \"" + identifier + "\" needs a verify function");
  type_table().insert(identifier, std::move(verify));
}

const PayloadTypes::Verify* PayloadTypes::find(std::string_view identifier) {
  return type_table().find(identifier);
}

Rejection verify_payload(std::string_view payload_id, const std::uint8_t* data, std::size_t size,
                         const WireLimits& limits) {
  if (size == 0 || size > limits.max_payload_bytes || size > kMaxFlatBuffer) return Rejection::payload_size;
  const PayloadTypes::Verify* verify = PayloadTypes::find(payload_id);
  if (verify == nullptr) return Rejection::payload_type;
  // A known type's identifier is 4 non-NUL characters, so payload_id is too.
  if (size < kMinIdentifiedBuffer ||
      std::memcmp(data + sizeof(flatbuffers::uoffset_t), payload_id.data(), flatbuffers::kFileIdentifierLength) !=
          0) {
    return Rejection::payload_type;
  }
  const AlignedView bytes(data, size);
  flatbuffers::Verifier verifier(bytes.data(), size, limits.max_depth, limits.max_tables);
  return (*verify)(verifier) ? Rejection::none : Rejection::payload_invalid;
}

// -- packs ---------------------------------------------------------------------

namespace {

constexpr std::uint8_t kPackMagic[4] = {'S', 'F', 'P', 'K'};

constexpr std::size_t pad8(std::size_t n) { return (n + 7) & ~static_cast<std::size_t>(7); }

bool zeros(const std::uint8_t* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (data[i] != 0) return false;
  }
  return true;
}

}  // namespace

std::size_t pack_record_size(std::size_t header_size, std::size_t payload_size) {
  return kRecordPrefixSize + pad8(header_size) + pad8(payload_size);
}

PackWriter::~PackWriter() { std::free(bytes_); }

void PackWriter::clear() {
  size_ = 0;
  records_ = 0;
}

std::uint8_t* PackWriter::take() {
  std::uint8_t* taken = bytes_;
  last_size_ = size_;
  bytes_ = nullptr;
  size_ = 0;
  capacity_ = 0;
  records_ = 0;
  return taken;
}

void PackWriter::add(const Destination& d, const std::uint8_t* header, std::size_t header_size,
                     const std::uint8_t* payload, std::size_t payload_size) {
  const std::size_t record = pack_record_size(header_size, payload_size);
  const std::size_t needed = (records_ == 0 ? kPackHeadSize : size_) + record;
  if (needed > capacity_) {
    const std::size_t grown = std::max({needed, capacity_ * 2, last_size_, std::size_t{4096}});
    auto* bigger = static_cast<std::uint8_t*>(std::realloc(bytes_, grown));
    if (bigger == nullptr) throw std::bad_alloc();
    bytes_ = bigger;
    capacity_ = grown;
  }
  if (records_ == 0) {
    std::memset(bytes_, 0, kPackHeadSize);
    std::memcpy(bytes_, kPackMagic, sizeof kPackMagic);
    bytes_[4] = kPackVersion;
    size_ = kPackHeadSize;
  }
  std::uint8_t* out = bytes_ + size_;
  put_u32(out, static_cast<std::uint32_t>(header_size));
  put_u32(out + 4, static_cast<std::uint32_t>(payload_size));
  encode_destination(d, out + 8);
  out += kRecordPrefixSize;
  if (header_size > 0) std::memcpy(out, header, header_size);
  std::memset(out + header_size, 0, pad8(header_size) - header_size);
  out += pad8(header_size);
  if (payload_size > 0) std::memcpy(out, payload, payload_size);
  std::memset(out + payload_size, 0, pad8(payload_size) - payload_size);
  size_ += record;
  ++records_;
  put_u32(bytes_ + 8, records_);
}

bool is_pack(const FrameView& frame) {
  return frame.size >= sizeof kPackMagic && std::memcmp(frame.data, kPackMagic, sizeof kPackMagic) == 0;
}

Rejection split_pack(const FrameView& pack, const WireLimits& limits, std::vector<std::array<FrameView, 3>>* records) {
  records->clear();
  if (pack.size < kPackHeadSize || !is_pack(pack) || pack.data[4] != kPackVersion || !zeros(pack.data + 5, 3) ||
      !zeros(pack.data + 12, 4)) {
    return Rejection::part_count;
  }
  const std::uint32_t count = get_u32(pack.data + 8);
  // Every record takes at least kRecordPrefixSize bytes: a count that cannot
  // fit is refused before anything is reserved for it.
  if (count == 0 || count > limits.max_pack_records || count > (pack.size - kPackHeadSize) / kRecordPrefixSize) {
    return Rejection::part_count;
  }
  records->reserve(count);
  std::size_t at = kPackHeadSize;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (pack.size - at < kRecordPrefixSize) break;
    const std::uint8_t* record = pack.data + at;
    const std::size_t header_size = get_u32(record);
    const std::size_t payload_size = get_u32(record + 4);
    const std::size_t left = pack.size - at - kRecordPrefixSize;
    if (header_size > left || pad8(header_size) > left || payload_size > left - pad8(header_size) ||
        pad8(payload_size) > left - pad8(header_size)) {
      break;
    }
    const std::uint8_t* header = record + kRecordPrefixSize;
    const std::uint8_t* payload = header + pad8(header_size);
    if (!zeros(header + header_size, pad8(header_size) - header_size) ||
        !zeros(payload + payload_size, pad8(payload_size) - payload_size)) {
      break;
    }
    records->push_back({FrameView{record + 8, kDestinationSize}, FrameView{header, header_size},
                        FrameView{payload_size == 0 ? nullptr : payload, payload_size}});
    at += pack_record_size(header_size, payload_size);
  }
  if (records->size() != count || at != pack.size) {
    records->clear();
    return Rejection::part_count;
  }
  return Rejection::none;
}

// -- whole message -------------------------------------------------------------

namespace {

/// The checks after the header's: the payload's size, type and Verifier.
std::optional<Inbound> finish(const Destination& destination, WireHeader&& header, const FrameView& payload_frame,
                              const WireLimits& limits, Rejection* why,
                              const std::function<PayloadPtr()>& adopt_payload, Inbound* refused) {
  Inbound in;
  in.destination = destination;
  in.header = std::move(header);
  // A deliver whose destination and header passed but whose payload did not:
  // its consumer still acknowledges it, so that its producer's credit comes back.
  auto refuse = [&](Rejection r) -> std::optional<Inbound> {
    set(why, r);
    if (refused != nullptr) {
      refused->destination = in.destination;
      refused->header = std::move(in.header);
      refused->payload = nullptr;
    }
    return std::nullopt;
  };
  if (destination.kind != FrameKind::deliver) {
    if (payload_frame.size != 0) {
      set(why, Rejection::payload_size);
      return std::nullopt;
    }
    set(why, Rejection::none);
    return in;
  }
  const Rejection r = verify_payload(in.header.payload_id, payload_frame.data, payload_frame.size, limits);
  if (r != Rejection::none) return refuse(r);
  in.payload = adopt_payload ? adopt_payload() : nullptr;
  if (!in.payload || in.payload->size() != payload_frame.size || !is_wire_aligned(in.payload->data())) {
    in.payload = nullptr;
    return refuse(Rejection::payload_invalid);
  }
  set(why, Rejection::none);
  return in;
}

}  // namespace

std::optional<Inbound> decode_message(const FrameView* frames, std::size_t count, const WireLimits& limits,
                                      Rejection* why, const std::function<PayloadPtr()>& adopt_payload,
                                      Inbound* refused) {
  if (count != 3) {
    set(why, Rejection::part_count);
    return std::nullopt;
  }
  const FrameView& dest_frame = frames[0];
  const FrameView& header_frame = frames[1];
  const FrameView& payload_frame = frames[2];

  auto destination = decode_destination(dest_frame.data, dest_frame.size);
  if (!destination) {
    set(why, Rejection::destination);
    return std::nullopt;
  }

  Rejection r = Rejection::none;
  auto header = decode_header(header_frame.data, header_frame.size, limits, &r);
  if (!header) {
    set(why, r);
    return std::nullopt;
  }
  const bool deliver = destination->kind == FrameKind::deliver;
  if (deliver && header->payload_id.empty()) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }

  return finish(*destination, std::move(*header), payload_frame, limits, why, adopt_payload, refused);
}

std::optional<Inbound> decode_record(const std::array<FrameView, 3>& record, const WireLimits& limits, Rejection* why,
                                     const std::function<PayloadPtr()>& adopt_payload, Inbound* refused) {
  auto destination = decode_destination(record[0].data, record[0].size);
  if (!destination) {
    set(why, Rejection::destination);
    return std::nullopt;
  }
  Rejection r = Rejection::none;
  auto header = decode_record_header(record[1].data, record[1].size, &r);
  if (!header) {
    set(why, r);
    return std::nullopt;
  }
  if (destination->kind == FrameKind::deliver && header->payload_id.empty()) {
    set(why, Rejection::header_invalid);
    return std::nullopt;
  }
  return finish(*destination, std::move(*header), record[2], limits, why, adopt_payload, refused);
}

}  // namespace swarmflow::transport
