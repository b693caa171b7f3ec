#pragma once
// Snapshots of stateful replicas on the control plane: Snapshot (unit to
// coordinator), SnapshotStored (its answer) and Restore (coordinator to the
// unit a replica moves to).

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

}  // namespace swarmflow::runtime
