#pragma once
/// \file lm_stages.hpp
/// The stages of the `lm` pack; see lm.hpp for their ports and parameters.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <swarmflow/schema/completion_generated.h>
#include <swarmflow/schema/prompt_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/stage.hpp>

#include "lm/engine.hpp"
#include "lm/model.hpp"
#include "lm/tokenizer.hpp"

namespace swarmflow::lm {

/// Sampling defaults shared by lm.prompts' parameters.
struct PromptDefaults {
  std::int64_t max_tokens = 32;
  double temperature = 0.0;
  std::int64_t top_k = 0;
  double top_p = 1.0;
  std::int64_t seed = 0;
  std::string stop;
};

class ServeHub;

class PromptSource final : public Stage {
 public:
  void setup(StageSpec& spec) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  /// A server's requests (serve_hub.hpp), instead of the file's.
  Status from_hub(Outputs& out, StageContext& ctx);
  ServeHub* hub_ = nullptr;
  OutputPort<schema::Prompt> out_;
  std::string path_;
  PromptDefaults defaults_;
  std::vector<PayloadPtr> prompts_;
  std::vector<std::uint64_t> ids_;
  std::size_t next_ = 0;
};

class Tokenize final : public Stage {
 public:
  void setup(StageSpec& spec) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Prompt> in_;
  OutputPort<schema::Prompt> out_;
  std::string model_path_;
  Tokenizer tokenizer_;
};

class Generate final : public Stage {
 public:
  void setup(StageSpec& spec) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  void stop(StageContext& ctx) override;
  /// Its requests (running and queued) with what each has generated: a
  /// replica that takes over goes on from there (docs/lm.md).
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

 private:
  void emit(const TokenEvent& event, Outputs& out);
  /// One decoding step of the running batch (a call without input).
  Status step(Outputs& out, StageContext& ctx);
  /// Ends request `id`'s stream with no token and `reason`.
  void emit_end(std::uint64_t id, const std::string& reason, Outputs& out);
  /// Asks to be called again while requests are held.
  void keep_going(StageContext& ctx, std::int64_t wake_ns);

  InputPort<schema::Prompt> in_;
  InputPort<schema::Tokens> agreed_;
  OutputPort<schema::Tokens> out_;
  std::string model_path_;
  /// Fault injection (docs/lm.md, "Faults"), on replica `fault_replica_` (-1: all).
  std::int64_t fault_replica_ = 0;
  std::int64_t lie_every_ = 0;
  double lie_confidence_ = 0.99;
  double slow_ms_ = 0;
  std::int64_t crash_every_ = 0;
  bool faulty_ = false;
  std::int64_t sampled_ = 0;  ///< tokens this replica sampled, for lie_every
  std::int64_t steps_ = 0;    ///< steps this instance ran, for crash_every
  std::int64_t max_size_ = 8;
  double max_wait_ms_ = 0;
  std::int64_t kv_budget_ = 4096;
  std::int64_t prefill_chunk_ = 64;
  std::int64_t max_queue_ = 256;
  double max_step_factor_ = 0.0;
  bool calibrated_ = true;  ///< the step sizes are timed (or need not be)
  std::shared_ptr<const Model> model_;  ///< shared with the process's other lm stages on the same file
  std::unique_ptr<Engine> engine_;
  /// The header of each held request's prompt: its tokens carry it on
  /// (capture time, part).
  std::map<std::uint64_t, EnvelopeHeader> headers_;
  std::vector<TokenEvent> events_;
  StageContext* context_ = nullptr;  ///< the replica's, from start on
};

class Detokenize final : public Stage {
 public:
  void setup(StageSpec& spec) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  /// The texts of requests not finished yet.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

 private:
  /// One request's stream as it comes: tokens by position (a voter may
  /// decide them out of order, a correction may replace one), passed on in
  /// order from `next`.
  struct Token {
    int id = 0;
    std::string piece;
    float logprob = 0;
  };
  struct Partial {
    std::string text;              ///< the pieces of positions before `next`
    std::uint32_t tokens = 0;      ///< positions before `next`
    std::uint64_t next = 0;        ///< the first position not passed on yet
    bool ended = false;            ///< its final envelope has come
    bool end_only = false;         ///< ... without a token (a refusal, a cancellation)
    std::uint64_t end = 0;         ///< with `ended`: one past its last position
    std::string finish_reason;
    std::uint32_t prompt_tokens = 0;
    std::map<std::uint64_t, Token> ahead;  ///< positions from `next` on that have come
  };
  /// Takes what is in order now; true once the request is complete.
  static bool advance(Partial& part, std::uint64_t id, ServeHub* hub);
  InputPort<schema::Tokens> in_;
  OutputPort<schema::Completion> out_;
  std::map<std::uint64_t, Partial> partial_;
};

}  // namespace swarmflow::lm
