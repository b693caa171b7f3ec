#pragma once
/// \file envelope.hpp
/// The unit of data that flows through a pipeline: a small header plus an
/// immutable, reference-counted FlatBuffers payload.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <flatbuffers/flatbuffers.h>

namespace swarmflow {

/// One finished FlatBuffers buffer. Immutable once made; shared between all
/// envelopes and actors that carry it, so passing it on copies no bytes.
class Payload {
 public:
  /// Takes the finished buffer out of `builder` without copying it. The builder
  /// must have been finished (`Finish`/`FinishXBuffer`) with a file identifier.
  static std::shared_ptr<const Payload> from_builder(flatbuffers::FlatBufferBuilder& builder);
  /// Copies `size` bytes; for data that arrives from outside (files, tests).
  static std::shared_ptr<const Payload> copy_of(const void* data, std::size_t size);
  /// Adopts `bytes` without copying them.
  static std::shared_ptr<const Payload> adopt(std::vector<std::uint8_t> bytes);
  /// Refers to `size` bytes at `data` that `owner` keeps alive (a received
  /// network message, say); no copy.
  static std::shared_ptr<const Payload> wrap(const std::uint8_t* data, std::size_t size,
                                             std::shared_ptr<const void> owner);
  /// A byte range of a buffer, for wrap_views.
  struct Range {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
  };
  /// Refers to `count` ranges of one buffer that `owner` keeps alive (the
  /// records of one received network message), with one allocation for all
  /// of them; appends them to `out` in order. Every view keeps the buffer,
  /// and the other views' bookkeeping, alive. No copy.
  static void wrap_views(const Range* ranges, std::size_t count, std::shared_ptr<const void> owner,
                         std::vector<std::shared_ptr<const Payload>>* out);

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  /// The 4-character file identifier, or an empty view if the buffer is too short.
  std::string_view identifier() const;
  /// The root table, read without verification (payloads made in-process are trusted;
  /// bytes from sockets are verified by the transport before they become a Payload).
  template <class T>
  const T* root() const {
    return flatbuffers::GetRoot<T>(data_);
  }

  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;

  /// Only Payload's own factories can make one (the key is private).
  class Key {
    friend class Payload;
    Key() = default;
  };
  explicit Payload(Key) {}

 private:
  flatbuffers::DetachedBuffer detached_;
  std::vector<std::uint8_t> bytes_;
  std::shared_ptr<const void> owner_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

using PayloadPtr = std::shared_ptr<const Payload>;

/// Memory for large payloads, for the FlatBufferBuilder that makes them:
///
///     flatbuffers::FlatBufferBuilder fbb(bytes + 256, &swarmflow::payload_allocator());
///
/// A block of kPooledPayloadBytes or more (a video frame) is kept when its
/// payload is freed and handed out again for a request of the same size, so
/// a stream of frames reuses its memory instead of faulting in fresh pages
/// for every frame (the C library gives large freed blocks back to the
/// kernel). At most kPooledPayloadLimit bytes are kept. A block of at most
/// 4 KiB (a small message) freed on a thread is kept for that thread's next
/// request of the same size, as is the block of every Payload that
/// from_builder makes (at most 1 MiB a thread, freed when the thread ends):
/// a stream's payloads are freed in bursts when acks release them, more than
/// the C library's per-thread cache holds. Other sizes go to operator new.
/// Thread-safe; lives as long as the process.
flatbuffers::Allocator& payload_allocator();
constexpr std::size_t kPooledPayloadBytes = 256u << 10;
constexpr std::size_t kPooledPayloadLimit = 256u << 20;

/// Keeps freed frame-sized blocks in the C library's heap for the next
/// malloc, for the frames this process did not allocate itself: ZeroMQ
/// mallocs every frame it receives over ipc:// or tcp://, OpenCV every Mat.
/// With glibc's defaults a thread's heap is trimmed (its top pages handed
/// back to the kernel) whenever a few freed frames add up to twice the
/// largest block seen, so the next frame faults in some 1 500 fresh pages
/// and a stream runs at half speed in one run of three. This sets glibc's
/// M_MMAP_THRESHOLD to kFrameHeapMmapBytes (blocks below it come from the
/// heap) and M_TRIM_THRESHOLD to kFrameHeapTrimBytes (a heap keeps that much
/// free at its top), once per process. Resident memory then stays near its
/// peak instead of following every burst; the peak itself is what the
/// queues bound, plus up to kFrameHeapTrimBytes left free in each of glibc's
/// arenas (one per thread that allocates, at most 8 per core).
///
/// The Runtime calls it unless RuntimeOptions::tune_allocator is false. It
/// changes nothing, and returns false, when the environment already sets
/// malloc's parameters (GLIBC_TUNABLES with glibc.malloc., or
/// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_), or the C
/// library is not glibc; true when the settings are in force (also on a
/// later call).
bool keep_freed_frames_in_heap();
constexpr std::size_t kFrameHeapMmapBytes = 32u << 20;  ///< glibc's largest allowed value on 64-bit
constexpr std::size_t kFrameHeapTrimBytes = 128u << 20;

/// Maximum number of hop times an envelope records.
constexpr std::size_t kMaxHops = 8;

/// The header every envelope carries.
struct EnvelopeHeader {
  std::uint64_t stream = 0;     ///< which stream (camera, token sequence) this belongs to
  std::uint64_t seq = 0;        ///< position in the stream, set by the source
  std::int64_t capture_ns = 0;  ///< steady-clock time of capture at the source
  float confidence = 1.0F;      ///< how sure the producer is, 0..1 (used by voters)
  std::uint64_t vote_key = 0;   ///< what is being agreed on (used by voters)
  std::uint64_t part_id = 0;    ///< the physical item the data is about (a part on a conveyor); 0 = none
  std::uint8_t hop_count = 0;   ///< valid entries of hop_ns
  std::array<std::int64_t, kMaxHops> hop_ns{};  ///< arrival time at each stage, oldest first
  /// Steady-clock time it left its producer on the edge it last came over
  /// (after any wait for credit there); 0 = not stamped. Set by the runtime
  /// when it measures latency per hop; a stage has no use for it.
  std::int64_t sent_ns = 0;

  /// Appends an arrival time; the oldest times are kept when the trace is full.
  void add_hop(std::int64_t t_ns) {
    if (hop_count < kMaxHops) hop_ns[hop_count++] = t_ns;
  }
};

/// Header plus shared payload. Copying an envelope copies the header and one
/// reference, never the payload bytes.
class Envelope {
 public:
  Envelope() = default;
  Envelope(const EnvelopeHeader& header, PayloadPtr payload)
      : header_(header), payload_(std::move(payload)) {}

  const EnvelopeHeader& header() const { return header_; }
  /// Null only for a default-constructed envelope.
  const PayloadPtr& payload() const { return payload_; }
  /// The payload's root table of type T.
  template <class T>
  const T* as() const {
    return payload_ ? payload_->root<T>() : nullptr;
  }
  /// The same payload under another header.
  Envelope with_header(const EnvelopeHeader& header) const& { return Envelope(header, payload_); }
  Envelope with_header(const EnvelopeHeader& header) && { return Envelope(header, std::move(payload_)); }

 private:
  EnvelopeHeader header_;
  PayloadPtr payload_;
};

/// Monotonic clock used for capture times and latencies, in nanoseconds.
std::int64_t steady_now_ns();

}  // namespace swarmflow
