#include "inspection/batch_quality.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "video/synthetic_parts.hpp"

namespace swarmflow::inspection {

double ClassTally::precision() const {
  const auto d = true_positives + false_positives;
  return d == 0 ? 1.0 : static_cast<double>(true_positives) / static_cast<double>(d);
}

double ClassTally::recall() const {
  const auto d = true_positives + false_negatives;
  return d == 0 ? 1.0 : static_cast<double>(true_positives) / static_cast<double>(d);
}

double ClassTally::f1() const {
  const double p = precision();
  const double r = recall();
  return p + r == 0 ? 0.0 : 2 * p * r / (p + r);
}

namespace {

/// How well a detection's box matches a true one: IoU >= 0.3, or its centre
/// inside the true box grown by 4 px (thin defects give small IoUs).
bool matches(const schema::Box& d, const video::DefectTruth& t) {
  const double ix = std::max(0.0, std::min<double>(d.x() + d.width(), t.x + t.width) - std::max<double>(d.x(), t.x));
  const double iy =
      std::max(0.0, std::min<double>(d.y() + d.height(), t.y + t.height) - std::max<double>(d.y(), t.y));
  const double inter = ix * iy;
  const double uni = static_cast<double>(d.width()) * d.height() + static_cast<double>(t.width) * t.height - inter;
  if (uni > 0 && inter / uni >= 0.3) return true;
  const double cx = d.x() + d.width() / 2.0;
  const double cy = d.y() + d.height() / 2.0;
  constexpr double kGrow = 4;
  return cx >= t.x - kGrow && cx <= t.x + t.width + kGrow && cy >= t.y - kGrow && cy <= t.y + t.height + kGrow;
}

/// The kind of a cannot_inspect reason, for counting: its text up to the
/// first figure or colon after the camera's name.
std::string reason_kind(const std::string& reason) {
  if (reason.find("belt too close") != std::string::npos) return "belt/metal contrast";
  if (reason.find("glare") != std::string::npos) return "specular glare";
  if (reason.find("no plate") != std::string::npos) return "no plate found";
  if (reason.find("uneven") != std::string::npos) return "uneven lighting";
  return "other";
}

std::vector<std::pair<std::string, std::uint64_t>> pareto(const std::map<std::string, std::uint64_t>& counts) {
  std::vector<std::pair<std::string, std::uint64_t>> v(counts.begin(), counts.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

}  // namespace

void BatchQuality::setup(StageSpec& s) {
  defects_ = s.input<schema::VisionResults>("defects", "defects found in each camera frame");
  measurements_ = s.optional_input<schema::VisionResults>("measurements", "each part's measurements");
  reports_ = s.output<schema::BatchReport>("reports", "one quality report per batch");
  s.param(batch_parts_, "batch_parts", "parts per batch", 20, {1.0, 1e6});
  s.param(cameras_per_part_, "cameras_per_part", "defect results that make a part complete", 2, {1.0, 16.0});
  s.param(report_path_, "report_path", "JSON lines file with one line per batch; empty = none", "");
  s.param(measured_, "measured", "each part also waits for its measurement", true);
  s.param(summary_, "summary", "print the run's quality summary when the stage stops", true);
}

Status BatchQuality::start(StageContext& ctx) {
  parts_counter_ = &ctx.counter("parts");
  passed_counter_ = &ctx.counter("passed");
  batches_counter_ = &ctx.counter("batches");
  late_counter_ = &ctx.counter("late_results");
  if (!report_path_.empty()) {
    report_file_ = std::fopen(report_path_.c_str(), "a");
    if (report_file_ == nullptr) {
      return Status::error("inspection.batch_quality: cannot open " + report_path_ + ": " + std::strerror(errno),
                           StatusCode::unavailable);
    }
  }
  return {};
}

Status BatchQuality::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::VisionResults* d = in.get(defects_);
  const schema::VisionResults* m = in.get(measurements_);
  const schema::VisionResults* r = d != nullptr ? d : m;
  if (r == nullptr) return {};
  const std::uint64_t id = r->part_id() != 0 ? r->part_id() : in.envelope()->header().part_id;
  if (closed_.count(id) != 0) {
    late_counter_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  auto [it, opened] = open_.try_emplace(id);
  Part& part = it->second;
  part.id = id;
  if (opened) opened_.push_back(id);
  if (d != nullptr) add_defects(*d, part);
  if (m != nullptr) add_measurements(*m, part);
  if (complete(part)) close_part(id, false, &out);
  // Parts that will never be complete (a camera's frame was dropped) must
  // not pile up: past the bound, the oldest open part closes as partial.
  const auto max_open = static_cast<std::size_t>(4 * batch_parts_);
  while (open_.size() > max_open && !opened_.empty()) {
    const std::uint64_t oldest = opened_.front();
    opened_.pop_front();
    if (open_.count(oldest) != 0) close_part(oldest, true, &out);
  }
  return {};
}

void BatchQuality::add_defects(const schema::VisionResults& r, Part& part) {
  ++part.results;
  if (r.cannot_inspect() != nullptr && r.cannot_inspect()->size() > 0) {
    // No verdict and nothing to score: the frame was not inspected.
    part.not_inspected.push_back(r.cannot_inspect()->str());
    return;
  }
  const std::string camera = r.camera_id() != nullptr ? r.camera_id()->str() : std::string("?");
  std::vector<const schema::Defect*> found;
  if (r.defects() != nullptr) {
    for (const auto* d : *r.defects()) {
      found.push_back(d);
      part.detections.push_back(Detection{d->class_name() != nullptr ? d->class_name()->str() : "?", camera});
    }
  }
  if (r.ground_truth() == nullptr || r.ground_truth()->size() == 0) return;
  auto truth = video::parse_truth(r.ground_truth()->string_view());
  if (!truth) return;
  // Greedy one-to-one matching within each class.
  std::vector<bool> used(truth->defects.size(), false);
  for (const auto* d : found) {
    const std::string cls = d->class_name() != nullptr ? d->class_name()->str() : "?";
    bool hit = false;
    for (std::size_t t = 0; t < truth->defects.size() && !hit; ++t) {
      if (used[t] || truth->defects[t].class_name != cls || d->box() == nullptr) continue;
      if (matches(*d->box(), truth->defects[t])) used[t] = hit = true;
    }
    ClassTally& tally = part.scores[cls];
    (hit ? tally.true_positives : tally.false_positives) += 1;
  }
  for (std::size_t t = 0; t < truth->defects.size(); ++t) {
    if (!used[t]) ++part.scores[truth->defects[t].class_name].false_negatives;
  }
}

void BatchQuality::add_measurements(const schema::VisionResults& r, Part& part) {
  part.measured = true;
  if (r.cannot_inspect() != nullptr && r.cannot_inspect()->size() > 0) {
    part.not_inspected.push_back(r.cannot_inspect()->str());
    return;
  }
  std::optional<video::PartTruth> truth;
  if (r.ground_truth() != nullptr && r.ground_truth()->size() > 0) truth = video::parse_truth(r.ground_truth()->string_view());
  if (r.measurements() == nullptr) return;
  for (const auto* m : *r.measurements()) {
    if (!m->in_tolerance()) part.out_of_tolerance = true;
    // A value of 0 is a size that could not be measured (a hole not drilled):
    // it fails the tolerance above, but has no error to speak of.
    if (!truth || m->name() == nullptr || m->value() <= 0) continue;
    const std::string name = m->name()->str();
    double true_value = std::nan("");
    if (name.find("width") != std::string::npos) {
      true_value = truth->width_mm;
    } else if (name.find("height") != std::string::npos) {
      true_value = truth->height_mm;
    } else if (name.rfind("hole", 0) == 0) {
      // The nearest drilled hole's true diameter.
      double best = std::nan("");
      for (const auto& h : truth->holes) {
        if (h.missing) continue;
        if (std::isnan(best) || std::abs(h.diameter_mm - m->value()) < std::abs(best - m->value())) best = h.diameter_mm;
      }
      true_value = best;
    }
    if (!std::isnan(true_value)) part.errors_mm.push_back(std::abs(m->value() - true_value));
  }
}

bool BatchQuality::complete(const Part& part) const {
  return part.results >= cameras_per_part_ && (!measured_ || part.measured);
}

void BatchQuality::close_part(std::uint64_t id, bool partial, Outputs* out) {
  auto it = open_.find(id);
  if (it == open_.end()) return;
  batch_.parts.push_back(std::move(it->second));
  if (partial) ++batch_.partial;
  open_.erase(it);
  constexpr std::size_t kRememberClosed = 4096;
  closed_.insert(id);
  closed_order_.push_back(id);
  if (closed_order_.size() > kRememberClosed) {
    closed_.erase(closed_order_.front());
    closed_order_.pop_front();
  }
  if (static_cast<std::int64_t>(batch_.parts.size()) >= batch_parts_) close_batch(out);
}

void BatchQuality::close_batch(Outputs* out) {
  if (batch_.parts.empty()) return;
  std::map<std::string, std::uint64_t> by_class;
  std::map<std::string, std::uint64_t> by_camera;
  std::map<std::string, ClassTally> scores;
  std::vector<std::uint64_t> out_of_tolerance;
  std::uint64_t passed = 0;
  std::uint64_t not_inspected = 0;
  std::map<std::string, std::uint64_t> not_inspected_by_reason;
  double error_max = 0;
  double error_sum = 0;
  std::uint64_t error_count = 0;
  for (const Part& p : batch_.parts) {
    for (const auto& d : p.detections) {
      ++by_class[d.class_name];
      ++by_camera[d.camera];
    }
    for (const auto& [cls, t] : p.scores) {
      scores[cls].true_positives += t.true_positives;
      scores[cls].false_positives += t.false_positives;
      scores[cls].false_negatives += t.false_negatives;
    }
    if (!p.not_inspected.empty()) {
      // No verdict: neither passed nor out of tolerance, whatever the other
      // camera found.
      ++not_inspected;
      ++not_inspected_by_reason[reason_kind(p.not_inspected.front())];
      continue;
    }
    if (p.out_of_tolerance) out_of_tolerance.push_back(p.id);
    if (p.detections.empty() && !p.out_of_tolerance) ++passed;
    for (double e : p.errors_mm) {
      error_max = std::max(error_max, e);
      error_sum += e;
      ++error_count;
    }
  }
  const auto parts = static_cast<std::uint64_t>(batch_.parts.size());
  const std::uint64_t inspected = parts - not_inspected;
  const double yield = inspected > 0 ? static_cast<double>(passed) / static_cast<double>(inspected) : 0.0;

  // Totals for the run.
  total_parts_ += parts;
  total_passed_ += passed;
  total_partial_ += batch_.partial;
  total_not_inspected_ += not_inspected;
  for (const auto& [reason, n] : not_inspected_by_reason) total_not_inspected_by_reason_[reason] += n;
  for (const auto& [cls, t] : scores) {
    total_scores_[cls].true_positives += t.true_positives;
    total_scores_[cls].false_positives += t.false_positives;
    total_scores_[cls].false_negatives += t.false_negatives;
  }
  for (const auto& [cls, n] : by_class) total_by_class_[cls] += n;
  total_error_max_ = std::max(total_error_max_, error_max);
  total_error_sum_ += error_sum;
  total_error_count_ += error_count;
  parts_counter_->fetch_add(static_cast<std::int64_t>(parts));
  passed_counter_->fetch_add(static_cast<std::int64_t>(passed));
  batches_counter_->fetch_add(1);

  const auto class_pareto = pareto(by_class);
  const auto camera_pareto = pareto(by_camera);
  if (out != nullptr) {
    flatbuffers::FlatBufferBuilder fbb;
    auto counts = [&](const std::vector<std::pair<std::string, std::uint64_t>>& v) {
      std::vector<flatbuffers::Offset<schema::ClassCount>> o;
      for (const auto& [name, n] : v) o.push_back(schema::CreateClassCount(fbb, fbb.CreateString(name), n));
      return fbb.CreateVector(o);
    };
    auto classes = counts(class_pareto);
    auto cameras = counts(camera_pareto);
    auto reasons = counts(pareto(not_inspected_by_reason));
    std::vector<flatbuffers::Offset<schema::ClassScore>> score_offsets;
    for (const auto& [cls, t] : scores) {
      score_offsets.push_back(schema::CreateClassScore(fbb, fbb.CreateString(cls), t.true_positives, t.false_positives,
                                                       t.false_negatives, t.precision(), t.recall(), t.f1()));
    }
    fbb.Finish(schema::CreateBatchReport(fbb, batch_index_, parts, passed, yield, classes, cameras,
                                         fbb.CreateVector(out_of_tolerance), batch_.partial,
                                         fbb.CreateVector(score_offsets), error_max,
                                         error_count > 0 ? error_sum / static_cast<double>(error_count) : 0.0,
                                         not_inspected, reasons),
               schema::BatchReportIdentifier());
    out->emit(reports_, Payload::from_builder(fbb));
  }
  if (report_file_ != nullptr) {
    nlohmann::ordered_json j;
    j["batch"] = batch_index_;
    j["parts"] = parts;
    j["passed"] = passed;
    j["yield"] = yield;
    j["partial_parts"] = batch_.partial;
    j["not_inspected"] = not_inspected;
    j["not_inspected_by_reason"] = nlohmann::ordered_json::object();
    for (const auto& [reason, n] : not_inspected_by_reason) j["not_inspected_by_reason"][reason] = n;
    j["defects_by_class"] = nlohmann::ordered_json::array();
    for (const auto& [name, n] : class_pareto) j["defects_by_class"].push_back({{"class", name}, {"count", n}});
    j["defects_by_camera"] = nlohmann::ordered_json::array();
    for (const auto& [name, n] : camera_pareto) j["defects_by_camera"].push_back({{"camera", name}, {"count", n}});
    j["out_of_tolerance"] = out_of_tolerance;
    for (const auto& [cls, t] : scores) {
      j["scores"][cls] = {{"precision", t.precision()}, {"recall", t.recall()}, {"f1", t.f1()},
                          {"tp", t.true_positives}, {"fp", t.false_positives}, {"fn", t.false_negatives}};
    }
    j["measurement_error_mm"] = {{"max", error_max},
                                 {"mean", error_count > 0 ? error_sum / static_cast<double>(error_count) : 0.0}};
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), report_file_);
    std::fflush(report_file_);
  }
  ++batch_index_;
  batch_ = Batch{};
}

void BatchQuality::stop(StageContext&) {
  // Parts still open when the input ended go into a last batch as partial.
  std::vector<std::uint64_t> ids;
  for (const auto& [id, part] : open_) ids.push_back(id);
  for (std::uint64_t id : ids) {
    auto it = open_.find(id);
    batch_.parts.push_back(std::move(it->second));
    ++batch_.partial;
    open_.erase(it);
  }
  close_batch(nullptr);
  if (report_file_ != nullptr) {
    std::fclose(report_file_);
    report_file_ = nullptr;
  }
  if (summary_) print_summary();
}

namespace {

nlohmann::json tally_json(const std::map<std::string, ClassTally>& scores) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [cls, t] : scores) j[cls] = {t.true_positives, t.false_positives, t.false_negatives};
  return j;
}

std::map<std::string, ClassTally> tally_from(const nlohmann::json& j) {
  std::map<std::string, ClassTally> scores;
  for (auto it = j.begin(); it != j.end(); ++it) {
    ClassTally& t = scores[it.key()];
    t.true_positives = it.value().at(0).get<std::uint64_t>();
    t.false_positives = it.value().at(1).get<std::uint64_t>();
    t.false_negatives = it.value().at(2).get<std::uint64_t>();
  }
  return scores;
}

}  // namespace

bool BatchQuality::snapshot(std::string& out) const {
  auto part_json = [](const Part& p) {
    nlohmann::json detections = nlohmann::json::array();
    for (const auto& d : p.detections) detections.push_back({d.class_name, d.camera});
    return nlohmann::json{{"id", p.id},          {"results", p.results},       {"measured", p.measured},
                          {"oot", p.out_of_tolerance}, {"detections", detections}, {"scores", tally_json(p.scores)},
                          {"errors", p.errors_mm},     {"not_inspected", p.not_inspected}};
  };
  nlohmann::json j;
  j["open"] = nlohmann::json::array();
  for (const auto& [id, part] : open_) j["open"].push_back(part_json(part));
  j["opened"] = opened_;
  j["closed"] = closed_order_;
  j["batch"] = nlohmann::json::array();
  for (const auto& part : batch_.parts) j["batch"].push_back(part_json(part));
  j["batch_partial"] = batch_.partial;
  j["batch_index"] = batch_index_;
  j["scores"] = tally_json(total_scores_);
  j["by_class"] = total_by_class_;
  j["parts"] = total_parts_;
  j["passed"] = total_passed_;
  j["partial"] = total_partial_;
  j["error"] = {total_error_max_, total_error_sum_, total_error_count_};
  j["not_inspected"] = total_not_inspected_;
  j["not_inspected_by_reason"] = total_not_inspected_by_reason_;
  const std::vector<std::uint8_t> bytes = nlohmann::json::to_cbor(j);
  out.assign(bytes.begin(), bytes.end());
  return true;
}

Status BatchQuality::restore(const std::string& state) {
  try {
    const nlohmann::json j = nlohmann::json::from_cbor(state.begin(), state.end());
    auto part_from = [](const nlohmann::json& p) {
      Part part;
      part.id = p.at("id").get<std::uint64_t>();
      part.results = p.at("results").get<int>();
      part.measured = p.at("measured").get<bool>();
      part.out_of_tolerance = p.at("oot").get<bool>();
      for (const auto& d : p.at("detections")) {
        part.detections.push_back(Detection{d.at(0).get<std::string>(), d.at(1).get<std::string>()});
      }
      part.scores = tally_from(p.at("scores"));
      part.errors_mm = p.at("errors").get<std::vector<double>>();
      part.not_inspected = p.at("not_inspected").get<std::vector<std::string>>();
      return part;
    };
    open_.clear();
    for (const auto& p : j.at("open")) {
      Part part = part_from(p);
      open_.emplace(part.id, std::move(part));
    }
    opened_ = j.at("opened").get<std::deque<std::uint64_t>>();
    closed_order_ = j.at("closed").get<std::deque<std::uint64_t>>();
    closed_ = std::unordered_set<std::uint64_t>(closed_order_.begin(), closed_order_.end());
    batch_ = Batch{};
    for (const auto& p : j.at("batch")) batch_.parts.push_back(part_from(p));
    batch_.partial = j.at("batch_partial").get<std::uint64_t>();
    batch_index_ = j.at("batch_index").get<std::uint64_t>();
    total_scores_ = tally_from(j.at("scores"));
    total_by_class_ = j.at("by_class").get<std::map<std::string, std::uint64_t>>();
    total_parts_ = j.at("parts").get<std::uint64_t>();
    total_passed_ = j.at("passed").get<std::uint64_t>();
    total_partial_ = j.at("partial").get<std::uint64_t>();
    total_error_max_ = j.at("error").at(0).get<double>();
    total_error_sum_ = j.at("error").at(1).get<double>();
    total_error_count_ = j.at("error").at(2).get<std::uint64_t>();
    total_not_inspected_ = j.at("not_inspected").get<std::uint64_t>();
    total_not_inspected_by_reason_ = j.at("not_inspected_by_reason").get<std::map<std::string, std::uint64_t>>();
  } catch (const std::exception& ex) {
    return Status::error(std::string("inspection.batch_quality: a snapshot it cannot read: ") + ex.what(),
                         StatusCode::invalid_argument);
  }
  return {};
}

void BatchQuality::print_summary() const {
  const std::uint64_t inspected = total_parts_ - total_not_inspected_;
  std::printf("\nquality: %llu parts in %llu batches, %llu passed (yield %.1f%%), %llu partial, %llu not inspected\n",
              static_cast<unsigned long long>(total_parts_), static_cast<unsigned long long>(batch_index_),
              static_cast<unsigned long long>(total_passed_),
              inspected > 0 ? 100.0 * static_cast<double>(total_passed_) / static_cast<double>(inspected) : 0.0,
              static_cast<unsigned long long>(total_partial_), static_cast<unsigned long long>(total_not_inspected_));
  if (total_not_inspected_ > 0) {
    std::printf("  NOT INSPECTED %llu parts (no verdict; yield is over the %llu inspected):\n",
                static_cast<unsigned long long>(total_not_inspected_),
                static_cast<unsigned long long>(total_parts_ - total_not_inspected_));
    for (const auto& [reason, n] : pareto(total_not_inspected_by_reason_)) {
      std::printf("    cannot inspect: %-20s %6llu\n", reason.c_str(), static_cast<unsigned long long>(n));
    }
  }
  for (const auto& [cls, n] : pareto(total_by_class_)) {
    std::printf("  defects found %-14s %6llu\n", cls.c_str(), static_cast<unsigned long long>(n));
  }
  if (!total_scores_.empty()) {
    std::printf("  %-14s %9s %9s %9s %6s %6s %6s\n", "class", "precision", "recall", "F1", "TP", "FP", "FN");
    for (const auto& [cls, t] : total_scores_) {
      std::printf("  %-14s %9.3f %9.3f %9.3f %6llu %6llu %6llu\n", cls.c_str(), t.precision(), t.recall(), t.f1(),
                  static_cast<unsigned long long>(t.true_positives), static_cast<unsigned long long>(t.false_positives),
                  static_cast<unsigned long long>(t.false_negatives));
    }
  }
  if (total_error_count_ > 0) {
    std::printf("  measurement error vs truth: max %.3f mm, mean %.3f mm over %llu values\n", total_error_max_,
                total_error_sum_ / static_cast<double>(total_error_count_),
                static_cast<unsigned long long>(total_error_count_));
  }
  std::fflush(stdout);
}

void register_batch_quality(Registry& registry) {
  registry.add<BatchQuality>("inspection.batch_quality", "yield, defect Pareto and tolerance per batch of parts");
}

}  // namespace swarmflow::inspection
