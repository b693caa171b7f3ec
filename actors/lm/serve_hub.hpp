#pragma once
/// \file serve_hub.hpp
/// Where a server meets a pipeline in its process (`swarmflow serve`). The
/// server admits requests into a bounded set and waits on each one's token
/// events; `lm.prompts` takes the admitted requests as envelopes, and
/// `lm.detokenize` hands each request's tokens back as they pass. Requests
/// therefore travel the pipeline like any other envelopes (tokenize, then
/// generate on replicas that may be on other units); only the stages at
/// its two ends must be in the serving process.
///
/// While a hub is attached (`attach_serve_hub`), every lm.prompts in the
/// process reads requests from it instead of its file (its parameters are
/// the defaults of what a request leaves out) and ends its stream once the
/// hub is closed; every lm.detokenize delivers to it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace swarmflow::lm {

/// A request as a client sent it; what it leaves out, lm.prompts' parameters fill in.
struct ServeRequest {
  std::uint64_t id = 0;
  std::string text;
  std::optional<int> max_tokens;
  std::optional<double> temperature;
  std::optional<int> top_k;
  std::optional<double> top_p;
  std::optional<std::uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  bool cancel = false;  ///< withdraws request `id`
  std::int64_t arrived_ns = 0;
};

/// One token of a request's stream, or its end.
struct ServeEvent {
  int token = -1;  ///< -1: no token (a refusal, a cancellation)
  std::string piece;
  double logprob = 0;
  bool final = false;
  std::string finish_reason;  ///< with final: length, stop, context, cancelled, refused: why
  std::uint32_t prompt_tokens = 0;  ///< with the first token
};

class ServeHub {
 public:
  /// At most `max_active` requests admitted and not finished at once.
  explicit ServeHub(std::size_t max_active) : max_active_(max_active) {}

  // -- the server's side
  /// Admits a request and gives it an id; nullopt when `max_active` are
  /// in flight already (overload: answer 429) or the hub is closed.
  std::optional<std::uint64_t> admit(ServeRequest request);
  /// Waits up to `timeout` for request `id`'s next event; false on timeout
  /// (or for an id it does not hold).
  bool next(std::uint64_t id, ServeEvent& event, std::chrono::milliseconds timeout);
  /// The client is gone: the request is withdrawn (its KV cache freed where
  /// it runs) and forgotten here.
  void cancel(std::uint64_t id);
  /// The request is answered: forgets it.
  void forget(std::uint64_t id);
  /// No more requests: lm.prompts ends its stream once the queue is empty.
  void close();

  // -- the pipeline's side
  /// The next request to send into the pipeline, if any.
  std::optional<ServeRequest> take();
  bool closed() const;
  /// An event for request `id` (ignored if it is no longer held).
  void deliver(std::uint64_t id, ServeEvent event);

  // -- figures
  struct Figures {
    std::size_t active = 0;       ///< admitted and not answered
    std::size_t queued = 0;       ///< admitted, not yet taken into the pipeline
    std::uint64_t admitted = 0;
    std::uint64_t overloaded = 0;  ///< refused because max_active were in flight
    std::uint64_t cancelled = 0;   ///< withdrawn because their client went away
    std::uint64_t completed = 0;
  };
  Figures figures() const;

 private:
  /// Only the server thread answering a request waits on its `ready`, and
  /// only that thread forgets or cancels it.
  struct Active {
    std::deque<ServeEvent> events;
    std::condition_variable ready;
  };
  mutable std::mutex mutex_;
  std::size_t max_active_;
  std::uint64_t next_id_ = 1;
  std::deque<ServeRequest> queue_;
  std::map<std::uint64_t, Active> active_;
  bool closed_ = false;
  Figures figures_;
};

/// The hub of this process's server, or null; set it before the pipeline
/// starts and clear it after the run.
void attach_serve_hub(ServeHub* hub);
ServeHub* serve_hub();

}  // namespace swarmflow::lm
