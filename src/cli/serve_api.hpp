#pragma once
// `swarmflow serve`: an OpenAI-compatible HTTP API in front of a pipeline
// (docs/serving.md). Requests are admitted into the pipeline's serve hub
// (actors/lm/serve_hub.hpp) and answered from the token events it hands
// back, streamed as Server-Sent Events or as one JSON body.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "lm/serve_hub.hpp"

namespace swarmflow::cli {

struct ServeOptions {
  std::string address;            ///< HOST:PORT (port 0: any free one)
  std::string model = "swarmflow";  ///< the model id /v1/models lists and responses name
  std::size_t max_prompt_bytes = 16384;  ///< longer prompts get 400
  std::size_t max_body_bytes = 1 << 20;  ///< larger bodies get 413
  int max_tokens_limit = 4096;      ///< a request's max_tokens above this gets 400
  int first_event_timeout_ms = 60000;  ///< no token by then: 504
};

/// A completion request as the API accepts it.
struct ApiRequest {
  lm::ServeRequest request;
  bool stream = false;
  bool chat = false;
};

/// Parses and checks the body of POST /v1/completions (`chat` false) or
/// /v1/chat/completions (`chat` true). On a mistake returns nullopt with
/// `error` (a message for the client) and `param` (the offending field).
/// Fields the API does not use are ignored, as OpenAI's API does; fields it
/// uses must have the right type and range.
std::optional<ApiRequest> parse_api_request(const std::string& body, bool chat, const ServeOptions& options,
                                            std::string* error, std::string* param);

class ApiServer {
 public:
  /// Binds the address and serves on threads of its own. `health` gives a
  /// JSON object whose members GET /health adds to its own. Null with
  /// `error` set when the address cannot be bound.
  static std::unique_ptr<ApiServer> start(const ServeOptions& options, lm::ServeHub& hub,
                                          std::function<std::string()> health, std::string* error);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;
  int port() const;
  /// Stops taking connections; requests being answered are cut off.
  void stop();

 private:
  ApiServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swarmflow::cli
