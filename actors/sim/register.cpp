#include "sim/sim.hpp"
#include "sim/sim_stages.hpp"

namespace swarmflow {

void register_sim_stages(Registry& registry) {
  registry.add<sim::SimSource>("sim.source", "synthetic source of blobs, paced or as fast as allowed");
  registry.add<sim::SimWork>("sim.work", "simulated work with service time, jitter and failures");
  registry.add<sim::SimSink>("sim.sink", "sink that checks per-stream sequence numbers");
}

}  // namespace swarmflow
