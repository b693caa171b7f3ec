#pragma once
/// \file lm.hpp
/// The `lm` pack: a small language model (docs/lm.md) run as pipeline stages.
/// Model files are `.sflm` (scripts/train_lm.py writes them); a relative
/// `model` or `path` is looked for in the working directory, then in the
/// source tree and the installed data directory (share/swarmflow).
///
/// lm.prompts — output `out` (swarmflow.schema.Prompt). A source.
///   path (string): a file of prompts, one a line: plain text, or a JSON
///   object {"prompt", "id", "max_tokens", "temperature", "top_k", "top_p",
///   "seed", "stop"} whose keys override the stage's defaults. Blank lines
///   are skipped. Request ids are the line's `id`, else 1, 2, 3, ...
///   max_tokens, temperature, top_k, top_p, seed, stop: defaults for each
///   prompt (`stop` is one string, `\n` written as a backslash and n).
///   One envelope per prompt: stream = request id. Counter `expected`.
/// lm.tokenize — input `in` (Prompt), output `out` (Prompt with `tokens`).
///   model (string). Counter `tokens`.
/// lm.generate — input `in` (Prompt), optional input `agreed` (Tokens: decisions
///   fed back, docs/lm.md), output `out` (swarmflow.schema.Tokens).
///   model (string); batch.max_size, batch.max_wait_ms, batch.kv_budget_tokens,
///   batch.prefill_chunk, batch.max_queue (lm/batch_policy.hpp); fault.replica,
///   fault.lie_every, fault.lie_confidence, fault.slow_ms, fault.crash_every.
///   A Prompt with `cancel` withdraws its request.
///   One envelope per generated token: Tokens{ids: [id], pieces: [text],
///   position, confidence: [p], logprobs: [log p], request_id, final,
///   finish_reason}; header stream = request id, seq = position, vote_key =
///   token id, confidence = p. A refused request gives one envelope with no
///   token, final, finish_reason "refused: why" (or "cancelled"). Counters:
///   requests, refused, cancelled, tokens, steps, batch_slots (sum of batch
///   sizes over steps), ttft_us_sum, tpot_us_sum, resynced, lies, crashes;
///   histograms ttft_ms, tpot_ms, batch_size.
/// lm.detokenize — input `in` (Tokens), output `out` (swarmflow.schema.Completion).
///   Collects each request's pieces; at its final token emits its text.
///   Under `swarmflow serve` it hands each token, in order, to the server:
///   to the client whose request it answers, or, in a pipeline without
///   lm.prompts, to the clients that follow GET /v1/streams (docs/serving.md).
///
/// ```yaml
/// stages:
///   - {id: prompts, type: lm.prompts, params: {path: pipelines/prompts.txt, max_tokens: 48}}
///   - {id: tok, type: lm.tokenize, inputs: {in: prompts/out}}
///   - id: gen
///     type: lm.generate
///     inputs: {in: tok/out}
///     params: {batch.max_size: 8, batch.kv_budget_tokens: 4096}
///   - {id: text, type: lm.detokenize, inputs: {in: gen/out}}
///   - {id: out, type: io.jsonl, inputs: {in: text/out}, params: {path: completions.jsonl}}
/// ```

#include <memory>
#include <string>

#include <swarmflow/registry.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow {

/// Adds lm.prompts, lm.tokenize, lm.generate and lm.detokenize.
void register_lm_stages(Registry& registry);

namespace lm {
/// `path` if it exists, else the first of the source tree and the installed
/// data directory that has it, else `path` unchanged.
std::string resolve_data_path(const std::string& path);

class Model;
/// The model file `path` names (resolve_data_path), loaded once in this
/// process and shared, read only (Model::forward is const), by every lm
/// stage and replica that names the same file while one of them holds it:
/// a pipeline's tokenize and generate, and generate's replicas, load and
/// pack its weights once. A file changed since (its size or time) is
/// loaded again.
Status shared_model(const std::string& path, std::shared_ptr<const Model>& out);
}  // namespace lm

}  // namespace swarmflow
