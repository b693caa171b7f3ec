#pragma once
/// \file sim.hpp
/// The `sim` pack: synthetic sources, work and sinks for tests, benchmarks and
/// placement experiments. Payloads are `swarmflow.schema.Blob`.
///
/// sim.source — output `out`.
///   count (integer, 0 = until stopped), rate_hz (number, 0 = as fast as flow
///   control allows), payload_bytes (integer), streams (integer).
///   Envelopes of stream s carry seq 0, 1, 2, ... in order. Counter
///   `expected` = count (the progress line shows percentage and eta).
/// sim.work — input `in`, optional input `agreed` (VoteDecision), output `out`.
///   service_us (number), jitter_us (number), fail_every (integer, 0 = never;
///   else throw on every n-th envelope this instance sees).
///   Service time is divided by the unit's speed.
///   answer_confidence (number, 0 = off): each output answers its
///   (stream, seq) — vote_key a fixed function of them, confidence this —
///   for a voter (consensus.vote) downstream.
///   Faults of one replica, `fault_replica` (-1 = none): lie_every (every
///   k-th answer wrong, with confidence lie_confidence, 0.99 by default;
///   counter `lies`), slow_us (added service time), crash_after (answers
///   nothing after n envelopes, as a hung replica; counter `silenced`).
///   A decision on `agreed` (a feedback edge from the voter) for an answer
///   it gave otherwise replaces that answer (counter `resynced`).
/// sim.sink — input `in`. service_us (number).
///   Checks each stream's sequence numbers; counters received, lost, duplicate,
///   reordered. Keep one sink replica per stream (`key: stream`) for exact counts.
///   `lost` counts the gaps seen: envelopes skipped by a later one of their
///   stream. Drops after the last envelope a sink receives of a stream are not
///   seen (nothing says how many the stream had); the edges' `dropped` counts
///   every drop (docs/pipelines.md, "Counting drops").
///
/// ```yaml
/// stages:
///   - {id: src,  type: sim.source, params: {count: 1000, streams: 4}}
///   - {id: work, type: sim.work,   replicas: 2, inputs: {in: src/out}, params: {service_us: 200}}
///   - {id: sink, type: sim.sink,   inputs: {in: work/out}}
/// ```

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds sim.source, sim.work and sim.sink.
void register_sim_stages(Registry& registry);

}  // namespace swarmflow
