// embed_example — how an application embeds swarmflow.
//
// It is built against the installed package only (find_package(swarmflow
// CONFIG), link swarmflow::runtime) and shows, in one small program:
//   1. defining a stage of one's own: `embed.checksum` declares a typed input
//      and output (swarmflow.schema.Blob) and a documented parameter with a
//      range in `setup`, and in `process` computes an FNV-1a checksum over the
//      payload bytes and emits a new payload built with a FlatBufferBuilder;
//   2. registering it next to the built-in packs with registry().add<...>();
//   3. loading a pipeline from a YAML string that mixes it with built-in
//      stages: sim.source -> embed.checksum -> sim.sink;
//   4. subscribing to the custom stage's output with Runtime::subscribe and
//      validating every envelope there (checksum recomputed independently);
//   5. running to completion and reading the run report.
// It exits 0 only if the subscriber saw every envelope once with a correct
// checksum, the sink lost and duplicated nothing, and the run is ok.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/swarmflow.hpp>

namespace {

constexpr std::int64_t kCount = 4000;        // envelopes made by the source
constexpr std::int64_t kStreams = 2;         // produced round robin
constexpr std::int64_t kPayloadBytes = 256;  // bytes of data in each source payload
constexpr std::int64_t kSeed = 7;            // the checksum's configured seed
constexpr std::uint32_t kFnvPrime = 16777619U;
constexpr std::int64_t kFnvOffsetBasis = 2166136261LL;

/// 32-bit FNV-1a over `size` bytes, starting from `seed`.
std::uint32_t fnv1a(const std::uint8_t* data, std::size_t size, std::uint32_t seed) {
  std::uint32_t h = seed;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= kFnvPrime;
  }
  return h;
}

/// Little-endian 32-bit load/store, so the digest layout does not depend on the host.
void put_u32(std::uint8_t* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return v;
}

/// embed.checksum — input `in` (Blob), output `out` (Blob).
/// For each input blob emits a blob with the same stream and seq whose data is
/// 8 bytes: the FNV-1a checksum of the input's data, then the input's length
/// (both little-endian 32-bit).
///   seed (integer, 0..4294967295, default 2166136261): the checksum's start value.
///
/// ```yaml
///   - {id: checksum, type: embed.checksum, inputs: {in: source/out}, params: {seed: 7}}
/// ```
class ChecksumStage final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    in_ = s.input<swarmflow::schema::Blob>("in", "blobs to checksum");
    out_ = s.output<swarmflow::schema::Blob>("out", "8-byte digests: FNV-1a checksum, input length");
    s.param(seed_, "seed", "start value of the 32-bit FNV-1a checksum", kFnvOffsetBasis,
            {0.0, 4294967295.0});
  }

  swarmflow::Status start(swarmflow::StageContext& ctx) override {
    bytes_ = &ctx.counter("bytes_checksummed");
    return {};
  }

  swarmflow::Status process(swarmflow::Inputs& in, swarmflow::Outputs& out,
                            swarmflow::StageContext&) override {
    const swarmflow::schema::Blob* blob = in.get(in_);
    if (blob == nullptr) return {};
    const auto* data = blob->data();
    const std::size_t size = data != nullptr ? data->size() : 0;
    const std::uint32_t sum = fnv1a(data != nullptr ? data->data() : nullptr, size,
                                    static_cast<std::uint32_t>(seed_));

    flatbuffers::FlatBufferBuilder fbb(64);
    std::uint8_t* digest = nullptr;
    auto digest_vec = fbb.CreateUninitializedVector(8, &digest);
    put_u32(digest, sum);
    put_u32(digest + 4, static_cast<std::uint32_t>(size));
    fbb.Finish(swarmflow::schema::CreateBlob(fbb, blob->stream(), blob->seq(), digest_vec),
               swarmflow::schema::BlobIdentifier());
    out.emit(out_, fbb);
    bytes_->fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed);
    return {};
  }

 private:
  swarmflow::InputPort<swarmflow::schema::Blob> in_;
  swarmflow::OutputPort<swarmflow::schema::Blob> out_;
  std::int64_t seed_ = kFnvOffsetBasis;
  std::atomic<std::int64_t>* bytes_ = nullptr;
};

/// Checks what embed.checksum emits. The subscriber runs on worker threads,
/// so it takes a lock; it is short.
class DigestChecker {
 public:
  DigestChecker() : seen_(static_cast<std::size_t>(kCount), 0) {}

  void observe(const swarmflow::Envelope& e) {
    const swarmflow::Payload* p = e.payload().get();
    const bool right_type = p != nullptr && p->identifier() == swarmflow::schema::BlobIdentifier();
    const swarmflow::schema::Blob* blob = right_type ? e.as<swarmflow::schema::Blob>() : nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    ++received_;
    if (blob == nullptr || blob->data() == nullptr || blob->data()->size() != 8) {
      ++invalid_;
      return;
    }
    const std::uint64_t stream = e.header().stream;
    const std::uint64_t seq = e.header().seq;
    if (blob->stream() != stream || blob->seq() != seq || stream >= static_cast<std::uint64_t>(kStreams)) {
      ++invalid_;
      return;
    }
    // sim.source fills each payload with the byte (seq & 0xff).
    const std::vector<std::uint8_t> expected_input(static_cast<std::size_t>(kPayloadBytes),
                                                   static_cast<std::uint8_t>(seq & 0xff));
    const std::uint32_t expected = fnv1a(expected_input.data(), expected_input.size(),
                                         static_cast<std::uint32_t>(kSeed));
    const std::uint8_t* digest = blob->data()->data();
    if (get_u32(digest) != expected || get_u32(digest + 4) != static_cast<std::uint32_t>(kPayloadBytes)) {
      ++invalid_;
      return;
    }
    const std::uint64_t index = seq * static_cast<std::uint64_t>(kStreams) + stream;
    if (index >= seen_.size()) {
      ++invalid_;
      return;
    }
    if (seen_[index] != 0) {
      ++duplicates_;
      return;
    }
    seen_[index] = 1;
    ++distinct_;
  }

  std::int64_t received() const { return locked(received_); }
  std::int64_t distinct() const { return locked(distinct_); }
  std::int64_t invalid() const { return locked(invalid_); }
  std::int64_t duplicates() const { return locked(duplicates_); }

 private:
  std::int64_t locked(const std::int64_t& v) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return v;
  }
  mutable std::mutex mutex_;
  std::vector<char> seen_;
  std::int64_t received_ = 0;
  std::int64_t distinct_ = 0;
  std::int64_t invalid_ = 0;
  std::int64_t duplicates_ = 0;
};

std::string pipeline_yaml() {
  return "pipeline: embed\n"
         "units: 1\n"
         "stages:\n"
         "  - id: source\n"
         "    type: sim.source\n"
         "    params: {count: " + std::to_string(kCount) + ", streams: " + std::to_string(kStreams) +
         ", payload_bytes: " + std::to_string(kPayloadBytes) + "}\n"
         "  - id: checksum\n"
         "    type: embed.checksum\n"
         "    inputs: {in: source/out}\n"
         "    params: {seed: " + std::to_string(kSeed) + "}\n"
         "    queue: {capacity: 32, overflow: block}\n"
         "  - id: sink\n"
         "    type: sim.sink\n"
         "    inputs: {in: checksum/out}\n";
}

std::int64_t counter(const swarmflow::StageReport* s, const std::string& name) {
  if (s == nullptr) return -1;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

void print_summary(const swarmflow::RunReport& r) {
  std::printf("pipeline %s: %s in %.3f s%s%s\n", r.pipeline.c_str(), r.ok ? "ok" : "FAILED", r.duration_s,
              r.error.empty() ? "" : ": ", r.error.c_str());
  for (const auto& s : r.stages) {
    std::printf("  stage %-10s %-16s processed %8llu  errors %llu  restarts %llu  dead letters %llu\n",
                s.id.c_str(), s.type.c_str(), static_cast<unsigned long long>(s.processed),
                static_cast<unsigned long long>(s.errors), static_cast<unsigned long long>(s.restarts),
                static_cast<unsigned long long>(s.dead_letters));
  }
  for (const auto& e : r.edges) {
    std::printf("  edge  %-16s -> %-14s sent %8llu  delivered %8llu  dropped %llu\n", e.from.c_str(),
                e.to.c_str(), static_cast<unsigned long long>(e.sent), static_cast<unsigned long long>(e.delivered),
                static_cast<unsigned long long>(e.dropped));
  }
  if (const auto* sink = r.stage("sink")) {
    std::printf("  sink  received %lld  lost %lld  duplicate %lld  latency p50 %.3f ms  p99 %.3f ms\n",
                static_cast<long long>(counter(sink, "received")), static_cast<long long>(counter(sink, "lost")),
                static_cast<long long>(counter(sink, "duplicate")), sink->latency.p50_ms, sink->latency.p99_ms);
  }
  if (const auto* cs = r.stage("checksum")) {
    std::printf("  checksum bytes_checksummed %lld\n", static_cast<long long>(counter(cs, "bytes_checksummed")));
  }
}

}  // namespace

int main() {
  swarmflow::Runtime runtime;

  swarmflow::Status s = runtime.registry().add<ChecksumStage>(
      "embed.checksum", "FNV-1a checksum of each blob's bytes, emitted as an 8-byte digest blob");
  if (!s.ok()) {
    std::fprintf(stderr, "embed_example: cannot register embed.checksum: %s\n", s.message().c_str());
    return 1;
  }

  std::vector<swarmflow::Diagnostic> diagnostics;
  s = runtime.load_string(pipeline_yaml(), "embed.yaml", &diagnostics);
  if (!s.ok()) {
    std::fprintf(stderr, "embed_example: the pipeline does not load:\n%s\n",
                 swarmflow::format_diagnostics(diagnostics).c_str());
    return 1;
  }

  DigestChecker checker;
  s = runtime.subscribe("checksum/out", [&checker](const swarmflow::Envelope& e) { checker.observe(e); });
  if (!s.ok()) {
    std::fprintf(stderr, "embed_example: subscribe failed: %s\n", s.message().c_str());
    return 1;
  }

  const swarmflow::Status result = runtime.run();
  const swarmflow::RunReport report = runtime.report();
  print_summary(report);

  const auto* sink = report.stage("sink");
  const bool run_ok = result.ok() && report.ok && report.finished;
  const bool subscriber_ok = checker.distinct() == kCount && checker.received() == kCount &&
                             checker.invalid() == 0 && checker.duplicates() == 0;
  const bool sink_ok = counter(sink, "received") == kCount && counter(sink, "lost") == 0 &&
                       counter(sink, "duplicate") == 0;
  std::printf("subscriber on checksum/out: %lld received, %lld distinct, %lld invalid, %lld duplicate (expected %lld)\n",
              static_cast<long long>(checker.received()), static_cast<long long>(checker.distinct()),
              static_cast<long long>(checker.invalid()), static_cast<long long>(checker.duplicates()),
              static_cast<long long>(kCount));
  if (!run_ok) std::fprintf(stderr, "embed_example: the run failed: %s\n", result.message().c_str());
  if (!subscriber_ok) std::fprintf(stderr, "embed_example: the subscriber did not see every envelope once, valid\n");
  if (!sink_ok) std::fprintf(stderr, "embed_example: the sink lost or duplicated envelopes\n");
  const bool ok = run_ok && subscriber_ok && sink_ok;
  std::printf("embed_example: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
