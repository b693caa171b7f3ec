// The ultrasound stages driven one step at a time from the synthetic probe
// (video.source): frames, joined sets, token envelopes of the findings, the
// report's counters and the run report's `ultrasound` object.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include <nlohmann/json.hpp>
#include <swarmflow/report.hpp>
#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/completion_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/ultrasound_generated.h>

#include "support/media_packs.hpp"
#include "support/stage_runner.hpp"
#include "ultrasound/ultrasound_report.hpp"
#include "video/synthetic_ultrasound.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;

struct Chain {
  Registry registry;
  std::unique_ptr<StageRunner> source, enhance, segment, flow, report;

  explicit Chain(const std::string& uri, int count) {
    testing::register_media_packs(registry);
    source = std::make_unique<StageRunner>(registry, "video.source", "probe");
    EXPECT_TRUE(source->set("uri", uri).ok());
    EXPECT_TRUE(source->set("count", std::int64_t{count}).ok());
    enhance = std::make_unique<StageRunner>(registry, "ultrasound.enhance", "enhance");
    segment = std::make_unique<StageRunner>(registry, "ultrasound.segment", "segment");
    flow = std::make_unique<StageRunner>(registry, "ultrasound.flow", "flow");
    report = std::make_unique<StageRunner>(registry, "ultrasound.report", "report");
    EXPECT_TRUE(report->set("summary", false).ok());
    for (auto* r : {source.get(), enhance.get(), segment.get(), flow.get(), report.get()}) {
      EXPECT_TRUE(r->start().ok());
    }
  }

  /// Every frame through every stage; false if a step fails.
  bool run(int count) {
    for (int i = 0; i < count; ++i) {
      if (!source->pull().ok()) return false;
      const Envelope& frame = source->output("frames").back();
      if (!enhance->feed("frames", frame).ok()) return false;
      const Envelope& enhanced = enhance->output("frames").back();
      if (!segment->feed_joined({{"frames", &frame}, {"enhanced", &enhanced}}).ok()) return false;
      if (!flow->feed("frames", frame).ok()) return false;
      const Envelope& lesions = segment->output("results").back();
      const Envelope& vessels = flow->output("results").back();
      if (!report->feed_joined({{"lesions", &lesions}, {"vessels", &vessels}}).ok()) return false;
    }
    report->stop();
    return true;
  }
};

TEST(UltrasoundStages, AProbeThroughEveryStageStreamsOneFindingPerLesion) {
  constexpr int kFrames = 24;
  Chain chain("synthetic://ultrasound?seed=21&scene_frames=12", kFrames);
  ASSERT_TRUE(chain.run(kFrames));

  // Enhanced frames: GRAY8, same size and index, truth carried.
  const Envelope& e = chain.enhance->output("frames").back();
  const auto* ef = e.as<schema::Frame>();
  ASSERT_NE(ef, nullptr);
  EXPECT_EQ(ef->format(), schema::PixelFormat::GRAY8);
  EXPECT_EQ(ef->width(), 640U);
  EXPECT_EQ(ef->frame_index(), static_cast<std::uint64_t>(kFrames - 1));
  ASSERT_NE(ef->ground_truth(), nullptr);
  EXPECT_TRUE(video::is_ultrasound_truth(ef->ground_truth()->string_view()));

  // Segment results carry contours; flow results velocities from the second frame of a scene on.
  const auto* seg = chain.segment->output("results").back().as<schema::UltrasoundResults>();
  ASSERT_NE(seg, nullptr);
  ASSERT_NE(seg->lesions(), nullptr);
  ASSERT_GT(seg->lesions()->size(), 0U);
  EXPECT_GT(seg->lesions()->Get(0)->contour()->size(), 8U);
  const auto* first_flow = chain.flow->output("results").front().as<schema::UltrasoundResults>();
  ASSERT_EQ(first_flow->vessels()->size(), 1U);
  EXPECT_TRUE(std::isnan(first_flow->vessels()->Get(0)->velocity_mm_s()));
  const auto* later_flow = chain.flow->output("results").back().as<schema::UltrasoundResults>();
  ASSERT_EQ(later_flow->vessels()->size(), 1U);
  EXPECT_GT(later_flow->vessels()->Get(0)->velocity_mm_s(), 5.0F);

  // Findings: one token stream per lesion per frame, one envelope per word,
  // as lm.generate streams tokens: positions and seq 0, 1, 2, ..., the last
  // final with finish_reason "stop"; the words put together give the line.
  const auto& findings = chain.report->output("findings");
  std::uint64_t truth_lesions = 0;
  const video::SyntheticUltrasound probe([] {
    video::SyntheticUltrasoundConfig c;
    c.seed = 21;
    c.scene_frames = 12;
    return c;
  }());
  for (int i = 0; i < kFrames; ++i) truth_lesions += probe.truth(static_cast<std::uint64_t>(i)).lesions.size();
  std::map<std::uint64_t, std::string> lines;
  std::map<std::uint64_t, std::uint64_t> next_position;
  std::map<std::uint64_t, bool> ended;
  for (const Envelope& f : findings) {
    const auto* t = f.as<schema::Tokens>();
    ASSERT_NE(t, nullptr);
    const std::uint64_t request = t->request_id();
    EXPECT_EQ(f.header().stream, request);
    EXPECT_FALSE(ended[request]) << "a token after the final one of " << request;
    ASSERT_EQ(t->ids()->size(), 1U);
    ASSERT_EQ(t->pieces()->size(), 1U);
    ASSERT_EQ(t->confidence()->size(), 1U);
    EXPECT_EQ(t->position(), next_position[request]++);
    EXPECT_EQ(f.header().seq, t->position());
    const std::string piece = t->pieces()->Get(0)->str();
    EXPECT_EQ(f.header().vote_key, ultrasound::piece_key(piece));
    lines[request] += piece;
    ended[request] = t->final();
    if (t->final()) {
      ASSERT_NE(t->finish_reason(), nullptr);
      EXPECT_EQ(t->finish_reason()->str(), "stop");
    }
  }
  EXPECT_EQ(lines.size(), truth_lesions);
  EXPECT_GT(findings.size(), 10 * lines.size());  // words, not lines
  for (const auto& [request, done] : ended) EXPECT_TRUE(done) << request;
  const std::string& line = lines.rbegin()->second;
  EXPECT_EQ(line.rfind("frame 23 lesion ", 0), 0U) << line;
  EXPECT_NE(line.find(" mm, "), std::string::npos) << line;
  EXPECT_NE(line.find("mm/s"), std::string::npos) << line;
  EXPECT_EQ(line.back(), '.') << line;
  EXPECT_EQ(chain.report->counter_value("findings"), static_cast<std::int64_t>(lines.size()));
  EXPECT_EQ(chain.report->counter_value("tokens"), static_cast<std::int64_t>(findings.size()));

  // Scores: every frame scored, facts right.
  EXPECT_EQ(chain.report->counter_value("scored_frames"), kFrames);
  EXPECT_EQ(chain.report->counter_value("lesions_truth"), static_cast<std::int64_t>(truth_lesions));
  EXPECT_GE(chain.report->counter_value("facts_right"), chain.report->counter_value("facts") * 95 / 100);
  EXPECT_GT(chain.report->counter_value("latency_p99_us"), 0);

  // The run report's `ultrasound` object is made from those counters.
  RunReport run;
  StageReport s;
  s.id = "report";
  s.type = "ultrasound.report";
  for (const char* name : {"frames", "scored_frames", "lesions_truth", "dice_sum_ppm", "facts", "facts_right",
                           "vessels_truth", "flow_error_sum_ppm", "latency_p50_us", "latency_p99_us"}) {
    s.counters[name] = chain.report->counter_value(name);
  }
  run.stages.push_back(s);
  const auto j = nlohmann::json::parse(run.to_json());
  ASSERT_TRUE(j.contains("ultrasound"));
  const auto& us = j["ultrasound"];
  EXPECT_GE(us["dice_mean"].get<double>(), 0.85);
  EXPECT_LE(us["flow_error_mean"].get<double>(), 0.10);
  EXPECT_GE(us["report_facts_correct"].get<double>(), 0.95);
  EXPECT_GT(us["latency_p99_ms"].get<double>(), 0.0);
  // Without an ultrasound.report stage there is no such object.
  EXPECT_FALSE(nlohmann::json::parse(RunReport{}.to_json()).contains("ultrasound"));
}

// lm.detokenize gathers a finding's token stream into one completion, as
// it gathers a generated answer.
TEST(UltrasoundStages, LmDetokenizeGathersAFindingIntoItsLine) {
  constexpr int kFrames = 3;
  Chain chain("synthetic://ultrasound?seed=8", kFrames);
  ASSERT_TRUE(chain.run(kFrames));
  Runtime rt;  // carries the lm pack
  StageRunner detokenize(rt.registry(), "lm.detokenize");
  ASSERT_TRUE(detokenize.start().ok());
  const auto& findings = chain.report->output("findings");
  ASSERT_FALSE(findings.empty());
  for (const Envelope& f : findings) ASSERT_TRUE(detokenize.feed("in", f).ok());
  std::map<std::uint64_t, std::string> lines;
  for (const Envelope& f : findings) {
    const auto* t = f.as<schema::Tokens>();
    lines[t->request_id()] += t->pieces()->Get(0)->str();
  }
  const auto& completions = detokenize.output("out");
  ASSERT_EQ(completions.size(), lines.size());
  for (const Envelope& e : completions) {
    const auto* c = e.as<schema::Completion>();
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(lines.count(c->request_id()), 1U);
    EXPECT_EQ(c->text()->str(), lines[c->request_id()]);
    EXPECT_EQ(c->finish_reason()->str(), "stop");
    EXPECT_EQ(c->text()->str().back(), '.');
  }
}

// A failover restores the report's scores from its snapshot: half a run,
// snapshot, restore elsewhere, the other half, scores as one run's.
TEST(UltrasoundStages, ReportCarriesItsScoresAcrossASnapshot) {
  constexpr int kFrames = 8;
  Chain chain("synthetic://ultrasound?seed=9", kFrames);
  ASSERT_TRUE(chain.run(kFrames));
  auto fresh = [&] {
    auto r = std::make_unique<StageRunner>(chain.registry, "ultrasound.report", "report");
    EXPECT_TRUE(r->set("summary", false).ok());
    EXPECT_TRUE(r->start().ok());
    return r;
  };
  auto feed = [&](StageRunner& r, int i) {
    const Envelope& l = chain.segment->output("results")[static_cast<std::size_t>(i)];
    const Envelope& v = chain.flow->output("results")[static_cast<std::size_t>(i)];
    return r.feed_joined({{"lesions", &l}, {"vessels", &v}}).ok();
  };
  auto first = fresh();
  for (int i = 0; i < kFrames / 2; ++i) ASSERT_TRUE(feed(*first, i));
  std::string state;
  ASSERT_TRUE(first->stage().snapshot(state));
  auto second = fresh();
  ASSERT_TRUE(second->stage().restore(state).ok());
  for (int i = kFrames / 2; i < kFrames; ++i) ASSERT_TRUE(feed(*second, i));
  second->stop();
  for (const char* name : {"frames", "findings", "tokens", "scored_frames", "lesions_truth", "dice_sum_ppm", "facts",
                           "facts_right", "vessels_truth", "flow_error_sum_ppm"}) {
    EXPECT_EQ(second->counter_value(name), chain.report->counter_value(name)) << name;
  }
  EXPECT_EQ(first->output("findings").size() + second->output("findings").size(),
            chain.report->output("findings").size());
  EXPECT_FALSE(fresh()->stage().restore("ultrasound.report 2\n3 x").ok());
  EXPECT_FALSE(fresh()->stage().restore("something else").ok());
}

TEST(UltrasoundStages, SegmentRefusesFramesOfDifferentSizes) {
  Registry registry;
  testing::register_media_packs(registry);
  StageRunner a(registry, "video.source"), b(registry, "video.source");
  ASSERT_TRUE(a.set("uri", std::string("synthetic://ultrasound?seed=1")).ok());
  ASSERT_TRUE(b.set("uri", std::string("synthetic://ultrasound?seed=1&width=800&height=600")).ok());
  ASSERT_TRUE(a.start().ok());
  ASSERT_TRUE(b.start().ok());
  ASSERT_TRUE(a.pull().ok());
  ASSERT_TRUE(b.pull().ok());
  StageRunner segment(registry, "ultrasound.segment");
  ASSERT_TRUE(segment.start().ok());
  const Status s = segment.feed_joined({{"frames", &a.output("frames")[0]}, {"enhanced", &b.output("frames")[0]}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("differ in size"), std::string::npos) << s.message();
  // A set that arrived without its enhanced frame gives nothing, and no error.
  EXPECT_TRUE(segment.feed_joined({{"frames", &a.output("frames")[0]}}, true).ok());
  EXPECT_TRUE(segment.output("results").empty());
}

TEST(UltrasoundStages, VideoSourceDrawsGreyFramesStraightIntoThePayload) {
  Registry registry;
  testing::register_media_packs(registry);
  StageRunner source(registry, "video.source");
  ASSERT_TRUE(source.set("uri", std::string("synthetic://ultrasound?seed=4")).ok());
  ASSERT_TRUE(source.set("format", std::string("GRAY8")).ok());
  ASSERT_TRUE(source.start().ok());
  ASSERT_TRUE(source.pull().ok());
  ASSERT_TRUE(source.pull().ok());
  const auto* frame = source.output("frames")[1].as<schema::Frame>();
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(frame->format(), schema::PixelFormat::GRAY8);
  EXPECT_EQ(frame->stride(), 640U);
  ASSERT_EQ(frame->pixels()->size(), 640U * 480U);
  video::SyntheticUltrasoundConfig c;
  c.seed = 4;
  cv::Mat expected;
  const video::SyntheticUltrasound probe(c);
  const auto truth = probe.render_grey(1, expected);
  const cv::Mat got(480, 640, CV_8U, const_cast<std::uint8_t*>(frame->pixels()->data()));
  EXPECT_EQ(cv::norm(got, expected, cv::NORM_INF), 0);
  EXPECT_EQ(frame->ground_truth()->str(), video::to_json(truth));
  // NV12 is not something the probe draws.
  StageRunner nv12(registry, "video.source");
  ASSERT_TRUE(nv12.set("uri", std::string("synthetic://ultrasound?seed=4")).ok());
  ASSERT_TRUE(nv12.set("format", std::string("NV12")).ok());
  EXPECT_FALSE(nv12.start().ok());
}

TEST(UltrasoundStages, VideoSourceRefusesABadProbeUri) {
  Registry registry;
  testing::register_media_packs(registry);
  StageRunner source(registry, "video.source");
  ASSERT_TRUE(source.set("uri", std::string("synthetic://ultrasound?fps=0")).ok());
  const Status s = source.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fps"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace swarmflow
