#pragma once
/// \file batch_policy.hpp
/// Iteration-level (Orca-style) scheduling of generation requests, as pure
/// code: no model, no clock of its own. The engine asks it, before every
/// decoding step, which requests run and how many tokens each feeds in.
///
/// - A request is admitted (or refused with a reason) when it is submitted:
///   it needs `prompt + max_tokens` tokens of KV cache, reserved for its whole
///   life, so the reserved total never passes the budget.
/// - Queued requests join the running batch at the next step, oldest first,
///   while there is room (`max_size` requests and the KV budget).
/// - With nothing running, a step starts when `max_size` requests wait or the
///   oldest has waited `max_wait`; before that `plan` says when to ask again.
/// - Prompts are fed in chunks: a step carries one token per decoding request
///   and at most `prefill_chunk` prompt tokens, so a long prompt is spread
///   over several steps and the others keep decoding.
/// - With `max_step_factor`, a step feeds at most a cap of tokens, chosen
///   from the step times the engine reports (`observe_step`): among the
///   step sizes that stay within that many times a one-token step, the one
///   that gives the most tokens per second (the fewest tokens within 5 % of
///   that). The running batch and the prefill share of a step are capped,
///   so that the time per output token of a batch stays within that factor
///   of decoding alone, at the best throughput the factor allows.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace swarmflow::lm {

struct BatchSettings {
  int max_size = 8;                    ///< requests in the running batch
  std::int64_t max_wait_ns = 0;        ///< how long a lone request waits for company
  std::int64_t kv_budget_tokens = 4096;  ///< KV cache tokens reserved at most
  int prefill_chunk = 64;              ///< prompt tokens fed per step, all requests together
  int max_queue = 256;                 ///< requests waiting at most; more are refused
  /// 0: no cap; else (>= 1) a step takes at most this many times a step of
  /// one token, as the measured step times predict.
  double max_step_factor = 0;
};

/// What a step of each size costs. A step's time is not a line in its
/// tokens: a matrix kernel's tiles make 7 tokens cost much more than 6, and
/// 6 little more than 4. So each size keeps its own time: the fastest step
/// of that many tokens timed, before the replica's first step
/// (Engine::calibrate) or since. The machine only ever adds to a step's time (another thread
/// on the core, weights gone cold in the cache), so the fastest is what
/// the size itself costs, and sizes compare fairly whenever each was
/// timed. A line fitted to the steps run (fixed + per_token x tokens,
/// least squares, recent steps weighing more) predicts the sizes not timed;
/// without a line, a size not timed cannot be the cap.
struct StepCost {
  double fixed_ns = 0;
  double per_token_ns = 0;  ///< 0 until there is a fit
  /// [tokens]: the fastest step of that many tokens, 0 = none yet.
  std::vector<double> fastest_ns;
  double fitted(int tokens) const { return fixed_ns + per_token_ns * tokens; }
  /// A size timed: its fastest step; else the fit, and no less than the
  /// dearest smaller size timed.
  double predict(int tokens) const;
};

/// What the scheduler knows of a request.
struct BatchRequest {
  std::uint64_t id = 0;
  int prompt_tokens = 0;
  int max_tokens = 0;
  std::int64_t arrived_ns = 0;
};

/// One request's share of a step.
struct StepSlot {
  std::uint64_t id = 0;
  int first = 0;       ///< index of the first token fed (in prompt + generated)
  int count = 0;       ///< tokens fed in this step
  bool samples = false;  ///< the step ends its prompt or decodes: a token follows
};

struct StepPlan {
  std::vector<StepSlot> slots;        ///< empty: nothing to do now
  std::vector<std::uint64_t> joined;  ///< requests admitted to the batch at this step
  std::int64_t wake_ns = 0;           ///< with no slots and work queued: ask again then
};

class BatchPolicy {
 public:
  explicit BatchPolicy(BatchSettings settings) : settings_(settings) {}

  /// Queues a request. Returns "" when queued, else why it is refused.
  std::string submit(const BatchRequest& request);
  /// The next step at time `now_ns`.
  StepPlan plan(std::int64_t now_ns);
  /// After a step: `id` has produced one more token (or finished its prompt).
  /// Its reservation is released by `finish`.
  void finish(std::uint64_t id);
  /// A running request's KV cache holds only its first `fed` tokens now
  /// (a re-sync replaced a later one): they are fed again from there.
  void rewind(std::uint64_t id, int fed);
  /// After a step: it fed `tokens` tokens and took `duration_ns`.
  void observe_step(int tokens, std::int64_t duration_ns);

  /// What steps cost: each size's fastest, and the line (per_token_ns 0:
  /// none yet).
  const StepCost& step_cost() const { return cost_; }
  /// Tokens a step may feed at most under max_step_factor, 0 = no cap (none
  /// set, or neither a one-token step nor a line known yet).
  int step_token_cap() const { return cap_; }

  std::int64_t reserved_tokens() const { return reserved_; }
  std::size_t running() const { return running_.size(); }
  std::size_t queued() const { return queue_.size(); }
  const BatchSettings& settings() const { return settings_; }

 private:
  struct Running {
    BatchRequest request;
    int fed = 0;  // tokens already in the KV cache
  };
  static int need(const BatchRequest& r) { return r.prompt_tokens + r.max_tokens; }

  BatchSettings settings_;
  std::deque<BatchRequest> queue_;
  std::vector<Running> running_;
  std::int64_t reserved_ = 0;
  // Weighted sums of the measured steps: weight, tokens, time, tokens^2,
  // tokens x time.
  double w_ = 0, t_ = 0, d_ = 0, tt_ = 0, td_ = 0;
  StepCost cost_;
  int cap_ = 0;
  int choose_cap() const;
};

}  // namespace swarmflow::lm
