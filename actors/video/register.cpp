#include "video/video.hpp"
#include "video/video_sink.hpp"
#include "video/video_source.hpp"

#include <opencv2/core/utility.hpp>

#include <swarmflow/library_threads.hpp>

namespace swarmflow {

void register_video_stages(Registry& registry) {
  // Its stages call OpenCV: the runtime sets OpenCV's threads for a run
  // (swarmflow/library_threads.hpp).
  register_library_threads("opencv", {[] { return cv::getNumThreads(); }, [](int n) { cv::setNumThreads(n); }});
  registry.add<video::VideoSource>("video.source",
                                   "frames from a file, an RTSP/HTTP/V4L2 camera, a test pattern or the "
                                   "synthetic inspection camera");
  registry.add<video::VideoSink>("video.sink", "writes frames, with their annotations drawn, to a video file");
}

}  // namespace swarmflow
