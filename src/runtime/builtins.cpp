#include <swarmflow/registry.hpp>

#include "consensus/consensus.hpp"
#include "io/io.hpp"
#include "lm/lm.hpp"
#include "sim/sim.hpp"

namespace swarmflow {

// The packs the runtime carries. The packs on OpenCV and GStreamer (video,
// vision, inspection) are libraries of their own: whoever links one registers
// it (the `swarmflow` command registers those its build has).
void register_builtin_stages(Registry& registry) {
  register_sim_stages(registry);
  register_io_stages(registry);
  register_lm_stages(registry);
  register_consensus_stages(registry);
}

}  // namespace swarmflow
