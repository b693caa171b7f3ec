#pragma once
/// \file engine.hpp
/// Generation with continuous batching: requests are submitted at any time,
/// each `step` runs one decoding iteration of the running batch (as planned
/// by BatchPolicy) through the model in one forward pass, and returns the
/// tokens it produced. Each request has its own KV cache, sized to what it
/// reserved, and its own seeded sampler, so its tokens do not depend on the
/// batch it ran in.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lm/batch_policy.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "lm/tokenizer.hpp"

namespace swarmflow::lm {

struct GenerateRequest {
  std::uint64_t id = 0;
  std::vector<int> prompt;  ///< token ids, BOS first
  int max_tokens = 32;
  SamplingParams sampling;
  std::vector<std::string> stop;  ///< generation ends once the text ends with one of these
  /// A request taken over from a snapshot: the tokens it had generated (its
  /// prompt and these are fed again, and it goes on from there) and its
  /// sampler's state.
  std::vector<int> generated;
  std::string sampler_state;
};

/// One generated token.
struct TokenEvent {
  std::uint64_t request = 0;
  int position = 0;  ///< 0 for the first generated token
  int token = 0;
  std::string piece;
  double logprob = 0.0;
  bool final = false;
  std::string finish_reason;  ///< with `final`: "length", "stop" or "context"
  int prompt_tokens = 0;      ///< the request's prompt length
};

/// Per-request timings, on the clock the caller passes to `submit`/`step`.
struct RequestTiming {
  std::int64_t arrived_ns = 0;
  std::int64_t first_token_ns = 0;
  std::int64_t last_token_ns = 0;
  int tokens = 0;
  bool resumed = false;  ///< taken over from a snapshot: its first token came before
};

class Engine {
 public:
  /// The model must outlive the engine.
  Engine(const Model& model, BatchSettings settings);

  /// Queues a request; returns "" or why it is refused.
  std::string submit(GenerateRequest request, std::int64_t now_ns);
  /// Every request it holds, running or queued, with what each has
  /// generated, so that `load` on another engine goes on where this one is.
  std::string save() const;
  /// Takes over the requests `save` wrote; "" or why it cannot.
  std::string load(const std::string& state, std::int64_t now_ns);
  /// Token times are read from `clock` after each step's forward pass
  /// (without it, the `now_ns` the step is given); the time from `now_ns`
  /// to then is the step's duration, which the policy's step cap learns
  /// from (batch.max_step_factor).
  void set_clock(std::function<std::int64_t()> clock) { clock_ = std::move(clock); }
  /// Times a step of every size the policy can plan (1 to max_size +
  /// prefill_chunk tokens: one token each of that many scratch sequences
  /// of 24 tokens) on `clock` (the stage passes its thread's CPU time, so
  /// that a moment the thread was not running does not count), and tells
  /// the policy, so that its step cap (batch.max_step_factor) starts from
  /// every size's time rather than from the sizes the first requests happen
  /// to make. Twelve rounds, each size's fastest kept; sizes over 1.5 times
  /// the factor's budget are timed at most three times, and only the first
  /// of them; at most about a second on the clock. Adds no request and
  /// leaves those held as they were; its scratch caches hold max_size +
  /// prefill_chunk times 25 tokens, and it times nothing (returns 0) when
  /// they would not fit in what the KV budget has left. Returns the largest
  /// size timed.
  int calibrate(const std::function<std::int64_t()>& clock);
  /// Step times timed before (StepCost::fastest_ns of an engine on the same
  /// model and settings, as a restarted replica keeps them), taken as if
  /// timed here.
  void take_step_times(const std::vector<double>& fastest_ns);
  /// Fault injection (tests, demos): called with each sampled token before
  /// it is taken; it may replace the token and its log-probability (the
  /// sequence goes on from what it leaves there, as a faulty replica would).
  using Tamper = std::function<void(std::uint64_t request, int position, int& token, double& logprob)>;
  void set_tamper(Tamper tamper) { tamper_ = std::move(tamper); }
  /// The agreed token at `position` of request `id` (a decision fed back):
  /// if it had generated another one there, it drops that token and all
  /// after it, rewinds its KV cache and goes on from the agreed one (those
  /// positions are generated, and emitted, again); if it has not reached
  /// `position` yet, it takes the agreed token when it does. Returns true
  /// when it replaced a token it had generated.
  bool resync(std::uint64_t id, int position, int token);
  /// Whether request `id` is held (running or queued).
  bool holds(std::uint64_t id) const { return sequences_.count(id) != 0; }
  /// One decoding iteration; appends the tokens produced to `events`.
  /// Returns 0 when it ran, else the time to call again (nothing runnable
  /// until then), or -1 when there is no work at all.
  std::int64_t step(std::int64_t now_ns, std::vector<TokenEvent>& events);
  /// Drops a request and frees its KV cache.
  void cancel(std::uint64_t id);

  bool idle() const { return sequences_.empty(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const BatchPolicy& policy() const { return policy_; }
  /// Timings of finished requests, taken (and cleared) by the caller.
  std::vector<RequestTiming> take_timings();
  /// Tokens fed by the step running (read by a clock) or last run.
  int step_tokens() const { return step_tokens_; }
  /// Requests in the step last run (0 before the first).
  int last_batch_size() const { return last_batch_size_; }

 private:
  struct Sequence {
    GenerateRequest request;
    std::vector<int> tokens;  // prompt, then generated
    KvCache cache;
    Sampler sampler;
    std::string text;
    int generated = 0;
    RequestTiming timing;
    std::map<int, int> agreed;  ///< position -> token, decisions ahead of it
  };

  const Model& model_;
  Tokenizer tokenizer_;
  BatchPolicy policy_;
  std::map<std::uint64_t, std::unique_ptr<Sequence>> sequences_;
  std::vector<RequestTiming> finished_;
  int last_batch_size_ = 0;
  int step_tokens_ = 0;
  std::vector<float> logits_;
  std::function<std::int64_t()> clock_;
  Tamper tamper_;
};

}  // namespace swarmflow::lm
