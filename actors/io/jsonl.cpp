#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <swarmflow/registry.hpp>
#include <swarmflow/stage.hpp>

#include "io/io.hpp"
#include "io/payload_json.hpp"

namespace swarmflow::io {

namespace {

void append_uint(std::string& out, std::uint64_t v) { out += std::to_string(v); }

void append_int(std::string& out, std::int64_t v) { out += std::to_string(v); }

// Shortest text that reads back as the same float; null for NaN and infinities.
void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) {
    out += "null";
    return;
  }
  out.append(buf, end);
}

}  // namespace

/// io.jsonl: writes every envelope it receives as one JSON line.
class JsonlWriter final : public Stage {
 public:
  JsonlWriter() = default;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  ~JsonlWriter() override { close(); }

  void setup(StageSpec& s) override {
    in_ = s.input<AnyPayload>("in", "envelopes to write, of any payload type");
    s.param(path_, "path", "file to write, truncated at start; - for standard output", "-");
    s.param(max_payload_bytes_, "max_payload_bytes",
            "larger payloads are written as {\"type\", \"bytes\"} only", 1048576, {0.0, {}});
    s.param(flush_, "flush", "flush after every line (for tailing the file)", false);
  }

  Status start(StageContext& ctx) override {
    written_ = &ctx.counter("written");
    summarized_ = &ctx.counter("summarized");
    unprintable_ = &ctx.counter("unprintable");
    close();
    if (path_ == "-") {
      file_ = stdout;
      return {};
    }
    // A restarted replica appends to what it wrote before its failure.
    file_ = std::fopen(path_.c_str(), opened_before_ ? "a" : "w");
    if (file_ == nullptr) {
      return Status::error("io.jsonl: cannot open '" + path_ + "' for writing: " + std::strerror(errno),
                           StatusCode::unavailable);
    }
    opened_before_ = true;
    return {};
  }

  Status process(Inputs& in, Outputs&, StageContext&) override {
    const Envelope* e = in.envelope(in_);
    if (e == nullptr) return {};
    if (file_ == nullptr) {
      return Status::error("io.jsonl: '" + path_ + "' is not open", StatusCode::failed_precondition);
    }
    format_line(*e);
    if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size() ||
        (flush_ && std::fflush(file_) != 0)) {
      return Status::error("io.jsonl: cannot write to '" + path_ + "': " + std::strerror(errno),
                           StatusCode::unavailable);
    }
    written_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  void stop(StageContext&) override { close(); }

 private:
  void format_line(const Envelope& e) {
    const EnvelopeHeader& h = e.header();
    line_.clear();
    line_ += "{\"stream\":";
    append_uint(line_, h.stream);
    line_ += ",\"seq\":";
    append_uint(line_, h.seq);
    line_ += ",\"capture_ns\":";
    append_int(line_, h.capture_ns);
    line_ += ",\"confidence\":";
    append_float(line_, h.confidence);
    line_ += ",\"vote_key\":";
    append_uint(line_, h.vote_key);
    const Payload* p = e.payload().get();
    if (p == nullptr) {
      line_ += ",\"type\":null,\"payload\":null}\n";
      return;
    }
    line_ += ",\"type\":";
    line_ += json_quote(p->identifier());
    line_ += ",\"payload\":";
    if (static_cast<std::int64_t>(p->size()) > max_payload_bytes_) {
      line_ += "{\"type\":";
      line_ += json_quote(p->identifier());
      line_ += ",\"bytes\":";
      append_uint(line_, p->size());
      line_ += '}';
      summarized_->fetch_add(1, std::memory_order_relaxed);
    } else {
      if (!PayloadPrinter::instance().to_json(*p, &payload_)) {
        unprintable_->fetch_add(1, std::memory_order_relaxed);
      }
      line_ += payload_;
    }
    line_ += "}\n";
  }

  void close() {
    if (file_ == nullptr) return;
    if (file_ == stdout) {
      std::fflush(file_);
    } else {
      std::fclose(file_);
    }
    file_ = nullptr;
  }

  InputPort<AnyPayload> in_;
  std::string path_;
  std::int64_t max_payload_bytes_ = 0;
  bool flush_ = false;

  std::FILE* file_ = nullptr;
  bool opened_before_ = false;
  std::string line_;
  std::string payload_;
  std::atomic<std::int64_t>* written_ = nullptr;
  std::atomic<std::int64_t>* summarized_ = nullptr;
  std::atomic<std::int64_t>* unprintable_ = nullptr;
};

}  // namespace swarmflow::io

namespace swarmflow {

void register_io_stages(Registry& registry) {
  registry.add<io::JsonlWriter>("io.jsonl", "writes every envelope as one JSON line, payload included");
}

}  // namespace swarmflow
