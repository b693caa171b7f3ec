#include "lm/engine.hpp"

#include <algorithm>

namespace swarmflow::lm {

Engine::Engine(const Model& model, BatchSettings settings)
    : model_(model), tokenizer_(model.pieces(), model.config().bos), policy_(settings) {}

std::string Engine::submit(GenerateRequest request, std::int64_t now_ns) {
  if (sequences_.count(request.id) != 0) return "request id " + std::to_string(request.id) + " is already running";
  const int context = model_.config().max_seq_len;
  const int prompt = static_cast<int>(request.prompt.size());
  if (prompt >= context) {
    return "prompt of " + std::to_string(prompt) + " tokens, the model's context is " + std::to_string(context);
  }
  request.max_tokens = std::max(1, std::min(request.max_tokens, context - prompt));
  BatchRequest br{request.id, prompt, request.max_tokens, now_ns};
  std::string refused = policy_.submit(br);
  if (!refused.empty()) return refused;
  auto seq = std::make_unique<Sequence>(Sequence{request, request.prompt, KvCache(model_.config(), prompt + request.max_tokens),
                                                 Sampler(request.sampling), {}, 0, {}});
  seq->timing.arrived_ns = now_ns;
  sequences_.emplace(request.id, std::move(seq));
  return {};
}

void Engine::cancel(std::uint64_t id) {
  policy_.finish(id);
  sequences_.erase(id);
}

std::vector<RequestTiming> Engine::take_timings() {
  std::vector<RequestTiming> out;
  out.swap(finished_);
  return out;
}

std::int64_t Engine::step(std::int64_t now_ns, std::vector<TokenEvent>& events) {
  if (sequences_.empty()) return -1;
  StepPlan plan = policy_.plan(now_ns);
  if (plan.slots.empty()) return plan.wake_ns > 0 ? plan.wake_ns : -1;

  std::vector<ForwardItem> items;
  std::vector<Sequence*> seqs;
  for (const StepSlot& s : plan.slots) {
    Sequence* seq = sequences_.at(s.id).get();
    items.push_back(ForwardItem{&seq->cache, seq->tokens.data() + s.first, s.count, false});
    seqs.push_back(seq);
  }
  batch_sizes_.push_back(static_cast<int>(items.size()));
  model_.forward(items, logits_);

  const int vocab = model_.config().vocab;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    if (!plan.slots[i].samples) continue;
    Sequence& seq = *seqs[i];
    const SampledToken tok = seq.sampler.sample(&logits_[i * static_cast<std::size_t>(vocab)], vocab);
    TokenEvent ev;
    ev.request = seq.request.id;
    ev.position = seq.generated;
    ev.token = tok.id;
    ev.piece = tokenizer_.piece(tok.id);
    ev.logprob = tok.logprob;
    seq.tokens.push_back(tok.id);
    seq.text += ev.piece;
    ++seq.generated;
    if (seq.timing.first_token_ns == 0) seq.timing.first_token_ns = now_ns;
    seq.timing.last_token_ns = now_ns;
    seq.timing.tokens = seq.generated;
    for (const std::string& s : seq.request.stop) {
      if (!s.empty() && seq.text.size() >= s.size() && seq.text.compare(seq.text.size() - s.size(), s.size(), s) == 0) {
        ev.final = true;
        ev.finish_reason = "stop";
      }
    }
    if (!ev.final && seq.generated >= seq.request.max_tokens) {
      ev.final = true;
      ev.finish_reason = static_cast<int>(seq.tokens.size()) >= model_.config().max_seq_len ? "context" : "length";
    }
    const bool done = ev.final;
    events.push_back(std::move(ev));
    if (done) {
      finished_.push_back(seq.timing);
      const std::uint64_t id = seq.request.id;
      policy_.finish(id);
      sequences_.erase(id);
    }
  }
  return 0;
}

}  // namespace swarmflow::lm
