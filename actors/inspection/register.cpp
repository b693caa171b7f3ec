#include "inspection/defect_detector.hpp"
#include "inspection/dimension_gauge.hpp"
#include "inspection/inspection.hpp"

#include <opencv2/core/utility.hpp>

#include <swarmflow/library_threads.hpp>

namespace swarmflow {

void register_inspection_stages(Registry& registry) {
  // Its stages call OpenCV: the runtime sets OpenCV's threads for a run
  // (swarmflow/library_threads.hpp).
  register_library_threads("opencv", {[] { return cv::getNumThreads(); }, [](int n) { cv::setNumThreads(n); }});
  registry.add<inspection::DefectDetector>(
      "inspection.defects", "finds scratches, pits, cracks and missing holes on machined plates (classical OpenCV)");
  registry.add<inspection::DimensionGauge>(
      "inspection.measure", "gauges a plate's outer size and hole diameters in mm from a station's two cameras");
}

}  // namespace swarmflow
