#pragma once
// `swarmflow calibrate`: calibrates a camera from frames of a checkerboard
// read through video.source, and writes the calibration file that
// vision.undistort and inspection.measure read (docs/inspection.md).

#include <cstdint>
#include <string>

#include <swarmflow/registry.hpp>

namespace swarmflow::cli {

struct CalibrateArgs {
  std::string uri;          ///< any video.source URI
  std::string board;        ///< inner corners, WxH
  double square_mm = 0;     ///< side of a square
  std::string out;          ///< calibration file to write
  std::int64_t frames = 30; ///< frames to look at, 0 = until the source ends
  int min_views = 8;
  double max_rms_px = 0.5;
  std::int64_t plane_frame = 0;
};

/// Runs the calibration; prints what it found, and the reason when it
/// refuses. Returns the process exit code: 0 written, 1 refused or failed,
/// 2 bad arguments.
int run_calibrate(const Registry& registry, const CalibrateArgs& args);

}  // namespace swarmflow::cli
