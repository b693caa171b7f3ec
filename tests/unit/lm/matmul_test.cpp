// The lm pack's matrix product: every kernel this CPU runs gives each row
// the same bits whatever batch it is computed in, and the right values.
#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "lm/matmul.hpp"

namespace swarmflow::lm {
namespace {

std::vector<Kernel> kernels_here() {
  std::vector<Kernel> out;
  for (Kernel k : all_kernels()) {
    if (kernel_supported(k)) out.push_back(k);
  }
  return out;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

TEST(LmMatmul, ThePortableKernelIsAlwaysThereAndTheBestIsSupported) {
  EXPECT_TRUE(kernel_supported(Kernel::portable));
  EXPECT_TRUE(kernel_supported(best_kernel()));
  EXPECT_STREQ(kernel_name(Kernel::avx512), "avx512");
}

TEST(LmMatmul, EachRowIsTheSameAloneOrInAnyBatchAndMatchesTheSum) {
  std::mt19937 rng(7);
  for (Kernel kernel : kernels_here()) {
    SCOPED_TRACE(kernel_name(kernel));
    for (auto [out, in] : {std::pair{1, 1}, {17, 5}, {64, 128}, {257, 128}, {128, 384}, {100, 33}}) {
      // Two stacked parts, as the model stacks wq, wk and wv.
      const int top = out / 3;
      const std::vector<float> w = random_floats(static_cast<std::size_t>(out) * in, rng);
      const PackedMatrix packed({{top, w.data()}, {out - top, w.data() + static_cast<std::ptrdiff_t>(top) * in}}, in,
                                kernel);
      ASSERT_EQ(packed.out(), out);
      ASSERT_EQ(packed.in(), in);
      constexpr int kRows = 13;
      const std::vector<float> x = random_floats(static_cast<std::size_t>(kRows) * in, rng);
      // Each row alone.
      std::vector<float> alone(static_cast<std::size_t>(kRows) * out);
      for (int t = 0; t < kRows; ++t) {
        matmul(x.data() + static_cast<std::ptrdiff_t>(t) * in, 1, packed, alone.data() + static_cast<std::ptrdiff_t>(t) * out);
      }
      for (int t = 0; t < kRows; ++t) {
        for (int o = 0; o < out; ++o) {
          double sum = 0;
          for (int k = 0; k < in; ++k) {
            sum += static_cast<double>(x[static_cast<std::size_t>(t) * in + k]) * w[static_cast<std::size_t>(o) * in + k];
          }
          ASSERT_NEAR(alone[static_cast<std::size_t>(t) * out + o], sum, 1e-5 * in) << "row " << t << " out " << o;
        }
      }
      // Every batch size from 1 to kRows, starting at every row: the same bits.
      for (int rows = 2; rows <= kRows; ++rows) {
        for (int first = 0; first + rows <= kRows; first += 5) {
          std::vector<float> y(static_cast<std::size_t>(rows) * out, -1.0f);
          matmul(x.data() + static_cast<std::ptrdiff_t>(first) * in, rows, packed, y.data());
          const std::vector<float> want(alone.begin() + static_cast<std::ptrdiff_t>(first) * out,
                                        alone.begin() + static_cast<std::ptrdiff_t>(first + rows) * out);
          ASSERT_EQ(y, want) << rows << " rows from row " << first;
        }
      }
      // Rows further apart than their length (x_stride).
      std::vector<float> wide(static_cast<std::size_t>(kRows) * (in + 3), 0.0f);
      for (int t = 0; t < kRows; ++t) {
        std::copy(x.begin() + static_cast<std::ptrdiff_t>(t) * in, x.begin() + static_cast<std::ptrdiff_t>(t + 1) * in,
                  wide.begin() + static_cast<std::ptrdiff_t>(t) * (in + 3));
      }
      std::vector<float> y(static_cast<std::size_t>(kRows) * out);
      matmul(wide.data(), kRows, packed, y.data(), in + 3);
      EXPECT_EQ(y, alone);
    }
  }
}

TEST(LmMatmul, AttentionOfEveryKernelMatchesTheSoftmaxWeightedSum) {
  std::mt19937 rng(11);
  for (Kernel kernel : kernels_here()) {
    SCOPED_TRACE(kernel_name(kernel));
    // {heads, kv_heads, head_dim}: one head, grouped-query and plain attention.
    for (auto [heads, kv_heads, hd] : {std::tuple{1, 1, 32}, {4, 2, 32}, {4, 4, 12}, {2, 1, 64}, {7, 7, 64}}) {
      for (int n : {1, 7, 40, 100}) {
        const int stride = kv_heads * hd + 5;  // value rows with room after the heads
        const int kt_blocks = (n + 7) / 8 + 1;
        const std::vector<float> q = random_floats(static_cast<std::size_t>(heads) * hd, rng);
        const std::vector<float> k = random_floats(static_cast<std::size_t>(n) * stride, rng);
        const std::vector<float> v = random_floats(static_cast<std::size_t>(n) * stride, rng);
        // The keys in blocks of 8 positions, as the KV cache holds them; the
        // padding is garbage that must not matter.
        std::vector<float> kt(static_cast<std::size_t>(kv_heads) * kt_blocks * hd * 8, 1e30f);
        for (int j = 0; j < n; ++j) {
          for (int g = 0; g < kv_heads; ++g) {
            for (int i = 0; i < hd; ++i) {
              kt[((static_cast<std::size_t>(g) * kt_blocks + j / 8) * hd + i) * 8 + j % 8] =
                  k[static_cast<std::size_t>(j) * stride + g * hd + i];
            }
          }
        }
        const float scale = 0.5f;
        std::vector<float> scores(static_cast<std::size_t>(kt_blocks) * 8 * heads);
        std::vector<float> out(static_cast<std::size_t>(heads) * hd);
        attend(q.data(), kt.data(), kt_blocks, v.data(), stride, hd, n, heads, kv_heads, hd, scale, scores.data(),
               out.data(), kernel);
        for (int h = 0; h < heads; ++h) {
          const int at = h / (heads / kv_heads) * hd;
          std::vector<double> p(static_cast<std::size_t>(n));
          double mx = -1e300, sum = 0;
          for (int j = 0; j < n; ++j) {
            double dot = 0;
            for (int i = 0; i < hd; ++i) {
              dot += static_cast<double>(q[static_cast<std::size_t>(h) * hd + i]) * k[static_cast<std::size_t>(j) * stride + at + i];
            }
            p[j] = dot * scale;
            mx = std::max(mx, p[j]);
          }
          for (double& x : p) sum += (x = std::exp(x - mx));
          for (int i = 0; i < hd; ++i) {
            double want = 0;
            for (int j = 0; j < n; ++j) want += p[j] / sum * v[static_cast<std::size_t>(j) * stride + at + i];
            ASSERT_NEAR(out[static_cast<std::size_t>(h) * hd + i], want, 1e-5)
                << heads << " heads, " << kv_heads << " kv heads of " << hd << ", " << n << " positions, head " << h;
          }
        }
      }
    }
  }
}

// The AVX-512 kernel's attention keeps more sums in flight than the AVX2
// one (up to 12 blocks of scores, up to 6 heads of values at once), in the
// same order: the same bits, so a model's logits do not depend on which of
// the two runs.
TEST(LmMatmul, AttentionOnTheAvx512KernelHasTheBitsOfTheAvx2One) {
  if (!kernel_supported(Kernel::avx512)) GTEST_SKIP() << "this CPU does not run the avx512 kernel";
  std::mt19937 rng(12);
  // {heads, kv_heads, head_dim}: the shipped models' shapes, grouped-query
  // attention, heads of 16 and 48, and more heads than are summed at once.
  for (auto [heads, kv_heads, hd] : {std::tuple{4, 4, 32}, {6, 6, 64}, {8, 2, 64}, {3, 1, 16}, {13, 13, 48}}) {
    for (int n : {1, 8, 9, 72, 97, 104, 200}) {
      const int kt_blocks = (n + 7) / 8;
      const std::ptrdiff_t capacity = kt_blocks * 8;
      const std::vector<float> q = random_floats(static_cast<std::size_t>(heads) * hd, rng);
      const std::vector<float> kt = random_floats(static_cast<std::size_t>(kv_heads) * kt_blocks * hd * 8, rng);
      const std::vector<float> v = random_floats(static_cast<std::size_t>(kv_heads) * capacity * hd, rng);
      std::vector<float> scores(static_cast<std::size_t>(kt_blocks) * 8 * heads);
      std::vector<float> avx2(static_cast<std::size_t>(heads) * hd), avx512(avx2.size(), 1e30f);
      attend(q.data(), kt.data(), kt_blocks, v.data(), hd, capacity * hd, n, heads, kv_heads, hd, 0.125f, scores.data(),
             avx2.data(), Kernel::avx2);
      attend(q.data(), kt.data(), kt_blocks, v.data(), hd, capacity * hd, n, heads, kv_heads, hd, 0.125f, scores.data(),
             avx512.data(), Kernel::avx512);
      for (std::size_t i = 0; i < avx2.size(); ++i) {
        ASSERT_EQ(avx512[i], avx2[i]) << heads << " heads, " << kv_heads << " kv heads of " << hd << ", " << n
                                      << " positions, value " << i;
      }
    }
  }
}

// RMSNorm and the rotary embedding give every kernel the bits of the
// plain formulas (the AVX-512 code fuses no multiply-add), so a model's
// logits do not depend on which kernel runs them.
TEST(LmMatmul, RmsNormAndRotaryEmbeddingHaveTheBitsOfThePlainFormulas) {
  std::mt19937 rng(13);
  for (Kernel kernel : kernels_here()) {
    SCOPED_TRACE(kernel_name(kernel));
    for (int dim : {384, 128, 100, 12, 7}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(dim), rng);
      const std::vector<float> weight = random_floats(static_cast<std::size_t>(dim), rng);
      double part[8] = {};
      int i = 0;
      for (; i + 8 <= dim; i += 8) {
        for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(x[i + k]) * x[i + k];
      }
      for (; i < dim; ++i) part[0] += static_cast<double>(x[i]) * x[i];
      const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + 1e-5f));
      std::vector<float> out(static_cast<std::size_t>(dim));
      rmsnorm(x.data(), weight.data(), dim, 1e-5f, out.data(), kernel);
      for (i = 0; i < dim; ++i) ASSERT_EQ(out[i], x[i] * scale * weight[i]) << "dim " << dim << ", value " << i;
    }
    for (auto [heads, hd] : {std::pair{6, 64}, {4, 32}, {2, 16}, {3, 12}}) {
      const std::vector<float> v = random_floats(static_cast<std::size_t>(heads) * hd, rng);
      const std::vector<float> cs = random_floats(static_cast<std::size_t>(hd) / 2, rng);
      const std::vector<float> sn = random_floats(static_cast<std::size_t>(hd) / 2, rng);
      std::vector<float> got = v;
      rotate_pairs(got.data(), heads, hd, cs.data(), sn.data(), kernel);
      for (int h = 0; h < heads; ++h) {
        for (int p = 0; p < hd / 2; ++p) {
          const float a = v[static_cast<std::size_t>(h * hd + 2 * p)], b = v[static_cast<std::size_t>(h * hd + 2 * p + 1)];
          ASSERT_EQ(got[static_cast<std::size_t>(h * hd + 2 * p)], a * cs[p] - b * sn[p]) << hd << ", head " << h << ", pair " << p;
          ASSERT_EQ(got[static_cast<std::size_t>(h * hd + 2 * p + 1)], a * sn[p] + b * cs[p]) << hd << ", head " << h << ", pair " << p;
        }
      }
    }
  }
}

TEST(LmMatmul, SumExpIsTheSoftmaxNormaliserWithinFloatPrecision) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(-30.0f, 12.0f);
  // The vocabulary sizes of the shipped models and of llama2.c's, and sizes
  // that leave a tail past the last 8 lanes.
  for (int n : {1, 7, 8, 257, 32000}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x) v = logit(rng);
    float top = x[0];
    for (float v : x) top = std::max(top, v);
    double want = 0;
    for (float v : x) want += std::exp(static_cast<double>(v) - top);
    EXPECT_NEAR(sum_exp(x.data(), n, top), want, want * 1e-6) << n;
    EXPECT_GE(sum_exp(x.data(), n, top), 1.0 - 1e-6) << n;  // the top logit's own term is 1
  }
}

}  // namespace
}  // namespace swarmflow::lm
