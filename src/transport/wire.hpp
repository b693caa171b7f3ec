#pragma once
// The data-plane wire format between units, and the checks every inbound
// message passes before any field is read. Pure code: no sockets.
//
// A message is three frames: [destination][header][payload].
// - destination: 16 bytes, little endian: u8 version (=1), u8 kind, u16 zero,
//   u32 consumer node (deliver, eos) or producer node (ack), u32 replica, u32 epoch.
// - header: a FlatBuffer `swarmflow.schema.EnvelopeHeader` ("SFEH").
// - payload: the envelope's FlatBuffer for deliver; empty for ack and eos.
// Small messages may instead travel many to a frame, as the records of one
// pack (see PackWriter); each record holds the same three parts and passes
// the same checks. docs/wire.md has the byte layout.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include <swarmflow/envelope.hpp>

namespace swarmflow::transport {

/// drain: a producer sends a consumer replica draining for a move nothing
/// more (after its envelopes); drained: that replica owes the producer
/// nothing more (after its acks); owed: a producer that drains asks a
/// consumer for what it owes it at once (after its last envelope). None
/// carries a payload.
enum class FrameKind : std::uint8_t { deliver = 1, ack = 2, eos = 3, drain = 4, drained = 5, owed = 6 };

constexpr std::uint8_t kWireVersion = 1;
constexpr std::size_t kDestinationSize = 16;
/// FlatBuffers read scalars of up to 8 bytes in place, so a buffer they read
/// must start at an address that is a multiple of this. Checks verify an
/// aligned copy of a misaligned frame; a Payload must itself be aligned.
constexpr std::size_t kWireAlignment = 8;
/// Whether `data` may be read as a FlatBuffer in place.
bool is_wire_aligned(const void* data);

/// The first frame: where a message goes inside the receiving unit.
struct Destination {
  FrameKind kind = FrameKind::deliver;
  std::uint32_t node = 0;     ///< stage index in the graph
  std::uint32_t replica = 0;  ///< replica index of that stage
  std::uint32_t epoch = 0;    ///< placement epoch the sender believes in
};

/// One received frame, not owned.
struct FrameView {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

/// Everything the header frame carries, decoded.
struct WireHeader {
  std::uint32_t edge = 0;
  std::uint32_t from_replica = 0;
  std::uint32_t epoch = 0;
  EnvelopeHeader envelope;     ///< deliver
  std::string payload_id;      ///< deliver: 4-character file identifier
  std::uint32_t credits = 0;   ///< ack
  std::uint32_t released = 0;  ///< ack
  double service_ns = 0;       ///< ack
};

/// Bounds on what a peer can make a unit read.
struct WireLimits {
  std::size_t max_header_bytes = 4096;
  std::size_t max_payload_bytes = 64u << 20;  ///< also set as ZMQ_MAXMSGSIZE
  flatbuffers::uoffset_t max_depth = 16;
  flatbuffers::uoffset_t max_tables = 4096;
  std::size_t max_pack_records = 4096;  ///< records in one pack frame
};

/// Why an inbound message was dropped; each reason has its own counter.
enum class Rejection {
  none,
  part_count,         ///< neither three frames nor one well-formed pack
  destination,        ///< wrong size, version or kind
  header_size,        ///< empty or above max_header_bytes
  header_invalid,     ///< wrong identifier or fails the Verifier
  payload_size,       ///< above max_payload_bytes, or non-empty on ack/eos, or empty on deliver
  payload_type,       ///< identifier unknown, or not the one the header names
  payload_invalid,    ///< fails its schema's Verifier
};
const char* to_string(Rejection r);

/// Writes the destination frame into `out` (kDestinationSize bytes).
void encode_destination(const Destination& d, std::uint8_t* out);
/// Reads a destination frame; nothing when it is malformed.
std::optional<Destination> decode_destination(const std::uint8_t* data, std::size_t size);

/// Builds the header frame into `builder` (finished, with identifier).
void encode_header(const WireHeader& h, flatbuffers::FlatBufferBuilder& builder);
/// Verifies and reads a header frame; nothing (and `*why`) when it fails.
std::optional<WireHeader> decode_header(const std::uint8_t* data, std::size_t size, const WireLimits& limits,
                                        Rejection* why);

/// Checks a payload of the type named `payload_id` with that schema's Verifier.
/// Payload types are known by their file identifier; see PayloadTypes.
Rejection verify_payload(std::string_view payload_id, const std::uint8_t* data, std::size_t size,
                         const WireLimits& limits);

/// The payload types a unit accepts from the wire: the built-in schemas, plus
/// any an application registers for its own stages. Unknown types are refused.
class PayloadTypes {
 public:
  using Verify = std::function<bool(flatbuffers::Verifier&)>;
  /// Adds a type by file identifier (4 characters), e.g. "SFBL" with
  /// `schema::VerifyBlobBuffer`. Thread-safe; call before units start.
  /// Adding a known identifier replaces its verifier. Throws
  /// std::invalid_argument for an identifier that is not 4 non-NUL
  /// characters, for "SFEH" (the header's) and for an empty `verify`.
  static void add(const std::string& identifier, Verify verify);
  static const Verify* find(std::string_view identifier);
};

// -- packs: many small messages in one frame ----------------------------------
//
// A pack frame is a 16-byte head ("SFPK", u8 version 1, three zero bytes, u32
// record count, u32 zero) and then its records, each starting at a multiple
// of 8 bytes from the frame's start: u32 header size, u32 payload size, the
// 16-byte destination, the header, zero padding to a multiple of 8, the
// payload, zero padding to a multiple of 8. Headers and payloads therefore
// sit 8-byte aligned whenever the frame does, and a received record's payload
// can be handed on without a copy as a view of the frame.

constexpr std::size_t kPackHeadSize = 16;
constexpr std::size_t kRecordPrefixSize = 8 + kDestinationSize;
constexpr std::uint8_t kPackVersion = 1;

/// Size of a record's header: a `swarmflow.schema.RecordHeader` struct.
constexpr std::size_t kRecordHeaderSize = 152;
/// The same without its last field, `sent_ns`: what is written when the
/// envelope carries no send time (acks, end of stream, a deliver from a
/// replica that does not measure latency per hop), and all there was before
/// that field was added.
constexpr std::size_t kShortRecordHeaderSize = 144;

/// Writes a record header for `h` into `out` (kRecordHeaderSize bytes, all
/// written) and returns the size to send: kShortRecordHeaderSize when `h`
/// has no send time, else kRecordHeaderSize.
std::size_t encode_record_header(const WireHeader& h, std::uint8_t* out);
/// Reads a record header: exactly kRecordHeaderSize or
/// kShortRecordHeaderSize bytes (no send time), at most kMaxHops hop times
/// (the unused ones zero), reserved bytes zero, a payload id of 4 non-NUL
/// bytes or none, confidence and service time finite and the service time
/// not negative. Nothing (and `*why` = header_size or header_invalid) when
/// it fails.
std::optional<WireHeader> decode_record_header(const std::uint8_t* data, std::size_t size, Rejection* why);

/// Bytes one record takes in a pack.
std::size_t pack_record_size(std::size_t header_size, std::size_t payload_size);

/// Writes records into one pack frame, in memory from std::malloc that
/// take() hands over whole (to ZeroMQ, say, with std::free as deleter).
class PackWriter {
 public:
  PackWriter() = default;
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  /// Forgets the records written so far; keeps the memory.
  void clear();
  void add(const Destination& d, const std::uint8_t* header, std::size_t header_size, const std::uint8_t* payload,
           std::size_t payload_size);
  std::size_t records() const { return records_; }
  /// The frame so far (its record count is kept up to date).
  const std::uint8_t* data() const { return bytes_; }
  std::size_t size() const { return records_ == 0 ? 0 : size_; }
  /// Hands the frame's memory over (free it with std::free) and starts empty.
  std::uint8_t* take();

 private:
  std::uint8_t* bytes_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::size_t last_size_ = 0;  // of the last frame taken: the next starts with as much room
  std::uint32_t records_ = 0;
};

/// Whether `frame` starts like a pack (its framing is checked by split_pack).
bool is_pack(const FrameView& frame);

/// Checks a pack's framing (head, record count within limits, every record
/// inside the frame, padding zero, nothing after the last) and fills
/// `records` with each record's [destination][header][payload], to be
/// checked one by one with decode_record. Reads nothing else; on a framing
/// error no record is returned and the result is Rejection::part_count.
Rejection split_pack(const FrameView& pack, const WireLimits& limits, std::vector<std::array<FrameView, 3>>* records);

/// A decoded, verified inbound message. For deliver, `payload` holds the
/// bytes (adopted without a copy when they are suitably aligned).
struct Inbound {
  Destination destination;
  WireHeader header;
  PayloadPtr payload;
  /// Which peer sent it (index in TransportConfig::peers): by the routing id
  /// its connection was admitted with, or, for what arrives on a unit's own
  /// outgoing connection to a peer (acks), that peer; -1 when not known.
  int sender = -1;
};

/// Checks and decodes one inbound message, in this order: part count,
/// destination, header size, header Verifier, payload size, payload type,
/// payload Verifier. `adopt_payload` turns the payload frame into a Payload
/// (keeping the socket's buffer alive, or copying it when misaligned); it is
/// called only after every check passed, and only for deliver. A Payload that
/// is null, of another size or misaligned is refused as payload_invalid.
/// When a deliver's destination and header pass and only its payload fails,
/// `*refused` (if given) gets the destination and header with a null
/// payload: its consumer acknowledges it, so its producer's credit returns.
std::optional<Inbound> decode_message(const FrameView* frames, std::size_t count, const WireLimits& limits,
                                      Rejection* why, const std::function<PayloadPtr()>& adopt_payload,
                                      Inbound* refused = nullptr);

/// decode_message for one record of a pack ([destination][record header]
/// [payload], as split_pack returns them): the same checks in the same
/// order, with the record header's own (decode_record_header).
std::optional<Inbound> decode_record(const std::array<FrameView, 3>& record, const WireLimits& limits, Rejection* why,
                                     const std::function<PayloadPtr()>& adopt_payload, Inbound* refused = nullptr);

}  // namespace swarmflow::transport
