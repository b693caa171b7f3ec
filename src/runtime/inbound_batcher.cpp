#include "runtime/inbound_batcher.hpp"

#include <string>
#include <utility>

#include "runtime/hop_figures.hpp"
#include "runtime/messages.hpp"
#include "runtime/run_state.hpp"

namespace swarmflow::runtime {

void InboundBatcher::add(transport::Inbound&& in) {
  // The run is held from the first message of a burst to its end (flush).
  if (!held_) {
    held_ = run_.lock();
    if (held_) table_ = held_->table();
  }
  RunState* run = held_.get();
  if (run == nullptr) return;
  if (!early_.empty() && table_->epoch > early_epoch_) retry_early();
  if (in.destination.epoch > table_->epoch) {
    // Sent under a newer placement than this unit has taken up yet (after
    // a failover): kept until it has, so that its hosts know the new
    // incarnations before they hear from them.
    if (early_.size() < kMaxEarly) {
      early_epoch_ = table_->epoch;
      early_.push_back(std::move(in));
    } else {
      run->abort("more than " + std::to_string(kMaxEarly) +
                 " messages arrived for a placement this unit has not taken up");
    }
    return;
  }
  const auto node = static_cast<std::size_t>(in.destination.node);
  const auto replica = static_cast<std::size_t>(in.destination.replica);
  if (node >= table_->unit_of.size() || replica >= table_->unit_of[node].size()) return;
  const caf::actor target = table_->actor(static_cast<int>(node), static_cast<int>(replica));
  if (table_->unit_of[node][replica] != unit_ || !target) {
    return;  // not hosted here; the transport counted it as received
  }
  const auto& h = in.header;
  const bool ack =
      in.destination.kind == transport::FrameKind::ack || in.destination.kind == transport::FrameKind::drained;
  if (in.sender >= 0 && !(ack ? from_its_consumer(*run, in) : from_its_producer(*run, in))) {
    // From a unit that no longer hosts the replica that sent it (fenced,
    // or late): its work is its replacement's now. A stale ack would
    // return credits and releases on the replacement's behalf.
    run->stale_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (in.destination.kind) {
    case transport::FrameKind::deliver: {
      // Refused for its payload: acknowledged only for the unit that really
      // hosts the producer it names, so no other peer can spend its credit.
      if (!in.payload && !sent_by_producer(*run, in)) return;
      Batch& b = batch_for(target, h.edge, h.from_replica);
      if (b.envelopes.empty()) b.envelopes.reserve(kMaxInboundBatch);  // one allocation a batch
      // Its times (capture, hops, sent) read on this process's clock from here on.
      const std::int64_t shift = in.sender >= 0 ? run->clock_shift_ns(in.sender, unit_) : 0;
      if (shift == 0) {
        b.envelopes.emplace_back(h.envelope, std::move(in.payload));
      } else {
        EnvelopeHeader shifted = h.envelope;
        shift_times(shifted, shift);
        b.envelopes.emplace_back(shifted, std::move(in.payload));
      }
      if (b.envelopes.size() >= kMaxInboundBatch) send(b);
      break;
    }
    case transport::FrameKind::ack:
      caf::anon_send(target, ack_atom::value, h.edge, h.from_replica, h.credits, h.released, h.service_ns);
      break;
    case transport::FrameKind::eos:
      send(batch_for(target, h.edge, h.from_replica));
      caf::anon_send(target, eos_atom::value, h.edge, h.from_replica);
      break;
    case transport::FrameKind::drain:
      send(batch_for(target, h.edge, h.from_replica));  // the mark follows the envelopes
      caf::anon_send(target, drain_atom::value, h.edge, h.from_replica);
      break;
    case transport::FrameKind::owed:
      send(batch_for(target, h.edge, h.from_replica));  // behind the envelopes
      caf::anon_send(target, owed_atom::value, h.edge, h.from_replica);
      break;
    case transport::FrameKind::drained:
      caf::anon_send(target, drained_atom::value, h.edge, h.from_replica);
      break;
  }
}

void InboundBatcher::flush() {
  for (auto& b : batches_) send(b);
  held_.reset();
  table_.reset();
}

void InboundBatcher::tick() {
  if (early_.empty()) return;
  auto run = run_.lock();
  if (!run || run->table()->epoch <= early_epoch_) return;
  retry_early();
  flush();
}

void InboundBatcher::retry_early() {
  std::vector<transport::Inbound> early = std::move(early_);
  early_.clear();
  for (auto& in : early) add(std::move(in));
}

bool InboundBatcher::from_its_producer(const RunState& run, const transport::Inbound& in) const {
  const auto edge = static_cast<std::size_t>(in.header.edge);
  if (edge >= run.graph.edges.size()) return false;
  const auto& producers = table_->unit_of[static_cast<std::size_t>(run.graph.edges[edge].from_node)];
  const auto from = static_cast<std::size_t>(in.header.from_replica);
  return from < producers.size() && producers[from] == in.sender;
}

bool InboundBatcher::from_its_consumer(const RunState& run, const transport::Inbound& in) const {
  const auto edge = static_cast<std::size_t>(in.header.edge);
  if (edge >= run.graph.edges.size()) return false;
  const int to = run.graph.edges[edge].to_node;
  const auto& consumers = table_->unit_of[static_cast<std::size_t>(to)];
  const auto from = static_cast<std::size_t>(in.header.from_replica);
  if (from >= consumers.size()) return false;
  // A replica that drained for a move sends its last acks and its drained
  // mark from where it was; they may arrive after its new placement.
  return consumers[from] == in.sender || table_->drained_on(to, static_cast<int>(from), in.sender);
}

bool InboundBatcher::sent_by_producer(const RunState& run, const transport::Inbound& in) const {
  const auto edge = static_cast<std::size_t>(in.header.edge);
  if (in.sender < 0 || edge >= run.graph.edges.size()) return false;
  const graph::Edge& e = run.graph.edges[edge];
  if (e.to_node != static_cast<int>(in.destination.node)) return false;
  const auto& producers = table_->unit_of[static_cast<std::size_t>(e.from_node)];
  const auto from = static_cast<std::size_t>(in.header.from_replica);
  return from < producers.size() && producers[from] == in.sender;
}

InboundBatcher::Batch& InboundBatcher::batch_for(const caf::actor& target, std::uint32_t edge, std::uint32_t from) {
  for (auto& b : batches_) {
    if (b.target == target && b.edge == edge && b.from == from) return b;
  }
  batches_.push_back(Batch{target, edge, from, {}});
  return batches_.back();
}

void InboundBatcher::send(Batch& b) {
  if (b.envelopes.empty()) return;
  if (b.envelopes.size() == 1) {
    caf::anon_send(b.target, deliver_atom::value, b.edge, b.from, std::move(b.envelopes.front()));
  } else {
    caf::anon_send(b.target, deliver_atom::value, b.edge, b.from, std::move(b.envelopes));
  }
  b.envelopes = {};
}

}  // namespace swarmflow::runtime
