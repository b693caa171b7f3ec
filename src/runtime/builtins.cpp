#include <swarmflow/registry.hpp>

#include "io/io.hpp"
#include "sim/sim.hpp"

namespace swarmflow {

void register_builtin_stages(Registry& registry) {
  register_sim_stages(registry);
  register_io_stages(registry);
}

}  // namespace swarmflow
