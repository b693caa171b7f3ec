// swarmflow_bench_ultrasound — the ultrasound example (docs/ultrasound.md):
// its latency from frame capture to report line at 30 fps, and what the
// framework costs against a plain OpenCV loop doing the same work, in the
// same run.
//
// The work per frame, on both sides: render a 640x480 frame of the synthetic
// probe (synthetic://ultrasound?seed=1) as GRAY8 straight into a FlatBuffers
// Frame, as video.source does; enhance it (median, guided filter, CLAHE);
// find and describe its lesions; find the vessel and track its speckle
// against the previous frame; write the frame's report lines
// (ultrasound_report.hpp), each as a stream of word tokens, one Tokens
// payload per word, and gather each line's words into its text and a
// Completion payload, as lm.detokenize does; score the facts the lines
// state and the outlines and flow against the frame's truth.
//
//   plain      one thread, no framework: the functions of
//              ultrasound_image.hpp, ultrasound_report.hpp and
//              ultrasound_score.hpp in a loop, with OpenCV's threads as a
//              program that does not set them has them (its default: a
//              thread a core); and the same loop with OpenCV on one thread
//              (`plain, 1 thread`). Ratios are given against both.
//   swarmflow  video.source -> ultrasound.enhance -> ultrasound.segment
//              (joined with the raw frame) ; video.source -> ultrasound.flow ;
//              both -> ultrasound.report (joined) -> lm.detokenize -> a sink
//              that counts the lines: pipelines/ultrasound.yaml with the
//              sink in place of io.jsonl, on its 4 units with its placement
//              (a unit for each image stage, the report's tokens on one)
//              and its `transport: {in_process: direct}` (messages between
//              the units go straight to the replicas' actors), the same
//              over the inproc ZeroMQ transport (`zeromq`), on 4 units
//              placed by the static policy
//              alone (`spread`: every edge between two units), and on 1
//              unit; worker threads as `swarmflow run` gives them (the
//              cores shared among the units: on 2 cores 1 thread for each
//              of 4 units, 2 for 1 unit), or --unit-threads; OpenCV's
//              threads as the pipeline's `opencv:` leaves them (one thread
//              by default), or --cv-threads.
//
// Two measurements, never mixed:
//   cost      unpaced (fps 0): CPU time of the process (all threads; less
//             moved by other processes than wall time). Each side runs N
//             frames and 4 frames; the difference over N-4 frames is the
//             cost per frame, start and stop apart (4 actor systems, their
//             threads and sockets start and drain in some 30 ms), and the
//             N-frame run's CPU and wall time per frame the cost all in.
//             Ratios are swarmflow / plain.
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

#include <swarmflow/schema/completion_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/swarmflow.hpp>

#include "ultrasound/ultrasound.hpp"
#include "ultrasound/ultrasound_image.hpp"
#include "ultrasound/ultrasound_report.hpp"
#include "ultrasound/ultrasound_score.hpp"
#include "ultrasound/ultrasound_stages.hpp"
#include "video/synthetic_ultrasound.hpp"
#include "video/video.hpp"

#include "bench_args.hpp"

namespace {

constexpr std::size_t kTruthRoom = 64 * 1024;
/// Frames of the short cost runs, which tell start and stop from the frames.
constexpr int kShortRun = 4;

struct Options {
  std::int64_t n = 150;         ///< frames of each cost run
  std::int64_t latency_n = 300; ///< frames of each latency run (at 30 fps)
  int repeat = 3;               ///< cost runs of each side; the median is reported
  std::string only;             ///< "cost" or "latency"
  std::string side;             ///< cost runs of one side only: "plain", "plain1", "4", "4z", "spread" or "1" (no ratio)
  int cv_threads = -1;          ///< the pipeline's `opencv: {threads}`; 0 = `auto`; -1 = not written (1)
  int unit_threads = 0;         ///< worker threads per unit (RuntimeOptions::threads); 0: as `swarmflow run`
  bool latency_zeromq = false;  ///< the latency run's units talk over the inproc transport
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "frames of each cost run (default 150)"),
      integer_flag("--latency-n", "M", o.latency_n, "frames of each latency run, at 30 fps (default 300)"),
      integer_flag("--repeat", "R", o.repeat, "cost runs of each side, the median is reported (default 3)"),
      text_flag("--only", "WHAT", o.only, "run only `cost` or only `latency`"),
      text_flag("--side", "SIDE", o.side,
                "cost runs of one side only, `plain`, `plain1` (OpenCV on one thread), `4`, `4z` (4 over zeromq), "
                "`spread` or `1`, for a profiler; no ratio"),
      integer_flag("--cv-threads", "T", o.cv_threads,
                   "the pipelines' `opencv: {threads: T}`, 0 for `auto` (OpenCV's default); default: not written "
                   "(one thread). The plain loops run with OpenCV's default and with one thread, whatever T"),
      switch_flag("--latency-zeromq", o.latency_zeromq,
                "the latency run's units talk over the inproc transport (in_process: zeromq), not directly"),
      integer_flag("--unit-threads", "T", o.unit_threads,
                   "worker threads per unit; default 0: as `swarmflow run`, the cores shared among the units "
                   "(on 2 cores: 1 each of 4 units, 2 for 1 unit)"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (o.n < 2 * kShortRun || o.latency_n < 4 || o.repeat <= 0 || (!o.only.empty() && o.only != "cost" && o.only != "latency") ||
      (!o.side.empty() && o.side != "plain" && o.side != "plain1" && o.side != "4" && o.side != "4z" && o.side != "spread" && o.side != "1") || o.unit_threads < 0 ||
      o.cv_threads < -1 || o.cv_threads > 256) {
    std::fprintf(stderr,
                 "--n must be at least 8, --latency-n at least 4, --repeat positive, --only cost or latency, --side plain, "
                 "plain1, 4, 4z, spread or 1, --unit-threads not negative, --cv-threads from 0 to 256\n");
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
  std::int64_t tokens = 0;
  std::uint64_t between_units = 0;  ///< messages the units sent each other through the transport (envelopes, acks, packs)
  double facts = 0;  ///< fraction of report facts right
  double p50_ms = 0, p99_ms = 0, sink_p99_ms = 0;
  std::string problem;
};

/// A line as ultrasound.report streams it (one Tokens payload per word)
/// and as lm.detokenize gathers it (its text, one Completion payload): the
/// payloads the pipeline makes, without the envelopes. The words it made.
std::size_t stream_line(const swarmflow::ultrasound::ReportLine& line) {
  using namespace swarmflow;
  const std::vector<std::string> pieces = ultrasound::line_pieces(line.text);
  std::string text;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const PayloadPtr token = ultrasound::word_token(pieces[k], k, k + 1 == pieces.size(), line.request);
    const auto* t = flatbuffers::GetRoot<schema::Tokens>(token->data());
    text += t->pieces()->Get(0)->string_view();
  }
  flatbuffers::FlatBufferBuilder fbb;
  const auto text_s = fbb.CreateString(text);
  const auto reason = fbb.CreateString("stop");
  fbb.Finish(schema::CreateCompletion(fbb, line.request, text_s, static_cast<std::uint32_t>(pieces.size()), reason),
             schema::CompletionIdentifier());
  const PayloadPtr completion = Payload::from_builder(fbb);
  return completion->size() > 0 ? pieces.size() : 0;
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
  flatbuffers::DetachedBuffer previous_buffer;
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
    // As ultrasound.flow does: keep the previous frame's buffer, not a copy.
    previous = grey;
    previous_buffer = fbb.Release();
    previous_index = frame->frame_index();
    const std::vector<ultrasound::ReportLine> lines =
        ultrasound::report_lines(frame->frame_index(), lesions, vessels, true);
    for (const ultrasound::ReportLine& line : lines) {
      r.tokens += static_cast<std::int64_t>(stream_line(line));
      ++r.lines;
    }
    const auto parsed = video::parse_ultrasound_truth(frame->ground_truth()->string_view());
    if (parsed) {
      video::UltrasoundTruth scored = *parsed;
      if (std::none_of(vessels.begin(), vessels.end(), [](const auto& v) { return v.tracked; })) scored.vessels.clear();
      int stated_count = -1;
      const auto stated = ultrasound::stated_lesions(lesions, lines, &stated_count);
      ultrasound::FrameScore score = ultrasound::score_frame(scored, stated, vessels, grey.cols, grey.rows);
      score.count_right = stated_count >= 0 && static_cast<std::size_t>(stated_count) == parsed->lesions.size();
      tally.add(score);
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

/// The sink: counts the report's lines, as lm.detokenize gathered them.
class LineCounter final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    in_ = s.input<swarmflow::schema::Completion>("lines", "the report's lines");
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
  swarmflow::InputPort<swarmflow::schema::Completion> in_;
  std::atomic<std::int64_t>* received_ = nullptr;
};

/// pipelines/ultrasound.yaml, with `n` frames at `fps` (0: unpaced, every
/// queue `block`, joins that wait 30 s) and a counting sink for io.jsonl. `pinned`: its
/// placement (u0 the probe, the report and its lines, u1 enhance, u2
/// segment, u3 flow); else the static policy's. `zeromq`: the units talk
/// over the inproc transport, not directly as the example's do.
std::string pipeline_yaml(std::int64_t n, double fps, int units, bool pinned, bool zeromq, int cv_threads) {
  const std::string q = fps > 0 ? "    queue: {capacity: 4, overflow: drop_oldest}\n" : "    queue: {capacity: 4, overflow: block}\n";
  // Unpaced, every frame is reported whole: a join waits as long as a
  // loaded machine may stall (the example's 500 ms, paced).
  const std::string join = fps > 0 ? "    join: {key: seq, timeout_ms: 500}\n" : "    join: {key: seq, timeout_ms: 30000}\n";
  auto on = [&](const char* unit) { return pinned ? "    placement: {units: [" + std::string(unit) + "]}\n" : ""; };
  char f[32];
  std::snprintf(f, sizeof f, "%g", fps);
  return "pipeline: bench_ultrasound\n"
         "units: " + std::to_string(units) + "\n"
         "placement: {policy: static, interval_ms: 250}\n"
         "transport: {in_process: " + std::string(zeromq ? "zeromq" : "direct") + "}\n" +
         (cv_threads < 0 ? std::string()
                         : "opencv: {threads: " + (cv_threads == 0 ? std::string("auto") : std::to_string(cv_threads)) +
                               "}\n") +
         "stages:\n"
         "  - id: probe\n"
         "    type: video.source\n" + on("u0") +
         "    params: {uri: \"synthetic://ultrasound?seed=1\", format: GRAY8, fps: " + std::string(f) + ", count: " +
         std::to_string(n) + "}\n"
         "  - id: enhance\n"
         "    type: ultrasound.enhance\n" + on("u1") +
         "    inputs: {frames: probe/frames}\n" + q +
         "  - id: segment\n"
         "    type: ultrasound.segment\n" + on("u2") +
         "    inputs: {frames: probe/frames, enhanced: enhance/frames}\n"
         + join + q +
         "  - id: flow\n"
         "    type: ultrasound.flow\n" + on("u3") +
         "    key: stream\n"
         "    inputs: {frames: probe/frames}\n" + q +
         "  - id: report\n"
         "    type: ultrasound.report\n" + on("u0") +
         "    inputs: {lesions: segment/results, vessels: flow/results}\n"
         + join +
         "    params: {summary: false}\n"
         "    queue: {capacity: 8}\n"
         "  - id: lines\n"
         "    type: lm.detokenize\n" + on("u0") +
         "    inputs: {in: report/findings}\n"
         "    queue: {capacity: 256}\n"
         "  - id: sink\n"
         "    type: bench.lines\n" + on("u0") +
         "    inputs: {lines: lines/out}\n"
         "    queue: {capacity: 64}\n";
}

std::int64_t counter(const swarmflow::StageReport* s, const char* name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

Result run_swarmflow(std::int64_t n, double fps, int units, bool pinned, int threads, int cv_threads,
                     bool zeromq = false) {
  swarmflow::RuntimeOptions ro;
  ro.threads = threads;
  swarmflow::Runtime runtime(ro);
  Result r;
  swarmflow::register_video_stages(runtime.registry());
  swarmflow::register_ultrasound_stages(runtime.registry());
  swarmflow::Status s = runtime.registry().add<LineCounter>("bench.lines", "counts the report's lines");
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (s.ok()) s = runtime.load_string(pipeline_yaml(n, fps, units, pinned && units == 4, zeromq, cv_threads), "bench_ultrasound.yaml",
                                         &diagnostics);
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
  r.tokens = counter(rep, "tokens");
  for (const auto& u : report.units) r.between_units += u.sent;
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
  // OpenCV's threads as a program that never sets them has them; the
  // runtime sets the pipeline's for each run and gives these back after.
  const int cv_default = cv::getNumThreads();
  bool ok = true;
  std::printf("swarmflow ultrasound benchmark: synthetic probe (seed 1) at 640x480, enhance + segment + flow + "
              "report per frame\n");
  std::printf("OpenCV's threads: plain loop %d (OpenCV's default), `plain, 1 thread` 1; swarmflow %s\n", cv_default,
              o.cv_threads < 0    ? "1 (the pipelines leave `opencv:` at its default)"
              : o.cv_threads == 0 ? "`opencv: {threads: auto}` (OpenCV's default)"
                                  : ("`opencv: {threads: " + std::to_string(o.cv_threads) + "}`").c_str());
  if (o.only != "latency") {
    std::printf("\ncost, unpaced: each side %d times alternating, N=%lld frames and %d frames; per frame = the "
                "difference over N-%d frames (start and stop apart), all in = the N-frame run; medians:\n",
                o.repeat, static_cast<long long>(o.n), kShortRun, kShortRun);
    struct Side {
      const char* key;
      const char* name;
      int units;
      bool pinned;
      bool zeromq;  ///< units talk over the inproc transport
      int plain_cv_threads;  ///< the plain loop's OpenCV threads (-1: OpenCV's default)
      std::vector<Result> runs;
      std::vector<double> per_frame_s;  ///< CPU of the N-frame run less the short run's, over the frames between
      std::vector<double> fixed_s;      ///< the short run's CPU less its frames' share: start and stop
    };
    std::vector<Side> sides = {{"plain", "plain OpenCV loop", 0, false, false, -1, {}, {}, {}},
                               {"plain1", "plain, 1 thread", 0, false, false, 1, {}, {}, {}},
                               {"4", "swarmflow, 4 units", 4, true, false, -1, {}, {}, {}},
                               {"4z", "4 units, zeromq", 4, true, true, -1, {}, {}, {}},
                               {"spread", "4 units, spread", 4, false, false, -1, {}, {}, {}},
                               {"1", "swarmflow, 1 unit", 1, false, false, -1, {}, {}, {}}};
    auto run = [&](const Side& side, std::int64_t frames) {
      cv::setNumThreads(side.units == 0 && side.plain_cv_threads > 0 ? side.plain_cv_threads : cv_default);
      return side.units == 0 ? run_plain(frames, 0)
                             : run_swarmflow(frames, 0, side.units, side.pinned, o.unit_threads, o.cv_threads,
                                             side.zeromq);
    };
    for (int i = 0; i < o.repeat; ++i) {
      for (Side& side : sides) {
        if (!o.side.empty() && o.side != side.key) continue;
        const Result full = run(side, o.n);
        const Result brief = run(side, kShortRun);
        for (const Result* r : {&full, &brief}) {
          if (!r->ok) {
            std::printf("  a run failed (%s): %s\n", side.name, r->problem.c_str());
            ok = false;
          }
        }
        const double per_frame = (full.cpu_s - brief.cpu_s) / static_cast<double>(o.n - kShortRun);
        side.per_frame_s.push_back(per_frame);
        side.fixed_s.push_back(brief.cpu_s - per_frame * kShortRun);
        side.runs.push_back(full);
      }
    }
    auto middle = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[(v.size() - 1) / 2];
    };
    const double n = static_cast<double>(o.n);
    const bool with_plain = !sides[0].runs.empty();
    const Result p = with_plain ? median(sides[0].runs) : Result{};
    const double p_frame = with_plain ? middle(sides[0].per_frame_s) : 0;
    // The same loop with OpenCV on one thread: the other baseline.
    const bool with_plain1 = !sides[1].runs.empty();
    const Result p1 = with_plain1 ? median(sides[1].runs) : Result{};
    const double p1_frame = with_plain1 ? middle(sides[1].per_frame_s) : 0;
    for (Side& side : sides) {
      if (side.runs.empty()) continue;
      const Result r = median(side.runs);
      const double frame = middle(side.per_frame_s);
      std::printf("  %-19s per frame cpu %6.2f ms", side.name, frame * 1e3);
      if (with_plain) std::printf(" (x%.3f", frame / p_frame);
      if (with_plain && with_plain1) std::printf("; x%.3f of 1 thread", frame / p1_frame);
      if (with_plain) std::printf(")");
      std::printf(", start+stop %5.1f ms | all in: cpu %6.2f ms/frame", middle(side.fixed_s) * 1e3, r.cpu_s * 1e3 / n);
      if (with_plain) std::printf(" (x%.3f", r.cpu_s / p.cpu_s);
      if (with_plain && with_plain1) std::printf("; x%.3f", r.cpu_s / p1.cpu_s);
      if (with_plain) std::printf(")");
      std::printf(", wall %6.2f", r.wall_s * 1e3 / n);
      if (with_plain) std::printf(" (x%.3f)", r.wall_s / p.wall_s);
      std::printf(" | %.1f messages through the transport a frame | facts %.3f, %lld lines, %lld tokens\n",
                  static_cast<double>(r.between_units) / n, r.facts, static_cast<long long>(r.lines),
                  static_cast<long long>(r.tokens));
      // The same work on both sides: the same lines, word for word.
      if (with_plain && (r.lines != p.lines || r.tokens != p.tokens)) {
        std::printf("  %s made other lines than the plain loop\n", side.name);
        ok = false;
      }
    }
  }
  if (o.only != "cost") {
    std::printf("\nlatency, paced at 30 fps, M=%lld frames, frame capture -> report line:\n",
                static_cast<long long>(o.latency_n));
    cv::setNumThreads(cv_default);
    const Result p = run_plain(o.latency_n, 30);
    const Result a = run_swarmflow(o.latency_n, 30, 4, true, o.unit_threads, o.cv_threads, o.latency_zeromq);
    for (const Result* r : {&p, &a}) {
      if (!r->ok) {
        std::printf("  a run failed: %s\n", r->problem.c_str());
        ok = false;
      }
    }
    std::printf("  %-22s p50 %6.1f ms   p99 %6.1f ms\n", "plain OpenCV loop", p.p50_ms, p.p99_ms);
    std::printf("  %-22s p50 %6.1f ms   p99 %6.1f ms   (sink p99 %.1f ms; %lld frames reported, facts right %.3f)\n",
                o.latency_zeromq ? "4 units, zeromq" : "swarmflow, 4 units", a.p50_ms, a.p99_ms, a.sink_p99_ms, static_cast<long long>(a.frames), a.facts);
  }
  return ok ? 0 : 1;
}
