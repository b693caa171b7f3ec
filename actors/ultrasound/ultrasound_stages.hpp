#pragma once
/// \file ultrasound_stages.hpp
/// The stages of the ultrasound pack. The methods are in ultrasound_image.hpp
/// and docs/ultrasound.md; the scores against ground truth in
/// ultrasound_score.hpp. Not for clinical use.
///
/// ## ultrasound.enhance
/// Speckle reduction and contrast. Input `frames` (Frame: BGR, RGB, BGRA,
/// GRAY8 or the luma of NV12), output `frames` (Frame, GRAY8, same size;
/// camera id, index, capture time and ground truth carried over). At half
/// resolution a 5x5 median and a self-guided filter (window radius
/// `guided_radius_mm`, regularisation `guided_eps` grey levels squared), back
/// to full size, then CLAHE (`clahe_clip`, `clahe_tiles`; clip 0 = none).
/// Parameters: mm_per_px 0.1 [0.01, 1]; guided_radius_mm 0.8 [0.1, 10];
/// guided_eps 400 [1, 1e5]; clahe_clip 1.0 [0, 40]; clahe_tiles 8 [1, 64].
/// Counters: frames.
///
/// ## ultrasound.segment
/// Lesion masks with contours. Inputs `frames` (the raw B-mode Frame) and
/// `enhanced` (ultrasound.enhance's Frame of the same index), joined by
/// sequence (`join: {key: seq}`); output `results` (UltrasoundResults: one
/// Lesion per lesion found, with its contour, size, echogenicity, shape,
/// margin and posterior features; no vessels; the frame's ground truth
/// carried). Candidates: the raw echo level in dB, smoothed (`detect_mm`),
/// `threshold_db` from a masked local background (`background_mm`), dark and
/// bright; long dark bands across the field are vessels. Outlines: halfway
/// between each candidate's inside and its surroundings on the enhanced
/// frame, opened (`smooth_mm`). Echogenicity from the mean dB inside against
/// a ring beside it (`anechoic_db`, `iso_db`); lesions nearer the tissue's
/// echo than `min_contrast_db`, and bright outlines under a dark lesion (its
/// posterior enhancement), are not reported; vessels (found as
/// ultrasound.flow finds them) are left out whole. Posterior features from
/// the echo under the lesion against the same depths beside it
/// (`posterior_db`).
/// Parameters: mm_per_px 0.1; dynamic_range_db 60 [10, 120] (of the probe's
/// log compression); min_size_mm 3 [0.5, 100]; background_mm 16 [2, 200];
/// detect_mm 1.0 [0.1, 10]; threshold_db 4 [0.5, 40]; smooth_mm 1.4 [0, 10];
/// top_mm 2 [0, 50]; posterior_db 2.5 [0.1, 40]; iso_db 3 [0.1, 40];
/// min_contrast_db 5 [0.1, 40]; anechoic_db -20 [-80, -1]; irregular_solidity
/// 0.93 [0, 1].
/// Counters: frames, lesions.
///
/// ## ultrasound.flow
/// Vessel velocity by speckle tracking. Input `frames` (raw B-mode Frame),
/// output `results` (UltrasoundResults: one Vessel per vessel found, with its
/// axis, radius, peak and mean velocity in mm/s against the tissue beside it,
/// direction and tracking quality; no lesions). Keeps the previous frame of
/// each stream (run it with `key: stream`): a reference to its payload, or
/// for colour frames a copy of its grey plane; the first frame of a stream, and
/// a frame that does not follow its predecessor, give vessels without flow.
/// Parameters: mm_per_px 0.1; fps 30 [1, 1000] (the probe's frame rate: the
/// time between two frames); max_velocity_mm_s 60 [1, 2000]; min_length 0.6
/// [0.1, 1] (of the frame's width a vessel crosses); threshold 18 [1, 255]
/// (grey levels below the background that make a lumen).
/// Counters: frames, vessels, tracked.
///
/// ## ultrasound.report
/// One structured finding per lesion, streamed as text tokens. Inputs
/// `lesions` (ultrasound.segment's results) and `vessels` (ultrasound.flow's),
/// joined by sequence; output `findings` (Tokens, the token-stream schema of
/// docs/lm.md): per lesion one line such as `frame 42 lesion 1 of 2:
/// hypoechoic solid mass 8.4 x 6.1 mm, oval, circumscribed margin, no
/// posterior feature, depth 21.3 mm; vessel 1 peak flow 18.2 mm/s (mean 9.1)
/// to the right.` (ultrasound_report.hpp), sent as lm.generate sends tokens:
/// one envelope per word (with the space after it), Tokens{ids: [-1] (no
/// vocabulary), pieces: [word], position, confidence: [1], logprobs: [0],
/// request_id, final, finish_reason}; the last word is final with
/// finish_reason "stop". request_id = frame index x 16 + lesion number (a
/// frame without lesions sends one `no focal lesion` line as number 0);
/// header stream = request id, seq = position, vote_key = the word's
/// FNV-1a hash, confidence 1. lm.detokenize gathers each line. Where the
/// results carry a synthetic probe's ground truth it scores them: Dice per
/// lesion type (from the outlines), and the report's facts as its text
/// states them (read back from the line: the lesion count per frame, size
/// within 1 mm, echogenicity), and the relative error of the vessel
/// velocity; and it measures the latency from frame capture to the report
/// line's completion (its last token sent). Counters (integers, read by
/// the run report's `ultrasound` object): frames, findings (lines), tokens,
/// lesions_truth, dice_sum_ppm, facts, facts_right, count_right,
/// size_right, class_right, vessels_truth, flow_error_sum_ppm,
/// latency_p50_us, latency_p99_us, latency_max_us, and dice_sum_ppm.<type> /
/// lesions_truth.<type> per lesion type. Prints the scored summary when it
/// stops (`summary`). Run one replica. It is stateful: on a unit process
/// its scores are snapshotted and a failover restores them elsewhere.
///
/// ```yaml
/// stages:
///   - {id: probe, type: video.source, params: {uri: "synthetic://ultrasound?seed=1", fps: 30, count: 300}}
///   - {id: enhance, type: ultrasound.enhance, inputs: {frames: probe/frames}}
///   - id: segment
///     type: ultrasound.segment
///     inputs: {frames: probe/frames, enhanced: enhance/frames}
///     join: {key: seq, timeout_ms: 500}
///   - {id: flow, type: ultrasound.flow, key: stream, inputs: {frames: probe/frames}}
///   - id: report
///     type: ultrasound.report
///     inputs: {lesions: segment/results, vessels: flow/results}
///     join: {key: seq, timeout_ms: 500}
///   - {id: lines, type: lm.detokenize, inputs: {in: report/findings}}
///   - {id: findings, type: io.jsonl, inputs: {in: lines/out}, params: {path: findings.jsonl}}
/// ```

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/ultrasound_generated.h>
#include <swarmflow/stage.hpp>

#include "ultrasound/ultrasound_image.hpp"
#include "ultrasound/ultrasound_report.hpp"
#include "ultrasound/ultrasound_score.hpp"

namespace swarmflow::ultrasound {

class Enhance final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> in_;
  OutputPort<schema::Frame> out_;
  EnhanceParams params_;
  std::int64_t tiles_ = 8;
  std::unique_ptr<Enhancer> enhancer_;
  cv::Mat grey_;
  std::atomic<std::int64_t>* frames_ = nullptr;
};

class Segment final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> frames_;
  InputPort<schema::Frame> enhanced_;
  OutputPort<schema::UltrasoundResults> results_;
  SegmentParams params_;
  cv::Mat raw_, enh_;
  std::atomic<std::int64_t>* frames_seen_ = nullptr;
  std::atomic<std::int64_t>* lesions_ = nullptr;
};

class Flow final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> frames_;
  OutputPort<schema::UltrasoundResults> results_;
  FlowParams params_;
  struct Previous {
    std::uint64_t index = 0;
    cv::Mat grey;        ///< a view into `payload`, or `owned`
    PayloadPtr payload;  ///< the previous frame's, while `grey` views its pixels
    cv::Mat owned;       ///< a copy, for frames converted from colour
  };
  std::map<std::uint64_t, Previous> previous_;  ///< by stream; bounded by the streams one replica sees
  cv::Mat grey_;
  std::atomic<std::int64_t>* frames_seen_ = nullptr;
  std::atomic<std::int64_t>* vessels_ = nullptr;
  std::atomic<std::int64_t>* tracked_ = nullptr;
};

class Report final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  void stop(StageContext& ctx) override;
  /// Its scores and latency histogram, so that a failover carries on from
  /// the snapshot rather than from zero.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

  const ScoreTally& tally() const { return tally_; }

 private:
  void emit_line(const ReportLine& line, Outputs& out);
  void publish();
  void print_summary() const;

  InputPort<schema::UltrasoundResults> lesions_;
  InputPort<schema::UltrasoundResults> vessels_;
  OutputPort<schema::Tokens> findings_;
  bool summary_ = true;
  StageContext* ctx_ = nullptr;
  ScoreTally tally_;
  std::uint64_t frames_ = 0, findings_sent_ = 0, tokens_sent_ = 0, partial_ = 0;
  /// Latency from capture to report line, 0.1 ms buckets up to 2 s (the last
  /// bucket holds everything slower): bounded, whatever the run's length.
  std::vector<std::uint64_t> latency_;
  std::uint64_t latency_count_ = 0;
  double latency_max_ms_ = 0;
};

/// Word `position` of a report line as `ultrasound.report` streams it: one
/// Tokens payload, no vocabulary id, certain, the last word final with
/// finish_reason "stop".
PayloadPtr word_token(const std::string& piece, std::size_t position, bool final, std::uint64_t request);

}  // namespace swarmflow::ultrasound
