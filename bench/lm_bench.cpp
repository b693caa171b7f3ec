// Tokens per second of the lm pack's engine, one request at a time against
// continuous batching at several batch sizes, on the same requests in the
// same run. Each run submits every request at once (saturation) and steps
// the engine until all are done; TTFT and TPOT are per request, measured on
// the steady clock.
//
//   swarmflow_bench_lm [--model models/devil-1m.sflm] [--requests 32] [--max-tokens 64]
//                      [--kernel portable|sse2|avx2|avx512]   (default: the best this CPU runs)
//                      [--step-sizes 1,2,4,6,8,12,16]         (the batch sizes of the step table)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "lm/engine.hpp"
#include "lm/matmul.hpp"

namespace {

std::int64_t cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

const char* kPrompts[] = {"ABSURDITY, n.", "BORE, n.  A person who talks", "CYNIC, n.  A blackguard whose",
                          "LOVE, n.  A temporary insanity curable by", "WAR, n.", "PHILOSOPHY, n.",
                          "LAWYER, n.  One skilled in", "DICTIONARY, n."};

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "models/devil-1m.sflm";
  int requests = 32;
  int max_tokens = 64;
  std::string kernel;
  std::vector<int> step_sizes = {1, 2, 4, 6, 8, 12, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--step-sizes") == 0) {
      step_sizes.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) step_sizes.push_back(std::stoi(item));
    }
    if (std::strcmp(argv[i], "--model") == 0) model_path = argv[i + 1];
    if (std::strcmp(argv[i], "--requests") == 0) requests = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-tokens") == 0) max_tokens = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--kernel") == 0) kernel = argv[i + 1];
  }
  swarmflow::lm::Model model;
  const swarmflow::Status s = swarmflow::lm::Model::load(model_path, model);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  if (!kernel.empty()) {
    bool known = false;
    for (auto k : swarmflow::lm::all_kernels()) {
      if (kernel != swarmflow::lm::kernel_name(k)) continue;
      known = true;
      if (!model.use_kernel(k)) {
        std::fprintf(stderr, "this CPU does not run the %s kernel\n", kernel.c_str());
        return 1;
      }
    }
    if (!known) {
      std::fprintf(stderr, "--kernel is portable, sse2, avx2 or avx512, not %s\n", kernel.c_str());
      return 2;
    }
  }
  std::printf("model %s: %lld parameters; %d requests of %d tokens, greedy, all submitted at once; %s kernel\n",
              model_path.c_str(), static_cast<long long>(model.parameter_count()), requests, max_tokens,
              swarmflow::lm::kernel_name(model.kernel()));
  std::printf("%-10s %10s %10s %12s %12s %12s %12s\n", "max_size", "tokens/s", "x alone", "TTFT p50 ms",
              "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms");
  double alone = 0;
  for (int size : {1, 2, 4, 8, 16}) {
    swarmflow::lm::BatchSettings settings;
    settings.max_size = size;
    settings.kv_budget_tokens = 1 << 20;
    settings.max_queue = requests;
    swarmflow::lm::Engine engine(model, settings);
    const std::int64_t start = now_ns();
    for (int i = 0; i < requests; ++i) {
      swarmflow::lm::GenerateRequest r;
      r.id = static_cast<std::uint64_t>(i + 1);
      r.prompt = engine.tokenizer().encode(kPrompts[i % 8], true);
      r.max_tokens = max_tokens;
      engine.submit(r, start);
    }
    std::vector<swarmflow::lm::TokenEvent> events;
    std::int64_t tokens = 0;
    while (!engine.idle()) {
      events.clear();
      engine.step(now_ns(), events);
      tokens += static_cast<std::int64_t>(events.size());
    }
    const double secs = static_cast<double>(now_ns() - start) / 1e9;
    std::vector<double> ttft, tpot;
    for (const auto& t : engine.take_timings()) {
      ttft.push_back(static_cast<double>(t.first_token_ns - t.arrived_ns) / 1e6);
      if (t.tokens > 1) tpot.push_back(static_cast<double>(t.last_token_ns - t.first_token_ns) / 1e6 / (t.tokens - 1));
    }
    const double rate = static_cast<double>(tokens) / secs;
    if (size == 1) alone = rate;
    std::printf("%-10d %10.0f %10.2f %12.1f %12.1f %12.2f %12.2f\n", size, rate, rate / alone, percentile(ttft, 0.5),
                percentile(ttft, 0.99), percentile(tpot, 0.5), percentile(tpot, 0.99));
  }

  // The cost of one decoding step by batch size, on this thread's CPU time
  // (time the machine gave other processes is not counted, so the figures
  // hold on a shared machine): B sequences of a 40-token prompt each decode
  // 64 tokens; the best of 5 rounds.
  std::printf("\ndecoding step, thread CPU time (best of 5 rounds of 64 steps; context 40 to 104 tokens)\n");
  std::printf("%-10s %12s %14s %16s\n", "batch", "step us", "us per token", "token cost x 1");
  double single = 0;
  for (int batch : step_sizes) {
    std::vector<swarmflow::lm::KvCache> caches;
    for (int i = 0; i < batch; ++i) caches.emplace_back(model.config(), 40 + 64);
    std::vector<int> prompt(40);
    for (int i = 0; i < 40; ++i) prompt[i] = 'a' + i % 26;
    std::vector<float> logits;
    const int token = 'e';
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      for (auto& c : caches) {
        c.clear();
        model.forward({swarmflow::lm::ForwardItem{&c, prompt.data(), 40, false}}, logits);
      }
      std::vector<swarmflow::lm::ForwardItem> items;
      for (auto& c : caches) items.push_back(swarmflow::lm::ForwardItem{&c, &token, 1, false});
      const std::int64_t t0 = cpu_ns();
      for (int step = 0; step < 64; ++step) model.forward(items, logits);
      best = std::min(best, static_cast<double>(cpu_ns() - t0) / 64 / 1e3);
    }
    if (single == 0) single = best;  // the first size listed (1 unless told)
    std::printf("%-10d %12.1f %14.1f %16.2f\n", batch, best, best / batch, best / batch / single);
  }

  // The matrix product alone, its weights in cache: how much of the batch's
  // gain the kernel itself can give (one row is the GEMV of a single token).
  std::printf("\nmatrix product alone, weights in cache, thread CPU time (best of 5 rounds)\n");
  std::printf("%-14s %6s %12s %10s\n", "shape", "rows", "us per row", "GFLOP/s");
  for (auto [out, in] : {std::pair{768, 128}, std::pair{128, 384}}) {
    std::vector<float> w(static_cast<std::size_t>(out) * in);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    const swarmflow::lm::PackedMatrix packed({{out, w.data()}}, in, model.kernel());
    for (int rows : {1, 4, 16}) {
      std::vector<float> x(static_cast<std::size_t>(rows) * in, 0.25f), y(static_cast<std::size_t>(rows) * out);
      const int reps = 4000 / rows;
      double best = 1e30;
      for (int round = 0; round < 5; ++round) {
        const std::int64_t t0 = cpu_ns();
        for (int r = 0; r < reps; ++r) swarmflow::lm::matmul(x.data(), rows, packed, y.data());
        best = std::min(best, static_cast<double>(cpu_ns() - t0) / reps);
      }
      std::printf("%4d x %-7d %6d %12.2f %10.1f\n", out, in, rows, best / 1e3 / rows, 2.0 * out * in * rows / best);
    }
  }
  return 0;
}
