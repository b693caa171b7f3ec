#pragma once
/// \file io.hpp
/// The `io` pack.
///
/// io.jsonl — input `in` (any payload type). Param `path` (`-` = stdout).
///   Writes each envelope as one JSON line: {"stream", "seq", "capture_ns",
///   "confidence", "vote_key", "type", "payload": {...}} where the payload is
///   printed by FlatBuffers' own JSON generation from the schemas.
///
/// ```yaml
///   - {id: dump, type: io.jsonl, inputs: {in: work/out}, params: {path: out.jsonl}}
/// ```

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds io.jsonl.
void register_io_stages(Registry& registry);

}  // namespace swarmflow
