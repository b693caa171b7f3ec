#pragma once
/// \file model.hpp
/// The `lm` pack's language model: a llama-style decoder-only transformer
/// (RMSNorm, rotary embeddings on interleaved pairs, SwiGLU, tied or untied
/// embeddings) read from one `.sflm` file (format in docs/lm.md), and its
/// forward pass over a batch of sequences, each with its own KV cache.

#include <cstdint>
#include <string>
#include <vector>

#include <swarmflow/status.hpp>

#include "lm/matmul.hpp"

namespace swarmflow::lm {

/// Sizes and hyperparameters stored in the model file.
struct ModelConfig {
  int dim = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int hidden = 0;
  int vocab = 0;
  int max_seq_len = 0;
  bool tied_embeddings = true;
  int bos = 0;
  int eos = -1;  ///< a token that ends generation (llama2.c models: 2), -1 = none
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  /// Bytes a weight takes in the file: 4 (float32) or 2 (float16, version
  /// 2). In memory the weights are float32 either way.
  int weight_bytes = 4;

  int head_dim() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
  /// Floats of KV cache one token takes (keys and values of every layer).
  std::int64_t kv_floats_per_token() const { return 2LL * layers * kv_dim(); }
};

/// Keys and values of one sequence, room for `capacity` tokens.
class KvCache {
 public:
  KvCache() = default;
  KvCache(const ModelConfig& config, int capacity);
  int capacity() const { return capacity_; }
  /// Tokens already in the cache (the position of the next one).
  int length() const { return length_; }
  void clear() { length_ = 0; }
  /// Forgets every token from position `length` on (they are fed again).
  void truncate(int length) { length_ = length < length_ ? (length > 0 ? length : 0) : length_; }

 private:
  friend class Model;
  int capacity_ = 0;
  int length_ = 0;
  int kv_dim_ = 0;
  int k_blocks_ = 0;      // blocks of 8 positions (attend reads whole blocks)
  std::vector<float> k_;  // [layer][kv_head][block][head_dim][8]: see attend()
  std::vector<float> v_;  // [layer][kv_head][position][head_dim]
};

/// One sequence's part of a forward step: `count` new tokens appended to
/// `cache` (a prefill chunk, or one token when decoding).
struct ForwardItem {
  KvCache* cache = nullptr;
  const int* tokens = nullptr;
  int count = 0;
  /// Logits for every new token instead of only the last one.
  bool all_logits = false;
};

/// Weights and tokenizer pieces of a model, read-only once loaded.
class Model {
 public:
  /// Reads and checks `path`. A missing, truncated or corrupt file, a wrong
  /// magic or version, or sizes that do not add up fail with a message that
  /// names the file and what is wrong.
  static Status load(const std::string& path, Model& out);
  /// The same from bytes already in memory; `name` is used in messages.
  static Status parse(const std::string& name, std::vector<std::uint8_t> bytes, Model& out);
  /// A checkpoint in llama2.c's format (docs/lm.md, "Your own model"):
  /// `bytes` of the checkpoint, `tokenizer` of its tokenizer.bin.
  static Status parse_llama2c(const std::string& name, const std::vector<std::uint8_t>& bytes,
                              const std::vector<std::uint8_t>& tokenizer, Model& out);

  const ModelConfig& config() const { return config_; }
  /// Byte string of each token id (the tokenizer's vocabulary).
  const std::vector<std::string>& pieces() const { return pieces_; }
  /// Number of parameters (floats) in the weights.
  std::int64_t parameter_count() const { return static_cast<std::int64_t>(weights_.size()); }

  /// Runs the new tokens of every item through the model in one batch and
  /// writes logits to `logits`: per item, in order, one row of `vocab`
  /// floats for its last token (or one per token with `all_logits`). The
  /// caches must have room. Each output value is computed in the same order
  /// whatever else is in the batch, so batching never changes a result.
  void forward(const std::vector<ForwardItem>& items, std::vector<float>& logits) const;

  /// The matrix-product kernel in use: the best this CPU runs, unless
  /// `use_kernel` chose another (tests compare them).
  Kernel kernel() const { return kernel_; }
  /// Repacks the weights for `kernel`; false (and nothing changes) when
  /// this CPU does not run it.
  bool use_kernel(Kernel kernel);

 private:
  struct Layer {
    const float* attn_norm;
    const float* wq;
    const float* wk;
    const float* wv;
    const float* wo;
    const float* ffn_norm;
    const float* w1;
    const float* w2;
    const float* w3;
    PackedMatrix qkv;  ///< wq, wk and wv stacked: one product for the three
    PackedMatrix o;
    PackedMatrix w13;  ///< w1 and w3 stacked
    PackedMatrix w2_packed;
  };

  ModelConfig config_;
  std::vector<std::string> pieces_;
  std::vector<float> weights_;
  const float* embedding_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* output_ = nullptr;
  std::vector<Layer> layers_;
  /// Fills rope_cos_ / rope_sin_ from the config.
  void make_rope();
  /// Packs the weight matrices for kernel_.
  void pack();
  Kernel kernel_ = best_kernel();
  PackedMatrix packed_output_;
  std::vector<float> rope_cos_;  // [position][head_dim / 2]
  std::vector<float> rope_sin_;
};

/// An IEEE 754 binary16 value (as the model file stores float16 weights)
/// as float32, exactly: normals, subnormals, signed zeros, infinities, NaN.
float half_to_float(std::uint16_t h);

/// CRC-32 (IEEE, as zlib's crc32) of `size` bytes.
std::uint32_t crc32(const std::uint8_t* data, std::size_t size);

}  // namespace swarmflow::lm
