#pragma once
// The data-plane wire format between units, and the checks every inbound
// message passes before any field is read. Pure code: no sockets.
//
// A message is three frames: [destination][header][payload].
// - destination: 16 bytes, little endian: u8 version (=1), u8 kind, u16 zero,
//   u32 consumer node (deliver, eos) or producer node (ack), u32 replica, u32 epoch.
// - header: a FlatBuffer `swarmflow.schema.EnvelopeHeader` ("SFEH").
// - payload: the envelope's FlatBuffer for deliver; empty for ack and eos.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <flatbuffers/flatbuffers.h>

#include <swarmflow/envelope.hpp>

namespace swarmflow::transport {

enum class FrameKind : std::uint8_t { deliver = 1, ack = 2, eos = 3 };

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
};

/// Why an inbound message was dropped; each reason has its own counter.
enum class Rejection {
  none,
  part_count,         ///< not exactly three frames
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

/// A decoded, verified inbound message. For deliver, `payload` holds the
/// bytes (adopted without a copy when they are suitably aligned).
struct Inbound {
  Destination destination;
  WireHeader header;
  PayloadPtr payload;
};

/// One received frame, not owned.
struct FrameView {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

/// Checks and decodes one inbound message, in this order: part count,
/// destination, header size, header Verifier, payload size, payload type,
/// payload Verifier. `adopt_payload` turns the payload frame into a Payload
/// (keeping the socket's buffer alive, or copying it when misaligned); it is
/// called only after every check passed, and only for deliver. A Payload that
/// is null, of another size or misaligned is refused as payload_invalid.
std::optional<Inbound> decode_message(const FrameView* frames, std::size_t count, const WireLimits& limits,
                                      Rejection* why, const std::function<PayloadPtr()>& adopt_payload);

}  // namespace swarmflow::transport
