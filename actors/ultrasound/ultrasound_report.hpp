#pragma once
/// \file ultrasound_report.hpp
/// The text of ultrasound.report's findings, and the facts read back from
/// it. Pure code, used by ultrasound.report, the tests and the benchmark:
/// the report is scored on what its streamed text states, not on what the
/// stages measured. Not for clinical use.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ultrasound/ultrasound_image.hpp"

namespace swarmflow::ultrasound {

/// One line of a frame's report and the token stream that carries it.
struct ReportLine {
  std::uint64_t request = 0;  ///< frame index x 16 + lesion number (0: the frame's only line, no lesion)
  std::string text;
};

/// A frame's report: one line per lesion, such as `frame 42 lesion 1 of 2:
/// hypoechoic solid mass 8.4 x 6.1 mm, oval, circumscribed margin, no
/// posterior feature, depth 21.3 mm; vessel 1 peak flow 18.2 mm/s (mean
/// 9.1) to the right.`, or one `frame 42: no focal lesion; ...` line.
/// `flow_measured` false (the flow half of the frame is missing) says `flow
/// not measured`. Lesions after the 15th share request number 15.
std::vector<ReportLine> report_lines(std::uint64_t frame_index, const std::vector<LesionFinding>& lesions,
                                     const std::vector<VesselFinding>& vessels, bool flow_measured);

/// A line as text tokens: its words, each with the space after it (the
/// last without), so that the pieces put together give the line again.
std::vector<std::string> line_pieces(std::string_view line);

/// 64-bit FNV-1a of a piece: the vote key of a text token without a
/// vocabulary id, so that replicas that write the same word agree.
std::uint64_t piece_key(std::string_view piece);

/// What a report line states, read back from its text.
struct StatedFinding {
  std::uint64_t frame = 0;
  int lesion = 0;  ///< 1-based; 0 for a `no focal lesion` line
  int of = 0;      ///< the lesion count the line states
  double size_mm = 0;
  std::string echogenicity;  ///< anechoic | hypoechoic | isoechoic | hyperechoic
};

/// Reads a line of report_lines(); nullopt when it is not one.
std::optional<StatedFinding> read_line(std::string_view line);

/// `lesions` as a frame's lines state them: each one's size and
/// echogenicity replaced by what its line says (NaN and "" when no line
/// that can be read speaks of it), for ultrasound_score.hpp's score_frame.
/// `*count` is the lesion count the lines state (-1 when they disagree or
/// cannot be read).
std::vector<LesionFinding> stated_lesions(const std::vector<LesionFinding>& lesions,
                                          const std::vector<ReportLine>& lines, int* count);

}  // namespace swarmflow::ultrasound
