// The synthetic ultrasound probe: determinism, ground truth as JSON, URIs,
// and the physics it claims (fully developed speckle, an anechoic cyst's
// posterior enhancement, the probe's motion carrying the lesions).

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "video/synthetic_ultrasound.hpp"

namespace swarmflow {
namespace {

using video::SyntheticUltrasound;
using video::SyntheticUltrasoundConfig;
using video::UltrasoundTruth;

SyntheticUltrasoundConfig config(std::uint64_t seed) {
  SyntheticUltrasoundConfig c;
  c.seed = seed;
  c.scene_frames = 30;
  return c;
}

TEST(SyntheticUltrasound, SameSeedAndIndexGiveTheSamePixelsAndTruth) {
  const SyntheticUltrasound one(config(5)), two(config(5));
  cv::Mat a, b;
  for (std::uint64_t index : {0U, 7U, 31U}) {
    const UltrasoundTruth ta = one.render_grey(index, a);
    const UltrasoundTruth tb = two.render_grey(index, b);
    EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0) << "frame " << index;
    EXPECT_EQ(video::to_json(ta), video::to_json(tb));
    EXPECT_EQ(video::to_json(ta), video::to_json(one.truth(index)));
  }
  one.render_grey(3, a);
  one.render_grey(4, b);
  EXPECT_GT(cv::norm(a, b, cv::NORM_L1), 0);
  SyntheticUltrasound(config(6)).render_grey(3, b);
  EXPECT_GT(cv::norm(a, b, cv::NORM_L1), 0);
}

TEST(SyntheticUltrasound, BgrFramesHaveEqualChannelsAndKeepRowPadding) {
  const SyntheticUltrasound probe(config(2));
  const int w = probe.config().width, h = probe.config().height;
  const std::size_t stride = static_cast<std::size_t>(w) * 3 + 8;
  std::vector<std::uint8_t> pixels(stride * static_cast<std::size_t>(h), 0xAB);
  probe.render(9, pixels.data(), stride);
  cv::Mat grey;
  probe.render_grey(9, grey);
  for (int y = 0; y < h; y += 37) {
    for (int x = 0; x < w; x += 41) {
      const std::uint8_t* p = pixels.data() + static_cast<std::size_t>(y) * stride + static_cast<std::size_t>(x) * 3;
      EXPECT_EQ(p[0], grey.at<std::uint8_t>(y, x));
      EXPECT_EQ(p[1], p[0]);
      EXPECT_EQ(p[2], p[0]);
    }
    EXPECT_EQ(pixels[static_cast<std::size_t>(y) * stride + static_cast<std::size_t>(w) * 3], 0xAB);
  }
}

TEST(SyntheticUltrasound, TruthRoundTripsThroughJson) {
  const SyntheticUltrasound probe(config(3));
  const UltrasoundTruth t = probe.truth(12);
  ASSERT_FALSE(t.lesions.empty());
  ASSERT_EQ(t.vessels.size(), 1U);
  const std::string json = video::to_json(t);
  EXPECT_TRUE(video::is_ultrasound_truth(json));
  const auto back = video::parse_ultrasound_truth(json);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(video::to_json(*back), json);
  EXPECT_EQ(back->lesions[0].contour.size(), 96U);
  EXPECT_FALSE(video::parse_ultrasound_truth("{\"kind\":\"parts\"}").has_value());
  EXPECT_FALSE(video::parse_ultrasound_truth("not json").has_value());
}

TEST(SyntheticUltrasound, ReadsItsUriAndRefusesUnknownKeysAndBadValues) {
  SyntheticUltrasoundConfig c;
  std::string error;
  ASSERT_TRUE(video::parse_ultrasound_uri(
      "synthetic://ultrasound?seed=9&width=800&height=600&mm_per_px=0.08&fps=25&scene_frames=10&max_lesions=2&"
      "vessels=0&f0_mhz=5&attenuation=0.7&dynamic_range_db=50&noise_db=-45&motion_mm=1",
      &c, &error))
      << error;
  EXPECT_EQ(c.seed, 9U);
  EXPECT_EQ(c.width, 800);
  EXPECT_DOUBLE_EQ(c.mm_per_px, 0.08);
  EXPECT_EQ(c.vessels, 0);
  EXPECT_DOUBLE_EQ(c.motion_mm, 1.0);
  EXPECT_FALSE(video::parse_ultrasound_uri("synthetic://ultrasound?sed=1", &c, &error));
  EXPECT_NE(error.find("known: seed"), std::string::npos) << error;
  EXPECT_FALSE(video::parse_ultrasound_uri("synthetic://ultrasound?vessels=2", &c, &error));
  EXPECT_NE(error.find("allowed"), std::string::npos) << error;
  EXPECT_FALSE(video::parse_ultrasound_uri("synthetic://ultrasound?width=320&mm_per_px=0.05", &c, &error));
  EXPECT_NE(error.find("32 x 24 mm"), std::string::npos) << error;
}

TEST(SyntheticUltrasound, EveryLesionTypeAppearsAndScenesChange) {
  std::map<std::string, int> types;
  int irregular = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const SyntheticUltrasound probe(config(seed));
    for (std::uint64_t scene = 0; scene < 3; ++scene) {
      const UltrasoundTruth t = probe.truth(scene * 30);
      EXPECT_EQ(t.scene, scene);
      ASSERT_GE(t.lesions.size(), 1U);
      for (const auto& l : t.lesions) {
        ++types[l.echogenicity];
        irregular += l.margin == "irregular" ? 1 : 0;
        EXPECT_EQ(l.posterior, l.echogenicity == "anechoic" ? "enhancement" : "none");
        EXPECT_GE(l.size_mm, 4.5);
        EXPECT_LE(l.size_mm, 16.0);
      }
    }
  }
  EXPECT_GT(types["anechoic"], 0);
  EXPECT_GT(types["hypoechoic"], 0);
  EXPECT_GT(types["hyperechoic"], 0);
  EXPECT_GT(irregular, 0);
}

// Fully developed speckle: the envelope is Rayleigh distributed, so its log
// has a standard deviation of 5.57 dB whatever the echo level.
TEST(SyntheticUltrasound, TissueShowsFullyDevelopedSpeckle) {
  SyntheticUltrasoundConfig c = config(7);
  c.vessels = 0;
  const SyntheticUltrasound probe(c);
  cv::Mat grey;
  const UltrasoundTruth t = probe.render_grey(0, grey);
  cv::Mat mask(grey.size(), CV_8U, cv::Scalar(255));
  for (const auto& l : t.lesions) {
    std::vector<cv::Point> poly;
    for (const auto& p : l.contour) poly.emplace_back(static_cast<int>(p.x), static_cast<int>(p.y));
    cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{poly}, cv::Scalar(0));
  }
  cv::erode(mask, mask, cv::getStructuringElement(cv::MORPH_ELLIPSE, cv::Size(61, 61)));
  // Local statistics over 4 mm windows, so the gentle tissue variation does not count.
  cv::Mat f, mean, sq;
  grey.convertTo(f, CV_32F, c.dynamic_range_db / 255.0);
  cv::blur(f, mean, cv::Size(41, 41));
  cv::blur(f.mul(f), sq, cv::Size(41, 41));
  cv::Mat var = sq - mean.mul(mean);
  cv::Mat sd;
  cv::sqrt(cv::max(var, 0), sd);
  const double speckle_db = cv::mean(sd, mask)[0];
  EXPECT_NEAR(speckle_db, 5.57, 0.6);
}

TEST(SyntheticUltrasound, AnAnechoicCystIsDarkAndBrightensWhatLiesBelowIt) {
  int cysts = 0;
  for (std::uint64_t seed = 1; seed <= 6 && cysts < 2; ++seed) {
    SyntheticUltrasoundConfig c = config(seed);
    c.vessels = 0;
    const SyntheticUltrasound probe(c);
    cv::Mat grey;
    const UltrasoundTruth t = probe.render_grey(0, grey);
    for (const auto& l : t.lesions) {
      if (l.echogenicity != "anechoic") continue;
      ++cysts;
      const cv::Rect box = cv::boundingRect(l.contour);
      const double db = c.dynamic_range_db / 255.0;
      const cv::Rect inside(box.x + box.width / 3, box.y + box.height / 3, box.width / 3, box.height / 3);
      const cv::Rect beside_inside(box.x + box.width + 30, inside.y, inside.width, inside.height);
      const double contrast = (cv::mean(grey(inside))[0] - cv::mean(grey(beside_inside & cv::Rect(0, 0, 640, 480)))[0]) * db;
      EXPECT_LT(contrast, -25.0);
      const int y0 = box.y + box.height + 10, h = std::min(50, grey.rows - y0);
      ASSERT_GT(h, 10);
      const cv::Rect below(box.x + box.width / 3, y0, box.width / 3, h);
      const cv::Rect beside(box.x + box.width + 30, y0, box.width / 3, h);
      const double enhancement =
          (cv::mean(grey(below))[0] - cv::mean(grey(beside & cv::Rect(0, 0, grey.cols, grey.rows)))[0]) * db;
      // Round trip at 0.5 dB/(cm MHz) and 7.5 MHz: 0.75 dB per mm of fluid
      // crossed; the middle third of a cyst of 6 mm or more is crossed for 4 mm or more.
      EXPECT_GT(enhancement, 2.0) << "seed " << seed;
    }
  }
  EXPECT_GE(cysts, 1);
}

TEST(SyntheticUltrasound, LesionsMoveWithTheProbe) {
  const SyntheticUltrasound probe(config(4));
  const UltrasoundTruth a = probe.truth(0), b = probe.truth(29);
  ASSERT_EQ(a.lesions.size(), b.lesions.size());
  const double moved_px = (b.probe_x_mm - a.probe_x_mm) / a.mm_per_px;
  EXPECT_GT(std::abs(moved_px), 0.5);
  EXPECT_NEAR(b.lesions[0].centre_x_px - a.lesions[0].centre_x_px, -moved_px, 1e-6);
  EXPECT_NEAR(b.lesions[0].size_mm, a.lesions[0].size_mm, 1e-9);
}

}  // namespace
}  // namespace swarmflow
