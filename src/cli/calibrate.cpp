#include "cli/calibrate.hpp"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include <opencv2/imgproc.hpp>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/stage.hpp>

#include "vision/camera_calibration.hpp"
#include "vision/frame_mat.hpp"

namespace swarmflow::cli {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitInvalid = 2;

/// What one video.source needs around it to run outside a pipeline.
class SourceContext final : public StageContext {
 public:
  const std::string& stage_id() const override { return id_; }
  int replica() const override { return 0; }
  int replica_count() const override { return 1; }
  std::int64_t now_ns() const override { return steady_now_ns(); }
  double speed() const override { return 1.0; }
  bool stop_requested() const override { return false; }
  void defer_until(std::int64_t t_ns) override { deferred_until_ = t_ns; }
  void set_live(bool) override {}
  std::atomic<std::int64_t>& counter(std::string_view name) override {
    auto& slot = counters_[std::string(name)];
    if (!slot) slot = std::make_unique<std::atomic<std::int64_t>>(0);
    return *slot;
  }
  /// Waits out a deferral the source asked for, if any.
  void wait_if_deferred() {
    const std::int64_t wait = deferred_until_ - steady_now_ns();
    deferred_until_ = 0;
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  }

 private:
  std::string id_ = "calibrate";
  std::int64_t deferred_until_ = 0;
  std::map<std::string, std::unique_ptr<std::atomic<std::int64_t>>> counters_;
};

/// The grey image of `frame` (a view for GRAY8 and NV12's luma).
cv::Mat grey_of(const schema::Frame& frame, cv::Mat* buffer) {
  const cv::Mat view = vision::view_of(frame);
  if (view.empty() || view.channels() == 1) return view;
  const int code = frame.format() == schema::PixelFormat::RGB    ? cv::COLOR_RGB2GRAY
                   : frame.format() == schema::PixelFormat::BGRA ? cv::COLOR_BGRA2GRAY
                                                                 : cv::COLOR_BGR2GRAY;
  cv::cvtColor(view, *buffer, code);
  return *buffer;
}

bool parse_board(const std::string& text, cv::Size* board) {
  const std::size_t x = text.find('x');
  if (x == std::string::npos) return false;
  try {
    std::size_t used = 0;
    const std::string w = text.substr(0, x), h = text.substr(x + 1);
    board->width = std::stoi(w, &used);
    if (used != w.size()) return false;
    board->height = std::stoi(h, &used);
    if (used != h.size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  return board->width >= 3 && board->height >= 3 && board->width <= 100 && board->height <= 100;
}

}  // namespace

int run_calibrate(const Registry& registry, const CalibrateArgs& args) {
  vision::CalibrationOptions options;
  if (!parse_board(args.board, &options.board)) {
    std::fprintf(stderr, "swarmflow: --board takes the inner corners as WxH, e.g. 9x6 (a board of 10x7 squares)\n");
    return kExitInvalid;
  }
  if (!(args.square_mm > 0)) {
    std::fprintf(stderr, "swarmflow: --square-mm must be the side of a square in mm, above 0\n");
    return kExitInvalid;
  }
  options.square_mm = args.square_mm;
  options.min_views = args.min_views;
  options.max_rms_px = args.max_rms_px;
  options.plane_frame = args.plane_frame;

  const StageType* type = registry.find("video.source");
  if (type == nullptr) {
    std::fprintf(stderr, "swarmflow: video.source is not in the catalogue\n");
    return kExitRuntime;
  }
  std::unique_ptr<Stage> source = type->make();
  StageSpec spec;
  source->setup(spec);
  for (const Status& s : {spec.set("uri", args.uri), spec.set("count", args.frames)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "swarmflow: %s\n", s.message().c_str());
      return kExitInvalid;
    }
  }
  SourceContext ctx;
  Status s = source->start(ctx);
  if (!s.ok()) {
    std::fprintf(stderr, "swarmflow: cannot read %s: %s\n", args.uri.c_str(), s.message().c_str());
    return kExitRuntime;
  }

  vision::CameraCalibrator calibrator(options);
  cv::Mat buffer;
  std::int64_t index = 0;
  while (true) {
    Inputs in;
    Outputs out;
    out.reset(EnvelopeHeader{});
    s = source->process(in, out, ctx);
    if (s.is_end_of_stream()) break;
    if (!s.ok()) {
      source->stop(ctx);
      std::fprintf(stderr, "swarmflow: reading %s failed: %s\n", args.uri.c_str(), s.message().c_str());
      return kExitRuntime;
    }
    for (auto& item : out.items()) {
      const auto* frame = item.envelope.as<schema::Frame>();
      if (frame == nullptr) continue;
      const cv::Mat grey = grey_of(*frame, &buffer);
      std::string error;
      if (grey.empty()) {
        std::fprintf(stderr, "swarmflow: frame %lld is malformed; skipped\n", static_cast<long long>(index));
      } else if (!calibrator.add(grey, index, &error) && !error.empty()) {
        std::fprintf(stderr, "swarmflow: %s; skipped\n", error.c_str());
      }
      ++index;
    }
    if (out.items().empty()) ctx.wait_if_deferred();
  }
  source->stop(ctx);

  vision::Calibration calibration;
  std::string reason;
  if (!calibrator.calibrate(&calibration, &reason)) {
    std::fprintf(stderr, "swarmflow: %s\n", reason.c_str());
    return kExitRuntime;
  }
  if (!vision::write_calibration(args.out, calibration, &reason)) {
    std::fprintf(stderr, "swarmflow: %s\n", reason.c_str());
    return kExitRuntime;
  }
  const cv::Mat& k = calibration.camera_matrix;
  std::printf("%dx%d frames, board found in %d of %d\n", calibration.image_size.width, calibration.image_size.height,
              calibration.views_used, calibration.views_seen);
  std::printf("RMS reprojection error  %.3f px (limit %.3f)\n", calibration.rms_px, options.max_rms_px);
  std::printf("focal length            %.1f x %.1f px, principal point (%.1f, %.1f)\n", k.at<double>(0, 0),
              k.at<double>(1, 1), k.at<double>(0, 2), k.at<double>(1, 2));
  std::printf("distortion k1 k2        %.5g %.5g (%+.3f %% at the image corner: %s)\n",
              calibration.distortion.at<double>(0), calibration.distortion.at<double>(1),
              100 * calibration.corner_distortion, calibration.corner_distortion < 0 ? "barrel" : "pincushion");
  if (calibration.mm_per_px > 0) {
    std::printf("mm_per_px               %.5f at the working plane (frame %lld, tilt %.2f deg)\n",
                calibration.mm_per_px, static_cast<long long>(calibration.plane_frame), calibration.plane_tilt_deg);
  } else if (calibration.plane_frame >= 0) {
    std::printf("mm_per_px               not derived: frame %lld is tilted %.2f deg (more than %.1f)\n",
                static_cast<long long>(calibration.plane_frame), calibration.plane_tilt_deg,
                options.max_plane_tilt_deg);
  } else {
    std::printf("mm_per_px               not derived: the board was not found in frame %lld\n",
                static_cast<long long>(options.plane_frame));
  }
  std::printf("wrote %s\n", args.out.c_str());
  return kExitOk;
}

}  // namespace swarmflow::cli
