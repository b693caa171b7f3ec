#pragma once
/// \file video.hpp
/// The `video` pack. Each stage's header lists its ports, parameters and a
/// YAML example:
///   video.source  video/video_source.hpp
///   video.sink    video/video_sink.hpp
/// docs/video.md describes URIs, threading, the watchdog and the one-copy rule.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the video.* stages.
void register_video_stages(Registry& registry);

}  // namespace swarmflow
