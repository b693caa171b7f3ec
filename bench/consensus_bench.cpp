// swarmflow_bench_consensus — what a voter costs and what it buys, in one
// process through swarmflow::Runtime.
//
// Latency: a paced source feeds sim.work answers to a sink; capture-to-sink
// latency p50/p99 with one replica and no voter (the baseline, measured in
// the same run) against three replicas (`fanout: all`) and consensus.vote,
// by quorum (two agreeing answers decide) and by the leader's fast path (the
// leader's confident answer passes at once). The voter's own figure, from
// each key's first candidate to its decision (the report's
// consensus.added_latency_ms), is shown too.
//
// Consistency: --n decisions with one of three replicas lying with
// confidence 0.99 on every fifth answer, checked by the voter against a
// fault-free reference stage: wrong decisions, decisions without quorum, and
// the 95 % upper bound of the wrong rate (Clopper-Pearson; 3/n when none).
// Exits 1 if a run fails, a decision is wrong, or (unpaced, where nothing is
// dropped) a decision is missing.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <swarmflow/log.hpp>
#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"

namespace {

struct Options {
  int n = 10000;          ///< decisions in the consistency run
  int latency_n = 2000;   ///< envelopes per latency run
  double rate = 1000;     ///< envelopes per second in the latency runs
  int repeat = 3;         ///< latency runs of each kind; the median run is shown
};

struct Run {
  bool ok = false;
  double p50_ms = 0;
  double p99_ms = 0;
  swarmflow::ConsensusReport vote;
  std::int64_t received = 0;
};

std::int64_t counter(const swarmflow::StageReport* s, const std::string& name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

Run run(const std::string& yaml) {
  swarmflow::Runtime rt;
  std::vector<swarmflow::Diagnostic> diags;
  Run r;
  if (!rt.load_string(yaml, "consensus-bench.yaml", &diags).ok()) {
    std::fprintf(stderr, "%s", swarmflow::format_diagnostics(diags).c_str());
    return r;
  }
  const swarmflow::Status s = rt.run();
  if (!s.ok()) {
    std::fprintf(stderr, "run failed: %s\n", s.message().c_str());
    return r;
  }
  const swarmflow::RunReport report = rt.report();
  const swarmflow::StageReport* sink = report.stage("sink");
  r.ok = sink != nullptr;
  if (sink != nullptr) {
    r.p50_ms = sink->latency.p50_ms;
    r.p99_ms = sink->latency.p99_ms;
    r.received = counter(sink, "received");
  }
  if (!report.consensus.empty()) r.vote = report.consensus[0];
  return r;
}

std::string source(int count, double rate) {
  return "  - {id: src, type: sim.source, params: {count: " + std::to_string(count) +
         ", rate_hz: " + std::to_string(rate) + "}}\n";
}

std::string single(const Options& o) {
  return "pipeline: single\nstages:\n" + source(o.latency_n, o.rate) +
         "  - {id: work, type: sim.work, inputs: {in: src/out}, params: {answer_confidence: 0.9}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n";
}

std::string voted(int count, double rate, const std::string& vote_params, const std::string& faults) {
  return "pipeline: voted\nstages:\n" + source(count, rate) +
         "  - {id: work, type: sim.work, replicas: 3, fanout: all, inputs: {in: src/out},\n"
         "     params: {answer_confidence: 0.9" + faults + "}}\n"
         "  - {id: truth, type: sim.work, inputs: {in: src/out}, params: {answer_confidence: 1.0}}\n"
         "  - {id: vote, type: consensus.vote, inputs: {candidates: work/out, reference: truth/out},\n"
         "     params: {deadline_ms: 1000" + vote_params + "}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: vote/out}}\n";
}

/// The run with the median p99 of `repeat`.
Run median_run(const std::string& yaml, int repeat, bool* ok) {
  std::vector<Run> runs;
  for (int i = 0; i < repeat; ++i) {
    runs.push_back(run(yaml));
    if (!runs.back().ok) *ok = false;
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.p99_ms < b.p99_ms; });
  return runs[runs.size() / 2];
}

/// Clopper-Pearson upper bound of a binomial proportion at 95 % (one-sided
/// 97.5 %), by bisection on the binomial tail.
double upper_bound(std::uint64_t k, std::uint64_t n) {
  if (n == 0) return 1;
  if (k >= n) return 1;
  auto tail = [&](double p) {  // P(X <= k) for X ~ Bin(n, p)
    double sum = 0;
    double log_term = static_cast<double>(n) * std::log1p(-p);  // k = 0
    for (std::uint64_t i = 0; i <= k; ++i) {
      if (i > 0) {
        log_term += std::log(static_cast<double>(n - i + 1)) - std::log(static_cast<double>(i)) + std::log(p) -
                    std::log1p(-p);
      }
      sum += std::exp(log_term);
    }
    return sum;
  };
  double lo = static_cast<double>(k) / static_cast<double>(n);
  double hi = 1.0;
  for (int it = 0; it < 100; ++it) {
    const double mid = (lo + hi) / 2;
    if (tail(mid) > 0.025) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return hi;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "decisions in the consistency run (default 10000)"),
      integer_flag("--latency-n", "N", o.latency_n, "envelopes per latency run (default 2000)"),
      number_flag("--rate", "HZ", o.rate, "envelopes per second in the latency runs (default 1000)"),
      integer_flag("--repeat", "N", o.repeat, "latency runs of each kind; the median is shown (default 3)"),
  };
  if (!parse_flags(argc, argv, flags)) return 2;
  o.repeat = std::max(1, o.repeat);
  swarmflow::log::Options log_options;
  log_options.level = swarmflow::log::Level::warn;
  (void)swarmflow::log::configure(log_options);

  bool ok = true;
  const Run base = median_run(single(o), o.repeat, &ok);
  const Run quorum = median_run(voted(o.latency_n, o.rate, "", ""), o.repeat, &ok);
  const Run fast = median_run(voted(o.latency_n, o.rate, ", leader_threshold: 0.85", ""), o.repeat, &ok);
  std::printf("latency, capture to sink, %d envelopes at %.0f/s, median of %d runs (ms)\n", o.latency_n, o.rate,
              o.repeat);
  std::printf("  %-36s %9s %9s %11s %11s %17s\n", "", "p50", "p99", "+p50", "+p99", "voter adds p50/p99");
  std::printf("  %-36s %9.3f %9.3f\n", "one replica, no voter (baseline)", base.p50_ms, base.p99_ms);
  auto row = [&](const char* name, const Run& r) {
    std::printf("  %-36s %9.3f %9.3f %+11.3f %+11.3f %8.3f / %.3f\n", name, r.p50_ms, r.p99_ms, r.p50_ms - base.p50_ms,
                r.p99_ms - base.p99_ms, r.vote.added_latency_p50_ms, r.vote.added_latency_p99_ms);
  };
  row("3 replicas + vote, quorum", quorum);
  row("3 replicas + vote, leader fast path", fast);
  std::printf("  (voter adds: from a key's first candidate to its decision, a histogram bucket's upper bound)\n");
  // A paced source is live: what flow control has no credit for is dropped
  // there (counted), so a latency run may decide a few less than it made.
  std::printf("  decided %llu and %llu of %d (a paced source drops what it has no credit for); wrong %llu and %llu\n",
              static_cast<unsigned long long>(quorum.vote.decisions),
              static_cast<unsigned long long>(fast.vote.decisions), o.latency_n,
              static_cast<unsigned long long>(quorum.vote.wrong), static_cast<unsigned long long>(fast.vote.wrong));
  if (quorum.vote.wrong != 0 || fast.vote.wrong != 0 || quorum.vote.decisions == 0 || fast.vote.decisions == 0) {
    std::fprintf(stderr, "a latency run decided nothing or decided wrongly\n");
    ok = false;
  }

  // Consistency: unpaced, one liar among three.
  const Run c = run(voted(o.n, 0, "", ", fault_replica: 2, lie_every: 5, lie_confidence: 0.99"));
  if (!c.ok || c.vote.decisions != static_cast<std::uint64_t>(o.n) || c.vote.checked != c.vote.decisions) {
    std::fprintf(stderr, "consistency run: %llu decisions, %llu checked, of %d\n",
                 static_cast<unsigned long long>(c.vote.decisions), static_cast<unsigned long long>(c.vote.checked),
                 o.n);
    ok = false;
  }
  std::printf("\nconsistency, 3 replicas, one lying with confidence 0.99 on every 5th answer (%d lies)\n", o.n / 5);
  std::printf("  decisions %llu, wrong %llu, without quorum %llu, corrections %llu\n",
              static_cast<unsigned long long>(c.vote.decisions), static_cast<unsigned long long>(c.vote.wrong),
              static_cast<unsigned long long>(c.vote.without_quorum),
              static_cast<unsigned long long>(c.vote.corrections));
  std::printf("  wrong rate %.2e, 95%% upper bound %.2e (Clopper-Pearson)\n",
              c.vote.decisions > 0 ? static_cast<double>(c.vote.wrong) / static_cast<double>(c.vote.decisions) : 0.0,
              upper_bound(c.vote.wrong, c.vote.decisions));
  return ok ? 0 : 1;
}
