// swarmflow_bench_inspection — what swarmflow costs on the inspection work of
// one camera at 1080p, against a plain loop doing the same work.
//
// Both sides do the same work per frame: render a 1920x1080 BGR frame of the
// synthetic parts camera (seed 7, station 0, camera 0) straight into a
// FlatBuffers Frame, exactly as video.source does, then run inspection.defects
// on it.
//
//   plain      one thread, no framework: construct the camera and a
//              DefectDetector, then per frame build the Frame and call the
//              detector's process() with a trivial StageContext.
//   swarmflow  video.source (synthetic://parts?seed=7&camera=0, 1920x1080,
//              fps 0 = unpaced, count N) -> inspection.defects (1 replica,
//              queue capacity 4, overflow block) -> bench.results (a sink that
//              counts) in one unit, run by swarmflow::Runtime with 1 and with
//              2 worker threads.
//
// Throughput under saturation only (no latency). Two figures per side:
//   whole run    the report's duration_s / N for swarmflow, which includes the
//                stages' start (the camera precomputes its textures, 50-200 ms);
//                for plain, the same: camera construction + start + N frames.
//   steady       from the first result to the last, / (N - 1): start-up left out.
//
// With --undistort the camera has radial lens distortion (--k1, default
// -0.01) and both sides put vision.undistort in front of the detector, with a
// calibration file written for the synthetic lens. The plain loop also
// reports the detector's own time per frame and the undistortion's.

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <time.h>

#include <opencv2/core/utility.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/swarmflow.hpp>

#include "inspection/defect_detector.hpp"
#include "inspection/inspection.hpp"
#include "video/video.hpp"
#include "video/synthetic_parts.hpp"
#include "vision/camera_calibration.hpp"
#include "vision/vision.hpp"
#include "vision/vision_stages.hpp"

#include "bench_args.hpp"

namespace {

/// Room in a frame's builder for the ground truth JSON, as video.source leaves it.
constexpr std::size_t kTruthRoom = 64 * 1024;
constexpr int kWidth = 1920;
constexpr int kHeight = 1080;

// -- options ------------------------------------------------------------------

struct Options {
  std::int64_t n = 60;    ///< frames per run
  int repeat = 3;         ///< runs of each side; the median is reported
  std::string json_path;  ///< write the results as JSON here when set
  std::string only;       ///< "plain" or "swarmflow": run one side only (for profiling)
  int cv_threads = -1;    ///< OpenCV's own worker threads (cv::setNumThreads); -1 = OpenCV's default
  bool undistort = false; ///< vision.undistort before the detector
  double k1 = -0.01;      ///< the camera's lens distortion with --undistort
  std::string calibration_path = "/tmp/swarmflow_bench_inspection_calibration.yaml";
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "frames per run (default 60)"),
      integer_flag("--repeat", "R", o.repeat, "runs of each side, the median is reported (default 3)"),
      integer_flag("--cv-threads", "T", o.cv_threads,
                   "OpenCV's own worker threads, for both sides (default: OpenCV's default;\n"
                   "1 = every OpenCV call on its caller's thread)"),
      text_flag("--json", "FILE", o.json_path, "also write the results as JSON to FILE"),
      text_flag("--only", "SIDE", o.only, "run only `plain` or only `swarmflow` (to profile one side)"),
      switch_flag("--undistort", o.undistort,
                  "lens distortion on the camera (--k1) and vision.undistort before the detector, both sides"),
      number_flag("--k1", "K", o.k1, "the camera's radial distortion with --undistort (default -0.01, 1 % barrel)"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (!o.only.empty() && o.only != "plain" && o.only != "swarmflow") {
    std::fprintf(stderr, "--only takes plain or swarmflow\n");
    return false;
  }
  if (o.n < 2 || o.repeat <= 0) {
    std::fprintf(stderr, "--n must be at least 2 and --repeat positive\n");
    return false;
  }
  return true;
}

// -- results ------------------------------------------------------------------

struct RunResult {
  bool ok = false;
  double detect_seconds = 0;     ///< plain only: inside the detector's process()
  double detect_cpu_seconds = 0; ///< plain only: CPU time of the calling thread inside process()
  double undistort_cpu_seconds = 0;
  double undistort_seconds = 0;  ///< plain only: inside vision.undistort's process()
  double seconds = 0;         ///< whole run (start included)
  double steady_seconds = 0;  ///< first result to last result
  double cpu_seconds = 0;     ///< CPU time of the whole process (all threads) over the whole run
  std::int64_t frames = 0;    ///< results produced
  std::int64_t defects = 0;   ///< defects found in all frames
  std::string problem;        ///< why the run is not ok, empty when it is
};

double ms_per_frame(const RunResult& r, std::int64_t n) { return r.seconds > 0 ? r.seconds * 1e3 / n : 0; }
double steady_ms_per_frame(const RunResult& r, std::int64_t n) {
  return r.steady_seconds > 0 ? r.steady_seconds * 1e3 / static_cast<double>(n - 1) : 0;
}
double cpu_ms_per_frame(const RunResult& r, std::int64_t n) { return r.cpu_seconds * 1e3 / n; }
double per_s(double ms) { return ms > 0 ? 1e3 / ms : 0; }
double overhead_pct(double ms, double plain_ms) { return plain_ms > 0 ? (ms - plain_ms) / plain_ms * 100 : 0; }

/// CPU time of this process, all threads, in seconds: less moved by other
/// processes on a shared machine than wall time.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// CPU time of the calling thread, in seconds (with --cv-threads 1 all of
/// a stage's work runs there).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// -- plain loop -------------------------------------------------------------------

/// The least a stage needs to run outside a pipeline: an id, counters, a clock.
class PlainContext final : public swarmflow::StageContext {
 public:
  const std::string& stage_id() const override { return id_; }
  int replica() const override { return 0; }
  int replica_count() const override { return 1; }
  std::int64_t now_ns() const override { return swarmflow::steady_now_ns(); }
  double speed() const override { return 1.0; }
  bool stop_requested() const override { return false; }
  void defer_until(std::int64_t /*t_ns*/) override {}
  void set_live(bool /*live*/) override {}
  std::atomic<std::int64_t>& counter(std::string_view name) override {
    auto& slot = counters_[std::string(name)];
    if (!slot) slot = std::make_unique<std::atomic<std::int64_t>>(0);
    return *slot;
  }

 private:
  std::string id_ = "detect";
  std::map<std::string, std::unique_ptr<std::atomic<std::int64_t>>> counters_;
};

/// One frame as video.source makes it for synthetic://parts: pixels rendered
/// straight into the payload, the ground truth as JSON beside them.
swarmflow::Envelope make_frame(const swarmflow::video::SyntheticParts& camera, std::uint64_t index,
                               const std::string& camera_id) {
  const std::size_t stride = static_cast<std::size_t>(kWidth) * 3;
  const std::size_t size = stride * kHeight;
  const std::int64_t capture_ns = swarmflow::steady_now_ns();
  flatbuffers::FlatBufferBuilder fbb(size + kTruthRoom + camera_id.size());
  const auto camera_name = fbb.CreateString(camera_id);
  std::uint8_t* pixels = nullptr;
  const auto data = fbb.CreateUninitializedVector(size, &pixels);
  const swarmflow::video::PartTruth truth = camera.render(index, pixels, stride);
  const auto ground_truth = fbb.CreateString(swarmflow::video::to_json(truth));
  const auto frame = swarmflow::schema::CreateFrame(
      fbb, swarmflow::schema::PixelFormat::BGR, static_cast<std::uint32_t>(kWidth),
      static_cast<std::uint32_t>(kHeight), static_cast<std::uint32_t>(stride), capture_ns, camera_name, index, data,
      ground_truth);
  swarmflow::schema::FinishFrameBuffer(fbb, frame);
  swarmflow::EnvelopeHeader header;
  header.stream = 0;  // station 0 * 2 + camera 0, as video.source numbers it
  header.seq = index;
  header.capture_ns = capture_ns;
  header.part_id = truth.part_id;
  return swarmflow::Envelope(header, swarmflow::Payload::from_builder(fbb));
}

/// A calibration file for the synthetic lens of `k1` at 1080p, 0.1 mm/px:
/// the pinhole camera and one radial term, in OpenCV's terms.
bool write_lens_calibration(const Options& o) {
  swarmflow::vision::Calibration c;
  c.image_size = cv::Size(kWidth, kHeight);
  const double f = swarmflow::video::kWorkingDistanceMm / 0.1;
  const double half_diagonal = std::hypot(kWidth, kHeight) / 2;
  c.camera_matrix = (cv::Mat_<double>(3, 3) << f, 0, (kWidth - 1) / 2.0, 0, f, (kHeight - 1) / 2.0, 0, 0, 1);
  c.distortion = (cv::Mat_<double>(1, 5) << o.k1 * (f / half_diagonal) * (f / half_diagonal), 0, 0, 0, 0);
  c.mm_per_px = 0.1;
  c.views_used = c.views_seen = 1;
  std::string error;
  if (!swarmflow::vision::write_calibration(o.calibration_path, c, &error)) {
    std::fprintf(stderr, "cannot write %s: %s\n", o.calibration_path.c_str(), error.c_str());
    return false;
  }
  return true;
}

RunResult run_plain(const Options& o) {
  RunResult r;
  const double cpu0 = process_cpu_s();
  const std::int64_t t0 = swarmflow::steady_now_ns();
  swarmflow::video::SyntheticPartsConfig config;
  config.seed = 7;
  config.width = kWidth;
  config.height = kHeight;
  config.station = 0;
  config.camera = 0;
  if (o.undistort) config.k1 = o.k1;
  const swarmflow::video::SyntheticParts camera(config);
  swarmflow::vision::Undistort undistort;
  swarmflow::StageSpec undistort_spec;
  PlainContext undistort_ctx;
  if (o.undistort) {
    undistort.setup(undistort_spec);
    swarmflow::Status u = undistort_spec.set("calibration", o.calibration_path);
    if (u.ok()) u = undistort.start(undistort_ctx);
    if (!u.ok()) {
      r.problem = "vision.undistort: " + u.message();
      return r;
    }
  }
  swarmflow::inspection::DefectDetector detector;
  swarmflow::StageSpec spec;
  detector.setup(spec);  // parameters keep their defaults, as in the pipeline
  PlainContext ctx;
  swarmflow::Status s = detector.start(ctx);
  if (!s.ok()) {
    r.problem = "start: " + s.message();
    return r;
  }
  const int frames_port = spec.input_index("frames");
  const std::string camera_id = "camera-0";
  std::int64_t first_ns = 0;
  std::int64_t defects = 0;
  for (std::int64_t i = 0; i < o.n; ++i) {
    swarmflow::Envelope frame = make_frame(camera, static_cast<std::uint64_t>(i), camera_id);
    if (o.undistort) {
      swarmflow::Inputs uin;
      uin.reset(undistort_spec.input_index("frames"), &frame);
      swarmflow::Outputs uout;
      uout.reset(frame.header());
      const std::int64_t u0 = swarmflow::steady_now_ns();
      const double uc0 = thread_cpu_s();
      s = undistort.process(uin, uout, undistort_ctx);
      r.undistort_cpu_seconds += thread_cpu_s() - uc0;
      r.undistort_seconds += static_cast<double>(swarmflow::steady_now_ns() - u0) / 1e9;
      if (!s.ok() || uout.items().size() != 1) {
        r.problem = "vision.undistort, frame " + std::to_string(i) + ": " + s.message();
        return r;
      }
      frame = uout.items()[0].envelope;
    }
    swarmflow::Inputs in;
    in.reset(frames_port, &frame);
    swarmflow::Outputs out;
    out.reset(frame.header());
    const std::int64_t d0 = swarmflow::steady_now_ns();
    const double dc0 = thread_cpu_s();
    s = detector.process(in, out, ctx);
    r.detect_cpu_seconds += thread_cpu_s() - dc0;
    r.detect_seconds += static_cast<double>(swarmflow::steady_now_ns() - d0) / 1e9;
    if (!s.ok()) {
      r.problem = "frame " + std::to_string(i) + ": " + s.message();
      return r;
    }
    for (const auto& item : out.items()) {
      const auto* results = item.envelope.as<swarmflow::schema::VisionResults>();
      if (results != nullptr && results->defects() != nullptr) defects += results->defects()->size();
      ++r.frames;
    }
    if (i == 0) first_ns = swarmflow::steady_now_ns();
  }
  const std::int64_t end_ns = swarmflow::steady_now_ns();
  detector.stop(ctx);
  r.cpu_seconds = process_cpu_s() - cpu0;
  r.seconds = static_cast<double>(end_ns - t0) / 1e9;
  r.steady_seconds = static_cast<double>(end_ns - first_ns) / 1e9;
  r.defects = defects;
  r.ok = r.frames == o.n;
  if (!r.ok) r.problem = "produced " + std::to_string(r.frames) + " results";
  return r;
}

// -- swarmflow pipeline -----------------------------------------------------------

/// The pipeline's sink: counts results and the defects in them.
class ResultCounter final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    results_ = s.input<swarmflow::schema::VisionResults>("results", "defects found in each frame");
  }
  swarmflow::Status start(swarmflow::StageContext& ctx) override {
    received_ = &ctx.counter("received");
    defects_ = &ctx.counter("defects");
    return {};
  }
  swarmflow::Status process(swarmflow::Inputs& in, swarmflow::Outputs& /*out*/,
                            swarmflow::StageContext& /*ctx*/) override {
    const auto* results = in.get(results_);
    if (results == nullptr) return {};
    received_->fetch_add(1, std::memory_order_relaxed);
    if (results->defects() != nullptr) {
      defects_->fetch_add(static_cast<std::int64_t>(results->defects()->size()), std::memory_order_relaxed);
    }
    return {};
  }

 private:
  swarmflow::InputPort<swarmflow::schema::VisionResults> results_;
  std::atomic<std::int64_t>* received_ = nullptr;
  std::atomic<std::int64_t>* defects_ = nullptr;
};

std::string pipeline_yaml(const Options& o) {
  char k1[32];
  std::snprintf(k1, sizeof k1, "%g", o.undistort ? o.k1 : 0.0);
  const std::string undistort =
      o.undistort ? "  - id: flat\n"
                    "    type: vision.undistort\n"
                    "    inputs: {frames: camera/frames}\n"
                    "    queue: {capacity: 4, overflow: block}\n"
                    "    params: {calibration: \"" + o.calibration_path + "\"}\n"
                  : std::string();
  // `auto`: OpenCV's threads as this process has them (--cv-threads), on
  // both sides alike, not the one thread a pipeline runs it on by default.
  return "pipeline: bench_inspection\n"
         "units: 1\n"
         "opencv: {threads: auto}\n"
         "stages:\n"
         "  - id: camera\n"
         "    type: video.source\n"
         "    params: {uri: \"synthetic://parts?seed=7&camera=0&k1=" + std::string(k1) + "\", width: " +
         std::to_string(kWidth) + ", height: " + std::to_string(kHeight) + ", fps: 0, count: " +
         std::to_string(o.n) + "}\n" + undistort +
         "  - id: detect\n"
         "    type: inspection.defects\n"
         "    inputs: {frames: " + (o.undistort ? "flat" : "camera") + "/frames}\n"
         "    queue: {capacity: 4, overflow: block}\n"
         "  - id: sink\n"
         "    type: bench.results\n"
         "    inputs: {results: detect/results}\n"
         "    queue: {capacity: 4, overflow: block}\n";
}

std::int64_t counter(const swarmflow::StageReport* s, const char* name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

RunResult run_swarmflow(const Options& o, int threads) {
  swarmflow::RuntimeOptions ro;
  ro.threads = threads;
  swarmflow::Runtime runtime(ro);
  RunResult r;
  swarmflow::register_video_stages(runtime.registry());
  swarmflow::register_inspection_stages(runtime.registry());
  swarmflow::register_vision_stages(runtime.registry());  // vision.undistort with --undistort
  swarmflow::Status s = runtime.registry().add<ResultCounter>("bench.results", "counts results and their defects");
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (s.ok()) s = runtime.load_string(pipeline_yaml(o), "bench_inspection.yaml", &diagnostics);
  if (!s.ok()) {
    std::fprintf(stderr, "the bench pipeline does not load: %s\n%s\n", s.message().c_str(),
                 swarmflow::format_diagnostics(diagnostics).c_str());
    r.problem = "does not load";
    return r;
  }
  // When the detector emits its first and last result: the steady rate.
  std::mutex mutex;
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  s = runtime.subscribe("detect/results", [&](const swarmflow::Envelope&) {
    const std::int64_t now = swarmflow::steady_now_ns();
    std::lock_guard<std::mutex> lock(mutex);
    if (first_ns == 0) first_ns = now;
    last_ns = now;
  });
  const double cpu0 = process_cpu_s();
  if (s.ok()) s = runtime.run();
  r.cpu_seconds = process_cpu_s() - cpu0;
  const swarmflow::RunReport report = runtime.report();
  const auto* sink = report.stage("sink");
  r.frames = counter(sink, "received");
  r.defects = counter(sink, "defects");
  std::uint64_t dropped = 0;
  for (const auto& e : report.edges) dropped += e.dropped;
  r.ok = s.ok() && report.ok && r.frames == o.n && dropped == 0;
  if (!r.ok) {
    r.problem = "received " + std::to_string(r.frames) + ", dropped " + std::to_string(dropped) +
                (s.ok() ? std::string() : ", " + s.message());
  }
  r.seconds = report.duration_s;
  r.steady_seconds = static_cast<double>(last_ns - first_ns) / 1e9;
  return r;
}

// -- reporting ------------------------------------------------------------------

/// The run whose whole-run time is the median (lower median for even counts).
RunResult median(std::vector<RunResult> runs) {
  std::sort(runs.begin(), runs.end(), [](const RunResult& a, const RunResult& b) { return a.seconds < b.seconds; });
  return runs[(runs.size() - 1) / 2];
}

std::string command_line(int argc, char** argv) {
  std::string c;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) c += ' ';
    c += argv[i];
  }
  return c;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string json_side(const RunResult& r, std::int64_t n, double plain_ms, double plain_steady_ms, double plain_cpu_ms) {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "{\"ms_per_frame\": %.4f, \"frames_per_s\": %.3f, \"steady_ms_per_frame\": %.4f, "
                "\"steady_frames_per_s\": %.3f, \"overhead_pct\": %.2f, \"steady_overhead_pct\": %.2f, "
                "\"cpu_ms_per_frame\": %.4f, \"cpu_overhead_pct\": %.2f, \"duration_s\": %.4f, \"defects\": %lld}",
                ms_per_frame(r, n), per_s(ms_per_frame(r, n)), steady_ms_per_frame(r, n),
                per_s(steady_ms_per_frame(r, n)), overhead_pct(ms_per_frame(r, n), plain_ms),
                overhead_pct(steady_ms_per_frame(r, n), plain_steady_ms), cpu_ms_per_frame(r, n),
                overhead_pct(cpu_ms_per_frame(r, n), plain_cpu_ms), r.seconds,
                static_cast<long long>(r.defects));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  const std::string cmd = command_line(argc, argv);
  if (o.cv_threads >= 0) cv::setNumThreads(o.cv_threads);
  if (o.undistort && !write_lens_calibration(o)) return 1;
  const int cv_threads = cv::getNumThreads();

  std::printf("swarmflow inspection benchmark: synthetic parts camera (seed 7, station 0, camera 0) at %dx%d,\n"
              "render + inspection.defects per frame, N=%lld frames, each side %d times alternating, median reported\n",
              kWidth, kHeight, static_cast<long long>(o.n), o.repeat);
  std::printf("  plain:     one thread, no framework; Frame built as video.source builds it, DefectDetector::process\n"
              "  swarmflow: video.source (fps 0) -> inspection.defects (1 replica, queue 4, block) -> sink,\n"
              "             one unit, RuntimeOptions::threads = 1 and = 2\n"
              "  both: OpenCV's own worker threads: %d (cv::getNumThreads; detection calls may run on them)\n\n",
              cv_threads);
  std::fflush(stdout);

  const bool run_plain_side = o.only != "swarmflow";
  const bool run_sf_side = o.only != "plain";
  RunResult skipped;  // stands for the side that --only leaves out
  skipped.ok = true;
  std::vector<RunResult> plain, sf1, sf2;
  for (int i = 0; i < o.repeat; ++i) {
    plain.push_back(run_plain_side ? run_plain(o) : skipped);
    sf1.push_back(run_sf_side ? run_swarmflow(o, 1) : skipped);
    sf2.push_back(run_sf_side ? run_swarmflow(o, 2) : skipped);
    std::printf("  run %d: plain %.2f ms/frame, swarmflow 1 thread %.2f, 2 threads %.2f (whole run);"
                " defects %lld / %lld / %lld\n",
                i + 1, ms_per_frame(plain.back(), o.n), ms_per_frame(sf1.back(), o.n), ms_per_frame(sf2.back(), o.n),
                static_cast<long long>(plain.back().defects), static_cast<long long>(sf1.back().defects),
                static_cast<long long>(sf2.back().defects));
    for (const auto* r : {&plain.back(), &sf1.back(), &sf2.back()}) {
      if (!r->ok) std::printf("    not ok: %s\n", r->problem.c_str());
    }
    std::fflush(stdout);
  }

  bool all_ok = true;
  for (const auto* runs : {&plain, &sf1, &sf2}) {
    for (const auto& r : *runs) all_ok = all_ok && r.ok;
  }
  const RunResult p = median(plain);
  const RunResult s1 = median(sf1);
  const RunResult s2 = median(sf2);
  // Both sides inspect the same frames, so they must find the same defects.
  const bool same_defects = o.only.empty() ? (p.defects == s1.defects && p.defects == s2.defects) : true;
  all_ok = all_ok && same_defects;

  const double p_ms = ms_per_frame(p, o.n);
  const double p_steady = steady_ms_per_frame(p, o.n);
  std::printf("\n1080p, N=%lld                  ms/frame   frames/s   overhead   steady ms/frame   frames/s   overhead"
              "   CPU ms/frame   overhead\n",
              static_cast<long long>(o.n));
  const struct {
    const char* name;
    const RunResult& r;
  } rows[] = {{"plain, 1 thread", p}, {"swarmflow, 1 thread", s1}, {"swarmflow, 2 threads", s2}};
  for (const auto& row : rows) {
    const double ms = ms_per_frame(row.r, o.n);
    const double steady = steady_ms_per_frame(row.r, o.n);
    const double cpu = cpu_ms_per_frame(row.r, o.n);
    std::printf("  %-26s %10.2f %10.2f %9.1f%% %17.2f %10.2f %9.1f%% %14.2f %9.1f%%\n", row.name, ms, per_s(ms),
                overhead_pct(ms, p_ms), steady, per_s(steady), overhead_pct(steady, p_steady), cpu,
                overhead_pct(cpu, cpu_ms_per_frame(p, o.n)));
  }
  std::printf("  plain loop, per frame: inspection.defects %.2f ms (its thread's CPU %.2f ms)\n",
              p.detect_seconds * 1e3 / o.n, p.detect_cpu_seconds * 1e3 / o.n);
  if (o.undistort) {
    std::printf("  plain loop, per frame: vision.undistort %.2f ms (its thread's CPU %.2f ms), k1 %g\n",
                p.undistort_seconds * 1e3 / o.n, p.undistort_cpu_seconds * 1e3 / o.n, o.k1);
  }
  std::printf("  (whole run: swarmflow's duration_s / N, which includes the stages' start; plain likewise\n"
              "   includes constructing the camera and starting the detector. steady: first to last result / (N-1).\n"
              "   CPU: the process's CPU time over the whole run, all threads, / N. overhead = (ms - plain ms) / plain ms)\n");
  const double overhead_1 = overhead_pct(ms_per_frame(s1, o.n), p_ms);
  // The load of a shared machine drifts between runs; a run of each side back
  // to back is compared in pairs too, and the median pair reported.
  std::vector<double> paired;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    paired.push_back(overhead_pct(ms_per_frame(sf1[i], o.n), ms_per_frame(plain[i], o.n)));
  }
  std::sort(paired.begin(), paired.end());
  const double paired_1 = paired[(paired.size() - 1) / 2];
  std::printf("  1 thread against plain, run by run:");
  for (std::size_t i = 0; i < plain.size(); ++i) {
    std::printf(" %+.1f%%", overhead_pct(ms_per_frame(sf1[i], o.n), ms_per_frame(plain[i], o.n)));
  }
  std::printf(" (median %+.1f%%)\n", paired_1);
  std::printf("\n  target: framework overhead (1 thread against plain, whole run) <= 5%%: %s (%.1f%%; paired %.1f%%)\n",
              overhead_1 <= 5.0 ? "met" : "NOT met", overhead_1, paired_1);
  std::printf("  every run produced one result per frame, none dropped, same defects on both sides (%lld): %s\n",
              static_cast<long long>(p.defects), all_ok ? "yes" : "NO");
  std::printf("command: %s\n", cmd.c_str());

  if (!o.json_path.empty()) {
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"benchmark\": \"inspection\",\n  \"command\": \"%s\",\n  \"width\": %d,\n  \"height\": %d,\n"
                 "  \"n\": %lld,\n  \"repeat\": %d,\n  \"opencv_threads\": %d,\n  \"plain\": %s,\n  \"swarmflow_1_thread\": %s,\n"
                 "  \"swarmflow_2_threads\": %s,\n  \"paired_overhead_1_thread_pct\": %.2f,\n  \"all_ok\": %s\n}\n",
                 json_escape(cmd).c_str(), kWidth, kHeight, static_cast<long long>(o.n), o.repeat, cv_threads,
                 json_side(p, o.n, p_ms, p_steady, cpu_ms_per_frame(p, o.n)).c_str(), json_side(s1, o.n, p_ms, p_steady, cpu_ms_per_frame(p, o.n)).c_str(),
                 json_side(s2, o.n, p_ms, p_steady, cpu_ms_per_frame(p, o.n)).c_str(), paired_1, all_ok ? "true" : "false");
    std::fclose(f);
    std::printf("results written to %s\n", o.json_path.c_str());
  }
  return all_ok ? 0 : 1;
}
