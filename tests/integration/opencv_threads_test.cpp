// A process without OpenCV (no pack built on it registered): a pipeline that
// sets `opencv:` is refused where it says so; one that does not runs.

#include <gtest/gtest.h>

#include <string>

#include <swarmflow/library_threads.hpp>
#include <swarmflow/runtime.hpp>

namespace swarmflow {
namespace {

constexpr const char* kStages =
    "stages:\n"
    "  - {id: src, type: sim.source, params: {count: 10}}\n"
    "  - {id: sink, type: sim.sink, inputs: {in: src/out}}\n";

TEST(OpenCvThreadsWithoutOpenCv, ASettingNobodyCanCarryOutIsRefusedWithItsPlace) {
  ASSERT_FALSE(library_threads_registered("opencv"));
  Runtime rt;
  ASSERT_TRUE(rt.load_string("pipeline: t\nopencv: {threads: 2}\n" + std::string(kStages), "t.yaml").ok());
  const Status s = rt.run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.yaml:2:19: 'opencv' is set, but no stage pack in this process registered the "
                             "threads of opencv"),
            std::string::npos)
      << s.message();
}

TEST(OpenCvThreadsWithoutOpenCv, WithoutTheSettingOrWithAutoTheRunGoesOn) {
  for (const std::string block : {"", "opencv: {threads: auto}\n"}) {
    Runtime rt;
    ASSERT_TRUE(rt.load_string("pipeline: t\n" + block + kStages, "t.yaml").ok());
    EXPECT_TRUE(rt.run().ok()) << block;
    EXPECT_FALSE(library_threads_registered("opencv"));
  }
}

}  // namespace
}  // namespace swarmflow
