// Snapshots of stateful replicas on the control plane (see snapshot_codec.hpp).

#include "runtime/snapshot_codec.hpp"

#include <utility>
#include <vector>

namespace swarmflow::runtime {

namespace {

struct KeyVectors {
  flatbuffers::Offset<flatbuffers::Vector<std::uint64_t>> ids;
  flatbuffers::Offset<flatbuffers::Vector<std::uint32_t>> sizes;
  flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>> bytes;
};

KeyVectors build_keys(flatbuffers::FlatBufferBuilder& fbb, const KeyStates& keys) {
  std::vector<std::uint64_t> ids;
  std::vector<std::uint32_t> sizes;
  std::string bytes;
  ids.reserve(keys.size());
  sizes.reserve(keys.size());
  for (const auto& [key, state] : keys) {
    ids.push_back(key);
    sizes.push_back(static_cast<std::uint32_t>(state.size()));
    bytes += state;
  }
  KeyVectors v;
  v.ids = fbb.CreateVector(ids);
  v.sizes = fbb.CreateVector(sizes);
  v.bytes = fbb.CreateVector(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return v;
}

/// false when the sizes do not add up to the bytes, or the vectors differ in length.
bool read_keys(const flatbuffers::Vector<std::uint64_t>* ids, const flatbuffers::Vector<std::uint32_t>* sizes,
               const flatbuffers::Vector<std::uint8_t>* bytes, KeyStates* out) {
  const std::size_t n = ids == nullptr ? 0 : ids->size();
  if ((sizes == nullptr ? 0 : sizes->size()) != n) return false;
  const std::size_t total = bytes == nullptr ? 0 : bytes->size();
  std::size_t at = 0;
  out->reserve(n);
  for (flatbuffers::uoffset_t i = 0; i < n; ++i) {
    const std::size_t size = sizes->Get(i);
    if (size > total - at) return false;
    out->emplace_back(ids->Get(i), std::string(reinterpret_cast<const char*>(bytes->data()) + at, size));
    at += size;
  }
  return at == total;
}

flatbuffers::Offset<schema::Snapshot> build_snapshot(flatbuffers::FlatBufferBuilder& fbb, const std::string& unit_id,
                                                     std::uint32_t epoch, int node, int replica,
                                                     const ReplicaSnapshot& s) {
  std::vector<flatbuffers::Offset<schema::Count>> counters;
  counters.reserve(s.counters.size());
  for (const auto& [name, value] : s.counters) {
    counters.push_back(schema::CreateCount(fbb, fbb.CreateString(name), value));
  }
  std::vector<flatbuffers::Offset<schema::SeenKeys>> seen;
  seen.reserve(s.seen.size());
  for (const auto& k : s.seen) {
    seen.push_back(schema::CreateSeenKeys(fbb, static_cast<std::uint32_t>(k.edge), static_cast<std::uint32_t>(k.producer),
                                          fbb.CreateVector(k.streams), fbb.CreateVector(k.seqs)));
  }
  const auto state = fbb.CreateVector(reinterpret_cast<const std::uint8_t*>(s.state.data()), s.state.size());
  const auto keys = build_keys(fbb, s.keys);
  return schema::CreateSnapshot(fbb, fbb.CreateString(unit_id), epoch, static_cast<std::uint32_t>(node),
                                static_cast<std::uint32_t>(replica), s.id, state, s.processed,
                                fbb.CreateVector(counters), fbb.CreateVector(seen), s.handover, s.finished, keys.ids,
                                keys.sizes, keys.bytes);
}

}  // namespace

transport::ControlBuffer encode_snapshot(const std::string& unit_id, std::uint32_t epoch, int node, int replica,
                                         const ReplicaSnapshot& snapshot) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::Snapshot,
                          build_snapshot(fbb, unit_id, epoch, node, replica, snapshot).Union());
  });
}

transport::ControlBuffer encode_snapshot_stored(std::uint32_t epoch, int node, int replica, std::uint64_t id) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::SnapshotStored,
                          schema::CreateSnapshotStored(fbb, epoch, static_cast<std::uint32_t>(node),
                                                       static_cast<std::uint32_t>(replica), id)
                              .Union());
  });
}

transport::ControlBuffer encode_restore(std::uint32_t epoch, int node, int replica, const ReplicaSnapshot& snapshot) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    // Keys given away go to their new owners (KeyStates), not to the successor.
    ReplicaSnapshot without_keys;
    const ReplicaSnapshot* sent = &snapshot;
    if (!snapshot.keys.empty()) {
      without_keys = snapshot;
      without_keys.keys.clear();
      sent = &without_keys;
    }
    const auto body = build_snapshot(fbb, "", epoch, node, replica, *sent);
    return std::make_pair(schema::ControlBody::Restore, schema::CreateRestore(fbb, epoch, body).Union());
  });
}

bool decode_snapshot(const schema::Snapshot& m, ReplicaSnapshot* out) {
  ReplicaSnapshot s;
  s.id = m.id();
  if (m.state() != nullptr) s.state.assign(reinterpret_cast<const char*>(m.state()->data()), m.state()->size());
  s.processed = m.processed();
  if (m.counters() != nullptr) {
    for (const auto* c : *m.counters()) {
      if (c == nullptr || c->name() == nullptr) return false;
      s.counters.emplace_back(c->name()->str(), c->value());
    }
  }
  if (m.seen() != nullptr) {
    for (const auto* k : *m.seen()) {
      if (k == nullptr) return false;
      ReplicaSnapshot::Seen seen;
      seen.edge = static_cast<int>(k->edge());
      seen.producer = static_cast<int>(k->producer());
      const std::size_t n = k->streams() != nullptr ? k->streams()->size() : 0;
      const std::size_t q = k->seqs() != nullptr ? k->seqs()->size() : 0;
      if (n != q) return false;
      seen.streams.reserve(n);
      seen.seqs.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        seen.streams.push_back(k->streams()->Get(static_cast<flatbuffers::uoffset_t>(i)));
        seen.seqs.push_back(k->seqs()->Get(static_cast<flatbuffers::uoffset_t>(i)));
      }
      s.seen.push_back(std::move(seen));
    }
  }
  s.handover = m.handover();
  s.finished = m.finished();
  if (!read_keys(m.key_ids(), m.key_sizes(), m.key_bytes(), &s.keys)) return false;
  *out = std::move(s);
  return true;
}

transport::ControlBuffer encode_key_states(std::uint32_t epoch, int node, int replica, const KeyStates& keys) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    const auto v = build_keys(fbb, keys);
    return std::make_pair(schema::ControlBody::KeyStates,
                          schema::CreateKeyStates(fbb, epoch, static_cast<std::uint32_t>(node),
                                                  static_cast<std::uint32_t>(replica), v.ids, v.sizes, v.bytes)
                              .Union());
  });
}

bool decode_key_states(const schema::KeyStates& m, KeyStates* out) {
  KeyStates keys;
  if (!read_keys(m.key_ids(), m.key_sizes(), m.key_bytes(), &keys)) return false;
  *out = std::move(keys);
  return true;
}

}  // namespace swarmflow::runtime
