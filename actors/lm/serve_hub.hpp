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
///
/// A pipeline that takes no requests (no lm.prompts: its token streams come
/// from its own sources, as ultrasound.report's findings do) is *followed*
/// instead: every token lm.detokenize passes on goes into a bounded log that
/// any number of clients read from where they are (GET /v1/streams). A
/// follower that falls further behind than the log holds skips what it
/// lost, and is told how much; nothing waits for a slow follower.

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
  std::uint64_t position = 0;       ///< the token's place in its stream (of the end: one past its last)
};

/// A token of a followed stream, numbered in the order the log took it.
struct FollowedEvent {
  std::uint64_t number = 0;   ///< from 1, one more for each event the log takes
  std::uint64_t request = 0;  ///< the stream's request id
  ServeEvent event;
};

/// What a follower reads at once.
struct FollowBatch {
  std::vector<FollowedEvent> events;  ///< in order, from the cursor on
  std::uint64_t lost = 0;             ///< events before those that the log no longer held
  bool ended = false;                 ///< the pipeline has finished and the follower has read everything
};

class ServeHub {
 public:
  /// At most `max_active` requests admitted and not finished at once.
  explicit ServeHub(std::size_t max_active) : max_active_(max_active) {}
  /// A hub that is followed (a pipeline that takes no requests): its log
  /// keeps the last `backlog` events.
  static constexpr std::size_t kFollowBacklog = 8192;
  ServeHub(std::size_t max_active, bool followed, std::size_t backlog = kFollowBacklog)
      : max_active_(max_active), followed_(followed), backlog_(backlog) {}
  bool followed() const { return followed_; }

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
  /// An event for request `id` (ignored if it is no longer held); on a
  /// followed hub, the next event of the log.
  void deliver(std::uint64_t id, ServeEvent event);
  /// The pipeline has finished: followers end once they have read the log.
  void end_streams();

  // -- a follower's side (a followed hub)
  /// The number the next event will get: where a follower of what comes
  /// from now on starts.
  std::uint64_t follow_next() const;
  /// Events numbered `from` on (at most `max`), waiting up to `timeout` for
  /// one; empty on timeout. `from` 0 is the oldest the log holds;
  /// events from `from` on that the log no longer holds are `lost` (and
  /// counted in the figures).
  FollowBatch follow(std::uint64_t from, std::size_t max, std::chrono::milliseconds timeout);
  /// A follower came or went (counted in the figures); false when
  /// `max_followers` follow already.
  bool add_follower(std::size_t max_followers);
  void remove_follower();

  // -- figures
  struct Figures {
    std::size_t active = 0;       ///< admitted and not answered
    std::size_t queued = 0;       ///< admitted, not yet taken into the pipeline
    std::uint64_t admitted = 0;
    std::uint64_t overloaded = 0;  ///< refused because max_active were in flight
    std::uint64_t cancelled = 0;   ///< withdrawn because their client went away
    std::uint64_t completed = 0;
    std::size_t followers = 0;         ///< clients following the streams now
    std::uint64_t followed_events = 0;  ///< events the follow log took
    std::uint64_t follow_lost = 0;      ///< events followers asked for that the log no longer held
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
  // The follow log: events numbered log_first_ on.
  bool followed_ = false;
  std::size_t backlog_ = kFollowBacklog;
  std::deque<FollowedEvent> log_;
  std::uint64_t log_next_ = 1;
  bool ended_ = false;
  std::condition_variable log_grew_;
};

/// The hub of this process's server, or null; set it before the pipeline
/// starts and clear it after the run.
void attach_serve_hub(ServeHub* hub);
ServeHub* serve_hub();

}  // namespace swarmflow::lm
