#include "lm/model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>


namespace swarmflow::lm {

namespace {

constexpr char kMagic[4] = {'S', 'F', 'L', 'M'};
constexpr std::uint32_t kVersion = 1;     // float32 weights
constexpr std::uint32_t kVersionF16 = 2;  // the same layout; flags bit 1 may say float16 weights
constexpr std::uint32_t kFlagTied = 1;
constexpr std::uint32_t kFlagF16 = 2;
// Far above anything this pack is meant for; guards the size arithmetic.
constexpr std::uint32_t kMaxSize = 1u << 20;

/// Reads little-endian fields from a byte string, remembering the first
/// read past its end.
class Reader {
 public:
  Reader(const std::vector<std::uint8_t>& bytes, std::size_t end) : bytes_(bytes), end_(end) {}
  bool take(void* out, std::size_t n) {
    if (n > end_ - pos_) {
      short_ = true;
      return false;
    }
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  float f32() {
    float v = 0;
    take(&v, sizeof v);
    return v;
  }
  /// Moves past `n` bytes the caller has checked are there.
  void skip(std::size_t n) { pos_ += n; }
  std::size_t pos() const { return pos_; }
  bool short_read() const { return short_; }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
  bool short_ = false;
};

std::string fail(const std::string& name, const std::string& what) {
  return "model file '" + name + "': " + what;
}

}  // namespace

std::uint32_t crc32(const std::uint8_t* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits = 0;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity, NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mantissa × 2^-24, normal in float32. Shift it up until its
    // leading one is the implicit bit.
    std::uint32_t e = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

KvCache::KvCache(const ModelConfig& config, int capacity)
    : capacity_(capacity),
      kv_dim_(config.kv_dim()),
      k_blocks_((capacity + 7) / 8),
      k_(static_cast<std::size_t>(config.layers) * k_blocks_ * 8 * config.kv_dim()),
      v_(static_cast<std::size_t>(config.layers) * capacity * config.kv_dim()) {}

Status Model::load(const std::string& path, Model& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fail(path, "cannot be opened"));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::error(fail(path, "cannot be read"));
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) != 0 && bytes.size() >= 28) {
    // Not ours: a llama2.c checkpoint, with its tokenizer.bin beside it?
    std::int32_t dim = 0;
    std::memcpy(&dim, bytes.data(), 4);
    if (dim > 0 && dim <= 65536) {
      const std::string tok = (std::filesystem::path(path).parent_path() / "tokenizer.bin").string();
      std::ifstream t(tok, std::ios::binary);
      if (!t) {
        return Status::error(fail(path, "not a swarmflow model (no 'SFLM' magic); read as a llama2.c checkpoint, "
                                        "its tokenizer " + tok + " cannot be opened"));
      }
      std::vector<std::uint8_t> tokenizer((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
      return parse_llama2c(path, bytes, tokenizer, out);
    }
  }
  return parse(path, std::move(bytes), out);
}

Status Model::parse(const std::string& name, std::vector<std::uint8_t> bytes, Model& out) {
  const std::size_t size = bytes.size();
  if (size < 8 + 4) {
    return Status::error(fail(name, "truncated: " + std::to_string(size) + " bytes, shorter than the header"));
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return Status::error(fail(name, "not a swarmflow model (the magic is not 'SFLM')"));
  }
  Reader r(bytes, size - 4);
  char magic[4];
  r.take(magic, 4);
  const std::uint32_t version = r.u32();
  if (version != kVersion && version != kVersionF16) {
    return Status::error(fail(name, "format version " + std::to_string(version) + ", this build reads versions " +
                                        std::to_string(kVersion) + " and " + std::to_string(kVersionF16)));
  }
  std::uint32_t f[9];
  for (auto& v : f) v = r.u32();
  ModelConfig c;
  const float theta = r.f32();
  const float eps = r.f32();
  if (r.short_read()) return Status::error(fail(name, "truncated inside the hyperparameters"));
  for (std::uint32_t v : {f[0], f[1], f[2], f[3], f[4], f[5], f[6]}) {
    if (v == 0 || v > kMaxSize) {
      return Status::error(fail(name, "implausible sizes in the header (corrupt?): a size of " + std::to_string(v)));
    }
  }
  c.dim = static_cast<int>(f[0]);
  c.layers = static_cast<int>(f[1]);
  c.heads = static_cast<int>(f[2]);
  c.kv_heads = static_cast<int>(f[3]);
  c.hidden = static_cast<int>(f[4]);
  c.vocab = static_cast<int>(f[5]);
  c.max_seq_len = static_cast<int>(f[6]);
  c.tied_embeddings = (f[7] & kFlagTied) != 0;
  const bool f16 = (f[7] & kFlagF16) != 0;
  if (f16 && version == kVersion) {
    return Status::error(fail(name, "a version-1 file with the float16 flag (flags " + std::to_string(f[7]) +
                                        "): float16 weights are version 2 (corrupt?)"));
  }
  c.weight_bytes = f16 ? 2 : 4;
  c.bos = static_cast<int>(f[8]);
  c.rope_theta = theta;
  c.norm_eps = eps;
  if (c.dim % c.heads != 0 || c.heads % c.kv_heads != 0 || c.head_dim() % 2 != 0 || c.bos >= c.vocab ||
      !(theta > 0) || !(eps > 0)) {
    return Status::error(fail(name, "inconsistent hyperparameters (dim " + std::to_string(c.dim) + ", heads " +
                                        std::to_string(c.heads) + ", kv_heads " + std::to_string(c.kv_heads) + ")"));
  }

  const std::uint32_t tokenizer_bytes = r.u32();
  const std::size_t tokenizer_end = r.pos() + tokenizer_bytes;
  std::vector<std::string> pieces;
  pieces.reserve(static_cast<std::size_t>(c.vocab));
  for (int i = 0; i < c.vocab && !r.short_read(); ++i) {
    const std::uint32_t n = r.u32();
    if (n > 64) return Status::error(fail(name, "token " + std::to_string(i) + " is " + std::to_string(n) + " bytes long (corrupt?)"));
    std::string piece(n, '\0');
    if (r.take(piece.data(), n)) pieces.push_back(std::move(piece));
  }
  if (r.short_read()) return Status::error(fail(name, "truncated inside the tokenizer"));
  if (r.pos() != tokenizer_end) return Status::error(fail(name, "the tokenizer's size does not match its entries"));

  const std::uint64_t data_bytes = r.u64();
  if (r.short_read()) return Status::error(fail(name, "truncated before the weights"));
  const std::int64_t d = c.dim, h = c.hidden, kv = c.kv_dim();
  const std::int64_t per_layer = 2 * d + 2 * d * d + 2 * kv * d + 3 * d * h;
  const std::int64_t floats = c.vocab * d + c.layers * per_layer + d + (c.tied_embeddings ? 0 : c.vocab * d);
  if (data_bytes != static_cast<std::uint64_t>(floats) * static_cast<std::uint64_t>(c.weight_bytes)) {
    return Status::error(fail(name, "the weights are " + std::to_string(data_bytes) + " bytes, the sizes need " +
                                        std::to_string(floats * c.weight_bytes) +
                                        (f16 ? " (float16)" : " (float32)")));
  }
  if (data_bytes > size - 4 - r.pos()) {
    return Status::error(fail(name, "truncated: " + std::to_string(size) + " bytes, the header announces " +
                                        std::to_string(r.pos() + data_bytes + 4)));
  }
  std::vector<float> weights(static_cast<std::size_t>(floats));
  if (f16) {
    // Converted once here; the forward pass runs on float32 as for any model.
    const std::uint8_t* half = bytes.data() + r.pos();
    for (std::size_t i = 0; i < weights.size(); ++i) {
      std::uint16_t v = 0;
      std::memcpy(&v, half + 2 * i, 2);
      weights[i] = half_to_float(v);
    }
    r.skip(data_bytes);
  } else {
    r.take(weights.data(), data_bytes);
  }
  if (r.pos() != size - 4) {
    return Status::error(fail(name, std::to_string(size - 4 - r.pos()) + " unexpected bytes after the weights"));
  }
  std::uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + size - 4, 4);
  const std::uint32_t actual = crc32(bytes.data(), size - 4);
  if (stored != actual) {
    return Status::error(fail(name, "checksum mismatch (the file says " + std::to_string(stored) +
                                        ", its contents give " + std::to_string(actual) + "): the file is corrupt"));
  }

  Model m;
  m.config_ = c;
  m.pieces_ = std::move(pieces);
  m.weights_ = std::move(weights);
  const float* p = m.weights_.data();
  auto next = [&p](std::int64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  m.embedding_ = next(c.vocab * d);
  for (int l = 0; l < c.layers; ++l) {
    Layer L{};
    L.attn_norm = next(d);
    L.wq = next(d * d);
    L.wk = next(kv * d);
    L.wv = next(kv * d);
    L.wo = next(d * d);
    L.ffn_norm = next(d);
    L.w1 = next(h * d);
    L.w2 = next(d * h);
    L.w3 = next(h * d);
    m.layers_.push_back(L);
  }
  m.final_norm_ = next(d);
  m.output_ = c.tied_embeddings ? m.embedding_ : next(c.vocab * d);

  m.make_rope();
  m.pack();
  out = std::move(m);
  return {};
}

void Model::make_rope() {
  const ModelConfig& c = config_;
  Model& m = *this;
  const int half = c.head_dim() / 2;
  m.rope_cos_.resize(static_cast<std::size_t>(c.max_seq_len) * half);
  m.rope_sin_.resize(m.rope_cos_.size());
  for (int pos = 0; pos < c.max_seq_len; ++pos) {
    for (int i = 0; i < half; ++i) {
      const double inv = 1.0 / std::pow(static_cast<double>(c.rope_theta), (2.0 * i) / c.head_dim());
      const double angle = pos * inv;
      m.rope_cos_[static_cast<std::size_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
      m.rope_sin_[static_cast<std::size_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void Model::pack() {
  const ModelConfig& c = config_;
  const int d = c.dim, kv = c.kv_dim(), h = c.hidden;
  for (Layer& L : layers_) {
    L.qkv = PackedMatrix({{d, L.wq}, {kv, L.wk}, {kv, L.wv}}, d, kernel_);
    L.o = PackedMatrix({{d, L.wo}}, d, kernel_);
    L.w13 = PackedMatrix({{h, L.w1}, {h, L.w3}}, d, kernel_);
    L.w2_packed = PackedMatrix({{d, L.w2}}, h, kernel_);
  }
  packed_output_ = PackedMatrix({{c.vocab, output_}}, d, kernel_);
}

bool Model::use_kernel(Kernel kernel) {
  if (!kernel_supported(kernel)) return false;
  if (kernel != kernel_) {
    kernel_ = kernel;
    pack();
  }
  return true;
}

Status Model::parse_llama2c(const std::string& name, const std::vector<std::uint8_t>& bytes,
                            const std::vector<std::uint8_t>& tokenizer, Model& out) {
  constexpr std::size_t kHeader = 7 * 4;
  if (bytes.size() < kHeader) return Status::error(fail(name, "truncated: shorter than a llama2.c header"));
  std::int32_t f[7];
  std::memcpy(f, bytes.data(), sizeof f);
  ModelConfig c;
  c.dim = f[0];
  c.hidden = f[1];
  c.layers = f[2];
  c.heads = f[3];
  c.kv_heads = f[4];
  c.tied_embeddings = f[5] > 0;
  c.vocab = f[5] > 0 ? f[5] : -f[5];
  c.max_seq_len = f[6];
  c.bos = 1;  // llama2.c: <s> = 1, </s> = 2
  c.eos = 2;
  for (std::int32_t v : {c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.vocab, c.max_seq_len}) {
    if (v <= 0 || static_cast<std::uint32_t>(v) > kMaxSize) {
      return Status::error(fail(name, "not a swarmflow model (no 'SFLM' magic) and not a llama2.c checkpoint "
                                      "(implausible sizes in its header)"));
    }
  }
  if (c.dim % c.heads != 0 || c.heads % c.kv_heads != 0 || c.head_dim() % 2 != 0 || c.vocab < 3) {
    return Status::error(fail(name, "llama2.c checkpoint with inconsistent hyperparameters"));
  }
  const std::int64_t d = c.dim, h = c.hidden, kv = c.kv_dim(), L = c.layers, V = c.vocab;
  const std::int64_t rope = static_cast<std::int64_t>(c.max_seq_len) * c.head_dim();  // freq_cis real + imag
  const std::int64_t floats =
      V * d + L * (2 * d + 2 * d * d + 2 * kv * d + 3 * d * h) + d + rope + (c.tied_embeddings ? 0 : V * d);
  const std::uint64_t expected = kHeader + static_cast<std::uint64_t>(floats) * 4;
  if (bytes.size() != expected) {
    return Status::error(fail(name, "llama2.c checkpoint of " + std::to_string(bytes.size()) +
                                        " bytes; its header (dim " + std::to_string(c.dim) + ", layers " +
                                        std::to_string(c.layers) + ", vocab " + std::to_string(c.vocab) +
                                        ") needs " + std::to_string(expected) + ": truncated or not one"));
  }
  // tokenizer.bin: i32 max token length, then per token f32 score, i32 length, bytes.
  std::vector<std::string> pieces;
  std::size_t at = 4;
  for (int i = 0; i < c.vocab; ++i) {
    std::int32_t n = 0;
    if (tokenizer.size() < at + 8) return Status::error(fail(name, "its tokenizer.bin is truncated or too small for the vocabulary"));
    std::memcpy(&n, tokenizer.data() + at + 4, 4);
    at += 8;
    if (n < 0 || n > 1024 || tokenizer.size() < at + static_cast<std::size_t>(n)) {
      return Status::error(fail(name, "its tokenizer.bin is corrupt at token " + std::to_string(i)));
    }
    std::string piece(reinterpret_cast<const char*>(tokenizer.data() + at), static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
    // Byte tokens <0xHH> are that byte; <unk>, <s>, </s> have no text.
    if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
      piece = std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    } else if (i < 3) {
      piece.clear();
    }
    pieces.push_back(std::move(piece));
  }
  Model m;
  m.config_ = c;
  m.pieces_ = std::move(pieces);
  m.weights_.resize(static_cast<std::size_t>(floats));
  std::memcpy(m.weights_.data(), bytes.data() + kHeader, static_cast<std::size_t>(floats) * 4);
  // Grouped by kind across the layers, not layer by layer.
  const float* p = m.weights_.data();
  auto next = [&p](std::int64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  m.embedding_ = next(V * d);
  m.layers_.resize(static_cast<std::size_t>(L));
  for (auto& l : m.layers_) l.attn_norm = next(d);
  for (auto& l : m.layers_) l.wq = next(d * d);
  for (auto& l : m.layers_) l.wk = next(kv * d);
  for (auto& l : m.layers_) l.wv = next(kv * d);
  for (auto& l : m.layers_) l.wo = next(d * d);
  for (auto& l : m.layers_) l.ffn_norm = next(d);
  for (auto& l : m.layers_) l.w1 = next(h * d);
  for (auto& l : m.layers_) l.w2 = next(d * h);
  for (auto& l : m.layers_) l.w3 = next(h * d);
  m.final_norm_ = next(d);
  next(rope);  // its own RoPE tables: computed here the same way (theta 10000)
  m.output_ = c.tied_embeddings ? m.embedding_ : next(V * d);
  m.make_rope();
  m.pack();
  out = std::move(m);
  return {};
}

void Model::forward(const std::vector<ForwardItem>& items, std::vector<float>& logits) const {
  const ModelConfig& c = config_;
  const int d = c.dim, hd = c.head_dim(), kv = c.kv_dim(), half = hd / 2;
  int total = 0;
  int rows_out = 0;
  for (const auto& it : items) {
    total += it.count;
    rows_out += it.all_logits ? it.count : (it.count > 0 ? 1 : 0);
  }
  if (total == 0) {
    logits.clear();
    return;
  }
  const auto T = static_cast<std::size_t>(total);
  const int qkv_dim = d + 2 * kv;  // a row of qkv: q, then k, then v
  std::vector<float> x(T * d), xb(T * d), qkv(T * qkv_dim), att(T * d), tmp(T * d);
  std::vector<float> h13(T * 2 * c.hidden);
  std::vector<float> scores;

  // Token t of the batch: its item and its position in that item's sequence.
  std::vector<int> item_of(T), pos_of(T);
  {
    std::size_t t = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      for (int j = 0; j < items[i].count; ++j, ++t) {
        item_of[t] = static_cast<int>(i);
        pos_of[t] = items[i].cache->length_ + j;
        const int tok = items[i].tokens[j];
        std::memcpy(&x[t * d], embedding_ + static_cast<std::ptrdiff_t>(tok) * d, sizeof(float) * d);
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto rope = [&](float* vec, int n_heads, int pos) {
    rotate_pairs(vec, n_heads, hd, &rope_cos_[static_cast<std::size_t>(pos) * half],
                 &rope_sin_[static_cast<std::size_t>(pos) * half], kernel_);
  };

  for (int l = 0; l < c.layers; ++l) {
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    for (std::size_t t = 0; t < T; ++t) rmsnorm(&x[t * d], L.attn_norm, d, c.norm_eps, &xb[t * d], kernel_);
    matmul(xb.data(), total, L.qkv, qkv.data());
    for (std::size_t t = 0; t < T; ++t) {
      float* qt = &qkv[t * qkv_dim];
      rope(qt, c.heads, pos_of[t]);
      rope(qt + d, c.kv_heads, pos_of[t]);
      KvCache& cache = *items[static_cast<std::size_t>(item_of[t])].cache;
      // Values by KV head, then position; keys in blocks of 8 positions
      // (attend()): KV head g's dimension i.
      const int p = pos_of[t];
      float* vt = &cache.v_[static_cast<std::size_t>(l) * cache.capacity_ * kv];
      for (int g = 0; g < c.kv_heads; ++g) {
        std::memcpy(vt + (static_cast<std::ptrdiff_t>(g) * cache.capacity_ + p) * hd, qt + d + kv + g * hd,
                    sizeof(float) * hd);
      }
      float* kt = &cache.k_[static_cast<std::size_t>(l) * kv * cache.k_blocks_ * 8];
      for (int g = 0; g < c.kv_heads; ++g) {
        float* block = kt + ((static_cast<std::ptrdiff_t>(g) * cache.k_blocks_ + p / 8) * hd) * 8 + p % 8;
        for (int i = 0; i < hd; ++i) block[i * 8] = qt[d + g * hd + i];
      }
    }
    for (std::size_t t = 0; t < T; ++t) {
      const KvCache& cache = *items[static_cast<std::size_t>(item_of[t])].cache;
      const int n = pos_of[t] + 1;
      const float* kbase = &cache.k_[static_cast<std::size_t>(l) * kv * cache.k_blocks_ * 8];
      const float* vbase = &cache.v_[static_cast<std::size_t>(l) * cache.capacity_ * kv];
      scores.resize(static_cast<std::size_t>(cache.k_blocks_) * 8 * c.heads);
      attend(&qkv[t * qkv_dim], kbase, cache.k_blocks_, vbase, hd, static_cast<std::ptrdiff_t>(cache.capacity_) * hd, n,
             c.heads, c.kv_heads, hd, scale, scores.data(),
             &att[t * d], kernel_);
    }
    matmul(att.data(), total, L.o, tmp.data());
    for (std::size_t i = 0; i < T * d; ++i) x[i] += tmp[i];
    for (std::size_t t = 0; t < T; ++t) rmsnorm(&x[t * d], L.ffn_norm, d, c.norm_eps, &xb[t * d], kernel_);
    matmul(xb.data(), total, L.w13, h13.data());
    const int hidden = c.hidden;
    for (std::size_t t = 0; t < T; ++t) {
      float* h1 = &h13[t * 2 * hidden];  // then h3 = h1 + hidden; SwiGLU into h1
      swiglu(h1, h1 + hidden, hidden, kernel_);
    }
    matmul(h13.data(), total, L.w2_packed, tmp.data(), 2 * hidden);
    for (std::size_t i = 0; i < T * d; ++i) x[i] += tmp[i];
  }

  std::vector<float> last(static_cast<std::size_t>(rows_out) * d);
  {
    std::size_t t = 0, row = 0;
    for (const auto& it : items) {
      for (int j = 0; j < it.count; ++j, ++t) {
        if (it.all_logits || j == it.count - 1) {
          rmsnorm(&x[t * d], final_norm_, d, c.norm_eps, &last[row * d], kernel_);
          ++row;
        }
      }
    }
  }
  logits.resize(static_cast<std::size_t>(rows_out) * c.vocab);
  matmul(last.data(), rows_out, packed_output_, logits.data());
  for (const auto& it : items) it.cache->length_ += it.count;
}

}  // namespace swarmflow::lm
