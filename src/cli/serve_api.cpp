// `swarmflow serve`'s HTTP API (see serve_api.hpp), with cpp-httplib.

#include "cli/serve_api.hpp"

#include <limits>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/http_address.hpp"

namespace swarmflow::cli {

namespace {

using Json = nlohmann::ordered_json;

/// How long a streaming answer waits for a token before it looks whether
/// its client is still there.
constexpr std::chrono::milliseconds kPollInterval{50};
/// Requests answered at once, streams included.
constexpr std::size_t kServerThreads = 64;
/// Clients following a pipeline's token streams at once (each holds one of
/// the server's threads); more are answered 429.
constexpr std::size_t kMaxFollowers = 16;
/// Events a follower's stream writes at once, at most.
constexpr std::size_t kFollowBatch = 256;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string error_body(const std::string& message, const std::string& type, const std::string& param = {},
                       const std::string& code = {}) {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json(nullptr) : Json(param);
  e["code"] = code.empty() ? Json(nullptr) : Json(code);
  Json j = Json::object();
  j["error"] = std::move(e);
  return j.dump();
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& param = {}, const std::string& code = {}) {
  res.status = status;
  res.set_content(error_body(message, type, param, code), "application/json");
}

/// Reads an optional number field; false (with the error) when present with another type or out of range.
bool number_field(const Json& j, const char* name, double lo, double hi, std::optional<double>& out,
                  std::string* error, std::string* param) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number()) {
    *error = std::string("'") + name + "' must be a number";
    *param = name;
    return false;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    *error = std::string("'") + name + "' must be from " + Json(lo).dump() + " to " + Json(hi).dump();
    *param = name;
    return false;
  }
  out = v;
  return true;
}

bool integer_field(const Json& j, const char* name, std::int64_t lo, std::int64_t hi, std::optional<std::int64_t>& out,
                   std::string* error, std::string* param) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    *error = std::string("'") + name + "' must be an integer";
    *param = name;
    return false;
  }
  const std::int64_t v = it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
                             ? hi + 1
                             : it->get<std::int64_t>();
  if (v < lo || v > hi) {
    *error = std::string("'") + name + "' must be from " + std::to_string(lo) + " to " + std::to_string(hi);
    *param = name;
    return false;
  }
  out = v;
  return true;
}

/// A chat's messages as one prompt: each message's content on a line of its own.
bool chat_prompt(const Json& j, std::string& text, std::string* error, std::string* param) {
  auto it = j.find("messages");
  *param = "messages";
  if (it == j.end() || !it->is_array() || it->empty()) {
    *error = "'messages' must be a non-empty array of {role, content}";
    return false;
  }
  for (const auto& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      *error = "each message must be an object with a string 'role'";
      return false;
    }
    const auto c = m.find("content");
    if (c == m.end() || !c->is_string()) {
      *error = "each message must have a string 'content'";
      return false;
    }
    text += c->get<std::string>();
    text += '\n';
  }
  param->clear();
  return true;
}

/// The `text` (completions) or `delta` (chat) chunk of a stream.
std::string stream_chunk(const std::string& id, bool chat, const std::string& model, const std::string& piece,
                         const std::string& finish_reason, bool first) {
  Json choice = Json::object();
  choice["index"] = 0;
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!piece.empty() || finish_reason.empty()) delta["content"] = piece;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = piece;
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  Json j = Json::object();
  j["id"] = id;
  j["object"] = chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = unix_seconds();
  j["model"] = model;
  j["choices"] = Json::array({std::move(choice)});
  return "data: " + j.dump() + "\n\n";
}

/// OpenAI's finish reasons: `stop` for a stop string, `length` for
/// max_tokens or the model's context; ours otherwise (`cancelled`).
std::string api_finish_reason(const std::string& reason) {
  if (reason == "context") return "length";
  return reason;
}

/// One followed token as a Server-Sent Event: its number in the follow log
/// as the event id (what a reconnecting EventSource sends back as
/// Last-Event-ID), the token as JSON.
std::string follow_event(const lm::FollowedEvent& f) {
  Json j = Json::object();
  j["request_id"] = f.request;
  j["position"] = f.event.position;
  if (f.event.token >= 0) j["token"] = f.event.token;
  j["text"] = f.event.piece;
  j["final"] = f.event.final;
  if (f.event.final) j["finish_reason"] = f.event.finish_reason;
  return "id: " + std::to_string(f.number) + "\ndata: " +
         j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

/// Where a follower starts: `?from=N` (0: the oldest the log holds), else
/// after a reconnecting client's Last-Event-ID, else what comes from now
/// on. False (with the error) for a `from` that is not a number.
bool follow_start(const httplib::Request& req, const lm::ServeHub& hub, std::uint64_t& from, std::string* error) {
  auto number = [](const std::string& text, std::uint64_t& out) {
    if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoull(text);
    return true;
  };
  if (req.has_param("from")) {
    if (!number(req.get_param_value("from"), from)) {
      *error = "'from' must be an event number (0: the oldest still kept)";
      return false;
    }
    return true;
  }
  std::uint64_t last = 0;
  if (req.has_header("Last-Event-ID") && number(req.get_header_value("Last-Event-ID"), last)) {
    from = last + 1;
    return true;
  }
  from = hub.follow_next();
  return true;
}

}  // namespace

std::optional<ApiRequest> parse_api_request(const std::string& body, bool chat, const ServeOptions& options,
                                            std::string* error, std::string* param) {
  const Json j = Json::parse(body, nullptr, false);
  param->clear();
  if (j.is_discarded()) {
    *error = "the body is not valid JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    *error = "the body must be a JSON object";
    return std::nullopt;
  }
  ApiRequest r;
  r.chat = chat;
  if (chat) {
    if (!chat_prompt(j, r.request.text, error, param)) return std::nullopt;
  } else {
    auto it = j.find("prompt");
    *param = "prompt";
    if (it == j.end()) {
      *error = "'prompt' is required";
      return std::nullopt;
    }
    if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      r.request.text = (*it)[0].get<std::string>();
    } else if (it->is_string()) {
      r.request.text = it->get<std::string>();
    } else {
      *error = "'prompt' must be a string (or an array of one string)";
      return std::nullopt;
    }
    param->clear();
  }
  if (r.request.text.size() > options.max_prompt_bytes) {
    *error = "the prompt is " + std::to_string(r.request.text.size()) + " bytes, more than the " +
             std::to_string(options.max_prompt_bytes) + " this server takes";
    *param = chat ? "messages" : "prompt";
    return std::nullopt;
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      *error = "'stream' must be true or false";
      *param = "stream";
      return std::nullopt;
    }
    r.stream = it->get<bool>();
  }
  std::optional<std::int64_t> max_tokens, top_k, seed, n;
  std::optional<double> temperature, top_p;
  const char* max_name = chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!integer_field(j, max_name, 1, options.max_tokens_limit, max_tokens, error, param) ||
      !integer_field(j, "top_k", 0, 1'000'000, top_k, error, param) ||
      !integer_field(j, "seed", 0, std::numeric_limits<std::int64_t>::max(), seed, error, param) ||
      !integer_field(j, "n", 1, 1, n, error, param) || !number_field(j, "temperature", 0, 2, temperature, error, param) ||
      !number_field(j, "top_p", 0, 1, top_p, error, param)) {
    return std::nullopt;
  }
  if (max_tokens) r.request.max_tokens = static_cast<int>(*max_tokens);
  if (top_k) r.request.top_k = static_cast<int>(*top_k);
  if (seed) r.request.seed = static_cast<std::uint64_t>(*seed);
  r.request.temperature = temperature;
  r.request.top_p = top_p;
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    std::vector<std::string> stop;
    if (it->is_string()) {
      stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
      for (const auto& s : *it) {
        if (!s.is_string()) break;
        stop.push_back(s.get<std::string>());
      }
    }
    if (stop.empty() || (it->is_array() && stop.size() != it->size())) {
      *error = "'stop' must be a string or an array of up to 4 strings";
      *param = "stop";
      return std::nullopt;
    }
    r.request.stop = std::move(stop);
  }
  return r;
}

struct ApiServer::Impl {
  ServeOptions options;
  lm::ServeHub* hub = nullptr;
  std::function<std::string()> health;
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};

  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void follow(const httplib::Request& req, httplib::Response& res);
  void models(httplib::Response& res) const;
};

void ApiServer::Impl::follow(const httplib::Request& req, httplib::Response& res) {
  if (!hub->followed()) {
    return send_error(res, 404,
                      "this pipeline answers requests (it has an lm.prompts stage): a client follows its own "
                      "completion with \"stream\": true",
                      "not_found_error");
  }
  std::uint64_t from = 0;
  std::string error;
  if (!follow_start(req, *hub, from, &error)) return send_error(res, 400, error, "invalid_request_error", "from");
  if (stopping.load()) return send_error(res, 503, "the server is stopping", "server_error");
  if (!hub->add_follower(kMaxFollowers)) {
    res.set_header("Retry-After", "1");
    return send_error(res, 429, "too many clients follow the streams already", "rate_limit_error", {}, "overloaded");
  }
  // Server-Sent Events: one per token, in the order lm.detokenize passed
  // them on; `lost` when this client fell behind what the log keeps; `end`
  // once the pipeline has finished and everything has been sent.
  auto cursor = std::make_shared<std::uint64_t>(from);
  lm::ServeHub* h = hub;
  std::atomic<bool>* stop_flag = &stopping;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [h, cursor, stop_flag](std::size_t, httplib::DataSink& sink) {
        lm::FollowBatch batch;
        while (true) {
          batch = h->follow(*cursor, kFollowBatch, kPollInterval);
          if (!batch.events.empty() || batch.lost > 0 || batch.ended) break;
          if (stop_flag->load() || !sink.is_writable()) return false;
        }
        std::string out;
        if (batch.lost > 0) out += "event: lost\ndata: {\"lost\": " + std::to_string(batch.lost) + "}\n\n";
        for (const lm::FollowedEvent& e : batch.events) out += follow_event(e);
        if (batch.ended) out += "event: end\ndata: {\"reason\": \"the pipeline has finished\"}\n\n";
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        *cursor = (batch.events.empty() ? *cursor + batch.lost : batch.events.back().number + 1);
        if (batch.ended) sink.done();
        return true;
      },
      [h](bool) { h->remove_follower(); });
}

void ApiServer::Impl::models(httplib::Response& res) const {
  Json m = Json::object();
  m["id"] = options.model;
  m["object"] = "model";
  m["created"] = 0;
  m["owned_by"] = "swarmflow";
  Json j = Json::object();
  j["object"] = "list";
  j["data"] = Json::array({std::move(m)});
  res.set_content(j.dump(), "application/json");
}

void ApiServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (hub->followed()) {
    return send_error(res, 404,
                      "this pipeline takes no requests (it has no lm.prompts stage); follow its token streams at "
                      "GET /v1/streams",
                      "not_found_error");
  }
  std::string error, param;
  std::optional<ApiRequest> api = parse_api_request(req.body, chat, options, &error, &param);
  if (!api) return send_error(res, 400, error, "invalid_request_error", param);
  api->request.arrived_ns = steady_ns();
  const std::optional<std::uint64_t> admitted = hub->admit(api->request);
  if (!admitted) {
    res.set_header("Retry-After", "1");
    return send_error(res, 429, "too many requests in flight; try again shortly", "rate_limit_error", {},
                      "overloaded");
  }
  const std::uint64_t id = *admitted;
  const std::string name = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
  // The first event decides the status: a refusal is an error, not a stream.
  lm::ServeEvent first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.first_event_timeout_ms);
  while (!hub->next(id, first, kPollInterval)) {
    if (stopping.load() || std::chrono::steady_clock::now() >= deadline) {
      hub->cancel(id);
      return send_error(res, stopping.load() ? 503 : 504,
                        stopping.load() ? "the server is stopping" : "no token came in time", "server_error");
    }
  }
  if (first.token < 0 && first.final) {
    hub->forget(id);
    const std::string& why = first.finish_reason;
    // The model's context cannot hold the prompt: the request is at fault.
    const bool client = why.find("the model's context") != std::string::npos;
    return send_error(res, client ? 400 : 503, "the request was refused: " + why,
                      client ? "invalid_request_error" : "server_error", client ? (chat ? "messages" : "prompt") : "",
                      client ? "context_length_exceeded" : "overloaded");
  }
  if (!api->stream) {
    std::string text = first.piece;
    std::uint32_t tokens = first.token >= 0 ? 1 : 0;
    const std::uint32_t prompt_tokens = first.prompt_tokens;
    lm::ServeEvent e = first;
    while (!e.final) {
      if (!hub->next(id, e, kPollInterval)) {
        if (stopping.load()) {
          hub->cancel(id);
          return send_error(res, 503, "the server is stopping", "server_error");
        }
        continue;
      }
      text += e.piece;
      if (e.token >= 0) ++tokens;
    }
    hub->forget(id);
    Json choice = Json::object();
    choice["index"] = 0;
    if (chat) {
      Json message = Json::object();
      message["role"] = "assistant";
      message["content"] = text;
      choice["message"] = std::move(message);
    } else {
      choice["text"] = text;
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = api_finish_reason(e.finish_reason);
    Json usage = Json::object();
    usage["prompt_tokens"] = prompt_tokens;
    usage["completion_tokens"] = tokens;
    usage["total_tokens"] = prompt_tokens + tokens;
    Json j = Json::object();
    j["id"] = name;
    j["object"] = chat ? "chat.completion" : "text_completion";
    j["created"] = unix_seconds();
    j["model"] = options.model;
    j["choices"] = Json::array({std::move(choice)});
    j["usage"] = std::move(usage);
    res.set_content(j.dump(), "application/json");
    return;
  }
  // Server-Sent Events: one chunk per token, then the finish, then [DONE].
  // A client that goes away cancels the request, which frees its cache.
  struct Stream {
    lm::ServeEvent pending;
    bool has_pending = true;
    bool first = true;
    bool finished = false;
  };
  auto stream = std::make_shared<Stream>();
  stream->pending = std::move(first);
  lm::ServeHub* h = hub;
  const std::string model = options.model;
  std::atomic<bool>* stop_flag = &stopping;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [h, id, chat, name, model, stream, stop_flag](std::size_t, httplib::DataSink& sink) {
        while (!stream->has_pending) {
          if (h->next(id, stream->pending, kPollInterval)) {
            stream->has_pending = true;
          } else if (stop_flag->load() || !sink.is_writable()) {
            return false;
          }
        }
        const lm::ServeEvent& e = stream->pending;
        std::string out;
        if (e.token >= 0 || !e.final) {
          out += stream_chunk(name, chat, model, e.piece, "", stream->first);
          stream->first = false;
        }
        if (e.final) {
          out += stream_chunk(name, chat, model, "", api_finish_reason(e.finish_reason), stream->first);
          out += "data: [DONE]\n\n";
        }
        if (!sink.write(out.data(), out.size())) return false;
        stream->has_pending = false;
        if (e.final) {
          stream->finished = true;
          sink.done();
        }
        return true;
      },
      [h, id, stream](bool) {
        // Cut off before its end: the client went away (or the server stops).
        if (stream->finished) {
          h->forget(id);
        } else {
          h->cancel(id);
        }
      });
}

ApiServer::ApiServer() : impl_(std::make_unique<Impl>()) {}

ApiServer::~ApiServer() { stop(); }

void ApiServer::stop() {
  impl_->stopping.store(true);
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int ApiServer::port() const { return impl_->port; }

std::unique_ptr<ApiServer> ApiServer::start(const ServeOptions& options, lm::ServeHub& hub,
                                            std::function<std::string()> health, std::string* error) {
  std::string host;
  int port = -1;
  if (!parse_host_port(options.address, "--http", host, port, error)) return nullptr;
  if (port_in_use(host, port)) {
    *error = "--http: cannot listen on " + options.address + " (in use)";
    return nullptr;
  }
  std::unique_ptr<ApiServer> s(new ApiServer());
  Impl* impl = s->impl_.get();
  impl->options = options;
  impl->hub = &hub;
  impl->health = std::move(health);
  httplib::Server& server = impl->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  server.set_payload_max_length(options.max_body_bytes);
  server.Post("/v1/completions",
              [impl](const httplib::Request& req, httplib::Response& res) { impl->completion(req, res, false); });
  server.Post("/v1/chat/completions",
              [impl](const httplib::Request& req, httplib::Response& res) { impl->completion(req, res, true); });
  server.Get("/v1/models", [impl](const httplib::Request&, httplib::Response& res) { impl->models(res); });
  server.Get("/v1/streams",
             [impl](const httplib::Request& req, httplib::Response& res) { impl->follow(req, res); });
  server.Get("/health", [impl](const httplib::Request&, httplib::Response& res) {
    const lm::ServeHub::Figures f = impl->hub->figures();
    Json j = Json::object();
    j["status"] = impl->stopping.load() ? "stopping" : "ok";
    j["model"] = impl->options.model;
    j["active"] = f.active;
    j["queued"] = f.queued;
    j["admitted"] = f.admitted;
    j["completed"] = f.completed;
    j["cancelled"] = f.cancelled;
    j["overloaded"] = f.overloaded;
    if (impl->hub->followed()) {
      j["followers"] = f.followers;
      j["followed_tokens"] = f.followed_events;
      j["follow_lost"] = f.follow_lost;
    }
    if (impl->health) {
      const Json extra = Json::parse(impl->health(), nullptr, false);
      if (extra.is_object()) {
        for (const auto& [k, v] : extra.items()) j[k] = v;
      }
    }
    res.status = impl->stopping.load() ? 503 : 200;
    res.set_content(j.dump(), "application/json");
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    // Bodies of errors httplib makes itself (404, 413, ...) are JSON too.
    if (res.body.empty()) {
      const std::string type = res.status == 404 ? "not_found_error" : "invalid_request_error";
      const std::string message = res.status == 404   ? "no such endpoint"
                                  : res.status == 413 ? "the body is too large"
                                                      : "the request failed (HTTP " + std::to_string(res.status) + ")";
      res.set_content(error_body(message, type), "application/json");
    }
  });
  if (port == 0) {
    impl->port = server.bind_to_any_port(host);
    if (impl->port <= 0) {
      *error = "--http: cannot listen on " + options.address;
      return nullptr;
    }
  } else {
    if (!server.bind_to_port(host, port)) {
      *error = "--http: cannot listen on " + options.address + " (in use, or not an address of this host)";
      return nullptr;
    }
    impl->port = port;
  }
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  return s;
}

}  // namespace swarmflow::cli
