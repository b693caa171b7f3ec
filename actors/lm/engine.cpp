#include "lm/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
  const int generated = static_cast<int>(request.generated.size());
  if (generated >= request.max_tokens) return "request " + std::to_string(request.id) + " has no tokens left to generate";
  for (int t : request.generated) {
    if (t < 0 || t >= model_.config().vocab) return "a generated token id is out of range";
  }
  // A request taken over feeds its prompt and what it had generated, and
  // reserves what is left: the same total as at its start.
  BatchRequest br{request.id, prompt + generated, request.max_tokens - generated, now_ns};
  std::string refused = policy_.submit(br);
  if (!refused.empty()) return refused;
  std::vector<int> tokens = request.prompt;
  tokens.insert(tokens.end(), request.generated.begin(), request.generated.end());
  // Its KV cache is allocated when it joins the running batch (`step`),
  // within the budget: a queued request holds none.
  auto seq = std::make_unique<Sequence>(
      Sequence{request, std::move(tokens), KvCache(), Sampler(request.sampling), {}, generated, {}, {}});
  if (!request.sampler_state.empty() && !seq->sampler.set_state(request.sampler_state)) {
    policy_.finish(request.id);
    return "the sampler state of request " + std::to_string(request.id) + " is not one";
  }
  for (int t : request.generated) seq->text += tokenizer_.piece(t);
  seq->timing.arrived_ns = now_ns;
  if (generated > 0) {
    seq->timing.first_token_ns = now_ns;  // its first token came before
    seq->timing.resumed = true;
  }
  seq->timing.tokens = generated;
  seq->request.generated.clear();
  seq->request.sampler_state.clear();
  sequences_.emplace(request.id, std::move(seq));
  return {};
}

namespace {

// The little-endian fields of a saved engine.
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
void put_f64(std::string& out, double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_u64(out, bits);
}
void put_ints(std::string& out, const std::vector<int>& v) {
  put_u64(out, v.size());
  for (int x : v) put_u64(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(x)));
}

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  bool ok = true;
  std::uint64_t u64() {
    if (in.size() - at < 8) {
      ok = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
    at += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (!ok || in.size() - at < n) {
      ok = false;
      return {};
    }
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  double f64() {
    const std::uint64_t bits = u64();
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::vector<int> ints() {
    const std::uint64_t n = u64();
    if (!ok || n > (in.size() - at) / 8) {
      ok = false;
      return {};
    }
    std::vector<int> v;
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(static_cast<int>(static_cast<std::int64_t>(u64())));
    return v;
  }
};

constexpr std::uint64_t kSaveMagic = 0x31454e474d4c4653ULL;  // "SFLMENG1"

}  // namespace

std::string Engine::save() const {
  std::string out;
  put_u64(out, kSaveMagic);
  put_u64(out, sequences_.size());
  for (const auto& [id, seq] : sequences_) {
    const GenerateRequest& r = seq->request;
    put_u64(out, r.id);
    put_u64(out, static_cast<std::uint64_t>(r.max_tokens));
    put_f64(out, r.sampling.temperature);
    put_u64(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(r.sampling.top_k)));
    put_f64(out, r.sampling.top_p);
    put_u64(out, r.sampling.seed);
    put_u64(out, r.stop.size());
    for (const auto& s : r.stop) put_str(out, s);
    put_ints(out, r.prompt);
    put_ints(out, std::vector<int>(seq->tokens.begin() + static_cast<std::ptrdiff_t>(r.prompt.size()), seq->tokens.end()));
    put_str(out, seq->sampler.state());
  }
  return out;
}

std::string Engine::load(const std::string& state, std::int64_t now_ns) {
  Reader in{state};
  if (in.u64() != kSaveMagic) return "not a saved lm.generate engine";
  const std::uint64_t n = in.u64();
  std::vector<GenerateRequest> requests;
  for (std::uint64_t i = 0; i < n && in.ok; ++i) {
    GenerateRequest r;
    r.id = in.u64();
    r.max_tokens = static_cast<int>(in.u64());
    r.sampling.temperature = in.f64();
    r.sampling.top_k = static_cast<int>(static_cast<std::int64_t>(in.u64()));
    r.sampling.top_p = in.f64();
    r.sampling.seed = in.u64();
    const std::uint64_t stops = in.u64();
    for (std::uint64_t k = 0; k < stops && in.ok; ++k) r.stop.push_back(in.str());
    r.prompt = in.ints();
    r.generated = in.ints();
    r.sampler_state = in.str();
    requests.push_back(std::move(r));
  }
  if (!in.ok || in.at != state.size()) return "a saved lm.generate engine is truncated or has trailing bytes";
  for (auto& r : requests) {
    const std::uint64_t id = r.id;
    if (std::string why = submit(std::move(r), now_ns); !why.empty()) {
      return "request " + std::to_string(id) + " cannot be taken over: " + why;
    }
  }
  return {};
}

void Engine::cancel(std::uint64_t id) {
  policy_.finish(id);
  sequences_.erase(id);
}

bool Engine::resync(std::uint64_t id, int position, int token) {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || position < 0 || token < 0 || token >= model_.config().vocab) return false;
  Sequence& seq = *it->second;
  const int prompt = static_cast<int>(seq.request.prompt.size());
  if (position >= seq.generated) {
    if (position < seq.request.max_tokens) seq.agreed[position] = token;
    return false;
  }
  const std::size_t at = static_cast<std::size_t>(prompt + position);
  if (seq.tokens[at] == token) return false;
  // From `position` on it diverged: the agreed token replaces its own, and
  // what it made after it is made again.
  seq.tokens.resize(at);
  seq.tokens.push_back(token);
  seq.generated = position + 1;
  seq.text.clear();
  for (std::size_t k = static_cast<std::size_t>(prompt); k < seq.tokens.size(); ++k) seq.text += tokenizer_.piece(seq.tokens[k]);
  seq.cache.truncate(static_cast<int>(at));
  policy_.rewind(id, static_cast<int>(at));
  for (auto a = seq.agreed.begin(); a != seq.agreed.end();) a = a->first <= position ? seq.agreed.erase(a) : std::next(a);
  return true;
}

std::vector<RequestTiming> Engine::take_timings() {
  std::vector<RequestTiming> out;
  out.swap(finished_);
  return out;
}

int Engine::calibrate(const std::function<std::int64_t()>& clock) {
  if (!clock) return 0;
  const BatchSettings& s = policy_.settings();
  const int most = s.max_size + std::max(1, s.prefill_chunk);
  const int context = std::min(24, model_.config().max_seq_len - 1);
  const std::int64_t room = s.kv_budget_tokens - policy_.reserved_tokens();
  if (context < 1 || static_cast<std::int64_t>(most) * (context + 1) > room) return 0;
  std::vector<KvCache> caches;
  caches.reserve(static_cast<std::size_t>(most));
  std::vector<int> prompt(static_cast<std::size_t>(context));
  for (int i = 0; i < context; ++i) prompt[static_cast<std::size_t>(i)] = (7 * i + 3) % model_.config().vocab;
  std::vector<ForwardItem> items;
  for (int i = 0; i < most; ++i) {
    caches.emplace_back(model_.config(), context + 1);
    items.push_back(ForwardItem{&caches.back(), prompt.data(), context, false});
  }
  model_.forward(items, logits_);
  const int token = prompt[0];
  // Twelve rounds over the sizes, up and down in turn, each size's fastest
  // kept: a single step's time moves by half on a shared machine, the
  // fastest of a dozen hardly. A size over 1.5 times the factor's budget
  // cannot be the cap: the first round goes up the sizes only to the first
  // such one (the larger are predicted no cheaper), and from the fourth on
  // a size found over it is left. Past a second on the clock, the rounds
  // stop where they are.
  const double factor = s.max_step_factor;
  std::vector<std::int64_t> fastest(static_cast<std::size_t>(most) + 1, std::numeric_limits<std::int64_t>::max());
  auto over = [&](std::size_t n) {
    return factor > 0 && static_cast<double>(fastest[n]) > 1.5 * factor * static_cast<double>(fastest[1]);
  };
  constexpr std::int64_t kMaxNs = 1'000'000'000;
  const std::int64_t start = clock();
  int limit = most;   // the sizes the rounds go to
  int largest = 0;    // the largest size timed
  bool out_of_time = false;
  for (int round = 0; round < 12 && !out_of_time; ++round) {
    for (int k = 0; k < limit; ++k) {
      const int t = round % 2 == 0 ? 1 + k : limit - k;
      const std::size_t n = static_cast<std::size_t>(t);
      if (round >= 3 && over(n)) continue;
      items.clear();
      for (int i = 0; i < t; ++i) items.push_back(ForwardItem{&caches[static_cast<std::size_t>(i)], &token, 1, false});
      step_tokens_ = t;
      const std::int64_t t0 = clock();
      model_.forward(items, logits_);
      const std::int64_t t1 = clock();
      for (int i = 0; i < t; ++i) caches[static_cast<std::size_t>(i)].truncate(context);
      fastest[n] = std::min(fastest[n], t1 - t0);
      largest = std::max(largest, t);
      policy_.observe_step(t, t1 - t0);
      if (round == 0 && t > 1 && over(n)) {
        limit = t;
        break;
      }
      if (t1 - start > kMaxNs) {
        out_of_time = true;
        break;
      }
    }
  }
  step_tokens_ = 0;
  return largest;
}

void Engine::take_step_times(const std::vector<double>& fastest_ns) {
  for (std::size_t t = 1; t < fastest_ns.size(); ++t) {
    if (fastest_ns[t] > 0) policy_.observe_step(static_cast<int>(t), static_cast<std::int64_t>(fastest_ns[t]));
  }
}

std::int64_t Engine::step(std::int64_t now_ns, std::vector<TokenEvent>& events) {
  if (sequences_.empty()) return -1;
  StepPlan plan = policy_.plan(now_ns);
  for (std::uint64_t id : plan.joined) {
    Sequence& seq = *sequences_.at(id);
    seq.cache = KvCache(model_.config(), static_cast<int>(seq.request.prompt.size()) + seq.request.max_tokens);
  }
  if (plan.slots.empty()) return plan.wake_ns > 0 ? plan.wake_ns : -1;

  std::vector<ForwardItem> items;
  std::vector<Sequence*> seqs;
  for (const StepSlot& s : plan.slots) {
    Sequence* seq = sequences_.at(s.id).get();
    items.push_back(ForwardItem{&seq->cache, seq->tokens.data() + s.first, s.count, false});
    seqs.push_back(seq);
  }
  last_batch_size_ = static_cast<int>(items.size());
  step_tokens_ = 0;
  for (const StepSlot& s : plan.slots) step_tokens_ += s.count;
  model_.forward(items, logits_);
  const std::int64_t done_ns = clock_ ? clock_() : now_ns;
  if (clock_) policy_.observe_step(step_tokens_, done_ns - now_ns);

  const int vocab = model_.config().vocab;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    if (!plan.slots[i].samples) continue;
    Sequence& seq = *seqs[i];
    SampledToken tok = seq.sampler.sample(&logits_[i * static_cast<std::size_t>(vocab)], vocab);
    if (tamper_) tamper_(seq.request.id, seq.generated, tok.id, tok.logprob);
    if (auto a = seq.agreed.find(seq.generated); a != seq.agreed.end()) {
      // Decided already: the agreed token, at its probability here.
      const float* row = &logits_[i * static_cast<std::size_t>(vocab)];
      const float top = *std::max_element(row, row + vocab);
      const double z = sum_exp(row, vocab, top);
      tok.id = a->second;
      tok.logprob = static_cast<double>(row[tok.id] - top) - std::log(z);
      seq.agreed.erase(a);
    }
    TokenEvent ev;
    ev.request = seq.request.id;
    ev.position = seq.generated;
    ev.token = tok.id;
    ev.piece = tokenizer_.piece(tok.id);
    ev.logprob = tok.logprob;
    ev.prompt_tokens = static_cast<int>(seq.request.prompt.size());
    seq.tokens.push_back(tok.id);
    seq.text += ev.piece;
    ++seq.generated;
    if (seq.timing.first_token_ns == 0) seq.timing.first_token_ns = done_ns;
    seq.timing.last_token_ns = done_ns;
    seq.timing.tokens = seq.generated;
    for (const std::string& s : seq.request.stop) {
      if (!s.empty() && seq.text.size() >= s.size() && seq.text.compare(seq.text.size() - s.size(), s.size(), s) == 0) {
        ev.final = true;
        ev.finish_reason = "stop";
      }
    }
    if (!ev.final && tok.id == model_.config().eos) {
      ev.final = true;
      ev.finish_reason = "stop";
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
