#pragma once
// The messages between stage hosts (and from a unit's transport thread to
// them). Within a unit they are CAF messages; between units the transport
// carries the same content as [destination][header][payload].

#include <caf/all.hpp>

#include <swarmflow/envelope.hpp>

#include "runtime/replica_snapshot.hpp"
#include "runtime/routing_table.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(swarmflow::Envelope)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<swarmflow::Envelope>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const swarmflow::runtime::RoutingTable>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const swarmflow::runtime::KeyStates>)

namespace swarmflow::runtime {

/// (edge, producer replica, envelope) or (edge, producer replica, vector of envelopes)
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;
/// (edge, consumer replica, credits, released, service_ns)
using ack_atom = caf::atom_constant<caf::atom("ack")>;
/// (edge, producer replica)
using eos_atom = caf::atom_constant<caf::atom("eos")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
/// a stage with work in hand asked to be called again (StageContext::defer_until)
using wake_atom = caf::atom_constant<caf::atom("wake")>;
/// (shared_ptr<const RoutingTable>): a new placement is in force
using placement_atom = caf::atom_constant<caf::atom("placement")>;
/// (edge, producer replica): a producer sends this draining replica nothing more
using drain_atom = caf::atom_constant<caf::atom("drain")>;
/// (edge, producer replica): a producer that drains asks for what it is owed at once
using owed_atom = caf::atom_constant<caf::atom("owed")>;
/// (edge, consumer replica): a drained consumer replica owes this producer nothing more
using drained_atom = caf::atom_constant<caf::atom("drained")>;
/// (uint64 id): the replica's snapshot `id` is stored off the unit
using stored_atom = caf::atom_constant<caf::atom("stored")>;
/// (keys with their state): keys handed on by a replica that drained, to take over
using keys_atom = caf::atom_constant<caf::atom("keys")>;

}  // namespace swarmflow::runtime
