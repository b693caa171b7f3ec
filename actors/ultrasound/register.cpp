#include "ultrasound/ultrasound.hpp"
#include "ultrasound/ultrasound_stages.hpp"

namespace swarmflow {

void register_ultrasound_stages(Registry& registry) {
  registry.add<ultrasound::Enhance>("ultrasound.enhance",
                                    "speckle reduction (median and guided filter) and contrast (CLAHE) of B-mode frames");
  registry.add<ultrasound::Segment>("ultrasound.segment",
                                    "lesion masks with contours, size in mm, echogenicity, shape, margin, posterior features");
  registry.add<ultrasound::Flow>("ultrasound.flow", "vessel velocity in mm/s by speckle tracking between frames");
  registry.add<ultrasound::Report>("ultrasound.report",
                                   "one finding per lesion as streamed text tokens; scored against ground truth");
}

}  // namespace swarmflow
