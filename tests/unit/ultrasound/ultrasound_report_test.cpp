// The report's text (ultrasound_report.hpp): lines, their word tokens, and
// the facts read back from them, which is what the report is scored on.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ultrasound/ultrasound_report.hpp"

namespace swarmflow::ultrasound {
namespace {

LesionFinding lesion(const char* echogenicity, double size_mm) {
  LesionFinding l;
  l.echogenicity = echogenicity;
  l.size_mm = size_mm;
  l.width_mm = size_mm * 0.7;
  l.shape = "oval";
  l.margin = "circumscribed";
  l.posterior = "none";
  l.depth_mm = 21.25;
  return l;
}

TEST(UltrasoundReport, LinesStateEachLesionAndReadBack) {
  VesselFinding v;
  v.tracked = true;
  v.velocity_mm_s = 18.24;
  v.mean_velocity_mm_s = 9.1;
  const std::vector<LesionFinding> lesions = {lesion("hypoechoic", 8.44), lesion("anechoic", 12.96)};
  const std::vector<ReportLine> lines = report_lines(42, lesions, {v}, true);
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0].request, 42U * 16 + 1);
  EXPECT_EQ(lines[1].request, 42U * 16 + 2);
  EXPECT_EQ(lines[0].text,
            "frame 42 lesion 1 of 2: hypoechoic solid mass 8.4 x 5.9 mm, oval, circumscribed margin, no posterior "
            "feature, depth 21.2 mm; vessel 1 peak flow 18.2 mm/s (mean 9.1) to the right.");
  const auto a = read_line(lines[0].text);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->frame, 42U);
  EXPECT_EQ(a->lesion, 1);
  EXPECT_EQ(a->of, 2);
  EXPECT_DOUBLE_EQ(a->size_mm, 8.4);
  EXPECT_EQ(a->echogenicity, "hypoechoic");
  const auto b = read_line(lines[1].text);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->lesion, 2);
  EXPECT_DOUBLE_EQ(b->size_mm, 13.0);
  EXPECT_EQ(b->echogenicity, "anechoic");

  // A frame without lesions: one line, lesion number 0, count 0.
  const std::vector<ReportLine> none = report_lines(7, {}, {}, false);
  ASSERT_EQ(none.size(), 1U);
  EXPECT_EQ(none[0].request, 7U * 16);
  EXPECT_EQ(none[0].text, "frame 7: no focal lesion; flow not measured.");
  const auto n = read_line(none[0].text);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->lesion, 0);
  EXPECT_EQ(n->of, 0);

  EXPECT_FALSE(read_line("frame 7 lesion 1 of 2: purple mass 3.0 x 2.0 mm").has_value());
  EXPECT_FALSE(read_line("frame 7 lesion 1 of 2: hypoechoic solid mass").has_value());
  EXPECT_FALSE(read_line("frame x: no focal lesion;").has_value());
  EXPECT_FALSE(read_line("").has_value());
}

TEST(UltrasoundReport, PiecesAreWordsThatGiveTheLineAgain) {
  const std::string line = "frame 3 lesion 1 of 1: anechoic cyst 9.0 x 8.1 mm, round.";
  const std::vector<std::string> pieces = line_pieces(line);
  ASSERT_EQ(pieces.size(), 13U);
  EXPECT_EQ(pieces[0], "frame ");
  EXPECT_EQ(pieces.back(), "round.");
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, line);
  EXPECT_TRUE(line_pieces("").empty());
  EXPECT_EQ(piece_key("frame "), piece_key("frame "));
  EXPECT_NE(piece_key("frame "), piece_key("frame"));
}

// The facts scored are the text's: a line that says another size, or one
// that cannot be read, makes the lesion's facts wrong.
TEST(UltrasoundReport, StatedLesionsAreWhatTheLinesSay) {
  const std::vector<LesionFinding> lesions = {lesion("hypoechoic", 8.4), lesion("hyperechoic", 6.0)};
  std::vector<ReportLine> lines = report_lines(5, lesions, {}, true);
  int count = 0;
  std::vector<LesionFinding> stated = stated_lesions(lesions, lines, &count);
  EXPECT_EQ(count, 2);
  EXPECT_DOUBLE_EQ(stated[0].size_mm, 8.4);
  EXPECT_EQ(stated[1].echogenicity, "hyperechoic");

  lines[0].text = "frame 5 lesion 1 of 2: hypoechoic solid mass 12.0 x 6.0 mm, oval.";
  lines[1].text = "frame 5 lesion 2 of 2: garbled";
  stated = stated_lesions(lesions, lines, &count);
  EXPECT_EQ(count, -1);  // one line cannot be read
  EXPECT_DOUBLE_EQ(stated[0].size_mm, 12.0);
  EXPECT_TRUE(std::isnan(stated[1].size_mm));
  EXPECT_EQ(stated[1].echogenicity, "");

  lines[1].text = "frame 5 lesion 2 of 3: hyperechoic mass 6.0 x 4.2 mm, oval.";
  stated_lesions(lesions, lines, &count);
  EXPECT_EQ(count, -1);  // the lines disagree on the count
}

}  // namespace
}  // namespace swarmflow::ultrasound
