#include "lm/lm_stages.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "lm/lm.hpp"
#include "lm/serve_hub.hpp"

namespace swarmflow::lm {

namespace {

std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

constexpr const char* kDefaultModel = "models/devil-1m.sflm";
/// The sequence number of a stream's end without a token (a refusal, a
/// cancellation): apart from every token's position.
constexpr std::uint64_t kEndSeq = std::uint64_t{1} << 32;
/// How often lm.prompts looks for requests from a server when it has none.
constexpr std::int64_t kHubPollNs = 500'000;

}  // namespace

std::string resolve_data_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path, ec)) return path;
  for (const char* dir : {SWARMFLOW_LM_SOURCE_DIR, SWARMFLOW_LM_DATA_DIR}) {
    const fs::path candidate = fs::path(dir) / path;
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  return path;
}

Status shared_model(const std::string& param, std::shared_ptr<const Model>& out) {
  namespace fs = std::filesystem;
  const std::string path = resolve_data_path(param);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto time = ec ? fs::file_time_type{} : fs::last_write_time(path, ec);
  const std::string key =
      path + "|" + std::to_string(ec ? 0 : size) + "|" + std::to_string(time.time_since_epoch().count());
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const Model>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto held = loaded[key].lock()) {
    out = std::move(held);
    return {};
  }
  auto model = std::make_shared<Model>();
  if (Status s = Model::load(path, *model); !s.ok()) return s;
  for (auto it = loaded.begin(); it != loaded.end();) it = it->second.expired() ? loaded.erase(it) : std::next(it);
  loaded[key] = model;
  out = std::move(model);
  return {};
}

// -- lm.prompts -----------------------------------------------------------

void PromptSource::setup(StageSpec& s) {
  out_ = s.output<schema::Prompt>("out", "one generation request per prompt");
  s.param(path_, "path", "file of prompts, one a line (text, or a JSON object with \"prompt\")", "");
  s.param(defaults_.max_tokens, "max_tokens", "tokens to generate at most per prompt", 32, {1.0, 4096.0});
  s.param(defaults_.temperature, "temperature", "sampling temperature, 0 = greedy", 0.0, {0.0, 10.0});
  s.param(defaults_.top_k, "top_k", "sample among the k likeliest tokens, 0 = all", 0, {0.0, 1e6});
  s.param(defaults_.top_p, "top_p", "sample within this probability mass (nucleus), 1 = all", 1.0, {0.0, 1.0});
  s.param(defaults_.seed, "seed", "seed of each request's sampler", 0, {0.0, {}});
  s.param(defaults_.stop, "stop", "stop string (\\n for a new line), empty = none", "");
}

Status PromptSource::start(StageContext& ctx) {
  hub_ = serve_hub();
  if (hub_ != nullptr) return {};  // requests come from the server
  const std::string file = resolve_data_path(path_);
  std::ifstream in(file);
  if (!in) return Status::error("lm.prompts: cannot open '" + path_ + "'");
  prompts_.clear();
  ids_.clear();
  next_ = 0;
  std::string line;
  int line_no = 0;
  std::uint64_t next_id = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string text = line;
    PromptDefaults p = defaults_;
    std::vector<std::string> stop;
    if (!p.stop.empty()) stop.push_back(unescape(p.stop));
    std::uint64_t id = next_id;
    if (line[0] == '{') {
      try {
        const auto j = nlohmann::json::parse(line);
        text = j.at("prompt").get<std::string>();
        if (j.contains("id")) id = j["id"].get<std::uint64_t>();
        p.max_tokens = j.value("max_tokens", p.max_tokens);
        p.temperature = j.value("temperature", p.temperature);
        p.top_k = j.value("top_k", p.top_k);
        p.top_p = j.value("top_p", p.top_p);
        p.seed = j.value("seed", p.seed);
        if (j.contains("stop")) {
          stop.clear();
          if (j["stop"].is_string()) stop.push_back(j["stop"].get<std::string>());
          else for (const auto& s : j["stop"]) stop.push_back(s.get<std::string>());
        }
      } catch (const std::exception& e) {
        return Status::error("lm.prompts: " + file + ":" + std::to_string(line_no) + ": " + e.what());
      }
    }
    next_id = id + 1;
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<flatbuffers::String>> stops;
    for (const auto& s : stop) stops.push_back(fbb.CreateString(s));
    const auto t = fbb.CreateString(text);
    const auto st = fbb.CreateVector(stops);
    fbb.Finish(schema::CreatePrompt(fbb, id, t, 0, static_cast<int>(p.max_tokens), static_cast<float>(p.temperature),
                                    static_cast<int>(p.top_k), static_cast<float>(p.top_p),
                                    static_cast<std::uint64_t>(p.seed), st),
               schema::PromptIdentifier());
    prompts_.push_back(Payload::from_builder(fbb));
    ids_.push_back(id);
  }
  ctx.counter("expected").store(static_cast<std::int64_t>(prompts_.size()), std::memory_order_relaxed);
  return {};
}

Status PromptSource::from_hub(Outputs& out, StageContext& ctx) {
  std::optional<ServeRequest> r = hub_->take();
  if (!r) {
    if (ctx.stop_requested() || hub_->closed()) return Status::end_of_stream();
    ctx.defer_until(ctx.now_ns() + kHubPollNs);
    return {};
  }
  flatbuffers::FlatBufferBuilder fbb;
  EnvelopeHeader h;
  h.stream = r->id;
  h.capture_ns = r->arrived_ns != 0 ? r->arrived_ns : ctx.now_ns();
  if (r->cancel) {
    schema::PromptBuilder b(fbb);
    b.add_request_id(r->id);
    b.add_cancel(true);
    fbb.Finish(b.Finish(), schema::PromptIdentifier());
    h.seq = 1;  // not the request's own key
  } else {
    std::vector<std::string> stop;
    if (r->stop) {
      stop = *r->stop;
    } else if (!defaults_.stop.empty()) {
      stop.push_back(unescape(defaults_.stop));
    }
    std::vector<flatbuffers::Offset<flatbuffers::String>> stops;
    for (const auto& s : stop) stops.push_back(fbb.CreateString(s));
    const auto t = fbb.CreateString(r->text);
    const auto st = fbb.CreateVector(stops);
    fbb.Finish(schema::CreatePrompt(fbb, r->id, t, 0, r->max_tokens.value_or(static_cast<int>(defaults_.max_tokens)),
                                    static_cast<float>(r->temperature.value_or(defaults_.temperature)),
                                    r->top_k.value_or(static_cast<int>(defaults_.top_k)),
                                    static_cast<float>(r->top_p.value_or(defaults_.top_p)),
                                    r->seed.value_or(static_cast<std::uint64_t>(defaults_.seed)), st),
               schema::PromptIdentifier());
    h.seq = 0;
    ctx.counter("expected").fetch_add(1, std::memory_order_relaxed);
  }
  out.emit(out_, Payload::from_builder(fbb), h);
  return {};
}

Status PromptSource::process(Inputs&, Outputs& out, StageContext& ctx) {
  if (hub_ != nullptr) return from_hub(out, ctx);
  if (ctx.stop_requested() || next_ >= prompts_.size()) return Status::end_of_stream();
  EnvelopeHeader h;
  h.stream = ids_[next_];
  h.seq = 0;
  h.capture_ns = ctx.now_ns();
  out.emit(out_, prompts_[next_], h);
  ++next_;
  return {};
}

// -- lm.tokenize ----------------------------------------------------------

void Tokenize::setup(StageSpec& s) {
  in_ = s.input<schema::Prompt>("in", "requests with text");
  out_ = s.output<schema::Prompt>("out", "the same requests with their token ids");
  s.param(model_path_, "model", "model file (.sflm) whose tokenizer to use", kDefaultModel);
}

Status Tokenize::start(StageContext&) {
  std::shared_ptr<const Model> model;
  if (Status s = shared_model(model_path_, model); !s.ok()) return s;
  tokenizer_ = Tokenizer(model->pieces(), model->config().bos);
  return {};
}

Status Tokenize::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::Prompt* p = in.get(in_);
  if (p == nullptr) return Status::error("lm.tokenize: not a Prompt");
  if (p->cancel()) {
    out.forward(out_, *in.envelope());
    return {};
  }
  const std::vector<int> ids = tokenizer_.encode(p->text() ? p->text()->string_view() : std::string_view{}, true);
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<flatbuffers::String>> stops;
  if (p->stop()) {
    for (const auto* s : *p->stop()) stops.push_back(fbb.CreateString(s->string_view()));
  }
  const auto text = fbb.CreateString(p->text() ? p->text()->string_view() : std::string_view{});
  const auto tokens = fbb.CreateVector(ids);
  const auto st = fbb.CreateVector(stops);
  fbb.Finish(schema::CreatePrompt(fbb, p->request_id(), text, tokens, p->max_tokens(), p->temperature(), p->top_k(),
                                  p->top_p(), p->seed(), st),
             schema::PromptIdentifier());
  out.emit(out_, fbb);
  ctx.counter("tokens").fetch_add(static_cast<std::int64_t>(ids.size()), std::memory_order_relaxed);
  return {};
}

// -- lm.generate ----------------------------------------------------------

void Generate::setup(StageSpec& s) {
  in_ = s.input<schema::Prompt>("in", "generation requests (tokenized or not)");
  agreed_ = s.optional_input<schema::Tokens>(
      "agreed", "agreed tokens fed back from a voter (feedback: true): a replica that generated another token at "
                "that position goes on from the agreed one");
  out_ = s.output<schema::Tokens>("out", "one envelope per generated token");
  s.param(model_path_, "model", "model file (.sflm)", kDefaultModel);
  s.param(max_size_, "batch.max_size", "requests decoded together in one step", 8, {1.0, 256.0});
  s.param(max_wait_ms_, "batch.max_wait_ms", "how long a lone request waits for others before it starts", 0.0,
          {0.0, 10000.0});
  s.param(kv_budget_, "batch.kv_budget_tokens",
          "KV cache tokens reserved at most (prompt + max_tokens per running request)", 4096, {1.0, 1e8});
  s.param(prefill_chunk_, "batch.prefill_chunk", "prompt tokens fed per step, all requests together", 64,
          {1.0, 65536.0});
  s.param(max_queue_, "batch.max_queue", "requests waiting at most; more are refused", 256, {0.0, 1e6});
  s.param(max_step_factor_, "batch.max_step_factor",
          "0 = off; else (>= 1) a step feeds at most the tokens that keep it within this many times a one-token "
          "step, of those sizes the fewest within 5 % of the best tokens/s, by each size's fastest step (timed "
          "before the first step, and since)", 0.0, {0.0, 1000.0});
  s.param(fault_replica_, "fault.replica", "fault injection: the replica that misbehaves, -1 = every one", 0,
          {-1.0, 1e6});
  s.param(lie_every_, "fault.lie_every",
          "fault injection: every k-th token it samples is replaced by another, with fault.lie_confidence; 0 = never",
          0, {0.0, 1e9});
  s.param(lie_confidence_, "fault.lie_confidence", "fault injection: the probability a lie claims", 0.99,
          {0.0, 1.0});
  s.param(slow_ms_, "fault.slow_ms", "fault injection: extra time each decoding step takes, ms", 0.0, {0.0, 60000.0});
  s.param(crash_every_, "fault.crash_every",
          "fault injection: every k-th decoding step fails (the stage restarts, losing its requests); 0 = never", 0,
          {0.0, 1e9});
}

namespace {

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Step times (StepCost::fastest_ns) as timed by the first replica in this
/// process of a model with given batch sizes: a restarted replica, or
/// another one of the same stage, takes them instead of timing again.
class StepTimes {
 public:
  static StepTimes& process() {
    static StepTimes times;
    return times;
  }
  bool find(const std::string& key, std::vector<double>& out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return false;
    out = it->second;
    return true;
  }
  void keep(const std::string& key, const std::vector<double>& times) {
    std::lock_guard<std::mutex> lock(mu_);
    by_key_.emplace(key, times);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<double>> by_key_;
};

}  // namespace

Status Generate::start(StageContext& ctx) {
  std::shared_ptr<const Model> model;
  if (Status s = shared_model(model_path_, model); !s.ok()) return s;
  BatchSettings b;
  b.max_size = static_cast<int>(max_size_);
  b.max_wait_ns = static_cast<std::int64_t>(max_wait_ms_ * 1e6);
  b.kv_budget_tokens = kv_budget_;
  b.prefill_chunk = static_cast<int>(prefill_chunk_);
  b.max_queue = static_cast<int>(max_queue_);
  if (max_step_factor_ > 0 && max_step_factor_ < 1) {
    return Status::error("lm.generate: batch.max_step_factor is " + std::to_string(max_step_factor_) +
                         "; it is 0 (no cap) or at least 1 (a step cannot be shorter than a one-token step)");
  }
  b.max_step_factor = max_step_factor_;
  model_ = std::move(model);
  engine_ = std::make_unique<Engine>(*model_, b);
  context_ = &ctx;
  engine_->set_clock([context = context_] { return context->now_ns(); });
  calibrated_ = !(b.max_step_factor > 0);
  faulty_ = fault_replica_ < 0 || fault_replica_ == ctx.replica();
  steps_ = 0;
  if (faulty_ && lie_every_ > 0) {
    const int vocab = model_->config().vocab;
    engine_->set_tamper([this, vocab, &ctx](std::uint64_t, int, int& token, double& logprob) {
      if (++sampled_ % lie_every_ != 0) return;
      token = (token + 1 + static_cast<int>(sampled_ % (vocab - 1))) % vocab;  // never the sampled one
      logprob = std::log(std::max(lie_confidence_, 1e-9));
      ctx.counter("lies").fetch_add(1, std::memory_order_relaxed);
    });
  }
  headers_.clear();
  return {};
}

void Generate::stop(StageContext&) {
  engine_.reset();
  model_.reset();
}

void Generate::emit(const TokenEvent& e, Outputs& out) {
  const float p = static_cast<float>(std::exp(e.logprob));
  const float lp = static_cast<float>(e.logprob);
  flatbuffers::FlatBufferBuilder fbb;
  const auto ids = fbb.CreateVector(std::vector<int>{e.token});
  const auto pieces = fbb.CreateVector(std::vector<flatbuffers::Offset<flatbuffers::String>>{fbb.CreateString(e.piece)});
  const auto conf = fbb.CreateVector(std::vector<float>{p});
  const auto lps = fbb.CreateVector(std::vector<float>{lp});
  const auto reason = fbb.CreateString(e.finish_reason);
  fbb.Finish(schema::CreateTokens(fbb, ids, pieces, static_cast<std::uint64_t>(e.position), conf, e.final, e.request,
                                  lps, reason, static_cast<std::uint32_t>(e.prompt_tokens)),
             schema::TokensIdentifier());
  auto it = headers_.find(e.request);
  EnvelopeHeader h = it != headers_.end() ? it->second : out.base_header();
  h.stream = e.request;
  h.seq = static_cast<std::uint64_t>(e.position);
  h.vote_key = static_cast<std::uint64_t>(e.token);
  h.confidence = p;
  out.emit(out_, Payload::from_builder(fbb), h);
  if (e.final && it != headers_.end()) headers_.erase(it);
}

void Generate::emit_end(std::uint64_t id, const std::string& reason, Outputs& out) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto why = fbb.CreateString(reason);
  schema::TokensBuilder b(fbb);
  b.add_final(true);
  b.add_request_id(id);
  b.add_finish_reason(why);
  fbb.Finish(b.Finish(), schema::TokensIdentifier());
  auto it = headers_.find(id);
  EnvelopeHeader h = it != headers_.end() ? it->second : out.base_header();
  h.stream = id;
  h.seq = kEndSeq;
  h.confidence = 0.0F;
  out.emit(out_, Payload::from_builder(fbb), h);
  if (it != headers_.end()) headers_.erase(it);
}

void Generate::keep_going(StageContext& ctx, std::int64_t wake_ns) {
  if (!engine_->idle()) ctx.defer_until(wake_ns > 0 ? wake_ns : ctx.now_ns());
}

Status Generate::process(Inputs& in, Outputs& out, StageContext& ctx) {
  if (in.envelope() == nullptr) return step(out, ctx);
  if (const schema::Tokens* agreed = in.get(agreed_)) {
    // A decision fed back: a replica that diverged goes on from it.
    const std::size_t n = agreed->ids() != nullptr ? agreed->ids()->size() : 0;
    for (std::size_t k = 0; k < n; ++k) {
      const int position = static_cast<int>(agreed->position() + k);
      if (engine_->resync(agreed->request_id(), position, agreed->ids()->Get(static_cast<flatbuffers::uoffset_t>(k)))) {
        ctx.counter("resynced").fetch_add(1, std::memory_order_relaxed);
      }
    }
    keep_going(ctx, 0);
    return {};
  }
  const schema::Prompt* p = in.get(in_);
  if (p == nullptr) return Status::error("lm.generate: not a Prompt");
  const std::uint64_t id = p->request_id();
  if (p->cancel()) {
    // The client is gone: its KV cache is freed at once.
    if (engine_->holds(id)) {
      engine_->cancel(id);
      ctx.counter("cancelled").fetch_add(1, std::memory_order_relaxed);
      emit_end(id, "cancelled", out);
    }
    keep_going(ctx, 0);
    return {};
  }
  GenerateRequest r;
  r.id = id;
  if (p->tokens() != nullptr && p->tokens()->size() > 0) {
    r.prompt.assign(p->tokens()->begin(), p->tokens()->end());
  } else {
    r.prompt = engine_->tokenizer().encode(p->text() ? p->text()->string_view() : std::string_view{}, true);
  }
  for (int& t : r.prompt) {
    if (t < 0 || t >= model_->config().vocab) return Status::error("lm.generate: token id out of range");
  }
  r.max_tokens = p->max_tokens();
  r.sampling.temperature = p->temperature();
  r.sampling.top_k = p->top_k();
  r.sampling.top_p = p->top_p();
  r.sampling.seed = p->seed();
  if (p->stop() != nullptr) {
    for (const auto* s : *p->stop()) r.stop.push_back(s->str());
  }
  EnvelopeHeader header = in.envelope()->header();
  const std::string refused = engine_->submit(r, ctx.now_ns());
  if (!refused.empty()) {
    ctx.counter("refused").fetch_add(1, std::memory_order_relaxed);
    headers_[id] = header;
    emit_end(id, "refused: " + refused, out);
  } else {
    ctx.counter("requests").fetch_add(1, std::memory_order_relaxed);
    headers_[id] = header;
  }
  // The next decoding step runs once the requests queued by now are in:
  // they join the batch together (continuous batching).
  keep_going(ctx, 0);
  return {};
}

Status Generate::step(Outputs& out, StageContext& ctx) {
  if (faulty_ && crash_every_ > 0 && ++steps_ % crash_every_ == 0) {
    ctx.counter("crashes").fetch_add(1, std::memory_order_relaxed);
    return Status::error("lm.generate: fault.crash_every: step " + std::to_string(steps_) + " fails");
  }
  if (faulty_ && slow_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow_ms_));
  if (!calibrated_) {
    // Timed before the first step, not at start: the pipeline's other
    // stages load their models then, and a step reading its weights beside
    // them is slower than it will be. Once per process and model.
    calibrated_ = true;
    const BatchSettings& b = engine_->policy().settings();
    const std::string key = resolve_data_path(model_path_) + "|" + std::to_string(b.max_size) + "|" +
                            std::to_string(b.prefill_chunk) + "|" + std::to_string(b.max_step_factor);
    std::vector<double> times;
    if (StepTimes::process().find(key, times)) {
      engine_->take_step_times(times);
    } else if (engine_->calibrate(thread_cpu_ns) > 0) {
      StepTimes::process().keep(key, engine_->policy().step_cost().fastest_ns);
    }
  }
  events_.clear();
  const std::int64_t wake = engine_->step(ctx.now_ns(), events_);
  if (wake == 0) {
    ctx.counter("steps").fetch_add(1, std::memory_order_relaxed);
    const int size = engine_->last_batch_size();
    ctx.counter("batch_slots").fetch_add(size, std::memory_order_relaxed);
    ctx.counter("step_tokens").fetch_add(engine_->step_tokens(), std::memory_order_relaxed);
    if (max_step_factor_ > 0) ctx.observe("step_token_cap", engine_->policy().step_token_cap());
    ctx.observe("batch_size", size);
  }
  for (const TokenEvent& e : events_) emit(e, out);
  ctx.counter("tokens").fetch_add(static_cast<std::int64_t>(events_.size()), std::memory_order_relaxed);
  for (const RequestTiming& t : engine_->take_timings()) {
    if (!t.resumed) {
      const std::int64_t ttft = t.first_token_ns - t.arrived_ns;
      ctx.counter("ttft_us_sum").fetch_add(ttft / 1000, std::memory_order_relaxed);
      ctx.observe("ttft_ms", static_cast<double>(ttft) / 1e6);
    }
    if (t.tokens > 1) {
      const std::int64_t tpot = (t.last_token_ns - t.first_token_ns) / (t.tokens - 1);
      ctx.counter("tpot_us_sum").fetch_add(tpot / 1000, std::memory_order_relaxed);
      ctx.observe("tpot_ms", static_cast<double>(tpot) / 1e6);
    }
  }
  keep_going(ctx, wake > 0 ? wake : 0);
  return {};
}

namespace {

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const std::string& in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

}  // namespace

// A snapshot: u64 length of the engine's state, that state (Engine::save),
// u64 count of held requests' headers, then per request its id, capture
// time and part (u64 each).
bool Generate::snapshot(std::string& out) const {
  if (!engine_) return true;
  const std::string engine = engine_->save();
  put_u64(out, engine.size());
  out += engine;
  put_u64(out, headers_.size());
  for (const auto& [id, h] : headers_) {
    put_u64(out, id);
    put_u64(out, static_cast<std::uint64_t>(h.capture_ns));
    put_u64(out, h.part_id);
  }
  return true;
}

Status Generate::restore(const std::string& state) {
  if (state.size() < 8) return Status::error("lm.generate: snapshot truncated");
  const std::uint64_t engine_size = get_u64(state, 0);
  if (engine_size > state.size() - 16) return Status::error("lm.generate: snapshot truncated");
  const std::size_t table = 8 + static_cast<std::size_t>(engine_size);
  const std::uint64_t count = get_u64(state, table);
  if (count > (state.size() - table - 8) / 24 || state.size() != table + 8 + 24 * count) {
    return Status::error("lm.generate: snapshot's header table is truncated or has trailing bytes");
  }
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  if (std::string why = engine_->load(state.substr(8, static_cast<std::size_t>(engine_size)), now); !why.empty()) {
    return Status::error("lm.generate: " + why);
  }
  for (std::uint64_t k = 0; k < count; ++k) {
    const std::size_t at = table + 8 + 24 * static_cast<std::size_t>(k);
    EnvelopeHeader h;
    h.stream = get_u64(state, at);
    h.capture_ns = static_cast<std::int64_t>(get_u64(state, at + 8));
    h.part_id = get_u64(state, at + 16);
    headers_[h.stream] = h;
  }
  // Its requests go on at once.
  if (context_ != nullptr) keep_going(*context_, 0);
  return {};
}

// -- lm.detokenize --------------------------------------------------------

void Detokenize::setup(StageSpec& s) {
  in_ = s.input<schema::Tokens>("in", "token streams");
  out_ = s.output<schema::Completion>("out", "one completion per request, at its final token");
}

Status Detokenize::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::Tokens* t = in.get(in_);
  if (t == nullptr) return Status::error("lm.detokenize: not Tokens");
  const std::uint64_t id = t->request_id();
  Partial& part = partial_[id];
  const std::size_t n = t->ids() != nullptr ? t->ids()->size() : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<flatbuffers::uoffset_t>(i);
    const std::uint64_t position = t->position() + i;
    if (position < part.next) {
      ctx.counter("late_tokens").fetch_add(1, std::memory_order_relaxed);  // passed on already
      continue;
    }
    Token& tok = part.ahead[position];
    tok.id = t->ids()->Get(k);
    tok.piece = t->pieces() != nullptr && k < t->pieces()->size() ? t->pieces()->Get(k)->str() : std::string();
    tok.logprob = t->logprobs() != nullptr && k < t->logprobs()->size() ? t->logprobs()->Get(k) : 0.0F;
  }
  if (t->prompt_tokens() > 0) part.prompt_tokens = t->prompt_tokens();
  if (t->final()) {
    part.finish_reason = t->finish_reason() ? t->finish_reason()->str() : std::string();
    // A final envelope without a token (a refusal, a cancellation) ends the
    // stream where it is; else the stream ends at its last token.
    part.ended = true;
    part.end_only = n == 0;
    part.end = n > 0 ? t->position() + n : part.next;
    if (n == 0) part.ahead.clear();
  }
  if (!advance(part, id, serve_hub())) return {};
  flatbuffers::FlatBufferBuilder fbb;
  const auto text = fbb.CreateString(part.text);
  const auto reason = fbb.CreateString(part.finish_reason);
  fbb.Finish(schema::CreateCompletion(fbb, id, text, part.tokens, reason), schema::CompletionIdentifier());
  partial_.erase(id);
  // A completion is about the whole request, not about its last token.
  EnvelopeHeader h = out.base_header();
  h.stream = id;
  h.seq = 0;
  h.vote_key = 0;
  h.confidence = 1.0F;
  out.emit(out_, Payload::from_builder(fbb), h);
  return {};
}

bool Detokenize::advance(Partial& part, std::uint64_t id, ServeHub* hub) {
  while (!part.ahead.empty() && part.ahead.begin()->first == part.next && (!part.ended || part.next < part.end)) {
    Token tok = std::move(part.ahead.begin()->second);
    part.ahead.erase(part.ahead.begin());
    part.text += tok.piece;
    ++part.tokens;
    ++part.next;
    if (hub != nullptr) {
      ServeEvent e;
      e.token = tok.id;
      e.piece = std::move(tok.piece);
      e.logprob = tok.logprob;
      e.prompt_tokens = part.prompt_tokens;
      e.position = part.next - 1;
      e.final = part.ended && !part.end_only && part.next == part.end;
      if (e.final) e.finish_reason = part.finish_reason;
      hub->deliver(id, std::move(e));
    }
  }
  if (!part.ended || part.next < part.end) return false;
  if (hub != nullptr && part.end_only) {
    ServeEvent e;
    e.final = true;
    e.finish_reason = part.finish_reason;
    e.position = part.next;
    hub->deliver(id, std::move(e));
  }
  return true;
}

// A snapshot: u64 count, then per request its id, tokens, next, end and
// flags (ended | end_only << 1), prompt tokens, text, finish reason, and the
// tokens that came ahead of `next` (position, id, logprob bits, piece); u64
// each, strings as u64 length and bytes.
namespace {

void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

struct SnapshotReader {
  const std::string& in;
  std::size_t at = 0;
  bool ok = true;
  std::uint64_t u64() {
    if (in.size() - at < 8) {
      ok = false;
      return 0;
    }
    const std::uint64_t v = get_u64(in, at);
    at += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (!ok || in.size() - at < n) {
      ok = false;
      return {};
    }
    std::string s = in.substr(at, static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
    return s;
  }
};

}  // namespace

bool Detokenize::snapshot(std::string& out) const {
  put_u64(out, partial_.size());
  for (const auto& [id, part] : partial_) {
    put_u64(out, id);
    put_u64(out, part.tokens);
    put_u64(out, part.next);
    put_u64(out, part.end);
    put_u64(out, (part.ended ? 1U : 0U) | (part.end_only ? 2U : 0U));
    put_u64(out, part.prompt_tokens);
    put_str(out, part.text);
    put_str(out, part.finish_reason);
    put_u64(out, part.ahead.size());
    for (const auto& [position, tok] : part.ahead) {
      put_u64(out, position);
      put_u64(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(tok.id)));
      std::uint32_t bits = 0;
      std::memcpy(&bits, &tok.logprob, 4);
      put_u64(out, bits);
      put_str(out, tok.piece);
    }
  }
  return true;
}

Status Detokenize::restore(const std::string& state) {
  SnapshotReader r{state};
  std::map<std::uint64_t, Partial> partial;
  const std::uint64_t count = r.u64();
  for (std::uint64_t k = 0; k < count && r.ok; ++k) {
    const std::uint64_t id = r.u64();
    Partial p;
    p.tokens = static_cast<std::uint32_t>(r.u64());
    p.next = r.u64();
    p.end = r.u64();
    const std::uint64_t flags = r.u64();
    p.ended = (flags & 1U) != 0;
    p.end_only = (flags & 2U) != 0;
    p.prompt_tokens = static_cast<std::uint32_t>(r.u64());
    p.text = r.str();
    p.finish_reason = r.str();
    const std::uint64_t ahead = r.u64();
    for (std::uint64_t a = 0; a < ahead && r.ok; ++a) {
      const std::uint64_t position = r.u64();
      Token tok;
      tok.id = static_cast<int>(static_cast<std::int64_t>(r.u64()));
      const auto bits = static_cast<std::uint32_t>(r.u64());
      std::memcpy(&tok.logprob, &bits, 4);
      tok.piece = r.str();
      p.ahead[position] = std::move(tok);
    }
    partial[id] = std::move(p);
  }
  if (!r.ok || r.at != state.size()) return Status::error("lm.detokenize: snapshot truncated or with trailing bytes");
  partial_ = std::move(partial);
  return {};
}

}  // namespace swarmflow::lm
