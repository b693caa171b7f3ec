// The model file, the tokenizer and the forward pass against the PyTorch
// reference written by scripts/train_lm.py.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lm/model.hpp"
#include "lm/tokenizer.hpp"

namespace swarmflow::lm {
namespace {

const std::string kModel = std::string(SWARMFLOW_SOURCE_DIR) + "/models/devil-1m.sflm";
const std::string kReference = std::string(SWARMFLOW_SOURCE_DIR) + "/tests/data/lm_reference.bin";
// The 8 M-parameter model, stored as float16 (format version 2).
const std::string kModel8m = std::string(SWARMFLOW_SOURCE_DIR) + "/models/devil-8m.sflm";
const std::string kReference8m = std::string(SWARMFLOW_SOURCE_DIR) + "/tests/data/lm_reference_8m.bin";

struct ReferencePrompt {
  std::string text;
  std::vector<int> ids;
  std::vector<float> logits;  // [ids.size()][vocab]
};

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<ReferencePrompt> read_reference(int& vocab, const std::string& path = kReference) {
  const std::vector<std::uint8_t> b = read_bytes(path);
  std::size_t at = 0;
  auto u32 = [&] {
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    at += 4;
    return v;
  };
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "SFLR");
  at = 4;
  const std::uint32_t n = u32();
  vocab = static_cast<int>(u32());
  std::vector<ReferencePrompt> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    ReferencePrompt p;
    const std::uint32_t len = u32();
    p.text.assign(reinterpret_cast<const char*>(b.data() + at), len);
    at += len;
    const std::uint32_t count = u32();
    p.ids.resize(count);
    std::memcpy(p.ids.data(), b.data() + at, 4 * count);
    at += 4 * count;
    p.logits.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(vocab));
    std::memcpy(p.logits.data(), b.data() + at, 4 * p.logits.size());
    at += 4 * p.logits.size();
    out.push_back(std::move(p));
  }
  return out;
}

class LmModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model;
    const Status s = Model::load(kModel, *model_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* LmModel::model_ = nullptr;

float max_diff(const float* a, const float* b, std::size_t n) {
  float worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST_F(LmModel, HeaderDescribesASmallLlamaStyleModel) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.vocab, 257);
  EXPECT_EQ(c.bos, 256);
  EXPECT_GT(c.layers, 0);
  EXPECT_GT(model_->parameter_count(), 500'000);
  EXPECT_LT(model_->parameter_count(), 15'000'000);
}

TEST_F(LmModel, TokenizerRoundTrip) {
  const Tokenizer tok(model_->pieces(), model_->config().bos);
  for (const std::string& s : {std::string("CYNIC, n.  A blackguard whose faulty vision"), std::string(""),
                              std::string("tabs\tand\nnewlines, caf\xc3\xa9, \x01\xff bytes")}) {
    const std::vector<int> ids = tok.encode(s, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), tok.bos());
    EXPECT_EQ(ids.size(), s.size() + 1);
    EXPECT_EQ(tok.decode(ids), s);
  }
  EXPECT_EQ(tok.piece(tok.bos()), "");
  EXPECT_EQ(tok.piece('A'), "A");
}

TEST_F(LmModel, LogitsMatchThePyTorchReference) {
  int vocab = 0;
  const std::vector<ReferencePrompt> ref = read_reference(vocab);
  ASSERT_EQ(vocab, model_->config().vocab);
  ASSERT_GE(ref.size(), 3u);
  const Tokenizer tok(model_->pieces(), model_->config().bos);
  // Every matrix-product kernel this CPU runs, not only the one in use.
  const Kernel best = model_->kernel();
  for (Kernel kernel : all_kernels()) {
    if (!model_->use_kernel(kernel)) continue;
    for (const ReferencePrompt& p : ref) {
      EXPECT_EQ(tok.encode(p.text, true), p.ids) << p.text;
      KvCache cache(model_->config(), static_cast<int>(p.ids.size()));
      std::vector<float> logits;
      model_->forward({ForwardItem{&cache, p.ids.data(), static_cast<int>(p.ids.size()), true}}, logits);
      ASSERT_EQ(logits.size(), p.logits.size());
      EXPECT_LT(max_diff(logits.data(), p.logits.data(), logits.size()), 1e-4f) << p.text << " " << kernel_name(kernel);
    }
  }
  ASSERT_TRUE(model_->use_kernel(best));
}

TEST_F(LmModel, ChunkedPrefillAndBatchingGiveTheSameLogits) {
  int vocab = 0;
  const std::vector<ReferencePrompt> ref = read_reference(vocab);
  // All prompts in one batch, fed 3 tokens at a time through their caches.
  std::vector<KvCache> caches;
  for (const auto& p : ref) caches.emplace_back(model_->config(), static_cast<int>(p.ids.size()));
  std::vector<std::vector<float>> got(ref.size());
  for (int start = 0;; start += 3) {
    std::vector<ForwardItem> items;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const int n = std::min<int>(3, static_cast<int>(ref[i].ids.size()) - start);
      if (n <= 0) continue;
      items.push_back(ForwardItem{&caches[i], ref[i].ids.data() + start, n, true});
      which.push_back(i);
    }
    if (items.empty()) break;
    std::vector<float> logits;
    model_->forward(items, logits);
    std::size_t row = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      auto& g = got[which[k]];
      const auto n = static_cast<std::size_t>(items[k].count) * static_cast<std::size_t>(vocab);
      g.insert(g.end(), logits.begin() + static_cast<std::ptrdiff_t>(row), logits.begin() + static_cast<std::ptrdiff_t>(row + n));
      row += n;
    }
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].size(), ref[i].logits.size());
    EXPECT_LT(max_diff(got[i].data(), ref[i].logits.data(), got[i].size()), 1e-4f) << ref[i].text;
  }
}

TEST_F(LmModel, BatchedLogitsAreBitIdenticalToOneSequenceAlone) {
  int vocab = 0;
  const std::vector<ReferencePrompt> ref = read_reference(vocab);
  // Alone: each prompt whole, in its own forward pass.
  std::vector<std::vector<float>> alone;
  for (const auto& p : ref) {
    KvCache cache(model_->config(), static_cast<int>(p.ids.size()));
    std::vector<float> logits;
    model_->forward({ForwardItem{&cache, p.ids.data(), static_cast<int>(p.ids.size()), true}}, logits);
    alone.push_back(logits);
  }
  // Together: every prompt in one pass, so tiles mix rows of different prompts.
  std::vector<KvCache> caches;
  std::vector<ForwardItem> items;
  for (const auto& p : ref) caches.emplace_back(model_->config(), static_cast<int>(p.ids.size()));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    items.push_back(ForwardItem{&caches[i], ref[i].ids.data(), static_cast<int>(ref[i].ids.size()), true});
  }
  std::vector<float> together;
  model_->forward(items, together);
  std::size_t at = 0;
  for (const auto& a : alone) {
    const std::vector<float> part(together.begin() + static_cast<std::ptrdiff_t>(at),
                                  together.begin() + static_cast<std::ptrdiff_t>(at + a.size()));
    EXPECT_EQ(part, a);
    at += a.size();
  }
  EXPECT_EQ(at, together.size());
}

// -- refusing bad files ------------------------------------------------------

Status parse_bytes(const std::vector<std::uint8_t>& bytes) {
  Model m;
  return Model::parse("bad.sflm", bytes, m);
}

TEST(LmModelFile, RefusesAMissingFile) {
  Model m;
  const Status s = Model::load("/nonexistent/model.sflm", m);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("/nonexistent/model.sflm"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cannot be opened"), std::string::npos) << s.message();
}

TEST(LmModelFile, RefusesATruncatedFile) {
  std::vector<std::uint8_t> bytes = read_bytes(kModel);
  ASSERT_GT(bytes.size(), 1000u);
  for (std::size_t keep : {std::size_t{6}, std::size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    const Status s = parse_bytes(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
    ASSERT_TRUE(s.is_error()) << keep;
    EXPECT_NE(s.message().find("bad.sflm"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  }
}

TEST(LmModelFile, RefusesACorruptFile) {
  std::vector<std::uint8_t> bytes = read_bytes(kModel);
  bytes[bytes.size() / 2] ^= 0x40;
  const Status s = parse_bytes(bytes);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("bad.sflm"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
}

TEST(LmModelFile, RefusesAWrongMagicOrVersion) {
  std::vector<std::uint8_t> bytes = read_bytes(kModel);
  std::vector<std::uint8_t> magic = bytes;
  magic[0] = 'X';
  Status s = parse_bytes(magic);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
  std::vector<std::uint8_t> version = bytes;
  version[4] = 9;
  s = parse_bytes(version);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("version 9"), std::string::npos) << s.message();
}

TEST(LmModelFile, LoadsAnIntactCopy) {
  Model m;
  const Status s = Model::parse("copy.sflm", read_bytes(kModel), m);
  EXPECT_TRUE(s.ok()) << s.message();
}

/// The shipped model rewritten in llama2.c's checkpoint format (weights
/// grouped by kind, RoPE tables after the final norm) with a tokenizer.bin
/// whose piece for 'A' is llama2.c's byte token "<0x41>".
void write_llama2c(const std::string& dir, std::size_t truncate = 0) {
  const std::vector<std::uint8_t> b = read_bytes(kModel);
  auto u32 = [&b](std::size_t at) {
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  const int dim = static_cast<int>(u32(8)), layers = static_cast<int>(u32(12)), heads = static_cast<int>(u32(16)),
            kv_heads = static_cast<int>(u32(20)), hidden = static_cast<int>(u32(24)), vocab = static_cast<int>(u32(28)),
            seq = static_cast<int>(u32(32));
  std::size_t at = 52;
  const std::size_t tokenizer_end = at + 4 + u32(at);
  at += 4;
  std::vector<std::string> pieces;
  while (at < tokenizer_end) {
    const std::uint32_t n = u32(at);
    pieces.emplace_back(reinterpret_cast<const char*>(b.data() + at + 4), n);
    at += 4 + n;
  }
  at += 8;  // u64 weight bytes
  const float* w = reinterpret_cast<const float*>(b.data() + at);
  const std::int64_t d = dim, h = hidden, kv = kv_heads * (dim / heads);
  const std::int64_t sizes[9] = {d, d * d, kv * d, kv * d, d * d, d, h * d, d * h, h * d};
  const std::int64_t per_layer = 2 * d + 2 * d * d + 2 * kv * d + 3 * d * h;
  std::vector<float> out(w, w + vocab * d);  // embedding
  for (int kind = 0; kind < 9; ++kind) {
    std::int64_t offset = 0;
    for (int k = 0; k < kind; ++k) offset += sizes[k];
    for (int l = 0; l < layers; ++l) {
      const float* from = w + vocab * d + l * per_layer + offset;
      out.insert(out.end(), from, from + sizes[kind]);
    }
  }
  const float* final_norm = w + vocab * d + layers * per_layer;
  out.insert(out.end(), final_norm, final_norm + d);
  out.resize(out.size() + static_cast<std::size_t>(seq) * (dim / heads), 0.0F);  // freq_cis, unused
  std::ofstream ck(dir + "/model.bin", std::ios::binary);
  const std::int32_t header[7] = {dim, hidden, layers, heads, kv_heads, vocab, seq};  // vocab > 0: tied
  ck.write(reinterpret_cast<const char*>(header), sizeof header);
  ck.write(reinterpret_cast<const char*>(out.data()),
           static_cast<std::streamsize>(out.size() * 4 - truncate));
  std::ofstream tok(dir + "/tokenizer.bin", std::ios::binary);
  const std::int32_t max_len = 8;
  tok.write(reinterpret_cast<const char*>(&max_len), 4);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string piece = i == 'A' ? "<0x41>" : pieces[i];
    const float score = 0;
    const auto n = static_cast<std::int32_t>(piece.size());
    tok.write(reinterpret_cast<const char*>(&score), 4);
    tok.write(reinterpret_cast<const char*>(&n), 4);
    tok.write(piece.data(), n);
  }
}

TEST(LmModelFile, ALlama2cCheckpointGivesTheLogitsOfTheSameWeightsInOurFormat) {
  const std::string dir = ::testing::TempDir() + "llama2c";
  std::filesystem::create_directories(dir);
  write_llama2c(dir);
  Model ours, theirs;
  ASSERT_TRUE(Model::load(kModel, ours).ok());
  const Status s = Model::load(dir + "/model.bin", theirs);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(theirs.config().dim, ours.config().dim);
  EXPECT_EQ(theirs.config().eos, 2);
  EXPECT_EQ(theirs.pieces()['A'], "A");  // from <0x41>
  EXPECT_EQ(theirs.pieces()['B'], "B");
  const std::vector<int> ids = {256, 'D', 'O', 'G', ',', ' ', 'n', '.'};
  std::vector<float> a, b;
  KvCache ca(ours.config(), 8), cb(theirs.config(), 8);
  ours.forward({ForwardItem{&ca, ids.data(), 8, true}}, a);
  theirs.forward({ForwardItem{&cb, ids.data(), 8, true}}, b);
  EXPECT_EQ(a, b);

  // A checkpoint cut short, or without its tokenizer, is refused with the reason.
  write_llama2c(dir, 4);
  Status cut = Model::load(dir + "/model.bin", theirs);
  ASSERT_TRUE(cut.is_error());
  EXPECT_NE(cut.message().find("llama2.c checkpoint of"), std::string::npos) << cut.message();
  std::filesystem::remove(dir + "/tokenizer.bin");
  Status alone = Model::load(dir + "/model.bin", theirs);
  ASSERT_TRUE(alone.is_error());
  EXPECT_NE(alone.message().find("tokenizer"), std::string::npos) << alone.message();
}

// -- float16 weights (format version 2) --------------------------------------

TEST(LmModelFile, HalfToFloatIsExactForEveryFloat16) {
  // Against the definition: (-1)^s × 2^(e-15) × 1.m, or 2^-14 × 0.m when e = 0.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = half_to_float(static_cast<std::uint16_t>(h));
    const bool negative = (h & 0x8000u) != 0;
    const int e = static_cast<int>((h >> 10) & 0x1Fu);
    const int m = static_cast<int>(h & 0x3FFu);
    if (e == 31) {
      if (m == 0) {
        EXPECT_TRUE(std::isinf(got)) << h;
      } else {
        EXPECT_TRUE(std::isnan(got)) << h;
      }
      EXPECT_EQ(std::signbit(got), negative) << h;
      continue;
    }
    const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    ASSERT_EQ(static_cast<double>(got), negative ? -magnitude : magnitude) << h;
    EXPECT_EQ(std::signbit(got), negative) << h;
  }
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
}

class LmModel8m : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    bytes_ = new std::vector<std::uint8_t>(read_bytes(kModel8m));
    model_ = new Model;
    const Status s = Model::parse(kModel8m, *bytes_, *model_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete bytes_;
  }
  static Status parse_changed(const std::vector<std::uint8_t>& bytes) {
    Model m;
    return Model::parse("bad8m.sflm", bytes, m);
  }
  static std::vector<std::uint8_t>* bytes_;
  static Model* model_;
};
std::vector<std::uint8_t>* LmModel8m::bytes_ = nullptr;
Model* LmModel8m::model_ = nullptr;

TEST_F(LmModel8m, IsStoredAsFloat16AndItsFloat32WeightsFillA32MBCache) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.weight_bytes, 2);
  EXPECT_EQ(c.vocab, 257);
  EXPECT_EQ(c.bos, 256);
  EXPECT_EQ(bytes_->at(4), 2);  // version 2
  // Both shipped models, weights and tokenizers, in at most 20 MB.
  EXPECT_LE(bytes_->size() + read_bytes(kModel).size(), 20'000'000u);
  EXPECT_GT(model_->parameter_count() * 4, 30LL << 20);
  EXPECT_LT(model_->parameter_count(), 15'000'000);
}

TEST_F(LmModel8m, LogitsMatchThePyTorchReferenceOfTheFloat16Weights) {
  int vocab = 0;
  const std::vector<ReferencePrompt> ref = read_reference(vocab, kReference8m);
  ASSERT_EQ(vocab, model_->config().vocab);
  ASSERT_GE(ref.size(), 3u);
  const Tokenizer tok(model_->pieces(), model_->config().bos);
  for (const ReferencePrompt& p : ref) {
    EXPECT_EQ(tok.encode(p.text, true), p.ids) << p.text;
    KvCache cache(model_->config(), static_cast<int>(p.ids.size()));
    std::vector<float> logits;
    model_->forward({ForwardItem{&cache, p.ids.data(), static_cast<int>(p.ids.size()), true}}, logits);
    ASSERT_EQ(logits.size(), p.logits.size());
    EXPECT_LT(max_diff(logits.data(), p.logits.data(), logits.size()), 1e-4f)
        << p.text << " " << kernel_name(model_->kernel());
  }
}

TEST_F(LmModel8m, ATruncatedOrCorruptFloat16FileIsRefused) {
  const std::vector<std::uint8_t>& bytes = *bytes_;
  // Cut in the header, the tokenizer, the weights (half-way through one
  // float16 too) and the checksum.
  for (std::size_t keep : {std::size_t{40}, std::size_t{300}, bytes.size() / 2, bytes.size() / 2 + 1,
                           bytes.size() - 5, bytes.size() - 1}) {
    const Status s = parse_changed(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
    ASSERT_TRUE(s.is_error()) << keep;
    EXPECT_NE(s.message().find("bad8m.sflm"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << keep << ": " << s.message();
  }
  // One bit of one weight flipped: the checksum catches it.
  std::vector<std::uint8_t> corrupt = bytes;
  corrupt[corrupt.size() * 3 / 4] ^= 0x01;
  Status s = parse_changed(corrupt);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  // The float16 flag in a version-1 file.
  std::vector<std::uint8_t> v1 = bytes;
  v1[4] = 1;
  s = parse_changed(v1);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("version-1 file with the float16 flag"), std::string::npos) << s.message();
  // The flag cleared: read as float32, the weights are half the size needed.
  std::vector<std::uint8_t> f32 = bytes;
  f32[8 + 7 * 4] &= static_cast<std::uint8_t>(~2u);
  s = parse_changed(f32);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("the sizes need"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(float32)"), std::string::npos) << s.message();
  // A version this build does not know.
  std::vector<std::uint8_t> v3 = bytes;
  v3[4] = 3;
  s = parse_changed(v3);
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("version 3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace swarmflow::lm
