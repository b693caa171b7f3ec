#include "inspection/defect_detector.hpp"
#include "inspection/dimension_gauge.hpp"
#include "inspection/inspection.hpp"

namespace swarmflow {

void register_inspection_stages(Registry& registry) {
  registry.add<inspection::DefectDetector>(
      "inspection.defects", "finds scratches, pits, cracks and missing holes on machined plates (classical OpenCV)");
  registry.add<inspection::DimensionGauge>(
      "inspection.measure", "gauges a plate's outer size and hole diameters in mm from a station's two cameras");
}

}  // namespace swarmflow
