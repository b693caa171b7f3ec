// Serving under load, as a Locust-style generator sees it: requests arrive
// at Poisson times at several rates and go through pipelines/tokens.yaml's
// stages (lm.prompts fed by a serve hub -> lm.tokenize -> lm.generate ->
// lm.detokenize) in one process, as `swarmflow serve` sends them; each
// request's client waits for its tokens. At each rate, in the same run, it
// measures continuous batching (batch.max_size N) and one request at a time
// (batch.max_size 1): TTFT and TPOT p50/p99 as the client sees them, and
// tokens/s delivered. Then the highest rate where batching keeps TTFT p99
// under 800 ms and TPOT p99 under 45 ms.
//
//   swarmflow_bench_tokens [--rates 50,100,200,400] [--seconds 4] [--max-tokens 64] [--max-size 16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <swarmflow/swarmflow.hpp>

#include "lm/serve_hub.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

const char* kPrompts[] = {"ABSURDITY, n.", "BORE, n.  A person who talks", "CYNIC, n.  A blackguard whose",
                          "LOVE, n.  A temporary insanity curable by", "WAR, n.", "PHILOSOPHY, n.",
                          "LAWYER, n.  One skilled in", "DICTIONARY, n."};

std::string pipeline(int max_size) {
  std::ostringstream y;
  y << "pipeline: tokens-bench\nunits: 1\nstages:\n"
    << "  - {id: prompts, type: lm.prompts}\n"
    << "  - {id: tokenize, type: lm.tokenize, inputs: {in: prompts/out}}\n"
    << "  - {id: generate, type: lm.generate, inputs: {in: tokenize/out}, queue: {capacity: 256},\n"
    << "     params: {batch.max_size: " << max_size << ", batch.kv_budget_tokens: 100000, batch.max_queue: 100000}}\n"
    << "  - {id: detokenize, type: lm.detokenize, inputs: {in: generate/out}, queue: {capacity: 256}}\n";
  return y.str();
}

struct Result {
  int completed = 0;
  int rejected = 0;
  long tokens = 0;
  double seconds = 0;
  std::vector<double> ttft_ms, tpot_ms;
};

/// Offers `rate` requests/s for `seconds`, then waits for the answers.
Result run(double rate, double seconds, int max_tokens, int max_size, unsigned seed) {
  swarmflow::lm::ServeHub hub(4096);
  swarmflow::lm::attach_serve_hub(&hub);
  swarmflow::Runtime rt;
  Result result;
  std::vector<swarmflow::Diagnostic> diags;
  if (!rt.load_string(pipeline(max_size), "tokens-bench.yaml", &diags).ok() || !rt.start().ok()) {
    std::fprintf(stderr, "cannot start the pipeline\n%s", swarmflow::format_diagnostics(diags).c_str());
    std::exit(1);
  }
  std::mutex mu;
  std::vector<std::thread> clients;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  const auto start = Clock::now();
  auto due = start;
  auto last_done = start;
  for (int i = 0;; ++i) {
    due += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    if (due - start > std::chrono::duration<double>(seconds)) break;
    std::this_thread::sleep_until(due);
    swarmflow::lm::ServeRequest r;
    r.text = kPrompts[i % 8];
    r.max_tokens = max_tokens;
    const auto sent = Clock::now();
    r.arrived_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(sent.time_since_epoch()).count();
    const auto id = hub.admit(r);
    if (!id) {
      std::lock_guard<std::mutex> lock(mu);
      ++result.rejected;
      continue;
    }
    clients.emplace_back([&, sent, id = *id] {
      swarmflow::lm::ServeEvent e;
      Clock::time_point first{}, last{};
      int n = 0;
      bool refused = false;
      while (true) {
        if (!hub.next(id, e, std::chrono::milliseconds(60000))) break;
        if (e.token >= 0) {
          last = Clock::now();
          if (n++ == 0) first = last;
        }
        if (e.final) {
          refused = e.token < 0 && e.finish_reason.rfind("refused", 0) == 0;
          break;
        }
      }
      hub.forget(id);
      std::lock_guard<std::mutex> lock(mu);
      if (refused || n == 0) {
        ++result.rejected;
        return;
      }
      ++result.completed;
      result.tokens += n;
      result.ttft_ms.push_back(std::chrono::duration<double, std::milli>(first - sent).count());
      if (n > 1) result.tpot_ms.push_back(std::chrono::duration<double, std::milli>(last - first).count() / (n - 1));
      last_done = std::max(last_done, last);
    });
  }
  for (auto& t : clients) t.join();
  hub.close();
  rt.request_stop();
  (void)rt.wait();
  swarmflow::lm::attach_serve_hub(nullptr);
  result.seconds = std::chrono::duration<double>(last_done - start).count();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> rates = {50, 100, 200, 400};
  double seconds = 4;
  int max_tokens = 64;
  int max_size = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rates") == 0) {
      rates.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string r; std::getline(ss, r, ',');) rates.push_back(std::stod(r));
    }
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::stod(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-tokens") == 0) max_tokens = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-size") == 0) max_size = std::stoi(argv[i + 1]);
  }
  std::printf("Poisson arrivals for %.1f s per rate; %d greedy tokens per request; the shipped model\n", seconds,
              max_tokens);
  std::printf("%-8s %-9s %9s %9s %10s %10s %10s %10s %10s\n", "req/s", "mode", "answered", "rejected", "tokens/s",
              "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99");
  double best = 0;
  for (double rate : rates) {
    Result alone = run(rate, seconds, max_tokens, 1, 1);
    Result batched = run(rate, seconds, max_tokens, max_size, 1);
    for (const auto* r : {&alone, &batched}) {
      std::printf("%-8.0f %-9s %9d %9d %10.0f %8.1fms %8.1fms %8.2fms %8.2fms\n", rate,
                  r == &alone ? "alone" : ("batch" + std::to_string(max_size)).c_str(), r->completed, r->rejected,
                  r->seconds > 0 ? static_cast<double>(r->tokens) / r->seconds : 0.0, percentile(r->ttft_ms, 0.5),
                  percentile(r->ttft_ms, 0.99), percentile(r->tpot_ms, 0.5), percentile(r->tpot_ms, 0.99));
    }
    const double ratio = alone.tokens > 0 && batched.seconds > 0 && alone.seconds > 0
                             ? (static_cast<double>(batched.tokens) / batched.seconds) /
                                   (static_cast<double>(alone.tokens) / alone.seconds)
                             : 0;
    const double tpot_ratio = percentile(alone.tpot_ms, 0.99) > 0
                                  ? percentile(batched.tpot_ms, 0.99) / percentile(alone.tpot_ms, 0.99)
                                  : 0;
    std::printf("         batching: %.2fx the tokens/s of one at a time, at %.2fx its TPOT p99\n", ratio, tpot_ratio);
    if (percentile(batched.ttft_ms, 0.99) < 800 && percentile(batched.tpot_ms, 0.99) < 45 && batched.rejected == 0) {
      best = std::max(best, rate);
    }
  }
  std::printf("highest rate with TTFT p99 < 800 ms and TPOT p99 < 45 ms (batching, none rejected): %.0f req/s\n", best);
  return 0;
}
