#include <cstring>
#include <sstream>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/stage.hpp>

#include "sim/sim_stages.hpp"

namespace swarmflow::sim {

void SimSource::setup(StageSpec& s) {
  out_ = s.output<schema::Blob>("out", "generated blobs");
  s.param(count_, "count", "envelopes to produce per replica, 0 = until stopped", 1000, {0.0, {}});
  s.param(rate_hz_, "rate_hz", "envelopes per second per replica, 0 = as fast as flow control allows", 0.0,
          {0.0, 1e7});
  s.param(payload_bytes_, "payload_bytes", "bytes of data in each payload", 64, {0.0, 1e9});
  s.param(streams_, "streams", "number of streams, produced round robin", 1, {1.0, 1e6});
}

Status SimSource::start(StageContext& ctx) {
  // Replicas produce disjoint stream ids so that sinks can check every stream.
  first_stream_ = static_cast<std::uint64_t>(ctx.replica()) * static_cast<std::uint64_t>(streams_);
  next_seq_.assign(static_cast<std::size_t>(streams_), 0);
  produced_ = 0;
  start_ns_ = ctx.now_ns();
  ctx.set_live(rate_hz_ > 0);
  // Its length, for the progress line's percentage and eta (0 = endless).
  ctx.counter("expected").store(count_, std::memory_order_relaxed);
  return {};
}

Status SimSource::process(Inputs&, Outputs& out, StageContext& ctx) {
  if (ctx.stop_requested() || (count_ > 0 && produced_ >= count_)) return Status::end_of_stream();
  if (rebase_pacing_) {
    rebase_pacing_ = false;
    if (rate_hz_ > 0) start_ns_ = ctx.now_ns() - static_cast<std::int64_t>(static_cast<double>(produced_) * 1e9 / rate_hz_);
  }
  if (rate_hz_ > 0) {
    // Paced: the host calls again when the next envelope is due.
    const auto due = start_ns_ + static_cast<std::int64_t>(static_cast<double>(produced_) * 1e9 / rate_hz_);
    if (due > ctx.now_ns()) {
      ctx.defer_until(due);
      return {};
    }
  }
  const auto index = static_cast<std::size_t>(produced_ % streams_);
  EnvelopeHeader h;
  h.stream = first_stream_ + index;
  h.seq = next_seq_[index]++;
  h.capture_ns = ctx.now_ns();

  // Room for the table too, so the builder never grows (and copies the payload).
  flatbuffers::FlatBufferBuilder fbb(static_cast<std::size_t>(payload_bytes_) + 256, &payload_allocator());
  std::uint8_t* bytes = nullptr;
  auto data = fbb.CreateUninitializedVector(static_cast<std::size_t>(payload_bytes_), &bytes);
  if (payload_bytes_ > 0) std::memset(bytes, static_cast<int>(h.seq & 0xff), static_cast<std::size_t>(payload_bytes_));
  fbb.Finish(schema::CreateBlob(fbb, h.stream, h.seq, data), schema::BlobIdentifier());
  out.emit(out_, Payload::from_builder(fbb), h);
  ++produced_;
  return {};
}

bool SimSource::snapshot(std::string& out) const {
  out = std::to_string(produced_);
  for (std::uint64_t seq : next_seq_) out += " " + std::to_string(seq);
  return true;
}

Status SimSource::restore(const std::string& state) {
  std::istringstream in(state);
  std::int64_t produced = 0;
  std::vector<std::uint64_t> next(next_seq_.size());
  bool ok = static_cast<bool>(in >> produced);
  for (auto& seq : next) ok = ok && static_cast<bool>(in >> seq);
  if (!ok) return Status::error("sim.source: a snapshot it cannot read", StatusCode::invalid_argument);
  produced_ = produced;
  next_seq_ = std::move(next);
  rebase_pacing_ = true;
  return {};
}

}  // namespace swarmflow::sim
