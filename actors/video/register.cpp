#include "video/video.hpp"
#include "video/video_sink.hpp"
#include "video/video_source.hpp"

namespace swarmflow {

void register_video_stages(Registry& registry) {
  registry.add<video::VideoSource>("video.source",
                                   "frames from a file, an RTSP/HTTP/V4L2 camera, a test pattern or the "
                                   "synthetic inspection camera");
  registry.add<video::VideoSink>("video.sink", "writes frames, with their annotations drawn, to a video file");
}

}  // namespace swarmflow
