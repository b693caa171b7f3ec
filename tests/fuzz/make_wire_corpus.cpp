// Writes the seed corpus of the wire fuzzer: valid messages of each kind and
// payload type (valid_*.bin) and malformed ones, each named after the
// rejection it must get (reject_<reason>-<what>.bin).
//
//   make_wire_corpus tests/fuzz/corpus/wire

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/control_generated.h>
#include <swarmflow/schema/envelope_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "fuzz/wire_fuzz_entry.hpp"
#include "transport/wire.hpp"

namespace {

using swarmflow::transport::Destination;
using swarmflow::transport::FrameKind;
using swarmflow::transport::WireHeader;
using Bytes = std::vector<std::uint8_t>;
namespace fuzz = swarmflow::transport::fuzz;
namespace schema = swarmflow::schema;

Bytes finished(flatbuffers::FlatBufferBuilder& fbb) {
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Bytes destination(FrameKind kind) {
  Destination d;
  d.kind = kind;
  d.node = 3;
  d.replica = 1;
  d.epoch = 7;
  Bytes out(swarmflow::transport::kDestinationSize);
  swarmflow::transport::encode_destination(d, out.data());
  return out;
}

WireHeader deliver_header(const std::string& payload_id, std::size_t hops = 2) {
  WireHeader h;
  h.edge = 2;
  h.from_replica = 1;
  h.epoch = 7;
  h.envelope.stream = 11;
  h.envelope.seq = 42;
  h.envelope.capture_ns = 1'000'000;
  h.envelope.confidence = 0.75F;
  h.envelope.vote_key = 5;
  for (std::size_t i = 0; i < hops; ++i) h.envelope.add_hop(1'000'000 + static_cast<std::int64_t>(i) * 1000);
  h.payload_id = payload_id;
  return h;
}

Bytes header(const WireHeader& h) {
  flatbuffers::FlatBufferBuilder fbb;
  swarmflow::transport::encode_header(h, fbb);
  return finished(fbb);
}

/// A deliver header whose hop_ns vector starts 4 bytes into its first element:
/// it verifies, but its 8-byte elements sit at a 4-byte boundary.
Bytes misaligned_hops_header() {
  WireHeader h = deliver_header("SFBL", 0);
  h.envelope.add_hop(1);
  h.envelope.add_hop(77);
  Bytes b = header(h);
  auto* table = flatbuffers::GetMutableRoot<flatbuffers::Table>(b.data());
  auto* offset = reinterpret_cast<std::uint8_t*>(table) +
                 table->GetOptionalFieldOffset(schema::EnvelopeHeader::VT_HOP_NS);
  flatbuffers::WriteScalar(offset, flatbuffers::ReadScalar<flatbuffers::uoffset_t>(offset) + 4);
  return b;
}

Bytes blob(std::size_t bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i * 7);
  fbb.Finish(schema::CreateBlob(fbb, 11, 42, fbb.CreateVector(data)), schema::BlobIdentifier());
  return finished(fbb);
}

Bytes frame() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> pixels(8 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 8);
  fbb.Finish(schema::CreateFrameDirect(fbb, schema::PixelFormat::GRAY8, 8, 4, 8, 1'000'000, "cam0", 42, &pixels,
                                       R"({"defects":[]})"),
             schema::FrameIdentifier());
  return finished(fbb);
}

Bytes tokens() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::int32_t> ids{17, 4, 99};
  std::vector<flatbuffers::Offset<flatbuffers::String>> pieces{fbb.CreateString("the"), fbb.CreateString(" cat"),
                                                               fbb.CreateString(".")};
  std::vector<float> confidence{0.9F, 0.8F, 0.99F};
  fbb.Finish(schema::CreateTokensDirect(fbb, &ids, &pieces, 12, &confidence, true), schema::TokensIdentifier());
  return finished(fbb);
}

Bytes vision() {
  flatbuffers::FlatBufferBuilder fbb;
  schema::Box box(1.0F, 2.0F, 3.0F, 4.0F);
  std::vector<flatbuffers::Offset<schema::Defect>> defects{schema::CreateDefectDirect(fbb, "scratch", &box, 0.9F)};
  std::vector<flatbuffers::Offset<schema::Measurement>> measurements{
      schema::CreateMeasurementDirect(fbb, "diameter", 10.02, "mm", 10.0, 0.05, true)};
  fbb.Finish(schema::CreateVisionResultsDirect(fbb, "cam0", 42, 9, &defects, &measurements, false),
             schema::VisionResultsIdentifier());
  return finished(fbb);
}

Bytes control_heartbeat() {
  flatbuffers::FlatBufferBuilder fbb;
  auto beat = schema::CreateHeartbeatDirect(fbb, "u1", 123456, 7);
  fbb.Finish(schema::CreateControl(fbb, schema::ControlBody::Heartbeat, beat.Union()), schema::ControlIdentifier());
  return finished(fbb);
}

Bytes control_load(std::size_t replicas) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<schema::ReplicaLoad>> loads;
  const auto stage = fbb.CreateSharedString("detect");
  for (std::size_t i = 0; i < replicas; ++i) {
    loads.push_back(schema::CreateReplicaLoad(fbb, stage, static_cast<std::uint32_t>(i), 2, 1.5e6, 30.0));
  }
  auto report = schema::CreateLoadReportDirect(fbb, "u1", 123456, 0.5F, &loads);
  fbb.Finish(schema::CreateControl(fbb, schema::ControlBody::LoadReport, report.Union()), schema::ControlIdentifier());
  return finished(fbb);
}

Bytes control_order() {
  flatbuffers::FlatBufferBuilder fbb;
  auto order = schema::CreatePlacementOrderDirect(fbb, 8, schema::PlacementAction::Move, "detect", 1, "u1", "u2");
  fbb.Finish(schema::CreateControl(fbb, schema::ControlBody::PlacementOrder, order.Union()),
             schema::ControlIdentifier());
  return finished(fbb);
}

WireHeader ack_header() {
  WireHeader h;
  h.edge = 2;
  h.from_replica = 0;
  h.epoch = 7;
  h.credits = 4;
  h.released = 3;
  h.service_ns = 250000.0;
  return h;
}

WireHeader eos_header() {
  WireHeader h;
  h.edge = 2;
  h.from_replica = 1;
  h.epoch = 7;
  return h;
}

// Byte offsets in a RecordHeader (schemas/envelope.fbs; wire.cpp asserts its size).
constexpr std::size_t kPayloadIdAt = 12;
constexpr std::size_t kHopCountAt = 76;
constexpr std::size_t kReservedBAt = 78;
constexpr std::size_t kHopsAt = 80;

Bytes record_header(const WireHeader& h) {
  Bytes out(swarmflow::transport::kRecordHeaderSize);
  out.resize(swarmflow::transport::encode_record_header(h, out.data()));
  return out;
}

/// One record of a pack, as PackWriter takes it.
struct Record {
  FrameKind kind;
  Bytes header;
  Bytes payload;
};

Bytes pack(const std::vector<Record>& records) {
  swarmflow::transport::PackWriter w;
  for (const auto& r : records) {
    Destination d;
    d.kind = r.kind;
    d.node = 3;
    d.replica = 1;
    d.epoch = 7;
    w.add(d, r.header.data(), r.header.size(), r.payload.empty() ? nullptr : r.payload.data(), r.payload.size());
  }
  return Bytes(w.data(), w.data() + w.size());
}

bool write(const std::string& dir, const std::string& name, const Bytes& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_wire_corpus: cannot write %s/%s\n", dir.c_str(), name.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_wire_corpus DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const Bytes deliver = destination(FrameKind::deliver);
  const Bytes ack = destination(FrameKind::ack);
  const Bytes eos = destination(FrameKind::eos);
  const Bytes blob_header = header(deliver_header("SFBL"));
  const Bytes small_blob = blob(24);

  std::vector<std::pair<std::string, Bytes>> seeds;
  auto seed = [&seeds](std::string name, const std::vector<Bytes>& frames, std::uint8_t flags = 0) {
    seeds.emplace_back(std::move(name), fuzz::join_wire_input(frames, flags));
  };

  // -- valid: every kind, every built-in payload type
  seed("valid_deliver-blob.bin", {deliver, blob_header, small_blob});
  seed("valid_deliver-blob-empty.bin", {deliver, blob_header, blob(0)});
  seed("valid_deliver-blob-hops.bin", {deliver, header(deliver_header("SFBL", swarmflow::kMaxHops)), small_blob});
  seed("valid_deliver-frame.bin", {deliver, header(deliver_header("SFFR")), frame()});
  seed("valid_deliver-tokens.bin", {deliver, header(deliver_header("SFTK")), tokens()});
  seed("valid_deliver-vision.bin", {deliver, header(deliver_header("SFVR")), vision()});
  seed("valid_deliver-control-heartbeat.bin", {deliver, header(deliver_header("SFCT")), control_heartbeat()});
  seed("valid_deliver-control-load.bin", {deliver, header(deliver_header("SFCT")), control_load(3)});
  seed("valid_deliver-control-order.bin", {deliver, header(deliver_header("SFCT")), control_order()});
  seed("valid_deliver-misaligned.bin", {deliver, blob_header, small_blob}, fuzz::kFlagMisaligned);
  seed("valid_deliver-tight.bin", {deliver, header(deliver_header("SFVR", swarmflow::kMaxHops)), vision()},
       fuzz::kFlagTightLimits);
  seed("valid_ack.bin", {ack, header(ack_header()), {}});
  seed("valid_eos.bin", {eos, header(eos_header()), {}});

  // -- malformed: one per rejection reason, and a few ways to reach it
  seed("reject_part_count-two.bin", {deliver, blob_header});
  seed("reject_part_count-four.bin", {deliver, blob_header, small_blob, small_blob});
  Bytes short_dest(deliver.begin(), deliver.end() - 1);
  seed("reject_destination-short.bin", {short_dest, blob_header, small_blob});
  Bytes bad_version = deliver;
  bad_version[0] = 2;
  seed("reject_destination-version.bin", {bad_version, blob_header, small_blob});
  Bytes bad_kind = deliver;
  bad_kind[1] = 9;
  seed("reject_destination-kind.bin", {bad_kind, blob_header, small_blob});
  Bytes bad_reserved = deliver;
  bad_reserved[3] = 1;
  seed("reject_destination-reserved.bin", {bad_reserved, blob_header, small_blob});
  seed("reject_header_size-empty.bin", {deliver, {}, small_blob});
  seed("reject_header_size-tight.bin", {deliver, Bytes(300, 0x41), small_blob}, fuzz::kFlagTightLimits);
  Bytes wrong_id = blob_header;
  wrong_id[4] = 'X';
  seed("reject_header_invalid-identifier.bin", {deliver, wrong_id, small_blob});
  Bytes bad_root = blob_header;
  bad_root[0] = 0xF0;
  bad_root[1] = 0xFF;
  seed("reject_header_invalid-root-offset.bin", {deliver, bad_root, small_blob});
  seed("reject_header_invalid-misaligned-hops.bin", {deliver, misaligned_hops_header(), small_blob});
  seed("reject_header_invalid-no-payload-id.bin", {deliver, header(eos_header()), small_blob});
  seed("reject_header_invalid-payload-id-length.bin", {deliver, header(deliver_header("SFBLX")), small_blob});
  seed("reject_payload_size-ack.bin", {ack, header(ack_header()), small_blob});
  seed("reject_payload_size-empty.bin", {deliver, blob_header, {}});
  seed("reject_payload_size-tight.bin", {deliver, blob_header, blob(2000)}, fuzz::kFlagTightLimits);
  seed("reject_payload_type-unknown.bin", {deliver, header(deliver_header("ZZZZ")), small_blob});
  seed("reject_payload_type-mismatch.bin", {deliver, header(deliver_header("SFFR")), small_blob});
  Bytes bad_blob = small_blob;
  bad_blob[0] = 0xF0;
  bad_blob[1] = 0xFF;
  seed("reject_payload_invalid-root-offset.bin", {deliver, blob_header, bad_blob});
  seed("reject_payload_invalid-tables.bin", {deliver, header(deliver_header("SFCT")), control_load(20)},
       fuzz::kFlagTightLimits);

  // -- packs: one frame of records, each checked on its own
  const Record blob_record{FrameKind::deliver, record_header(deliver_header("SFBL")), small_blob};
  const Record ack_record{FrameKind::ack, record_header(ack_header()), {}};
  const Record eos_record{FrameKind::eos, record_header(eos_header()), {}};
  const Bytes mixed = pack({blob_record, {FrameKind::deliver, record_header(deliver_header("SFTK", 0)), tokens()},
                            {FrameKind::deliver, record_header(deliver_header("SFBL", swarmflow::kMaxHops)), blob(0)},
                            ack_record, eos_record});
  seed("valid_pack-mixed.bin", {mixed});
  seed("valid_pack-misaligned.bin", {mixed}, fuzz::kFlagMisaligned);
  seed("valid_pack-one.bin", {pack({blob_record})});
  Bytes bad_magic = mixed;
  bad_magic[0] = 'X';
  seed("reject_part_count-pack-magic.bin", {bad_magic});
  Bytes bad_pack_version = mixed;
  bad_pack_version[4] = 2;
  seed("reject_part_count-pack-version.bin", {bad_pack_version});
  Bytes no_records = mixed;
  no_records[8] = 0;
  seed("reject_part_count-pack-count-zero.bin", {no_records});
  Bytes more_records = mixed;
  more_records[8] = 6;
  seed("reject_part_count-pack-count-over.bin", {more_records});
  Bytes huge_count = mixed;
  huge_count[11] = 0x7F;
  seed("reject_part_count-pack-count-huge.bin", {huge_count});
  Bytes trailing = mixed;
  trailing.insert(trailing.end(), 8, 0);
  seed("reject_part_count-pack-trailing.bin", {trailing});
  Bytes cut = mixed;
  cut.resize(cut.size() - 8);
  seed("reject_part_count-pack-cut.bin", {cut});
  Bytes overrun = pack({blob_record});
  overrun[swarmflow::transport::kPackHeadSize + 7] = 0x7F;  // payload size far past the end
  seed("reject_part_count-pack-overrun.bin", {overrun});
  Bytes padding = pack({{FrameKind::deliver, record_header(deliver_header("SFBL")), Bytes(5, 0)}});
  padding.back() = 1;  // a padding byte after the payload
  seed("reject_part_count-pack-padding.bin", {padding});
  seed("reject_part_count-pack-short.bin", {Bytes(mixed.begin(), mixed.begin() + 12)});
  seed("reject_header_size-record.bin", {pack({{FrameKind::deliver, Bytes(136, 0), small_blob}})});
  Bytes many_hops = record_header(deliver_header("SFBL"));
  many_hops[kHopCountAt] = 9;
  seed("reject_header_invalid-record-hops.bin", {pack({blob_record, {FrameKind::deliver, many_hops, small_blob}})});
  Bytes stale_hop = record_header(deliver_header("SFBL", 2));
  stale_hop[kHopsAt + 7 * 8] = 1;  // a hop past hop_count
  seed("reject_header_invalid-record-unused-hop.bin", {pack({{FrameKind::deliver, stale_hop, small_blob}})});
  Bytes reserved = record_header(deliver_header("SFBL"));
  reserved[kReservedBAt] = 1;
  seed("reject_header_invalid-record-reserved.bin", {pack({{FrameKind::deliver, reserved, small_blob}})});
  Bytes nul_id = record_header(deliver_header("SFBL"));
  nul_id[kPayloadIdAt + 2] = 0;
  seed("reject_header_invalid-record-payload-id.bin", {pack({{FrameKind::deliver, nul_id, small_blob}})});
  seed("reject_header_invalid-record-no-payload-id.bin",
       {pack({{FrameKind::deliver, record_header(eos_header()), small_blob}})});
  seed("reject_payload_size-record-ack.bin", {pack({{FrameKind::ack, record_header(ack_header()), small_blob}})});
  seed("reject_payload_size-record-empty.bin", {pack({{FrameKind::deliver, record_header(deliver_header("SFBL")), {}}})});
  seed("reject_payload_type-record-mismatch.bin",
       {pack({{FrameKind::deliver, record_header(deliver_header("SFFR")), small_blob}})});
  seed("reject_payload_invalid-record-root-offset.bin",
       {pack({eos_record, {FrameKind::deliver, record_header(deliver_header("SFBL")), bad_blob}})});

  bool ok = true;
  for (const auto& [name, bytes] : seeds) ok = write(dir, name, bytes) && ok;
  std::printf("make_wire_corpus: wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return ok ? 0 : 1;
}
