// OpenCV's worker threads while a run lasts: one unless the pipeline's
// `opencv: {threads}` says otherwise, and given back when the run ends
// (docs/design.md, "OpenCV's threads in a unit"; docs/pipelines.md).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <opencv2/core.hpp>
#include <opencv2/core/utility.hpp>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>

#include "video/video.hpp"

namespace swarmflow {
namespace {

/// What the stages saw of OpenCV during the run (one run at a time).
std::atomic<int> seen_threads{-1};   ///< cv::getNumThreads() in the last step
std::atomic<int> most_bodies{0};     ///< the most threads one parallel_for_ ran its body on

/// Calls OpenCV's parallel loop in each step, as an image stage does.
class OpenCvStep final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in", "anything"); }
  Status process(Inputs& in, Outputs&, StageContext&) override {
    if (in.get(in_) == nullptr) return {};
    seen_threads = cv::getNumThreads();
    std::mutex mutex;
    std::set<std::thread::id> bodies;
    cv::parallel_for_(
        cv::Range(0, 16),
        [&](const cv::Range& r) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            bodies.insert(std::this_thread::get_id());
          }
          volatile double x = 0;
          for (int i = 0; i < 20000 * (r.end - r.start); ++i) x = x + i;
        },
        16);
    int n = static_cast<int>(bodies.size());
    int most = most_bodies.load();
    while (n > most && !most_bodies.compare_exchange_weak(most, n)) {
    }
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
};

/// Runs sim.source -> test.opencv on `units` units with `opencv_block`
/// (a line of YAML, or nothing), OpenCV at `before` threads until then.
Status run_with(const std::string& opencv_block, int before, int units = 2) {
  cv::setNumThreads(before);
  seen_threads = -1;
  most_bodies = 0;
  Runtime rt;
  register_video_stages(rt.registry());  // a pack built on OpenCV: it registers OpenCV's threads
  EXPECT_TRUE(rt.registry().add<OpenCvStep>("test.opencv", "calls cv::parallel_for_").ok());
  std::vector<Diagnostic> diagnostics;
  Status s = rt.load_string("pipeline: cv\nunits: " + std::to_string(units) + "\n" + opencv_block +
                                "stages:\n"
                                "  - {id: src, type: sim.source, params: {count: 20}}\n"
                                "  - {id: cv, type: test.opencv, replicas: 2, inputs: {in: src/out}}\n",
                            "cv.yaml", &diagnostics);
  EXPECT_TRUE(s.ok()) << format_diagnostics(diagnostics);
  if (!s.ok()) return s;
  return rt.run();
}

TEST(OpenCvThreads, AUnitRunsOpenCvsLoopsOnItsOwnWorkerByDefaultAndTheRunGivesTheThreadsBack) {
  ASSERT_TRUE(run_with("", 3).ok());
  EXPECT_EQ(seen_threads.load(), 1);
  EXPECT_EQ(most_bodies.load(), 1);  // every body on the worker that called the loop
  EXPECT_EQ(cv::getNumThreads(), 3);
  cv::setNumThreads(-1);
}

TEST(OpenCvThreads, ThePipelineCanGiveOpenCvMoreThreads) {
  ASSERT_TRUE(run_with("opencv: {threads: 2}\n", 3).ok());
  EXPECT_EQ(seen_threads.load(), 2);
  EXPECT_EQ(cv::getNumThreads(), 3);
  cv::setNumThreads(-1);
}

TEST(OpenCvThreads, AutoLeavesOpenCvAsTheProcessHasIt) {
  ASSERT_TRUE(run_with("opencv: {threads: auto}\n", 3).ok());
  EXPECT_EQ(seen_threads.load(), 3);
  EXPECT_EQ(cv::getNumThreads(), 3);
  ASSERT_TRUE(run_with("opencv: {threads: 1}\n", 3, 1).ok());
  EXPECT_EQ(seen_threads.load(), 1);
  EXPECT_EQ(most_bodies.load(), 1);
  EXPECT_EQ(cv::getNumThreads(), 3);
  cv::setNumThreads(-1);
}

}  // namespace
}  // namespace swarmflow
