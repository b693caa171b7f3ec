#pragma once
// The entry logic of the wire fuzzer, shared with the corpus replay test and
// the seed generator so that all three read an input the same way.
//
// An input is one multipart message:
//   byte 0     flags: bits 0-1 = number of frames - 1 (1..4),
//                     bit 2 = place every frame at an odd address,
//                     bit 3 = use tight_limits() instead of the defaults
//   then       one u16 (little endian) length for each frame but the last;
//              lengths run out at the end of the input (missing ones are 0)
//   then       the frames, back to back; the last one takes what is left.
// Each frame gets its own allocation of exactly its size, so AddressSanitizer
// sees any read past a frame's end.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/control_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "transport/wire.hpp"

namespace swarmflow::transport::fuzz {

constexpr std::size_t kMaxFrames = 4;
constexpr std::uint8_t kFlagMisaligned = 1U << 2;
constexpr std::uint8_t kFlagTightLimits = 1U << 3;

/// Small limits, so that short inputs reach every size and complexity check.
inline WireLimits tight_limits() {
  WireLimits l;
  l.max_header_bytes = 256;
  l.max_payload_bytes = 1024;
  l.max_depth = 4;
  l.max_tables = 16;
  return l;
}

/// One input, split into frames that each own their bytes.
struct SplitInput {
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<FrameView> frames;
  WireLimits limits;
};

inline SplitInput split_wire_input(const std::uint8_t* data, std::size_t size) {
  SplitInput in;
  if (size == 0) return in;
  const std::uint8_t flags = data[0];
  const std::size_t count = static_cast<std::size_t>(flags & 3U) + 1;
  const std::size_t shift = (flags & kFlagMisaligned) != 0 ? 1 : 0;
  if ((flags & kFlagTightLimits) != 0) in.limits = tight_limits();

  std::size_t pos = 1;
  std::vector<std::size_t> lengths(count, 0);
  for (std::size_t i = 0; i + 1 < count; ++i) {
    if (pos + 2 > size) break;
    lengths[i] = static_cast<std::size_t>(data[pos]) | (static_cast<std::size_t>(data[pos + 1]) << 8);
    pos += 2;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t left = size - pos;
    const std::size_t n = i + 1 == count ? left : std::min(lengths[i], left);
    std::vector<std::uint8_t> bytes(n + shift);
    if (n > 0) std::memcpy(bytes.data() + shift, data + pos, n);
    pos += n;
    in.storage.push_back(std::move(bytes));
  }
  for (const auto& bytes : in.storage) {
    const std::size_t n = bytes.size() - shift;
    in.frames.push_back(FrameView{n == 0 ? nullptr : bytes.data() + shift, n});
  }
  return in;
}

/// The inverse of split_wire_input, for writing seeds.
inline std::vector<std::uint8_t> join_wire_input(const std::vector<std::vector<std::uint8_t>>& frames,
                                                 std::uint8_t flags = 0) {
  std::vector<std::uint8_t> out;
  const std::size_t count = frames.empty() ? 1 : std::min(frames.size(), kMaxFrames);
  out.push_back(static_cast<std::uint8_t>((flags & ~3U) | (count - 1)));
  for (std::size_t i = 0; i + 1 < count; ++i) {
    out.push_back(static_cast<std::uint8_t>(frames[i].size()));
    out.push_back(static_cast<std::uint8_t>(frames[i].size() >> 8));
  }
  for (std::size_t i = 0; i < count && i < frames.size(); ++i) {
    out.insert(out.end(), frames[i].begin(), frames[i].end());
  }
  return out;
}

/// One message an input held, decoded or refused, with the frames it came from.
struct DecodedMessage {
  std::array<FrameView, 3> frames{};
  bool record = false;  ///< a record of a pack (else a three-frame message)
  std::optional<Inbound> inbound;
  Rejection why = Rejection::none;
};

/// Decodes an input as the transport does: three frames are one message, one
/// frame is a pack of records, anything else is refused as part_count.
/// Payloads are adopted by copying them. Returns the first rejection (of the
/// framing, or of the first message refused), Rejection::none if there is none.
inline Rejection decode_split_input(const SplitInput& in, std::vector<DecodedMessage>* out) {
  out->clear();
  if (in.frames.size() == 1) {
    std::vector<std::array<FrameView, 3>> records;
    const Rejection framing = split_pack(in.frames[0], in.limits, &records);
    if (framing != Rejection::none) return framing;
    Rejection first = Rejection::none;
    for (const auto& r : records) {
      DecodedMessage m;
      m.frames = r;
      m.record = true;
      m.inbound = decode_record(r, in.limits, &m.why, [&r]() { return Payload::copy_of(r[2].data, r[2].size); });
      if (first == Rejection::none) first = m.why;
      out->push_back(std::move(m));
    }
    return first;
  }
  if (in.frames.size() != 3) {
    DecodedMessage m;
    m.inbound = decode_message(in.frames.data(), in.frames.size(), in.limits, &m.why, nullptr);
    const Rejection why = m.why;
    out->push_back(std::move(m));
    return why;
  }
  DecodedMessage m;
  m.frames = {in.frames[0], in.frames[1], in.frames[2]};
  const FrameView payload = in.frames[2];
  m.inbound = decode_message(in.frames.data(), 3, in.limits, &m.why,
                             [payload]() { return Payload::copy_of(payload.data, payload.size); });
  const Rejection why = m.why;
  out->push_back(std::move(m));
  return why;
}

// -- reading verified data -----------------------------------------------------
// Once a buffer passed its Verifier, every field of it can be read; these read
// them all, so that the sanitizers would see a Verifier that let a bad one by.

inline std::uint64_t bits_of(double x) {
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline std::uint64_t read_all(const flatbuffers::String* s) {
  if (s == nullptr) return 0;
  std::uint64_t h = s->size();
  for (char c : s->string_view()) h = h * 31 + static_cast<unsigned char>(c);
  return h;
}

template <class T>
std::uint64_t read_all(const flatbuffers::Vector<T>* v) {
  if (v == nullptr) return 0;
  std::uint64_t h = v->size();
  for (flatbuffers::uoffset_t i = 0; i < v->size(); ++i) h = h * 31 + bits_of(static_cast<double>(v->Get(i)));
  return h;
}

inline std::uint64_t read_all(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  if (v == nullptr) return 0;
  std::uint64_t h = v->size();
  for (flatbuffers::uoffset_t i = 0; i < v->size(); ++i) h = h * 31 + read_all(v->Get(i));
  return h;
}

inline std::uint64_t read_all(const schema::Blob& b) { return b.stream() + b.seq() + read_all(b.data()); }

inline std::uint64_t read_all(const schema::Frame& f) {
  return static_cast<std::uint64_t>(f.format()) + f.width() + f.height() + f.stride() +
         static_cast<std::uint64_t>(f.capture_ns()) + read_all(f.camera_id()) + f.frame_index() +
         read_all(f.pixels()) + read_all(f.ground_truth());
}

inline std::uint64_t read_all(const schema::Tokens& t) {
  return read_all(t.ids()) + read_all(t.pieces()) + t.position() + read_all(t.confidence()) +
         static_cast<std::uint64_t>(t.final());
}

inline std::uint64_t read_all(const schema::VisionResults& r) {
  std::uint64_t h = read_all(r.camera_id()) + r.frame_index() + r.part_id() + static_cast<std::uint64_t>(r.partial());
  if (const auto* defects = r.defects()) {
    for (const auto* d : *defects) {
      h += read_all(d->class_name()) + bits_of(d->score());
      if (const auto* box = d->box()) h += bits_of(box->x() + box->y() + box->width() + box->height());
    }
  }
  if (const auto* measurements = r.measurements()) {
    for (const auto* m : *measurements) {
      h += read_all(m->name()) + bits_of(m->value()) + read_all(m->unit()) + bits_of(m->nominal()) +
           bits_of(m->tolerance()) + static_cast<std::uint64_t>(m->in_tolerance());
    }
  }
  return h;
}

inline std::uint64_t read_all(const schema::Control& c) {
  std::uint64_t h = static_cast<std::uint64_t>(c.body_type());
  if (const auto* beat = c.body_as_Heartbeat()) {
    h += read_all(beat->unit_id()) + static_cast<std::uint64_t>(beat->sent_ns()) + beat->epoch();
  }
  if (const auto* report = c.body_as_LoadReport()) {
    h += read_all(report->unit_id()) + static_cast<std::uint64_t>(report->sent_ns()) + bits_of(report->utilisation());
    if (const auto* replicas = report->replicas()) {
      for (const auto* r : *replicas) {
        h += read_all(r->stage_id()) + r->replica() + r->queue_depth() + bits_of(r->service_ns()) +
             bits_of(r->arrival_hz());
      }
    }
  }
  if (const auto* order = c.body_as_PlacementOrder()) {
    h += order->epoch() + static_cast<std::uint64_t>(order->action()) + read_all(order->stage_id()) +
         order->replica() + read_all(order->unit_id()) + read_all(order->target_unit_id());
  }
  return h;
}

/// Reads every field of a verified payload of a built-in type (others: nothing).
inline std::uint64_t read_payload(std::string_view id, const std::uint8_t* data) {
  if (id == schema::BlobIdentifier()) return read_all(*schema::GetBlob(data));
  if (id == schema::FrameIdentifier()) return read_all(*schema::GetFrame(data));
  if (id == schema::TokensIdentifier()) return read_all(*schema::GetTokens(data));
  if (id == schema::VisionResultsIdentifier()) return read_all(*schema::GetVisionResults(data));
  if (id == schema::ControlIdentifier()) return read_all(*schema::GetControl(data));
  return 0;
}

inline void fuzz_check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "wire fuzz: %s\n", what);
    std::abort();
  }
}

inline bool same_header(const WireHeader& a, const WireHeader& b) {
  if (a.envelope.hop_count != b.envelope.hop_count) return false;
  for (std::size_t i = 0; i < a.envelope.hop_count; ++i) {
    if (a.envelope.hop_ns[i] != b.envelope.hop_ns[i]) return false;
  }
  return a.edge == b.edge && a.from_replica == b.from_replica && a.epoch == b.epoch &&
         a.envelope.stream == b.envelope.stream && a.envelope.seq == b.envelope.seq &&
         a.envelope.capture_ns == b.envelope.capture_ns && a.envelope.confidence == b.envelope.confidence &&
         a.envelope.vote_key == b.envelope.vote_key && a.envelope.part_id == b.envelope.part_id &&
         a.envelope.sent_ns == b.envelope.sent_ns && a.payload_id == b.payload_id && a.credits == b.credits &&
         a.released == b.released && a.service_ns == b.service_ns;
}

/// Decodes one input every way an inbound byte string can be decoded, and
/// checks what holds for any input: what decodes re-encodes to the same
/// header, an adopted payload is the frame's bytes, verified data reads.
inline void wire_fuzz_one(const std::uint8_t* data, std::size_t size) {
  volatile std::uint64_t sink = 0;
  const SplitInput split = split_wire_input(data, size);
  std::vector<DecodedMessage> messages;
  decode_split_input(split, &messages);
  for (const auto& m : messages) {
    fuzz_check(m.inbound.has_value() == (m.why == Rejection::none), "result and rejection disagree");
    if (!m.inbound) continue;
    const FrameView& payload = m.frames[2];
    if (m.inbound->destination.kind == FrameKind::deliver) {
      fuzz_check(m.inbound->payload && m.inbound->payload->size() == payload.size &&
                     std::memcmp(m.inbound->payload->data(), payload.data, payload.size) == 0,
                 "adopted payload differs from its frame");
      sink = sink + read_payload(m.inbound->header.payload_id, m.inbound->payload->data());
    } else {
      fuzz_check(!m.inbound->payload, "payload adopted for ack or eos");
    }
    Rejection again = Rejection::none;
    std::optional<WireHeader> h;
    if (m.record) {
      alignas(8) std::uint8_t bytes[kRecordHeaderSize];
      h = decode_record_header(bytes, encode_record_header(m.inbound->header, bytes), &again);
    } else {
      flatbuffers::FlatBufferBuilder fbb;
      encode_header(m.inbound->header, fbb);
      h = decode_header(fbb.GetBufferPointer(), fbb.GetSize(), split.limits, &again);
    }
    fuzz_check(h.has_value() && same_header(*h, m.inbound->header), "header does not survive a round trip");
  }

  // The raw input as a header frame, a record header, a pack and a payload of
  // every built-in type. A verified buffer is only read where it is aligned
  // (libFuzzer's is).
  for (const WireLimits& limits : {WireLimits{}, tight_limits()}) {
    Rejection r = Rejection::none;
    const auto h = decode_header(data, size, limits, &r);
    fuzz_check(h.has_value() == (r == Rejection::none), "header result and rejection disagree");
    if (h) sink = sink + h->credits + h->envelope.hop_count + h->payload_id.size();
    std::vector<std::array<FrameView, 3>> records;
    if (split_pack(FrameView{data, size}, limits, &records) == Rejection::none) {
      for (const auto& rec : records) {
        fuzz_check(rec[0].data >= data && rec[1].data + rec[1].size <= data + size &&
                       (rec[2].size == 0 || rec[2].data + rec[2].size <= data + size),
                   "a record reaches outside its pack");
      }
    }
    for (const char* id : {schema::BlobIdentifier(), schema::FrameIdentifier(), schema::TokensIdentifier(),
                           schema::VisionResultsIdentifier(), schema::ControlIdentifier()}) {
      if (verify_payload(id, data, size, limits) == Rejection::none && is_wire_aligned(data)) {
        sink = sink + read_payload(id, data);
      }
    }
  }
  Rejection r = Rejection::none;
  const auto rh = decode_record_header(data, size, &r);
  fuzz_check(rh.has_value() == (r == Rejection::none), "record header result and rejection disagree");
  if (rh) sink = sink + rh->credits + rh->envelope.hop_count + rh->payload_id.size();
  (void)sink;
}

}  // namespace swarmflow::transport::fuzz
