#pragma once
/// \file consensus.hpp
/// The consensus pack: `consensus.vote`, a voter over the results of
/// replicas (docs/consensus.md).
///
/// consensus.vote
///   inputs:  candidates (any type) — the replicas' results; each envelope's
///              header carries the answer (`vote_key`) and the replica's
///              `confidence`, and the runtime names the replica that sent it
///            reference (any type, optional) — a fault-free answer per
///              (stream, seq) in `vote_key`, to count wrong decisions
///   outputs: out (the candidates' type) — per decision, the winning
///              candidate's payload (not copied) under its header with
///              `vote_key` the answer and `confidence` the agreeing share
///            decisions (swarmflow.schema.VoteDecision) — the decision record
///   params:  replicas (0 = every replica that feeds `candidates`), quorum,
///            max_confidence, leader_threshold, deadline_ms,
///            reliability_alpha, leader_margin, max_pending
///
/// Example config:
///
///     - id: detect
///       type: inspection.defects
///       replicas: 3
///       fanout: all
///       inputs: {frames: camera/frames}
///     - id: vote
///       type: consensus.vote
///       inputs: {candidates: detect/defects}
///       params: {quorum: 0.5, max_confidence: 0.9, deadline_ms: 100}

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds consensus.vote.
void register_consensus_stages(Registry& registry);

}  // namespace swarmflow
