#include "inspection/inspection.hpp"

namespace swarmflow {

void register_inspection_stages(Registry& /*registry*/) {}

}  // namespace swarmflow
