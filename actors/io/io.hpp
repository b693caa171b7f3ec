#pragma once
/// \file io.hpp
/// The `io` pack: stages that move envelopes in and out of files.
///
/// io.jsonl — writes every envelope it receives as one JSON line.
///   Input `in`: any payload type. No outputs (a sink).
///   Params:
///   - `path` (string, default `-`): file to write; `-` is standard output. The
///     file is truncated when the stage first starts and appended to after a
///     restart. Keep one replica per file.
///   - `max_payload_bytes` (integer >= 0, default 1048576): a larger payload is
///     written as the summary {"type": id, "bytes": n} instead of in full, so a
///     6 MB video frame does not make a 20 MB line.
///   - `flush` (boolean, default false): flush after every line, for `tail -f`.
///   Line: {"stream", "seq", "capture_ns", "confidence", "vote_key", "type",
///   "payload"}, where `type` is the payload's file identifier and `payload` is
///   printed by FlatBuffers from the schemas in `schemas/` after the buffer is
///   verified against its schema. An identifier that no schema declares prints
///   {"unknown_type": id, "bytes": n}; a buffer that fails verification prints
///   {"type": id, "bytes": n, "error": why}. Non-finite floats print as null.
///   Counters: `written` (lines), `summarized` (payloads over the limit),
///   `unprintable` (unknown or invalid payloads).
///
/// ```yaml
/// stages:
///   - {id: src,  type: sim.source, params: {count: 100, payload_bytes: 16}}
///   - id: dump
///     type: io.jsonl
///     inputs: {in: src/out}
///     params: {path: out.jsonl, max_payload_bytes: 65536, flush: true}
/// ```

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds io.jsonl.
void register_io_stages(Registry& registry);

}  // namespace swarmflow
