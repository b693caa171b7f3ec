// Confidence-weighted vote with quorum, deadline, reliability and a leader
// (see vote_tally.hpp).

#include "consensus/vote_tally.hpp"

#include <algorithm>
#include <cmath>

namespace swarmflow::consensus {

std::size_t VoteTally::KeyHash::operator()(const Key& k) const {
  std::uint64_t x = k.stream * 0x9e3779b97f4a7c15ULL ^ k.seq;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::size_t>(x ^ (x >> 31));
}

VoteTally::VoteTally(TallySettings settings) : settings_(settings) {
  settings_.voters = std::max(1, settings_.voters);
  settings_.quorum = std::clamp(settings_.quorum, 0.5, 1.0);
  settings_.max_confidence = std::clamp(settings_.max_confidence, 1e-6, 1.0);
  settings_.min_confidence = std::clamp(settings_.min_confidence, 0.0, settings_.max_confidence);
  settings_.max_pending = std::max<std::size_t>(1, settings_.max_pending);
  reliability_.assign(static_cast<std::size_t>(settings_.voters), 1.0);
}

double VoteTally::weight(double confidence) const {
  if (!(confidence > 0)) confidence = 0;  // also NaN
  return std::clamp(confidence, settings_.min_confidence, settings_.max_confidence);
}

// -- events ---------------------------------------------------------------

void VoteTally::add(const Vote& vote, std::int64_t now, std::vector<Decision>& out) {
  advance(now, out);
  if (vote.voter < 0 || vote.voter >= settings_.voters) {
    ++counts_.unknown_voters;
    return;
  }
  const Key k{vote.stream, vote.seq};
  if (finished_.count(k) > 0) {
    ++counts_.late_votes;
    return;
  }
  auto it = pending_.find(k);
  if (it == pending_.end()) {
    Pending p;
    p.first_ns = now;
    const auto n = static_cast<std::size_t>(settings_.voters);
    p.voted.assign(n, false);
    p.keys.assign(n, 0);
    p.weights.assign(n, 0);
    it = pending_.emplace(k, std::move(p)).first;
    order_.emplace_back(now, k);
  }
  Pending& p = it->second;
  const auto v = static_cast<std::size_t>(vote.voter);
  if (p.voted[v]) {
    ++counts_.repeated_votes;
    return;
  }
  p.voted[v] = true;
  p.keys[v] = vote.key;
  p.weights[v] = weight(vote.confidence);
  ++p.votes;
  // The leader's confident answer passes at once; the rest confirm or correct it.
  if (!p.decided && !p.fast_sent && settings_.leader_threshold > 0 && vote.voter == leader_ &&
      vote.confidence >= settings_.leader_threshold) {
    p.fast_sent = true;
    p.fast_key = vote.key;
    Decision d = make_decision(k, p, vote.key, now);
    d.fast = true;
    d.quorum = false;
    d.winner = vote.voter;
    ++counts_.decisions;
    ++counts_.fast;
    out.push_back(std::move(d));
  }
  maybe_decide(k, p, now, false, out);
  if (p.decided && p.votes == settings_.voters) {
    finish(k, p);
  } else if (pending_.size() > settings_.max_pending) {
    // Too many keys at once: the oldest is decided now, as at its deadline.
    while (!order_.empty() && pending_.size() > settings_.max_pending) {
      const Key oldest = order_.front().second;
      order_.pop_front();
      auto o = pending_.find(oldest);
      if (o == pending_.end()) continue;
      ++counts_.evicted;
      maybe_decide(oldest, o->second, now, true, out);
      finish(oldest, o->second);
    }
  }
}

void VoteTally::advance(std::int64_t now, std::vector<Decision>& out) {
  while (!order_.empty()) {
    const auto [first_ns, k] = order_.front();
    auto it = pending_.find(k);
    if (it != pending_.end() && it->second.first_ns == first_ns && now < first_ns + settings_.deadline_ns) break;
    order_.pop_front();
    if (it == pending_.end() || it->second.first_ns != first_ns) continue;  // finished already
    maybe_decide(k, it->second, now, true, out);
    finish(k, it->second);
  }
}

void VoteTally::flush(std::int64_t now, std::vector<Decision>& out) {
  while (!order_.empty()) {
    const Key k = order_.front().second;
    order_.pop_front();
    auto it = pending_.find(k);
    if (it == pending_.end()) continue;
    maybe_decide(k, it->second, now, true, out);
    finish(k, it->second);
  }
}

std::int64_t VoteTally::next_deadline() const {
  for (const auto& [first_ns, k] : order_) {
    auto it = pending_.find(k);
    if (it != pending_.end() && it->second.first_ns == first_ns) return first_ns + settings_.deadline_ns;
  }
  return 0;
}

// -- deciding -------------------------------------------------------------

std::uint64_t VoteTally::heaviest(const Pending& p, double* weight) const {
  // Sum per answer; at most `voters` answers, so a small linear scan.
  std::vector<std::pair<std::uint64_t, double>> sums;
  for (std::size_t v = 0; v < p.voted.size(); ++v) {
    if (!p.voted[v]) continue;
    auto it = std::find_if(sums.begin(), sums.end(), [&](const auto& s) { return s.first == p.keys[v]; });
    if (it == sums.end()) {
      sums.emplace_back(p.keys[v], p.weights[v]);
    } else {
      it->second += p.weights[v];
    }
  }
  // Best voter of an answer: the most reliable, then the lowest index.
  auto best_voter = [&](std::uint64_t key) {
    int best = -1;
    for (std::size_t v = 0; v < p.voted.size(); ++v) {
      if (!p.voted[v] || p.keys[v] != key) continue;
      if (best < 0 || reliability_[v] > reliability_[static_cast<std::size_t>(best)]) best = static_cast<int>(v);
    }
    return best;
  };
  std::uint64_t answer = 0;
  double most = -1;
  int answer_voter = -1;
  for (const auto& [key, w] : sums) {
    const int bv = best_voter(key);
    bool better = w > most + 1e-12;
    if (!better && std::abs(w - most) <= 1e-12) {
      const double rb = reliability_[static_cast<std::size_t>(bv)];
      const double ra = reliability_[static_cast<std::size_t>(answer_voter)];
      better = rb > ra + 1e-12 || (std::abs(rb - ra) <= 1e-12 && bv < answer_voter);
    }
    if (better) {
      answer = key;
      most = w;
      answer_voter = bv;
    }
  }
  *weight = std::max(0.0, most);
  return answer;
}

double VoteTally::total_weight(const Pending& p) const {
  double total = 0;
  for (std::size_t v = 0; v < p.voted.size(); ++v) total += p.voted[v] ? p.weights[v] : settings_.max_confidence;
  return total;
}

Decision VoteTally::make_decision(const Key& k, const Pending& p, std::uint64_t answer, std::int64_t now) const {
  Decision d;
  d.stream = k.stream;
  d.seq = k.seq;
  d.key = answer;
  d.leader = leader_;
  d.waited_ns = now - p.first_ns;
  double heaviest_weight = -1;
  for (std::size_t v = 0; v < p.voted.size(); ++v) {
    const int voter = static_cast<int>(v);
    if (!p.voted[v]) {
      d.silent.push_back(voter);
    } else if (p.keys[v] == answer) {
      d.agreeing.push_back(voter);
      d.agreeing_weight += p.weights[v];
      if (p.weights[v] > heaviest_weight) {
        heaviest_weight = p.weights[v];
        d.winner = voter;
      }
    } else {
      d.dissenters.push_back(voter);
    }
  }
  d.total_weight = total_weight(p);
  d.quorum = d.agreeing_weight > settings_.quorum * d.total_weight;
  return d;
}

void VoteTally::maybe_decide(const Key& k, Pending& p, std::int64_t now, bool forced, std::vector<Decision>& out) {
  if (p.decided || p.votes == 0) return;
  double w = 0;
  const std::uint64_t answer = heaviest(p, &w);
  const bool quorum = w > settings_.quorum * total_weight(p);
  if (!quorum && !forced && p.votes < settings_.voters) return;
  p.decided = true;
  p.decided_key = answer;
  Decision d = make_decision(k, p, answer, now);
  d.at_deadline = forced && !quorum;
  if (!d.quorum) ++counts_.without_quorum;
  if (p.fast_sent) {
    if (answer == p.fast_key) {
      ++counts_.confirmed;
      return;
    }
    ++counts_.corrections;
    d.correction = true;
  } else {
    ++counts_.decisions;
  }
  out.push_back(std::move(d));
}

// -- reliability and the leader -------------------------------------------

void VoteTally::finish(const Key& k, const Pending& p) {
  const double a = std::clamp(settings_.reliability_alpha, 0.0, 1.0);
  for (std::size_t v = 0; v < p.voted.size(); ++v) {
    const double agreed = p.voted[v] && p.keys[v] == p.decided_key ? 1.0 : 0.0;
    reliability_[v] = (1 - a) * reliability_[v] + a * agreed;
  }
  choose_leader();
  finished_now_.push_back(Finished{k.stream, k.seq, p.decided_key});
  pending_.erase(k);
  finished_.insert(k);
  finished_order_.push_back(k);
  while (finished_order_.size() > 4 * settings_.max_pending) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

void VoteTally::choose_leader() {
  int best = leader_;
  for (int v = 0; v < settings_.voters; ++v) {
    if (reliability_[static_cast<std::size_t>(v)] > reliability_[static_cast<std::size_t>(best)]) best = v;
  }
  if (best != leader_ &&
      reliability_[static_cast<std::size_t>(best)] >
          reliability_[static_cast<std::size_t>(leader_)] + settings_.leader_margin) {
    leader_ = best;
    ++counts_.leader_changes;
  }
}

}  // namespace swarmflow::consensus
