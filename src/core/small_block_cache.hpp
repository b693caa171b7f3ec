#pragma once
// What the per-thread cache of small payload blocks (envelope.cpp, see
// payload_allocator) lets tests observe. Not part of the public API.

#include <cstdint>

namespace swarmflow {

/// How many small blocks (of at most 4 KiB) were freed on a thread after its
/// cache was gone: freed by a thread_local destroyed after the cache at the
/// thread's exit, and so handed straight back to the heap. A count for the
/// whole process, so that tests can see this rare path taken; it costs
/// nothing on the usual one.
std::uint64_t small_blocks_freed_after_thread_cache();

}  // namespace swarmflow
