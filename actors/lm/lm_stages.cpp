#include "lm/lm_stages.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lm/lm.hpp"

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

Status load_model(const std::string& param, Model& model) {
  return Model::load(resolve_data_path(param), model);
}

constexpr const char* kDefaultModel = "models/devil-1m.sflm";

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

Status PromptSource::process(Inputs&, Outputs& out, StageContext& ctx) {
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
  Model model;
  if (Status s = load_model(model_path_, model); !s.ok()) return s;
  tokenizer_ = Tokenizer(model.pieces(), model.config().bos);
  return {};
}

Status Tokenize::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::Prompt* p = in.get(in_);
  if (p == nullptr) return Status::error("lm.tokenize: not a Prompt");
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
}

Status Generate::start(StageContext&) {
  auto model = std::make_unique<Model>();
  if (Status s = load_model(model_path_, *model); !s.ok()) return s;
  BatchSettings b;
  b.max_size = static_cast<int>(max_size_);
  b.max_wait_ns = static_cast<std::int64_t>(max_wait_ms_ * 1e6);
  b.kv_budget_tokens = kv_budget_;
  b.prefill_chunk = static_cast<int>(prefill_chunk_);
  b.max_queue = static_cast<int>(max_queue_);
  model_ = std::move(model);
  engine_ = std::make_unique<Engine>(*model_, b);
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
                                  lps, reason),
             schema::TokensIdentifier());
  EnvelopeHeader h = out.base_header();
  h.stream = e.request;
  h.seq = static_cast<std::uint64_t>(e.position);
  h.vote_key = static_cast<std::uint64_t>(e.token);
  h.confidence = p;
  out.emit(out_, Payload::from_builder(fbb), h);
}

Status Generate::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::Prompt* p = in.get(in_);
  if (p == nullptr) return Status::error("lm.generate: not a Prompt");
  GenerateRequest r;
  r.id = p->request_id();
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
  const std::string refused = engine_->submit(r, ctx.now_ns());
  if (!refused.empty()) {
    ctx.counter("refused").fetch_add(1, std::memory_order_relaxed);
    flatbuffers::FlatBufferBuilder fbb;
    const auto reason = fbb.CreateString("refused: " + refused);
    schema::TokensBuilder b(fbb);
    b.add_final(true);
    b.add_request_id(r.id);
    b.add_finish_reason(reason);
    fbb.Finish(b.Finish(), schema::TokensIdentifier());
    EnvelopeHeader h = out.base_header();
    h.stream = r.id;
    h.confidence = 0.0F;
    out.emit(out_, Payload::from_builder(fbb), h);
    return {};
  }
  ctx.counter("requests").fetch_add(1, std::memory_order_relaxed);
  // The Stage API calls this stage once per envelope and not in between, so
  // the engine runs until what it holds is done (see docs/lm.md).
  std::vector<TokenEvent> events;
  while (!engine_->idle()) {
    events.clear();
    const std::int64_t now = ctx.now_ns();
    const std::int64_t wake = engine_->step(now, events);
    if (wake > 0) engine_->step(wake, events);
    if (!events.empty() || wake == 0) ctx.counter("steps").fetch_add(1, std::memory_order_relaxed);
    for (const TokenEvent& e : events) emit(e, out);
    ctx.counter("tokens").fetch_add(static_cast<std::int64_t>(events.size()), std::memory_order_relaxed);
  }
  std::int64_t slots = 0;
  for (int n : engine_->batch_sizes()) slots += n;
  ctx.counter("batch_slots").store(slots, std::memory_order_relaxed);
  for (const RequestTiming& t : engine_->take_timings()) {
    ctx.counter("ttft_us_sum").fetch_add((t.first_token_ns - t.arrived_ns) / 1000, std::memory_order_relaxed);
    if (t.tokens > 1) {
      ctx.counter("tpot_us_sum").fetch_add((t.last_token_ns - t.first_token_ns) / 1000 / (t.tokens - 1),
                                           std::memory_order_relaxed);
    }
  }
  return {};
}

// -- lm.detokenize --------------------------------------------------------

void Detokenize::setup(StageSpec& s) {
  in_ = s.input<schema::Tokens>("in", "token streams");
  out_ = s.output<schema::Completion>("out", "one completion per request, at its final token");
}

Status Detokenize::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Tokens* t = in.get(in_);
  if (t == nullptr) return Status::error("lm.detokenize: not Tokens");
  Partial& part = partial_[t->request_id()];
  if (t->pieces() != nullptr) {
    for (const auto* s : *t->pieces()) part.text += s->str();
  }
  if (t->ids() != nullptr) part.tokens += t->ids()->size();
  if (!t->final()) return {};
  flatbuffers::FlatBufferBuilder fbb;
  const auto text = fbb.CreateString(part.text);
  const auto reason = fbb.CreateString(t->finish_reason() ? t->finish_reason()->string_view() : std::string_view{});
  fbb.Finish(schema::CreateCompletion(fbb, t->request_id(), text, part.tokens, reason), schema::CompletionIdentifier());
  partial_.erase(t->request_id());
  // A completion is about the whole request, not about its last token.
  EnvelopeHeader h = out.base_header();
  h.seq = 0;
  h.vote_key = 0;
  h.confidence = 1.0F;
  out.emit(out_, Payload::from_builder(fbb), h);
  return {};
}

}  // namespace swarmflow::lm
