#pragma once
// Snapshots of stateful replicas on the control plane: Snapshot (unit to
// coordinator), SnapshotStored (its answer), Restore (coordinator to the
// unit a replica moves to), a drained replica's hand-over (a Snapshot) and
// the keys with state it gives away (KeyStates).

#include <cstdint>
#include <string>

#include <swarmflow/schema/control_generated.h>

#include "runtime/replica_snapshot.hpp"
#include "transport/control.hpp"

namespace swarmflow::runtime {

transport::ControlBuffer encode_snapshot(const std::string& unit_id, std::uint32_t epoch, int node, int replica,
                                         const ReplicaSnapshot& snapshot);
transport::ControlBuffer encode_snapshot_stored(std::uint32_t epoch, int node, int replica, std::uint64_t id);
transport::ControlBuffer encode_restore(std::uint32_t epoch, int node, int replica, const ReplicaSnapshot& snapshot);

/// The snapshot in a verified message (its sizes checked: streams and seqs
/// of one producer must match).
bool decode_snapshot(const schema::Snapshot& message, ReplicaSnapshot* out);

/// KeyStates: keys with their state for replica (node, replica), sent to
/// its unit ahead of the plan of `epoch` that routes them there.
transport::ControlBuffer encode_key_states(std::uint32_t epoch, int node, int replica, const KeyStates& keys);
bool decode_key_states(const schema::KeyStates& message, KeyStates* out);

}  // namespace swarmflow::runtime
