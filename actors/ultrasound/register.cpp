#include "ultrasound/ultrasound.hpp"
#include "ultrasound/ultrasound_stages.hpp"

#include <opencv2/core/utility.hpp>

#include <swarmflow/library_threads.hpp>

namespace swarmflow {

void register_ultrasound_stages(Registry& registry) {
  // Its stages call OpenCV: the runtime sets OpenCV's threads for a run
  // (swarmflow/library_threads.hpp).
  register_library_threads("opencv", {[] { return cv::getNumThreads(); }, [](int n) { cv::setNumThreads(n); }});
  registry.add<ultrasound::Enhance>("ultrasound.enhance",
                                    "speckle reduction (median and guided filter) and contrast (CLAHE) of B-mode frames");
  registry.add<ultrasound::Segment>("ultrasound.segment",
                                    "lesion masks with contours, size in mm, echogenicity, shape, margin, posterior features");
  registry.add<ultrasound::Flow>("ultrasound.flow", "vessel velocity in mm/s by speckle tracking between frames");
  registry.add<ultrasound::Report>("ultrasound.report",
                                   "one finding per lesion as streamed text tokens; scored against ground truth");
}

}  // namespace swarmflow
