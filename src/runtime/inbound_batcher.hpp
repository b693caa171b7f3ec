#pragma once
// Hands verified inbound messages from a unit's transport thread to the
// local replicas they are for, batched per burst, holding back those sent
// under a placement the unit has not taken up yet and refusing those from a
// unit that no longer hosts the replica they name.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <caf/actor.hpp>

#include <swarmflow/envelope.hpp>

#include "runtime/routing_table.hpp"
#include "transport/transport.hpp"

namespace swarmflow::runtime {

struct RunState;

/// Hands verified inbound messages to the local replicas they are for. It
/// lives on one unit's transport thread: envelopes received in one burst go
/// to each (replica, edge, producer) as one CAF message, as local batches do;
/// an end-of-stream mark first sends what came before it.
class InboundBatcher {
 public:
  InboundBatcher(std::weak_ptr<RunState> run, int unit) : run_(std::move(run)), unit_(unit) {}

  void add(transport::Inbound&& in);
  void flush();
  /// Delivers what came early once this unit has taken up its placement.
  void tick();

 private:
  static constexpr std::size_t kMaxInboundBatch = 32;
  /// Messages for a placement newer than this unit's, kept at most.
  static constexpr std::size_t kMaxEarly = 1u << 16;

  struct Batch {
    caf::actor target;
    std::uint32_t edge;
    std::uint32_t from;
    std::vector<Envelope> envelopes;
  };

  void retry_early();
  /// The sending unit hosts the producer replica the message names, by the
  /// table in force.
  bool from_its_producer(const RunState& run, const transport::Inbound& in) const;
  /// The sending unit hosts the consumer replica an ack names.
  bool from_its_consumer(const RunState& run, const transport::Inbound& in) const;
  bool sent_by_producer(const RunState& run, const transport::Inbound& in) const;
  Batch& batch_for(const caf::actor& target, std::uint32_t edge, std::uint32_t from);
  static void send(Batch& b);

  std::weak_ptr<RunState> run_;
  std::shared_ptr<RunState> held_;
  std::shared_ptr<const RoutingTable> table_;  ///< held with the run, for one burst
  std::vector<transport::Inbound> early_;
  std::uint32_t early_epoch_ = 0;
  int unit_;
  std::vector<Batch> batches_;
};

}  // namespace swarmflow::runtime
