// swarmflow_bench_ultrasound — the ultrasound example (docs/ultrasound.md):
// its latency from frame capture to report line at 30 fps, and what the
// framework costs against a plain OpenCV loop doing the same work, in the
// same run.
//
// The work per frame, on both sides: render a 640x480 frame of the synthetic
// probe (synthetic://ultrasound?seed=1) as GRAY8 straight into a FlatBuffers
// Frame, as video.source does; enhance it (median, guided filter, CLAHE);
// find and describe its lesions; find the vessel and track its speckle
// against the previous frame; score the findings against the frame's truth;
// write one text line per lesion.
//
//   plain      one thread, no framework: the functions of
//              ultrasound_image.hpp and ultrasound_score.hpp in a loop.
//   swarmflow  video.source -> ultrasound.enhance -> ultrasound.segment
//              (joined with the raw frame) ; video.source -> ultrasound.flow ;
//              both -> ultrasound.report (joined) -> a counting sink: the
//              stages of pipelines/ultrasound.yaml, on 4 units in one process
//              (and on 1 unit), RuntimeOptions::threads = 2.
//
// Two measurements, never mixed:
//   cost      unpaced (fps 0), N frames: CPU time of the process per frame
//             (all threads; less moved by other processes than wall time) and
//             wall time per frame. The ratio is swarmflow / plain.
//   latency   paced at 30 fps, M frames: swarmflow's capture-to-report-line
//             latency as ultrasound.report measures it (p50, p99) and the
//             sink's; the plain loop's time from capture to its last line,
//             paced the same way.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include <opencv2/imgproc.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/swarmflow.hpp>

#include "ultrasound/ultrasound.hpp"
#include "ultrasound/ultrasound_image.hpp"
#include "ultrasound/ultrasound_score.hpp"
#include "video/synthetic_ultrasound.hpp"
#include "video/video.hpp"

#include "bench_args.hpp"

namespace {

constexpr std::size_t kTruthRoom = 64 * 1024;

struct Options {
  std::int64_t n = 150;         ///< frames of each cost run
  std::int64_t latency_n = 300; ///< frames of each latency run (at 30 fps)
  int repeat = 3;               ///< cost runs of each side; the median is reported
  std::string only;             ///< "cost" or "latency"
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "frames of each cost run (default 150)"),
      integer_flag("--latency-n", "M", o.latency_n, "frames of each latency run, at 30 fps (default 300)"),
      integer_flag("--repeat", "R", o.repeat, "cost runs of each side, the median is reported (default 3)"),
      text_flag("--only", "WHAT", o.only, "run only `cost` or only `latency`"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (o.n < 4 || o.latency_n < 4 || o.repeat <= 0 || (!o.only.empty() && o.only != "cost" && o.only != "latency")) {
    std::fprintf(stderr, "--n and --latency-n must be at least 4, --repeat positive, --only cost or latency\n");
    return false;
  }
  return true;
}

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// -- plain loop -----------------------------------------------------------------

struct Result {
  bool ok = false;
  double wall_s = 0;
  double cpu_s = 0;
  std::int64_t frames = 0;
  std::int64_t lines = 0;
  double facts = 0;  ///< fraction of report facts right
  double p50_ms = 0, p99_ms = 0, sink_p99_ms = 0;
  std::string problem;
};

std::string line_of(std::uint64_t index, std::size_t i, std::size_t n, const swarmflow::ultrasound::LesionFinding& l,
                    const std::vector<swarmflow::ultrasound::VesselFinding>& vessels) {
  char buf[512];
  const double v = vessels.empty() || !vessels[0].tracked ? 0 : vessels[0].velocity_mm_s;
  std::snprintf(buf, sizeof buf,
                "frame %llu lesion %zu of %zu: %s %.1f x %.1f mm, %s, %s margin, %s posterior, depth %.1f mm; "
                "vessel flow %.1f mm/s.",
                static_cast<unsigned long long>(index), i + 1, n, l.echogenicity.c_str(), l.size_mm, l.width_mm,
                l.shape.c_str(), l.margin.c_str(), l.posterior.c_str(), l.depth_mm, v);
  return buf;
}

/// `fps` 0 = as fast as it goes; else paced, with the latency of each frame.
Result run_plain(std::int64_t n, double fps) {
  using namespace swarmflow;
  Result r;
  const double cpu0 = process_cpu_s();
  const std::int64_t t0 = steady_now_ns();
  video::SyntheticUltrasoundConfig config;
  config.seed = 1;
  const video::SyntheticUltrasound probe(config);
  ultrasound::Enhancer enhancer({});
  ultrasound::ScoreTally tally;
  cv::Mat previous, enhanced;
  std::vector<double> latency_ms;
  std::uint64_t previous_index = 0;
  const std::size_t stride = static_cast<std::size_t>(config.width);
  for (std::int64_t i = 0; i < n; ++i) {
    if (fps > 0) {
      const auto due = t0 + static_cast<std::int64_t>(static_cast<double>(i) * 1e9 / fps);
      while (steady_now_ns() < due) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const std::int64_t capture = steady_now_ns();
    flatbuffers::FlatBufferBuilder fbb(stride * static_cast<std::size_t>(config.height) + kTruthRoom);
    std::uint8_t* pixels = nullptr;
    const auto data = fbb.CreateUninitializedVector(stride * static_cast<std::size_t>(config.height), &pixels);
    cv::Mat plane(config.height, config.width, CV_8U, pixels);
    const video::UltrasoundTruth truth = probe.render_grey(static_cast<std::uint64_t>(i), plane);
    const auto truth_s = fbb.CreateString(video::to_json(truth));
    fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::GRAY8, static_cast<std::uint32_t>(config.width),
                                   static_cast<std::uint32_t>(config.height), static_cast<std::uint32_t>(stride),
                                   capture, 0, static_cast<std::uint64_t>(i), data, truth_s),
               schema::FrameIdentifier());
    const auto* frame = flatbuffers::GetRoot<schema::Frame>(fbb.GetBufferPointer());
    const cv::Mat grey(config.height, config.width, CV_8U, const_cast<std::uint8_t*>(frame->pixels()->data()), stride);
    enhancer.apply(grey, enhanced);
    const auto lesions = ultrasound::find_lesions(grey, enhanced, {});
    auto vessels = ultrasound::find_vessels(grey, {});
    const bool follows = !previous.empty() && frame->frame_index() == previous_index + 1;
    for (auto& v : vessels) {
      if (follows) ultrasound::track_flow(previous, grey, v, {});
    }
    grey.copyTo(previous);
    previous_index = frame->frame_index();
    const auto parsed = video::parse_ultrasound_truth(frame->ground_truth()->string_view());
    if (parsed) {
      video::UltrasoundTruth scored = *parsed;
      if (std::none_of(vessels.begin(), vessels.end(), [](const auto& v) { return v.tracked; })) scored.vessels.clear();
      tally.add(ultrasound::score_frame(scored, lesions, vessels, grey.cols, grey.rows));
    }
    for (std::size_t k = 0; k < lesions.size(); ++k) {
      const std::string line = line_of(frame->frame_index(), k, lesions.size(), lesions[k], vessels);
      r.lines += line.empty() ? 0 : 1;
    }
    latency_ms.push_back(static_cast<double>(steady_now_ns() - capture) / 1e6);
    ++r.frames;
  }
  r.wall_s = static_cast<double>(steady_now_ns() - t0) / 1e9;
  r.cpu_s = process_cpu_s() - cpu0;
  r.facts = tally.facts_fraction();
  r.p50_ms = percentile(latency_ms, 0.50);
  r.p99_ms = percentile(latency_ms, 0.99);
  r.ok = r.frames == n;
  return r;
}

// -- swarmflow ---------------------------------------------------------------------

/// The sink: counts the report's lines.
class LineCounter final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    in_ = s.input<swarmflow::schema::Tokens>("findings", "the report's lines");
  }
  swarmflow::Status start(swarmflow::StageContext& ctx) override {
    received_ = &ctx.counter("received");
    return {};
  }
  swarmflow::Status process(swarmflow::Inputs& in, swarmflow::Outputs&, swarmflow::StageContext&) override {
    if (in.get(in_) != nullptr) received_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }

 private:
  swarmflow::InputPort<swarmflow::schema::Tokens> in_;
  std::atomic<std::int64_t>* received_ = nullptr;
};

std::string pipeline_yaml(std::int64_t n, double fps, int units) {
  const std::string q = fps > 0 ? "    queue: {capacity: 4, overflow: drop_oldest}\n" : "    queue: {capacity: 4, overflow: block}\n";
  char f[32];
  std::snprintf(f, sizeof f, "%g", fps);
  return "pipeline: bench_ultrasound\n"
         "units: " + std::to_string(units) + "\n"
         "placement: {policy: static, interval_ms: 250}\n"
         "stages:\n"
         "  - id: probe\n"
         "    type: video.source\n"
         "    params: {uri: \"synthetic://ultrasound?seed=1\", format: GRAY8, fps: " + std::string(f) + ", count: " +
         std::to_string(n) + "}\n"
         "  - id: enhance\n"
         "    type: ultrasound.enhance\n"
         "    inputs: {frames: probe/frames}\n" + q +
         "  - id: segment\n"
         "    type: ultrasound.segment\n"
         "    inputs: {frames: probe/frames, enhanced: enhance/frames}\n"
         "    join: {key: seq, timeout_ms: 500}\n" + q +
         "  - id: flow\n"
         "    type: ultrasound.flow\n"
         "    key: stream\n"
         "    inputs: {frames: probe/frames}\n" + q +
         "  - id: report\n"
         "    type: ultrasound.report\n"
         "    inputs: {lesions: segment/results, vessels: flow/results}\n"
         "    join: {key: seq, timeout_ms: 500}\n"
         "    params: {summary: false}\n"
         "    queue: {capacity: 8}\n"
         "  - id: sink\n"
         "    type: bench.lines\n"
         "    inputs: {findings: report/findings}\n"
         "    queue: {capacity: 64}\n";
}

std::int64_t counter(const swarmflow::StageReport* s, const char* name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

Result run_swarmflow(std::int64_t n, double fps, int units) {
  swarmflow::RuntimeOptions ro;
  ro.threads = 2;
  swarmflow::Runtime runtime(ro);
  Result r;
  swarmflow::register_video_stages(runtime.registry());
  swarmflow::register_ultrasound_stages(runtime.registry());
  swarmflow::Status s = runtime.registry().add<LineCounter>("bench.lines", "counts the report's lines");
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (s.ok()) s = runtime.load_string(pipeline_yaml(n, fps, units), "bench_ultrasound.yaml", &diagnostics);
  if (!s.ok()) {
    std::fprintf(stderr, "the bench pipeline does not load: %s\n%s\n", s.message().c_str(),
                 swarmflow::format_diagnostics(diagnostics).c_str());
    r.problem = "does not load";
    return r;
  }
  const double cpu0 = process_cpu_s();
  const std::int64_t t0 = swarmflow::steady_now_ns();
  s = runtime.run();
  r.wall_s = static_cast<double>(swarmflow::steady_now_ns() - t0) / 1e9;
  r.cpu_s = process_cpu_s() - cpu0;
  const swarmflow::RunReport report = runtime.report();
  const auto* rep = report.stage("report");
  const auto* sink = report.stage("sink");
  r.frames = counter(rep, "frames");
  r.lines = counter(sink, "received");
  const auto facts = counter(rep, "facts");
  r.facts = facts > 0 ? static_cast<double>(counter(rep, "facts_right")) / static_cast<double>(facts) : 0;
  r.p50_ms = static_cast<double>(counter(rep, "latency_p50_us")) / 1000;
  r.p99_ms = static_cast<double>(counter(rep, "latency_p99_us")) / 1000;
  r.sink_p99_ms = sink != nullptr ? sink->latency.p99_ms : 0;
  std::uint64_t dropped = 0;
  for (const auto& e : report.edges) dropped += e.dropped;
  r.ok = s.ok() && report.ok && r.frames == n && (fps > 0 || dropped == 0);
  if (!r.ok) {
    r.problem = "reported " + std::to_string(r.frames) + " of " + std::to_string(n) + " frames, dropped " +
                std::to_string(dropped) + (s.ok() ? std::string() : ", " + s.message());
  }
  return r;
}

Result median(std::vector<Result> runs) {
  std::sort(runs.begin(), runs.end(), [](const Result& a, const Result& b) { return a.cpu_s < b.cpu_s; });
  return runs[(runs.size() - 1) / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  bool ok = true;
  std::printf("swarmflow ultrasound benchmark: synthetic probe (seed 1) at 640x480, enhance + segment + flow + "
              "report per frame\n");
  if (o.only != "latency") {
    std::printf("\ncost, unpaced, N=%lld frames, each side %d times alternating, median (by CPU) reported:\n",
                static_cast<long long>(o.n), o.repeat);
    std::vector<Result> plain, sf4, sf1;
    for (int i = 0; i < o.repeat; ++i) {
      plain.push_back(run_plain(o.n, 0));
      sf4.push_back(run_swarmflow(o.n, 0, 4));
      sf1.push_back(run_swarmflow(o.n, 0, 1));
      for (const Result* r : {&plain.back(), &sf4.back(), &sf1.back()}) {
        if (!r->ok) {
          std::printf("  a run failed: %s\n", r->problem.c_str());
          ok = false;
        }
      }
    }
    const Result p = median(plain), a = median(sf4), b = median(sf1);
    const double n = static_cast<double>(o.n);
    auto row = [&](const char* name, const Result& r) {
      std::printf("  %-22s cpu %7.2f ms/frame (x%.3f)   wall %7.2f ms/frame (x%.3f)   facts right %.3f\n", name,
                  r.cpu_s * 1e3 / n, r.cpu_s / p.cpu_s, r.wall_s * 1e3 / n, r.wall_s / p.wall_s, r.facts);
    };
    row("plain OpenCV loop", p);
    row("swarmflow, 4 units", a);
    row("swarmflow, 1 unit", b);
  }
  if (o.only != "cost") {
    std::printf("\nlatency, paced at 30 fps, M=%lld frames, frame capture -> report line:\n",
                static_cast<long long>(o.latency_n));
    const Result p = run_plain(o.latency_n, 30);
    const Result a = run_swarmflow(o.latency_n, 30, 4);
    for (const Result* r : {&p, &a}) {
      if (!r->ok) {
        std::printf("  a run failed: %s\n", r->problem.c_str());
        ok = false;
      }
    }
    std::printf("  %-22s p50 %6.1f ms   p99 %6.1f ms\n", "plain OpenCV loop", p.p50_ms, p.p99_ms);
    std::printf("  %-22s p50 %6.1f ms   p99 %6.1f ms   (sink p99 %.1f ms; %lld frames reported, facts right %.3f)\n",
                "swarmflow, 4 units", a.p50_ms, a.p99_ms, a.sink_p99_ms, static_cast<long long>(a.frames), a.facts);
  }
  return ok ? 0 : 1;
}
