// `swarmflow serve` over HTTP, as a client sees it: streamed completions
// ending in [DONE], JSON errors for bad requests, cancellation when a client
// goes away, 429 and 503 under overload, and a clean stop with its report;
// and a pipeline that takes no requests (the ultrasound example) followed
// token by token at /v1/streams. The shipped model and pipelines/tokens.yaml;
// bounded waits, no timing asserted.

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace {

using swarmflow::testing::free_port;
using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit_within;
using Json = nlohmann::json;

constexpr std::chrono::seconds kPatience{60};
const std::string kTokens = std::string(SWARMFLOW_SOURCE_DIR) + "/pipelines/tokens.yaml";

/// A `swarmflow serve` process on a free port, stopped (SIGTERM) at the end.
class Server {
 public:
  Server(const TempDir& dir, std::vector<std::string> extra, const std::string& file = kTokens)
      : dir_(dir), port_(free_port()) {
    std::vector<std::string> args = {"serve", file, "--http", "127.0.0.1:" + std::to_string(port_), "--quiet",
                                     "--report", dir.file("report.json")};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = spawn_cli(args, dir.file("serve.out"), dir.file("serve.err"));
    httplib::Client c("127.0.0.1", port_);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto r = c.Get("/health"); r && r->status == 200) {
        up_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Server() {
    if (pid_ > 0 && !stopped_) stop();
  }
  /// SIGTERM; its exit code.
  int stop() {
    stopped_ = true;
    kill(pid_, SIGTERM);
    return wait_exit_within(pid_, kPatience);
  }
  bool up() const { return up_; }
  int port() const { return port_; }
  std::string err() const { return slurp(dir_.file("serve.err")); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  Json health() const {
    auto r = client().Get("/health");
    return r ? Json::parse(r->body, nullptr, false) : Json();
  }

 private:
  const TempDir& dir_;
  int port_;
  pid_t pid_ = -1;
  bool up_ = false;
  bool stopped_ = false;
};

/// A connection that sends a request and reads only what it is told to:
/// a client that stalls or goes away.
class RawClient {
 public:
  RawClient(int port, const std::string& path, const std::string& body) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ok_ = send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  ~RawClient() { close(); }
  /// Reads until `n` SSE events have come (or the connection ends).
  std::string read_events(int n) {
    std::string got;
    char buf[4096];
    while (count(got, "data: ") < n) {
      const ssize_t k = recv(fd_, buf, sizeof buf, 0);
      if (k <= 0) break;
      got.append(buf, static_cast<std::size_t>(k));
    }
    return got;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool ok() const { return ok_; }
  static int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

/// Waits until /health satisfies `done`; the last health seen.
Json wait_health(const Server& s, const std::function<bool(const Json&)>& done) {
  Json h;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    h = s.health();
    if (h.is_object() && done(h)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return h;
}

TEST(Serve, StreamsEachTokenAsAServerSentEventThenDoneAndAgreesWithTheWholeAnswer) {
  TempDir dir;
  Server s(dir, {});
  ASSERT_TRUE(s.up()) << s.err();
  auto c = s.client();
  const std::string body = R"({"prompt": "DOG, n.", "max_tokens": 24, "stream": true, "temperature": 0})";
  auto streamed = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  // 24 token chunks, one with the finish reason, then [DONE].
  std::string text;
  int chunks = 0;
  std::string finish;
  bool done = false;
  std::size_t at = 0;
  while ((at = streamed->body.find("data: ", at)) != std::string::npos) {
    const auto end = streamed->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string data = streamed->body.substr(at + 6, end - at - 6);
    at = end;
    ASSERT_FALSE(done) << "an event after [DONE]";
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const Json j = Json::parse(data, nullptr, false);
    ASSERT_TRUE(j.is_object()) << data;
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["model"], "devil-1m");
    const Json& choice = j["choices"][0];
    text += choice["text"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      finish = choice["finish_reason"];
    } else {
      ++chunks;
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(chunks, 24);
  EXPECT_EQ(finish, "length");
  // The same request without streaming: the same text (greedy).
  auto whole = c.Post("/v1/completions", R"({"prompt": "DOG, n.", "max_tokens": 24})", "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json w = Json::parse(whole->body);
  EXPECT_EQ(w["choices"][0]["text"], text);
  EXPECT_EQ(w["usage"]["completion_tokens"], 24);
  EXPECT_EQ(w["usage"]["prompt_tokens"], 8);  // BOS and 7 bytes
  // Chat, and the model list.
  auto chat = c.Post("/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "CAT, n."}], "max_tokens": 6, "stream": true})",
                     "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200);
  EXPECT_NE(chat->body.find("\"object\":\"chat.completion.chunk\""), std::string::npos) << chat->body;
  EXPECT_NE(chat->body.find("\"delta\":{\"role\":\"assistant\""), std::string::npos) << chat->body;
  EXPECT_NE(chat->body.find("data: [DONE]"), std::string::npos);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "devil-1m");
  EXPECT_EQ(s.stop(), 0) << s.err();
  // The run report has the requests' TTFT and TPOT.
  const Json report = Json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object());
  const Json& gen = report["stages"]["generate"];
  EXPECT_EQ(gen["counters"]["requests"], 3);
  EXPECT_EQ(gen["histograms"]["ttft_ms"]["count"], 3);
  EXPECT_EQ(gen["histograms"]["tpot_ms"]["count"], 3);
  EXPECT_GT(gen["histograms"]["batch_size"]["count"].get<int>(), 0);
}

TEST(Serve, BadRequestsGetA4xxWithAJsonErrorAndUnknownFieldsAreIgnored) {
  TempDir dir;
  Server s(dir, {"--max-prompt-bytes", "64"});
  ASSERT_TRUE(s.up()) << s.err();
  auto c = s.client();
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& k : {Case{"{\"prompt\": ", ""}, Case{"[1, 2]", ""}, Case{"{}", "prompt"},
                        Case{R"({"prompt": 7})", "prompt"}, Case{R"({"prompt": "x", "max_tokens": "ten"})", "max_tokens"},
                        Case{R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
                        Case{R"({"prompt": "x", "temperature": 9})", "temperature"},
                        Case{R"({"prompt": "x", "stream": "yes"})", "stream"},
                        Case{R"({"prompt": "x", "stop": [1]})", "stop"}, Case{R"({"prompt": "x", "n": 2})", "n"}}) {
    auto r = c.Post("/v1/completions", k.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << k.body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (*k.param != '\0') {
      EXPECT_EQ(j["error"]["param"], k.param) << r->body;
    }
  }
  auto big = c.Post("/v1/completions", Json{{"prompt", std::string(65, 'a')}}.dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_NE(big->body.find("65 bytes"), std::string::npos) << big->body;
  auto chat = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user"}]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  auto nowhere = c.Get("/v1/nothing");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_TRUE(Json::parse(nowhere->body, nullptr, false).is_object());
  auto fine = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "user": "me", "logit_bias": {}})",
                     "application/json");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200) << fine->body;
}

TEST(Serve, AClientThatGoesAwayMidStreamCancelsItsRequestWhichFreesItsCache) {
  TempDir dir;
  Server s(dir, {});
  ASSERT_TRUE(s.up()) << s.err();
  {
    RawClient gone(s.port(), "/v1/completions", R"({"prompt": "DOG, n.", "max_tokens": 480, "stream": true})");
    ASSERT_TRUE(gone.ok());
    EXPECT_GE(RawClient::count(gone.read_events(3), "data: "), 3);
  }
  const Json h = wait_health(s, [](const Json& j) { return j["active"] == 0 && j["generate_cancelled"] == 1; });
  EXPECT_EQ(h["active"], 0) << h.dump();
  EXPECT_EQ(h["cancelled"], 1) << h.dump();
  EXPECT_EQ(h["generate_cancelled"], 1) << h.dump();  // lm.generate dropped it and freed its KV cache
  EXPECT_LT(h["generated_tokens"].get<int>(), 480) << h.dump();
  EXPECT_EQ(s.stop(), 0) << s.err();
}

TEST(Serve, OverloadIsAnswered429AndARequestGenerateRefusesIs503) {
  TempDir dir;
  // lm.generate with a KV budget of 64 tokens (a request that needs more is
  // refused), where a lone request waits 2 s for company before it starts.
  std::string yaml = slurp(kTokens);
  const auto at = yaml.find("batch.kv_budget_tokens: 4096");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, 28, "batch.kv_budget_tokens: 64, batch.max_wait_ms: 2000");
  yaml.replace(yaml.find("path: pipelines/prompts.txt"), 27, "path: " + std::string(SWARMFLOW_SOURCE_DIR) + "/pipelines/prompts.txt");
  const std::string file = dir.write("small.yaml", yaml);
  Server s(dir, {"--max-active", "1"}, file);
  ASSERT_TRUE(s.up()) << s.err();
  auto c = s.client();
  auto refused = c.Post("/v1/completions", R"({"prompt": "DOG, n.", "max_tokens": 100})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_NE(refused->body.find("needs 108 tokens"), std::string::npos) << refused->body;
  {
    // One request in flight (waiting for company): the next is over --max-active.
    RawClient busy(s.port(), "/v1/completions", R"({"prompt": "DOG, n.", "max_tokens": 8, "stream": true})");
    ASSERT_TRUE(busy.ok());
    ASSERT_EQ(wait_health(s, [](const Json& j) { return j["active"] == 1; })["active"], 1);
    auto over = c.Post("/v1/completions", R"({"prompt": "CAT, n.", "max_tokens": 4})", "application/json");
    ASSERT_TRUE(over);
    EXPECT_EQ(over->status, 429) << over->body;
    EXPECT_EQ(over->get_header_value("Retry-After"), "1");
    EXPECT_EQ(Json::parse(over->body)["error"]["code"], "overloaded");
  }
  const Json h = wait_health(s, [](const Json& j) { return j["active"] == 0; });
  EXPECT_EQ(h["overloaded"], 1) << h.dump();
  auto after = c.Post("/v1/completions", R"({"prompt": "CAT, n.", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200) << after->body;
  EXPECT_EQ(s.stop(), 0) << s.err();
}

/// The ultrasound example, short: `frames` frames of the synthetic probe,
/// each finding streamed as word tokens, gathered by lm.detokenize into
/// findings.jsonl. It takes no requests: clients follow it.
std::string ultrasound_file(const TempDir& dir, int frames) {
  return dir.write("ultrasound.yaml",
                   "pipeline: ultrasound_follow\nunits: 2\nstages:\n"
                   "  - id: probe\n    type: video.source\n    placement: {units: [u0]}\n"
                   "    params: {uri: \"synthetic://ultrasound?seed=3&scene_frames=4\", format: GRAY8, fps: 0, count: " +
                       std::to_string(frames) +
                       "}\n"
                       "  - {id: enhance, type: ultrasound.enhance, inputs: {frames: probe/frames}}\n"
                       "  - id: segment\n    type: ultrasound.segment\n"
                       "    inputs: {frames: probe/frames, enhanced: enhance/frames}\n    join: {key: seq}\n"
                       "  - {id: flow, type: ultrasound.flow, key: stream, inputs: {frames: probe/frames}}\n"
                       "  - id: report\n    type: ultrasound.report\n    placement: {units: [u1]}\n"
                       "    inputs: {lesions: segment/results, vessels: flow/results}\n    join: {key: seq}\n"
                       "    params: {summary: false}\n"
                       "  - id: lines\n    type: lm.detokenize\n    placement: {units: [u1]}\n"
                       "    inputs: {in: report/findings}\n    queue: {capacity: 256}\n"
                       "  - id: findings\n    type: io.jsonl\n    inputs: {in: lines/out}\n"
                       "    params: {path: \"" +
                       dir.file("findings.jsonl") + "\"}\n");
}

/// One Server-Sent Event.
struct Sse {
  std::string id, event, data;
};

std::vector<Sse> parse_sse(const std::string& body) {
  std::vector<Sse> out;
  std::size_t at = 0;
  while (at < body.size()) {
    std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    Sse e;
    std::size_t line = at;
    while (line < end) {
      std::size_t eol = body.find('\n', line);
      if (eol == std::string::npos || eol > end) eol = end;
      const std::string l = body.substr(line, eol - line);
      if (l.rfind("id: ", 0) == 0) e.id = l.substr(4);
      if (l.rfind("event: ", 0) == 0) e.event = l.substr(7);
      if (l.rfind("data: ", 0) == 0) e.data = l.substr(6);
      line = eol + 1;
    }
    if (!e.data.empty() || !e.event.empty()) out.push_back(e);
    at = end + 2;
  }
  return out;
}

TEST(Serve, APipelineWithoutRequestsIsFollowedTokenByTokenAtStreams) {
  TempDir dir;
  constexpr int kFrames = 8;
  const std::string file = ultrasound_file(dir, kFrames);
  Server s(dir, {}, file);
  ASSERT_TRUE(s.up()) << s.err();
  // Its sources end; the server goes on answering until it is stopped.
  const Json h = wait_health(s, [](const Json& j) { return j.value("running", true) == false; });
  ASSERT_FALSE(h.value("running", true)) << h.dump();

  // Everything the log kept, from the oldest: one event per token, numbered
  // 1, 2, 3, ...; each finding's tokens in order from position 0, the last
  // final with "stop"; then the end.
  auto all = s.client().Get("/v1/streams?from=0");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->status, 200);
  EXPECT_EQ(all->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<Sse> events = parse_sse(all->body);
  ASSERT_GE(events.size(), 2U) << all->body;
  EXPECT_EQ(events.back().event, "end");
  std::map<std::uint64_t, std::string> texts;
  std::map<std::uint64_t, std::uint64_t> next;
  std::map<std::uint64_t, bool> ended;
  std::uint64_t number = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const Sse& e = events[i];
    ASSERT_EQ(e.event, "") << e.data;
    EXPECT_EQ(e.id, std::to_string(++number));
    const Json t = Json::parse(e.data, nullptr, false);
    ASSERT_TRUE(t.is_object()) << e.data;
    const auto request = t["request_id"].get<std::uint64_t>();
    EXPECT_FALSE(ended[request]) << "a token after the end of " << request;
    EXPECT_EQ(t["position"].get<std::uint64_t>(), next[request]++) << e.data;
    texts[request] += t["text"].get<std::string>();
    ended[request] = t["final"].get<bool>();
    if (ended[request]) {
      EXPECT_EQ(t["finish_reason"], "stop") << e.data;
    }
  }
  ASSERT_GE(texts.size(), static_cast<std::size_t>(kFrames));  // a line at least per frame
  EXPECT_GT(number, 10 * texts.size());                         // words, not lines
  for (const auto& [request, done] : ended) EXPECT_TRUE(done) << request;
  for (const auto& [request, text] : texts) {
    EXPECT_EQ(text.rfind("frame " + std::to_string(request / 16), 0), 0U) << text;
    EXPECT_EQ(text.back(), '.') << text;
  }
  // The follower leaves once its response is written, which the client may
  // see done first.
  const Json figures = wait_health(s, [](const Json& j) { return j.value("followers", std::uint64_t{1}) == 0; });
  EXPECT_EQ(figures["followed_tokens"].get<std::uint64_t>(), number);
  EXPECT_EQ(figures["follow_lost"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(figures["followers"].get<std::uint64_t>(), 0U);

  // A new follower starts with what comes from now on: here, the end.
  auto live = s.client().Get("/v1/streams");
  ASSERT_TRUE(live);
  const std::vector<Sse> none = parse_sse(live->body);
  ASSERT_EQ(none.size(), 1U) << live->body;
  EXPECT_EQ(none[0].event, "end");
  // A reconnecting client goes on after its Last-Event-ID.
  auto resumed = s.client().Get("/v1/streams", {{"Last-Event-ID", std::to_string(number - 2)}});
  ASSERT_TRUE(resumed);
  const std::vector<Sse> two = parse_sse(resumed->body);
  ASSERT_EQ(two.size(), 3U) << resumed->body;
  EXPECT_EQ(two[0].id, std::to_string(number - 1));
  EXPECT_EQ(two[1].id, std::to_string(number));
  EXPECT_EQ(two[2].event, "end");

  auto bad = s.client().Get("/v1/streams?from=x");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["param"], "from");
  // It takes no requests.
  auto request = s.client().Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(request);
  EXPECT_EQ(request->status, 404);
  EXPECT_NE(request->body.find("/v1/streams"), std::string::npos) << request->body;

  EXPECT_EQ(s.stop(), 0) << s.err();
  const Json report = Json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["ultrasound"]["frames"], kFrames);
  // The lines are those lm.detokenize wrote to the file (closed once the server has stopped).
  std::map<std::uint64_t, std::string> written;
  std::ifstream in(dir.file("findings.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    written[j["payload"]["request_id"].get<std::uint64_t>()] = j["payload"]["text"].get<std::string>();
  }
  EXPECT_EQ(texts, written);

}

// A follower further behind than --follow-backlog is told what it lost,
// and /health counts it.
TEST(Serve, AFollowerBehindTheBacklogIsToldWhatItLost) {
  TempDir dir;
  const std::string file = ultrasound_file(dir, 4);
  Server s(dir, {"--follow-backlog", "5"}, file);
  ASSERT_TRUE(s.up()) << s.err();
  const Json h = wait_health(s, [](const Json& j) { return j.value("running", true) == false; });
  ASSERT_FALSE(h.value("running", true)) << h.dump();
  const auto total = h["followed_tokens"].get<std::uint64_t>();
  ASSERT_GT(total, 5U);
  auto r = s.client().Get("/v1/streams?from=1");
  ASSERT_TRUE(r);
  const std::vector<Sse> events = parse_sse(r->body);
  ASSERT_EQ(events.size(), 7U) << r->body;  // lost, the 5 kept, end
  EXPECT_EQ(events[0].event, "lost");
  EXPECT_EQ(Json::parse(events[0].data)["lost"].get<std::uint64_t>(), total - 5);
  EXPECT_EQ(events[1].id, std::to_string(total - 4));
  EXPECT_EQ(events[5].id, std::to_string(total));
  EXPECT_EQ(events[6].event, "end");
  EXPECT_EQ(s.health()["follow_lost"].get<std::uint64_t>(), total - 5);
  EXPECT_EQ(s.stop(), 0) << s.err();
}

TEST(Serve, AFileWithoutItsEndsOrAnAddressInUseIsRefused) {
  TempDir dir;
  const std::string file = dir.write("no_ends.yaml",
                                     "pipeline: x\nstages:\n"
                                     "  - {id: source, type: sim.source, params: {count: 1}}\n"
                                     "  - {id: sink, type: sim.sink, inputs: {in: source/out}}\n");
  pid_t p = spawn_cli({"serve", file, "--http", "127.0.0.1:0"}, dir.file("a.out"), dir.file("a.err"));
  EXPECT_EQ(wait_exit_within(p, kPatience), 2);
  EXPECT_NE(slurp(dir.file("a.err")).find("has no lm.detokenize stage"), std::string::npos) << slurp(dir.file("a.err"));
  // A port another program listens on.
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  socklen_t len = sizeof a;
  getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len);
  pid_t q = spawn_cli({"serve", kTokens, "--http", "127.0.0.1:" + std::to_string(ntohs(a.sin_port))},
                      dir.file("b.out"), dir.file("b.err"));
  const int rc = wait_exit_within(q, kPatience);
  if (rc < 0) kill(q, SIGKILL);
  close(taken);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(slurp(dir.file("b.err")).find("cannot listen"), std::string::npos) << slurp(dir.file("b.err"));
  // A port another swarmflow server holds too (cpp-httplib binds with
  // SO_REUSEPORT, which would let the two share it), for --http and --metrics.
  Server s(dir, {});
  ASSERT_TRUE(s.up()) << s.err();
  // A pipeline that answers requests is not followed: each client follows its own.
  auto follow = s.client().Get("/v1/streams");
  ASSERT_TRUE(follow);
  EXPECT_EQ(follow->status, 404) << follow->body;
  const std::string held = "127.0.0.1:" + std::to_string(s.port());
  for (const auto& args : {std::vector<std::string>{"serve", kTokens, "--http", held},
                           std::vector<std::string>{"serve", kTokens, "--http", "127.0.0.1:0", "--metrics", held}}) {
    pid_t r = spawn_cli(args, dir.file("c.out"), dir.file("c.err"));
    const int code = wait_exit_within(r, kPatience);
    if (code < 0) kill(r, SIGKILL);
    EXPECT_EQ(code, 2) << slurp(dir.file("c.err"));
    EXPECT_NE(slurp(dir.file("c.err")).find("(in use)"), std::string::npos) << slurp(dir.file("c.err"));
  }
}

}  // namespace
