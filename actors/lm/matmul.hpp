#pragma once
/// \file matmul.hpp
/// The `lm` pack's matrix product: activations of a batch of tokens times a
/// weight matrix packed once at load time. One token is a matrix-vector
/// product, a batch a matrix-matrix product over the same packed weights:
/// the weights are streamed once per step whatever the batch, and a tile of
/// tokens shares every weight load. The kernel is chosen at run time from
/// what the CPU offers (AVX-512, AVX2 with FMA, SSE2, or portable code), so
/// the build needs no -march flag.
///
/// Each output value is one chain of multiply-adds over the input in order
/// (y = x[0]w[0], then y += x[k]w[k] for k = 1..in-1), whatever tile or
/// batch it is computed in: batching never changes a result.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace swarmflow::lm {

/// A matrix-product kernel. Higher values need newer CPUs.
enum class Kernel { portable = 0, sse2 = 1, avx2 = 2, avx512 = 3 };

/// Every kernel, whether this CPU runs it or not.
std::vector<Kernel> all_kernels();

/// The best kernel this CPU runs.
Kernel best_kernel();
/// Whether this CPU runs `kernel`.
bool kernel_supported(Kernel kernel);
/// "portable", "sse2", "avx2" or "avx512".
const char* kernel_name(Kernel kernel);

/// A weight matrix ([out][in], row-major, several stacked) repacked for one
/// kernel: panels of `panel` output rows, each panel stored input-major
/// ([k][panel]) and padded with zero rows, 64-byte aligned.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// Stacks `parts` (each {rows, [rows][in] floats}) into one matrix.
  PackedMatrix(const std::vector<std::pair<int, const float*>>& parts, int in, Kernel kernel);

  int in() const { return in_; }
  int out() const { return out_; }
  int panel() const { return panel_; }
  Kernel kernel() const { return kernel_; }
  const float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int in_ = 0;
  int out_ = 0;
  int panel_ = 0;
  Kernel kernel_ = Kernel::portable;
  std::shared_ptr<float> data_;  // shared: a copied Model shares its read-only weights
};

/// y[t][o] = sum over k of x[t][k] * w[o][k], for `rows` rows of x (each
/// w.in() floats, `x_stride` floats apart; 0 = w.in()) into y
/// ([rows][w.out()]), with the kernel `w` was packed for.
void matmul(const float* x, int rows, const PackedMatrix& w, float* y, int x_stride = 0);

/// Attention of one token over its n cached positions, every head: head h
/// (reading KV head g = h / (heads / kv_heads)) gets out[h] = sum over j < n
/// of softmax_j(scale * q[h] . k_j) v_j. q and out hold heads x head_dim
/// floats. Keys are stored in blocks of 8 positions, so that the scores of
/// 8 positions are one vector product: dimension i of KV head g at position
/// j is kt[((g * kt_blocks + j / 8) * head_dim + i) * 8 + j % 8], with
/// kt_blocks >= (n + 7) / 8 (the lanes past n are computed and not used).
/// Dimension i of KV head g's value at position j is v[g * v_head_stride + j
/// * v_stride + i] (the model keeps each head's values together: v_stride =
/// head_dim). `scores` has room for heads x kt_blocks x 8 floats.
/// It depends on nothing but its arguments, so not on the batch.
void attend(const float* q, const float* kt, int kt_blocks, const float* v, std::ptrdiff_t v_stride,
            std::ptrdiff_t v_head_stride, int n, int heads, int kv_heads, int head_dim, float scale, float* scores,
            float* out, Kernel kernel);

/// The sum over i < n of e^(x[i] - shift): the normaliser of a softmax
/// over logits (shift = their maximum). With AVX2, the exponentials are
/// computed in float (within 2 ulp) and summed in double.
double sum_exp(const float* x, int n, float shift);

/// RMSNorm of one row: out[i] = x[i] * s * weight[i], s = 1 / sqrt(the mean
/// of x[i]^2 + eps), the squares summed in double in 8 parts (part k takes
/// i = k mod 8). The same bits with every kernel.
void rmsnorm(const float* x, const float* weight, int dim, float eps, float* out, Kernel kernel);

/// Rotary embedding in place of `heads` heads of `head_dim` floats, on the
/// interleaved pairs (2i, 2i+1) of each head: (a, b) becomes (a cos_i - b
/// sin_i, a sin_i + b cos_i) with cos_i = cos[i], sin_i = sin[i]. The same
/// bits with every kernel.
void rotate_pairs(float* v, int heads, int head_dim, const float* cos, const float* sin, Kernel kernel);

/// SwiGLU in place: gate[i] = silu(gate[i]) * up[i] for i < n.
void swiglu(float* gate, const float* up, int n, Kernel kernel);

}  // namespace swarmflow::lm
