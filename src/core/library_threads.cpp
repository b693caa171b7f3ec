// The worker pools of libraries that stages call into (swarmflow/library_threads.hpp).
//
// The library's setting is process-wide (OpenCV keeps one thread count for
// every caller), so what is known about it here is too: how to read and set
// it, and the holds that keep it while runs last.

#include <swarmflow/library_threads.hpp>

#include <map>
#include <mutex>

namespace swarmflow {
namespace {

struct Library {
  LibraryThreads control;
  int holds = 0;     ///< holds held now
  int found = 0;     ///< the size before the first of them
};

struct Libraries {
  std::mutex mutex;
  std::map<std::string, Library> by_name;
};

Libraries& libraries() {
  static Libraries l;
  return l;
}

}  // namespace

void register_library_threads(const std::string& library, LibraryThreads control) {
  Libraries& l = libraries();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.by_name[library].control = std::move(control);
}

bool library_threads_registered(const std::string& library) {
  Libraries& l = libraries();
  std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.by_name.find(library);
  return it != l.by_name.end() && it->second.control.get && it->second.control.set;
}

Status LibraryThreadsHold::hold(const std::string& library, int threads) {
  release();
  if (threads < 1) {
    return Status::error("threads of " + library + " must be at least 1, got " + std::to_string(threads),
                         StatusCode::invalid_argument);
  }
  Libraries& l = libraries();
  std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.by_name.find(library);
  if (it == l.by_name.end() || !it->second.control.get || !it->second.control.set) {
    return Status::error("no stage pack in this process registered the threads of " + library,
                         StatusCode::failed_precondition);
  }
  Library& lib = it->second;
  const int now = lib.control.get();
  if (lib.holds == 0) lib.found = now;
  // Setting a pool to the size it has would still rebuild it (OpenCV's
  // TBB arena): only a change is made.
  if (now != threads) lib.control.set(threads);
  ++lib.holds;
  library_ = library;
  return {};
}

void LibraryThreadsHold::release() {
  if (library_.empty()) return;
  Libraries& l = libraries();
  std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.by_name.find(library_);
  library_.clear();
  if (it == l.by_name.end()) return;
  Library& lib = it->second;
  if (--lib.holds > 0) return;
  if (lib.control.get() != lib.found) lib.control.set(lib.found);
}

}  // namespace swarmflow
