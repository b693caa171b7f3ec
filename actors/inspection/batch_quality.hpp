#pragma once
/// \file batch_quality.hpp
/// inspection.batch_quality — rolls the results of every station and camera,
/// across all units, up into a quality report per batch of parts.
///
/// Inputs:
///   defects       swarmflow.schema.VisionResults   one per camera frame (inspection.defects)
///   measurements  swarmflow.schema.VisionResults   one per part (inspection.measure); optional
/// Output:
///   reports       swarmflow.schema.BatchReport     one per batch
/// Parameters:
///   batch_parts        integer [1, 1e6]  parts per batch (20)
///   cameras_per_part   integer [1, 16]   defect results that make a part complete (2)
///   report_path        string            JSON lines file, one line per batch ("" = none)
///   measured           boolean           each part also waits for its measurement (true)
///   summary            boolean           print the run's quality summary when the stage stops (true)
///
/// A part is complete when `cameras_per_part` defect results and (when the
/// measurements input is fed) its measurement have arrived. It passes when no
/// camera found a defect and every measurement is in tolerance. A part with
/// any result flagged `cannot_inspect` gets no verdict: it is counted as not
/// inspected (by reason), neither passed nor failed, and left out of the
/// yield (passed / inspected parts) and of the scores against ground truth. Where the
/// results carry ground truth (synthetic cameras), detections are matched to
/// the true defects of the same frame (same class, IoU >= 0.3, or the centre
/// inside the true box grown by 4 px) for precision, recall and F1 per class,
/// and measurements are compared with the true sizes. Parts still incomplete
/// when the run ends go into a last batch as partial parts, and so does the
/// oldest open part whenever more than 4 x batch_parts are open (memory stays
/// bounded when frames are dropped). A result for a part already closed is
/// counted (`late_results`) and ignored. The stage is stateful: on a unit
/// process its state is snapshotted, and a failover restores it elsewhere
/// (a `report_path` file may then repeat the batches closed after the last
/// snapshot; the summary and the counters do not). Run one replica,
/// so that it sees every unit's results:
///
/// ```yaml
///   - id: quality
///     type: inspection.batch_quality
///     inputs: {defects: [detect_a/results, detect_b/results], measurements: measure/results}
///     params: {batch_parts: 20, report_path: batches.jsonl}
/// ```

#include <cstdio>
#include <deque>
#include <map>
#include <unordered_set>
#include <string>
#include <vector>

#include <swarmflow/schema/quality_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/registry.hpp>
#include <swarmflow/stage.hpp>

namespace swarmflow::inspection {

/// Detection scores of one class.
struct ClassTally {
  std::uint64_t true_positives = 0;
  std::uint64_t false_positives = 0;
  std::uint64_t false_negatives = 0;
  double precision() const;
  double recall() const;
  double f1() const;
};

class BatchQuality final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  void stop(StageContext& ctx) override;
  /// Its open parts, the batch being filled and the run's totals, so that a
  /// failover carries on from where the snapshot was taken.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

  /// Totals over the whole run (for tests and the summary).
  const std::map<std::string, ClassTally>& scores() const { return total_scores_; }
  double measurement_error_max() const { return total_error_max_; }
  std::uint64_t parts() const { return total_parts_; }
  std::uint64_t passed() const { return total_passed_; }
  std::uint64_t not_inspected() const { return total_not_inspected_; }

 private:
  struct Detection {
    std::string class_name;
    std::string camera;
  };
  struct Part {
    std::uint64_t id = 0;
    int results = 0;
    bool measured = false;
    bool out_of_tolerance = false;
    std::vector<std::string> not_inspected;  ///< why, one per flagged result
    std::vector<Detection> detections;
    std::map<std::string, ClassTally> scores;
    std::vector<double> errors_mm;
  };
  struct Batch {
    std::vector<Part> parts;
    std::uint64_t partial = 0;
  };

  void add_defects(const schema::VisionResults& r, Part& part);
  void add_measurements(const schema::VisionResults& r, Part& part);
  bool complete(const Part& part) const;
  void close_part(std::uint64_t id, bool partial, Outputs* out);
  void close_batch(Outputs* out);
  void print_summary() const;

  InputPort<schema::VisionResults> defects_;
  InputPort<schema::VisionResults> measurements_;
  OutputPort<schema::BatchReport> reports_;
  std::int64_t batch_parts_ = 20;
  std::int64_t cameras_per_part_ = 2;
  std::string report_path_;
  bool summary_ = true;

  bool measured_ = true;
  std::map<std::uint64_t, Part> open_;
  std::deque<std::uint64_t> opened_;           ///< open part ids, oldest first
  std::unordered_set<std::uint64_t> closed_;   ///< recently closed ids (late results are ignored)
  std::deque<std::uint64_t> closed_order_;
  std::atomic<std::int64_t>* late_counter_ = nullptr;
  Batch batch_;
  std::uint64_t batch_index_ = 0;
  std::FILE* report_file_ = nullptr;

  std::map<std::string, ClassTally> total_scores_;
  std::map<std::string, std::uint64_t> total_by_class_;
  std::uint64_t total_parts_ = 0;
  std::uint64_t total_passed_ = 0;
  std::uint64_t total_partial_ = 0;
  std::uint64_t total_not_inspected_ = 0;
  std::map<std::string, std::uint64_t> total_not_inspected_by_reason_;
  double total_error_max_ = 0;
  double total_error_sum_ = 0;
  std::uint64_t total_error_count_ = 0;
  std::atomic<std::int64_t>* parts_counter_ = nullptr;
  std::atomic<std::int64_t>* passed_counter_ = nullptr;
  std::atomic<std::int64_t>* batches_counter_ = nullptr;
};

/// Adds inspection.batch_quality (called by the runtime next to the pack's
/// own registration).
void register_batch_quality(Registry& registry);

}  // namespace swarmflow::inspection
