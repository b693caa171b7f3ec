#include "ultrasound/ultrasound_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace swarmflow::ultrasound {

namespace {

std::string fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string mass_of(const std::string& echogenicity) {
  if (echogenicity == "anechoic") return "anechoic cyst";
  if (echogenicity == "hypoechoic") return "hypoechoic solid mass";
  if (echogenicity == "hyperechoic") return "hyperechoic mass";
  return echogenicity + " lesion";
}

std::string posterior_of(const std::string& posterior) {
  if (posterior == "enhancement") return "posterior acoustic enhancement";
  if (posterior == "shadowing") return "posterior acoustic shadowing";
  return "no posterior feature";
}

std::string flow_text(const std::vector<VesselFinding>& vessels) {
  if (vessels.empty()) return "no vessel in view";
  std::string t;
  for (std::size_t i = 0; i < vessels.size(); ++i) {
    const VesselFinding& v = vessels[i];
    if (i > 0) t += "; ";
    t += "vessel " + std::to_string(i + 1) + " ";
    if (!v.tracked) {
      t += "flow not measured";
    } else {
      t += "peak flow " + fixed(v.velocity_mm_s) + " mm/s (mean " + fixed(v.mean_velocity_mm_s) + ") to the " +
           (v.direction > 0 ? "right" : "left");
    }
  }
  return t;
}

/// An unsigned decimal at `at`, moving past it; false when there is none.
bool read_uint(std::string_view s, std::size_t& at, std::uint64_t& out) {
  const std::size_t start = at;
  out = 0;
  while (at < s.size() && s[at] >= '0' && s[at] <= '9' && at - start < 19) {
    out = out * 10 + static_cast<std::uint64_t>(s[at] - '0');
    ++at;
  }
  return at > start;
}

/// `word` at `at`, moving past it.
bool expect(std::string_view s, std::size_t& at, std::string_view word) {
  if (s.substr(at, word.size()) != word) return false;
  at += word.size();
  return true;
}

}  // namespace

std::vector<ReportLine> report_lines(std::uint64_t frame_index, const std::vector<LesionFinding>& lesions,
                                     const std::vector<VesselFinding>& vessels, bool flow_measured) {
  const std::string flow = flow_measured ? flow_text(vessels) : "flow not measured";
  const std::string frame = "frame " + std::to_string(frame_index);
  std::vector<ReportLine> lines;
  if (lesions.empty()) {
    lines.push_back({frame_index * 16, frame + ": no focal lesion; " + flow + "."});
    return lines;
  }
  lines.reserve(lesions.size());
  for (std::size_t i = 0; i < lesions.size(); ++i) {
    const LesionFinding& l = lesions[i];
    lines.push_back({frame_index * 16 + std::min<std::uint64_t>(i + 1, 15),
                     frame + " lesion " + std::to_string(i + 1) + " of " + std::to_string(lesions.size()) + ": " +
                         mass_of(l.echogenicity) + " " + fixed(l.size_mm) + " x " + fixed(l.width_mm) + " mm, " +
                         l.shape + ", " + l.margin + " margin, " + posterior_of(l.posterior) + ", depth " +
                         fixed(l.depth_mm) + " mm; " + flow + "."});
  }
  return lines;
}

std::vector<std::string> line_pieces(std::string_view line) {
  std::vector<std::string> pieces;
  std::size_t at = 0;
  while (at < line.size() && line[at] == ' ') ++at;
  while (at < line.size()) {
    std::size_t end = line.find(' ', at);
    if (end == std::string_view::npos) end = line.size();
    std::size_t next = end;
    while (next < line.size() && line[next] == ' ') ++next;
    // A word and the spaces after it, unless it is the last.
    pieces.emplace_back(line.substr(at, (next < line.size() ? next : end) - at));
    at = next;
  }
  return pieces;
}

std::uint64_t piece_key(std::string_view piece) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : piece) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::optional<StatedFinding> read_line(std::string_view s) {
  StatedFinding f;
  std::size_t at = 0;
  std::uint64_t v = 0;
  if (!expect(s, at, "frame ") || !read_uint(s, at, f.frame)) return std::nullopt;
  if (expect(s, at, ": no focal lesion;")) return f;
  if (!expect(s, at, " lesion ") || !read_uint(s, at, v) || v == 0 || v > 1000) return std::nullopt;
  f.lesion = static_cast<int>(v);
  if (!expect(s, at, " of ") || !read_uint(s, at, v) || v == 0 || v > 1000) return std::nullopt;
  f.of = static_cast<int>(v);
  if (!expect(s, at, ": ")) return std::nullopt;
  const std::size_t word_end = s.find(' ', at);
  if (word_end == std::string_view::npos) return std::nullopt;
  f.echogenicity = std::string(s.substr(at, word_end - at));
  if (f.echogenicity != "anechoic" && f.echogenicity != "hypoechoic" && f.echogenicity != "isoechoic" &&
      f.echogenicity != "hyperechoic") {
    return std::nullopt;
  }
  // The size: the number just before " x ".
  const std::size_t cross = s.find(" x ", word_end);
  if (cross == std::string_view::npos) return std::nullopt;
  const std::size_t start = s.rfind(' ', cross - 1);
  if (start == std::string_view::npos || start < word_end) return std::nullopt;
  const std::string number(s.substr(start + 1, cross - start - 1));
  char* end = nullptr;
  f.size_mm = std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(f.size_mm)) return std::nullopt;
  return f;
}

std::vector<LesionFinding> stated_lesions(const std::vector<LesionFinding>& lesions,
                                          const std::vector<ReportLine>& lines, int* count) {
  std::vector<LesionFinding> stated = lesions;
  for (LesionFinding& l : stated) {
    l.size_mm = std::numeric_limits<double>::quiet_NaN();
    l.echogenicity.clear();
  }
  int n = -2;  // none read yet
  for (const ReportLine& line : lines) {
    const std::optional<StatedFinding> f = read_line(line.text);
    if (!f) {
      n = -1;
      continue;
    }
    if (n == -2) n = f->of;
    if (n != f->of) n = -1;
    if (f->lesion >= 1 && static_cast<std::size_t>(f->lesion) <= stated.size()) {
      LesionFinding& l = stated[static_cast<std::size_t>(f->lesion - 1)];
      l.size_mm = f->size_mm;
      l.echogenicity = f->echogenicity;
    }
  }
  *count = n == -2 ? -1 : n;
  return stated;
}

}  // namespace swarmflow::ultrasound
