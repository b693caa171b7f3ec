#include "runtime/routing.hpp"

#include <algorithm>

namespace swarmflow::runtime {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// -- ConsistentHashRing -------------------------------------------------------

ConsistentHashRing::ConsistentHashRing(int replicas, int virtual_nodes) : replicas_(std::max(1, replicas)) {
  ring_.reserve(static_cast<std::size_t>(replicas_ * virtual_nodes));
  for (int r = 0; r < replicas_; ++r) {
    for (int v = 0; v < virtual_nodes; ++v) {
      ring_.push_back(Point{mix64((static_cast<std::uint64_t>(r) << 32) | static_cast<std::uint64_t>(v)), r});
    }
  }
  std::sort(ring_.begin(), ring_.end(), [](const Point& a, const Point& b) { return a.hash < b.hash; });
}

int ConsistentHashRing::replica_for(std::uint64_t stream) const {
  if (replicas_ == 1) return 0;
  const std::uint64_t h = mix64(stream ^ 0x5f3759df5f3759dfULL);
  auto it = std::lower_bound(ring_.begin(), ring_.end(), h,
                             [](const Point& p, std::uint64_t value) { return p.hash < value; });
  if (it == ring_.end()) it = ring_.begin();
  return it->replica;
}

// -- routing choice -----------------------------------------------------------

int pick_least_delay(const std::vector<ReplicaView>& replicas, int capacity, int start) {
  const int n = static_cast<int>(replicas.size());
  if (n == 0) return -1;
  double known_sum = 0;
  int known = 0;
  for (const auto& r : replicas) {
    if (r.service_ns > 0) {
      known_sum += r.service_ns;
      ++known;
    }
  }
  const double fallback = known > 0 ? known_sum / known : 1.0;
  int best = -1;
  double best_delay = 0;
  for (int k = 0; k < n; ++k) {
    const int i = (start + k) % n;
    const ReplicaView& r = replicas[static_cast<std::size_t>(i)];
    if (r.credits <= 0) continue;
    const double service = r.service_ns > 0 ? r.service_ns : fallback;
    const double delay = static_cast<double>(capacity - r.credits + 1) * service;
    if (best < 0 || delay < best_delay) {
      best = i;
      best_delay = delay;
    }
  }
  return best;
}

int ack_threshold(int capacity) { return std::max(1, capacity / 2); }

std::size_t retention_limit(int capacity, std::size_t join_sets) {
  return 2 * static_cast<std::size_t>(std::max(1, capacity)) + join_sets;
}

// -- EdgeRouter ---------------------------------------------------------------

EdgeRouter::EdgeRouter(int replicas, int capacity, config::Overflow overflow, bool keyed, config::KeyField key,
                       std::size_t retain)
    : capacity_(std::max(1, capacity)),
      overflow_(overflow),
      keyed_(keyed),
      key_(key),
      ring_(replicas),
      views_(static_cast<std::size_t>(std::max(1, replicas))),
      in_flight_(static_cast<std::size_t>(std::max(1, replicas))),
      replay_(static_cast<std::size_t>(std::max(1, replicas))),
      flight_origin_(static_cast<std::size_t>(std::max(1, replicas))),
      replay_origin_(static_cast<std::size_t>(std::max(1, replicas))),
      credited_(static_cast<std::size_t>(std::max(1, replicas)), 0),
      retention_limit_(retain > 0 ? retain : runtime::retention_limit(capacity)) {
  for (auto& v : views_) v.credits = capacity_;
  fixed_waiting_.assign(views_.size(), 0);
  paused_.assign(views_.size(), 0);
  standby_.assign(views_.size(), 0);
}

std::uint64_t EdgeRouter::key_of(const Envelope& e) const {
  switch (key_) {
    case config::KeyField::part_id: return e.header().part_id;
    case config::KeyField::seq: return e.header().seq;
    case config::KeyField::stream: break;
  }
  return e.header().stream;
}

const std::vector<ReplicaView>& EdgeRouter::restricted_views(bool exclude_fixed) {
  scratch_ = views_;
  for (std::size_t i = 0; i < scratch_.size(); ++i) {
    if ((exclude_fixed && fixed_waiting_[i] > 0) || in_flight_[i].size() >= retention_limit_ || !replay_[i].empty() ||
        paused_[i] != 0 || standby_[i] != 0) {
      scratch_[i].credits = 0;
    }
  }
  return scratch_;
}

int EdgeRouter::replica_for_key(std::uint64_t key) const {
  if (key_map_) {
    const auto it = key_map_->find(key);
    if (it != key_map_->end() && it->second >= 0 && it->second < static_cast<int>(views_.size())) return it->second;
  }
  return ring_.replica_for(key);
}

int EdgeRouter::choose(const Envelope& e) {
  if (keyed_) return replica_for_key(key_of(e));
  const int pick = pick_least_delay(usable_views(false), capacity_, next_start_);
  if (pick >= 0) next_start_ = (pick + 1) % static_cast<int>(views_.size());
  return pick;
}

bool EdgeRouter::try_send(int target, Envelope& e, std::uint64_t origin, std::vector<Dispatch>& out) {
  if (target < 0 || !can_take_new(target)) return false;
  ++dispatched_;
  retain(target, e, origin);
  out.push_back(Dispatch{target, std::move(e)});
  return true;
}

void EdgeRouter::retain(int replica, const Envelope& e, std::uint64_t origin) {
  flight_origin_[static_cast<std::size_t>(replica)].push_back(origin);
  ReplicaView& v = views_[static_cast<std::size_t>(replica)];
  --v.credits;
  peak_outstanding_ = std::max(peak_outstanding_, capacity_ - v.credits);
  auto& flight = in_flight_[static_cast<std::size_t>(replica)];
  flight.push_back(e);
  if (flight.size() == retention_limit_) ++full_replicas_;
  peak_retained_ = std::max(peak_retained_, flight.size());
}

std::size_t EdgeRouter::retained() const {
  std::size_t n = replay_pending_;
  for (const auto& flight : in_flight_) n += flight.size();
  return n;
}

// -- replay -------------------------------------------------------------------

void EdgeRouter::replace(int replica, bool remote, std::vector<Dispatch>& out) {
  if (replica < 0 || replica >= static_cast<int>(views_.size())) return;
  const auto r = static_cast<std::size_t>(replica);
  // What was sent and not released comes first, then whatever an earlier
  // replace() had not sent again yet: both in the order first sent.
  auto& flight = in_flight_[r];
  auto& replay = replay_[r];
  RingQueue<Envelope> again;
  RingQueue<std::uint64_t> again_origin;
  if (flight.size() >= retention_limit_) --full_replicas_;
  while (!flight.empty()) {
    again.push_back(std::move(flight.front()));
    flight.pop_front();
    again_origin.push_back(flight_origin_[r].front());
    flight_origin_[r].pop_front();
  }
  credited_[r] = 0;
  if (!replay.empty()) --replaying_replicas_;
  replay_pending_ -= replay.size();
  while (!replay.empty()) {
    again.push_back(std::move(replay.front()));
    replay.pop_front();
    again_origin.push_back(replay_origin_[r].front());
    replay_origin_[r].pop_front();
  }
  replay = std::move(again);
  replay_origin_[r] = std::move(again_origin);
  replay_pending_ += replay.size();
  if (!replay.empty()) ++replaying_replicas_;
  views_[r] = ReplicaView{capacity_, 0};
  if (remote && remote_.empty()) remote_.assign(views_.size(), false);
  if (!remote_.empty()) {
    remote_[r] = remote;
    if (std::find(remote_.begin(), remote_.end(), true) == remote_.end()) remote_.clear();
  }
  send_replay(replica, out);
  send_waiting(out);
}

void EdgeRouter::send_replay(int replica, std::vector<Dispatch>& out) {
  const auto r = static_cast<std::size_t>(replica);
  auto& replay = replay_[r];
  if (replay.empty()) return;
  const bool too_far = !remote_.empty() && remote_[r];
  while (!replay.empty() && can_take(replica)) {
    Envelope e = std::move(replay.front());
    replay.pop_front();
    const std::uint64_t origin = replay_origin_[r].front();
    replay_origin_[r].pop_front();
    --replay_pending_;
    if (too_far && e.payload() && e.payload()->size() > max_remote_payload_bytes_) {
      // The transport cannot carry it to the replica's new unit.
      --dispatched_;
      ++dropped_;
      ++too_large_;
      continue;
    }
    ++replayed_;
    retain(replica, e, origin);
    out.push_back(Dispatch{replica, std::move(e)});
  }
  if (replay.empty()) --replaying_replicas_;
}

std::uint64_t EdgeRouter::oldest_held_origin() const {
  std::uint64_t oldest = kNoOrigin;
  for (const auto& w : waiting_) oldest = std::min(oldest, w.origin);
  // Per replica, origins rise in the order sent (a replay, of older ones,
  // goes first), so the first not credited is the oldest.
  for (std::size_t r = 0; r < in_flight_.size(); ++r) {
    if (credited_[r] < flight_origin_[r].size()) oldest = std::min(oldest, flight_origin_[r].at(credited_[r]));
    if (!replay_origin_[r].empty()) oldest = std::min(oldest, replay_origin_[r].front());
  }
  return oldest;
}

void EdgeRouter::set_remote(std::vector<bool> remote, std::size_t max_remote_payload_bytes) {
  remote_ = std::move(remote);
  remote_.resize(views_.size(), false);
  if (std::find(remote_.begin(), remote_.end(), true) == remote_.end()) remote_.clear();
  max_remote_payload_bytes_ = max_remote_payload_bytes;
}

int EdgeRouter::local_replica() const {
  int best = -1;
  for (int i = 0; i < static_cast<int>(views_.size()); ++i) {
    if (remote_[static_cast<std::size_t>(i)] || standby_[static_cast<std::size_t>(i)] != 0) continue;
    if (best < 0 || views_[static_cast<std::size_t>(i)].credits > views_[static_cast<std::size_t>(best)].credits) {
      best = i;
    }
  }
  return best;
}

void EdgeRouter::offer(Envelope envelope, std::vector<Dispatch>& out, bool may_wait, std::uint64_t origin) {
  if (fanout_) {
    const int n = replicas();
    for (int r = 0; r + 1 < n; ++r) offer_one(envelope, out, may_wait, origin, r);
    offer_one(std::move(envelope), out, may_wait, origin, n - 1);
    return;
  }
  const int target = keyed_ ? replica_for_key(key_of(envelope)) : -1;
  offer_one(std::move(envelope), out, may_wait, origin, target);
}

void EdgeRouter::offer_one(Envelope envelope, std::vector<Dispatch>& out, bool may_wait, std::uint64_t origin,
                           int target) {
  ++offered_;
  if (!remote_.empty() && envelope.payload() && envelope.payload()->size() > max_remote_payload_bytes_) {
    // Another unit would refuse it (and drop the connection): keep it here.
    if (target < 0) target = local_replica();
    if (target < 0 || remote_[static_cast<std::size_t>(target)]) {
      ++dropped_;
      ++too_large_;
      return;
    }
  }
  // Envelopes already waiting for a replica go to it first, so that order per
  // consumer is kept; one that may go anywhere waits behind any that may too.
  if (unfixed_waiting_ == 0) {
    int pick = -1;
    if (target >= 0) {
      if (fixed_waiting_[static_cast<std::size_t>(target)] == 0) pick = target;
    } else {
      pick = choose_free(envelope);
    }
    if (try_send(pick, envelope, origin, out)) return;
  }
  if (!may_wait && overflow_ == config::Overflow::block) {
    // A live source's envelope for a replica that drains for a move waits
    // for its successor, within `capacity`; otherwise it cannot wait.
    // (One that may go anywhere waits too while a replica drains: the
    // drained one may have been the only one with room.)
    const std::size_t held = waiting_for_paused() + static_cast<std::size_t>(unfixed_waiting_);
    const bool for_paused = paused_count_ > 0 && held < static_cast<std::size_t>(capacity_) &&
                            (target < 0 || paused_[static_cast<std::size_t>(target)] != 0);
    if (!for_paused) {
      ++dropped_;
      return;
    }
  }
  switch (overflow_) {
    case config::Overflow::block:
      wait(target, std::move(envelope), origin);
      return;
    case config::Overflow::drop_newest:
      if (waiting_.size() >= wait_limit()) {
        ++dropped_;
        return;
      }
      wait(target, std::move(envelope), origin);
      return;
    case config::Overflow::drop_oldest:
      if (waiting_.size() >= wait_limit()) {
        forget(waiting_.front());
        waiting_.pop_front();
        ++dropped_;
      }
      wait(target, std::move(envelope), origin);
      return;
  }
}

void EdgeRouter::wait(int target, Envelope envelope, std::uint64_t origin) {
  if (target >= 0) {
    ++fixed_waiting_[static_cast<std::size_t>(target)];
  } else {
    ++unfixed_waiting_;
  }
  waiting_.push_back(Waiting{target, std::move(envelope), origin});
}

void EdgeRouter::forget(const Waiting& w) {
  if (w.target >= 0) {
    --fixed_waiting_[static_cast<std::size_t>(w.target)];
  } else {
    --unfixed_waiting_;
  }
}

int EdgeRouter::choose_free(const Envelope& e) {
  if (keyed_) return choose(e);
  // Only replicas nothing waits for: an envelope fixed to a replica (too
  // large for other units) must not be overtaken there.
  const int pick = pick_least_delay(usable_views(true), capacity_, next_start_);
  if (pick >= 0) next_start_ = (pick + 1) % static_cast<int>(views_.size());
  return pick;
}

void EdgeRouter::on_ack(int replica, int credits, int released, double service_ns, std::vector<Dispatch>& out) {
  if (replica < 0 || replica >= static_cast<int>(views_.size())) return;
  ReplicaView& v = views_[static_cast<std::size_t>(replica)];
  v.credits = std::min(capacity_, v.credits + credits);
  if (service_ns > 0) v.service_ns = v.service_ns > 0 ? 0.7 * v.service_ns + 0.3 * service_ns : service_ns;
  const auto r = static_cast<std::size_t>(replica);
  auto& flight = in_flight_[r];
  credited_[r] = std::min(flight.size(), credited_[r] + static_cast<std::size_t>(std::max(0, credits)));
  const bool was_full = flight.size() >= retention_limit_;
  for (int i = 0; i < released && !flight.empty(); ++i) {
    flight.pop_front();
    flight_origin_[r].pop_front();
    if (credited_[r] > 0) --credited_[r];
  }
  if (was_full && flight.size() < retention_limit_) --full_replicas_;
  // A replay goes before anything new for its replica.
  if (replaying_replicas_ > 0) send_replay(replica, out);
  send_waiting(out);
}

void EdgeRouter::send_waiting(std::vector<Dispatch>& out) {
  // Hand waiting envelopes to whoever has credit now, oldest first. An
  // envelope fixed to a replica (keyed edges, payloads too large for other
  // units) whose replica has no credit keeps its place, and so do later ones
  // for that replica, so per-consumer order holds.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const int pick = it->target >= 0 ? it->target : choose(it->envelope);
    if (pick < 0) break;
    if (!try_send(pick, it->envelope, it->origin, out)) {
      ++it;
      continue;
    }
    forget(*it);
    it = waiting_.erase(it);
  }
}

// -- moves ------------------------------------------------------------------

void EdgeRouter::pause(int replica) {
  if (replica < 0 || replica >= static_cast<int>(views_.size())) return;
  auto& p = paused_[static_cast<std::size_t>(replica)];
  if (p == 0) ++paused_count_;
  p = 1;
}

void EdgeRouter::resume(int replica, bool remote, std::vector<Dispatch>& out) {
  if (replica < 0 || replica >= static_cast<int>(views_.size())) return;
  const auto r = static_cast<std::size_t>(replica);
  if (paused_[r] != 0) --paused_count_;
  paused_[r] = 0;
  views_[r].service_ns = 0;  // measured again where it runs now
  if (remote && remote_.empty()) remote_.assign(views_.size(), false);
  if (!remote_.empty()) {
    remote_[r] = remote;
    if (std::find(remote_.begin(), remote_.end(), true) == remote_.end()) remote_.clear();
  }
  send_waiting(out);
}

void EdgeRouter::set_key_map(std::shared_ptr<const KeyMap> keys) {
  key_map_ = std::move(keys);
  retarget_waiting();
}

void EdgeRouter::retarget_waiting() {
  if (!keyed_ || fanout_) return;
  for (auto& w : waiting_) {
    if (w.target < 0) continue;
    const int now = replica_for_key(key_of(w.envelope));
    if (now == w.target) continue;
    --fixed_waiting_[static_cast<std::size_t>(w.target)];
    ++fixed_waiting_[static_cast<std::size_t>(now)];
    w.target = now;
  }
}

void EdgeRouter::set_serving(int active, int ring, std::vector<Dispatch>& out) {
  const int n = static_cast<int>(views_.size());
  active = std::clamp(active, 1, n);
  ring = std::clamp(ring, 1, active);
  standby_count_ = 0;
  for (int r = 0; r < n; ++r) {
    standby_[static_cast<std::size_t>(r)] = r >= active ? 1 : 0;
    standby_count_ += r >= active ? 1 : 0;
  }
  if (ring != ring_.replicas()) {
    ring_ = ConsistentHashRing(ring);
    retarget_waiting();
  }
  send_waiting(out);
}

void EdgeRouter::drop_waiting() {
  dropped_ += waiting_.size();
  waiting_.clear();
  std::fill(fixed_waiting_.begin(), fixed_waiting_.end(), 0);
  unfixed_waiting_ = 0;
}

}  // namespace swarmflow::runtime
