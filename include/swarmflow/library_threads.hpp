#pragma once
/// \file library_threads.hpp
/// The worker pools of libraries that stages call into (OpenCV's, behind
/// its `parallel_for_`), whose size is one setting of the whole process.
///
/// A pack built on such a library registers how to read and set that size;
/// the runtime holds it at what the pipeline file asks (`opencv: {threads}`,
/// one thread unless it says otherwise) for as long as the run lasts, and
/// sets the size it found back when the run ends. Why one: units already
/// run stages side by side on their own worker threads, one per core, and a
/// library's pool on top of them only competes with them for the same cores
/// (docs/design.md, "OpenCV's threads in a unit").
///
/// ```cpp
/// swarmflow::register_library_threads(
///     "opencv", {[] { return cv::getNumThreads(); }, [](int n) { cv::setNumThreads(n); }});
/// ```
///
/// Every pack of the catalogue built on OpenCV registers it when its stages
/// are registered; a plugin built on OpenCV that registers none of them
/// registers it itself.

#include <functional>
#include <string>

#include <swarmflow/status.hpp>

namespace swarmflow {

/// How to read and set one library's worker threads.
struct LibraryThreads {
  std::function<int()> get;      ///< the threads the library's parallel loops use now
  std::function<void(int)> set;  ///< makes them `n` (the library's own call)
};

/// Registers how to read and set `library`'s threads ("opencv"). A second
/// registration of one name replaces the first: every pack built on the
/// library may register it.
void register_library_threads(const std::string& library, LibraryThreads control);

/// Whether `library` registered its threads in this process.
bool library_threads_registered(const std::string& library);

/// Holds a library's worker threads at a size while it lives. When the last
/// hold of the library ends, the size found by the first is set again.
/// Holds that overlap (two runs in one process) share the process's one
/// setting: the latest hold's size applies.
class LibraryThreadsHold {
 public:
  LibraryThreadsHold() = default;
  LibraryThreadsHold(const LibraryThreadsHold&) = delete;
  LibraryThreadsHold& operator=(const LibraryThreadsHold&) = delete;
  ~LibraryThreadsHold() { release(); }

  /// Sets `library`'s threads to `threads` (at least 1) and holds them;
  /// fails, holding nothing, if the library is not registered. A hold held
  /// already is released first.
  Status hold(const std::string& library, int threads);
  /// Ends the hold (nothing if none is held).
  void release();
  /// Whether a hold is held.
  bool held() const { return !library_.empty(); }

 private:
  std::string library_;
};

}  // namespace swarmflow
