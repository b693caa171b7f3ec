#include "lm/matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define SWARMFLOW_LM_X86 1
#define SWARMFLOW_LM_AVX2 __attribute__((target("avx2,fma")))
#define SWARMFLOW_LM_AVX512 __attribute__((target("avx512f")))
#define SWARMFLOW_LM_AVX512_FMA __attribute__((target("avx512f,avx2,fma")))
#define SWARMFLOW_LM_SSE2 __attribute__((target("sse2")))
#endif

namespace swarmflow::lm {

namespace {

int panel_of(Kernel kernel) {
  switch (kernel) {
    case Kernel::avx512: return 64;  // 4 zmm registers per token
    case Kernel::avx2: return 32;    // 4 ymm registers per token
    case Kernel::sse2: return 16;    // 4 xmm registers per token
    case Kernel::portable: break;
  }
  return 16;
}

/// Copies the first `n` values of each of `rows` rows of `tile` (rows of
/// `panel` floats) to y (rows of `out` floats) at column `o0`.
void put(const float* tile, int rows, int panel, int n, float* y, int out, int o0) {
  for (int t = 0; t < rows; ++t) {
    std::memcpy(y + static_cast<std::ptrdiff_t>(t) * out + o0, tile + static_cast<std::ptrdiff_t>(t) * panel,
                sizeof(float) * static_cast<std::size_t>(n));
  }
}

// Portable: 16 outputs at a time, one token at a time; the compiler may
// vectorise the inner loop, which keeps each value's order.
void matmul_portable(const float* x, int rows, const PackedMatrix& w, float* y, int ldx) {
  constexpr int P = 16;
  const int in = w.in(), out = w.out();
  float acc[P];
  for (int o0 = 0, p = 0; o0 < out; o0 += P, ++p) {
    const float* wp = w.data() + static_cast<std::ptrdiff_t>(p) * in * P;
    for (int t = 0; t < rows; ++t) {
      const float* xt = x + static_cast<std::ptrdiff_t>(t) * ldx;
      for (int j = 0; j < P; ++j) acc[j] = xt[0] * wp[j];
      for (int k = 1; k < in; ++k) {
        const float xv = xt[k];
        const float* wk = wp + static_cast<std::ptrdiff_t>(k) * P;
        for (int j = 0; j < P; ++j) acc[j] += xv * wk[j];
      }
      put(acc, 1, P, std::min(P, out - o0), y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
  }
}

/// The softmax of scores[0..n) in place (max subtracted, then normalised).
void softmax(float* scores, int n) {
  float mx = scores[0];
  for (int j = 1; j < n; ++j) mx = std::max(mx, scores[j]);
  float sum = 0;
  for (int j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  for (int j = 0; j < n; ++j) scores[j] /= sum;
}

/// One head; its keys in blocks of 8 positions (dimension i of position j
/// at kt[((j / 8) * hd + i) * 8 + j % 8]).
void attend_portable(const float* q, const float* kt, const float* v, std::ptrdiff_t vs, int n, int hd, float scale,
                     float* scores, float* out) {
  for (int j = 0; j < n; ++j) {
    const float* kj = kt + static_cast<std::ptrdiff_t>(j / 8) * hd * 8 + j % 8;
    float dot = q[0] * kj[0];
    for (int i = 1; i < hd; ++i) dot += q[i] * kj[i * 8];
    scores[j] = dot * scale;
  }
  softmax(scores, n);
  std::fill(out, out + hd, 0.0f);
  for (int j = 0; j < n; ++j) {
    const float a = scores[j];
    const float* vj = v + j * vs;
    for (int i = 0; i < hd; ++i) out[i] += a * vj[i];
  }
}

#if defined(SWARMFLOW_LM_X86)

// SSE2 (every x86-64): a tile of NT tokens by 16 outputs (4 xmm each),
// NT <= 2 (8 accumulators, 4 weights and a broadcast in 16 registers; 3
// tokens would spill); a multiply then an add, as SSE2 has no FMA.
template <int NT>
SWARMFLOW_LM_SSE2 void tile_sse2(const float* x, int ldx, int in, const float* wp, float* tile) {
  __m128 acc[NT][4];
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    const __m128 xb = _mm_set1_ps(x[static_cast<std::ptrdiff_t>(i) * ldx]);
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm_mul_ps(xb, _mm_load_ps(wp + 4 * v));
  }
  for (int k = 1; k < in; ++k) {
    const float* wk = wp + static_cast<std::ptrdiff_t>(k) * 16;
    const __m128 w0 = _mm_load_ps(wk), w1 = _mm_load_ps(wk + 4), w2 = _mm_load_ps(wk + 8), w3 = _mm_load_ps(wk + 12);
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const __m128 xb = _mm_set1_ps(x[static_cast<std::ptrdiff_t>(i) * ldx + k]);
      acc[i][0] = _mm_add_ps(acc[i][0], _mm_mul_ps(xb, w0));
      acc[i][1] = _mm_add_ps(acc[i][1], _mm_mul_ps(xb, w1));
      acc[i][2] = _mm_add_ps(acc[i][2], _mm_mul_ps(xb, w2));
      acc[i][3] = _mm_add_ps(acc[i][3], _mm_mul_ps(xb, w3));
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) _mm_storeu_ps(tile + i * 16 + 4 * v, acc[i][v]);
  }
}

SWARMFLOW_LM_SSE2 void matmul_sse2(const float* x, int rows, const PackedMatrix& w, float* y, int ldx) {
  constexpr int P = 16;
  const int in = w.in(), out = w.out();
  alignas(16) float tile[2 * P];
  for (int o0 = 0, p = 0; o0 < out; o0 += P, ++p) {
    const float* wp = w.data() + static_cast<std::ptrdiff_t>(p) * in * P;
    const int n = std::min(P, out - o0);
    int t = 0;
    for (; t + 2 <= rows; t += 2) {
      tile_sse2<2>(x + static_cast<std::ptrdiff_t>(t) * ldx, ldx, in, wp, tile);
      put(tile, 2, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
    if (t < rows) {
      tile_sse2<1>(x + static_cast<std::ptrdiff_t>(t) * ldx, ldx, in, wp, tile);
      put(tile, 1, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
  }
}

// How far ahead of its reads the first tile of a batch over a panel asks
// for the panel's weights (and then the next panel's): a batch's tile has
// many multiply-adds per weight, too few loads in flight to hide memory on
// its own, so without this it waits for the weights and then computes
// instead of doing both at once. One token alone (a load-bound GEMV) does
// not need it.
constexpr std::ptrdiff_t kFetchAheadBytes = 16384;

// AVX2 + FMA: a tile of NT tokens by 32 outputs (4 ymm each), NT <= 2
// (16 ymm registers; 3 tokens would spill). kFetch: ask for the weights
// kFetchAheadBytes ahead.
template <int NT, bool kFetch = false>
SWARMFLOW_LM_AVX2 void tile_avx2(const float* x, int ldx, int in, const float* wp, float* tile) {
  __m256 acc[NT][4];
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    const __m256 xb = _mm256_broadcast_ss(x + static_cast<std::ptrdiff_t>(i) * ldx);
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm256_mul_ps(xb, _mm256_load_ps(wp + 8 * v));
  }
  for (int k = 1; k < in; ++k) {
    const float* wk = wp + static_cast<std::ptrdiff_t>(k) * 32;
    if constexpr (kFetch) {
      const char* ahead = reinterpret_cast<const char*>(wk) + kFetchAheadBytes;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
    }
    const __m256 w0 = _mm256_load_ps(wk), w1 = _mm256_load_ps(wk + 8), w2 = _mm256_load_ps(wk + 16),
                 w3 = _mm256_load_ps(wk + 24);
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + static_cast<std::ptrdiff_t>(i) * ldx + k);
      acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(xb, w2, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(xb, w3, acc[i][3]);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(tile + i * 32 + 8 * v, acc[i][v]);
  }
}

SWARMFLOW_LM_AVX2 void matmul_avx2(const float* x, int rows, const PackedMatrix& w, float* y, int ldx) {
  constexpr int P = 32;
  const int in = w.in(), out = w.out();
  alignas(32) float tile[2 * P];
  for (int o0 = 0, p = 0; o0 < out; o0 += P, ++p) {
    const float* wp = w.data() + static_cast<std::ptrdiff_t>(p) * in * P;
    const int n = std::min(P, out - o0);
    int t = 0;
    for (; t + 2 <= rows; t += 2) {
      if (t == 0) {
        tile_avx2<2, true>(x, ldx, in, wp, tile);
      } else {
        tile_avx2<2>(x + static_cast<std::ptrdiff_t>(t) * ldx, ldx, in, wp, tile);
      }
      put(tile, 2, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
    if (t < rows) {
      tile_avx2<1>(x + static_cast<std::ptrdiff_t>(t) * ldx, ldx, in, wp, tile);
      put(tile, 1, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
  }
}

// AVX-512: a tile of NT tokens by 64 outputs (4 zmm each), NT <= 6
// (24 accumulators, 4 weights and a broadcast in 32 registers). kFetch: ask
// for the weights kFetchAheadBytes ahead.
template <int NT, bool kFetch = false>
SWARMFLOW_LM_AVX512 void tile_avx512(const float* x, int ldx, int in, const float* wp, float* tile) {
  __m512 acc[NT][4];
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    const __m512 xb = _mm512_set1_ps(x[static_cast<std::ptrdiff_t>(i) * ldx]);
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_mul_ps(xb, _mm512_load_ps(wp + 16 * v));
  }
  for (int k = 1; k < in; ++k) {
    const float* wk = wp + static_cast<std::ptrdiff_t>(k) * 64;
    if constexpr (kFetch) {
      const char* ahead = reinterpret_cast<const char*>(wk) + kFetchAheadBytes;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      _mm_prefetch(ahead + 128, _MM_HINT_T0);
      _mm_prefetch(ahead + 192, _MM_HINT_T0);
    }
    const __m512 w0 = _mm512_load_ps(wk), w1 = _mm512_load_ps(wk + 16), w2 = _mm512_load_ps(wk + 32),
                 w3 = _mm512_load_ps(wk + 48);
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const __m512 xb = _mm512_set1_ps(x[static_cast<std::ptrdiff_t>(i) * ldx + k]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(xb, w2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(xb, w3, acc[i][3]);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(tile + i * 64 + 16 * v, acc[i][v]);
  }
}

SWARMFLOW_LM_AVX512 void matmul_avx512(const float* x, int rows, const PackedMatrix& w, float* y, int ldx) {
  constexpr int P = 64;
  const int in = w.in(), out = w.out();
  alignas(64) float tile[6 * P];
  for (int o0 = 0, p = 0; o0 < out; o0 += P, ++p) {
    const float* wp = w.data() + static_cast<std::ptrdiff_t>(p) * in * P;
    const int n = std::min(P, out - o0);
    int t = 0;
    for (; t + 6 <= rows; t += 6) {
      if (t == 0) {
        tile_avx512<6, true>(x, ldx, in, wp, tile);
      } else {
        tile_avx512<6>(x + static_cast<std::ptrdiff_t>(t) * ldx, ldx, in, wp, tile);
      }
      put(tile, 6, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
    }
    const float* xt = x + static_cast<std::ptrdiff_t>(t) * ldx;
    const bool first = t == 0;  // a batch's first tile (one token alone, case 1, asks for nothing)
    switch (rows - t) {
      case 5: first ? tile_avx512<5, true>(xt, ldx, in, wp, tile) : tile_avx512<5>(xt, ldx, in, wp, tile); break;
      case 4: first ? tile_avx512<4, true>(xt, ldx, in, wp, tile) : tile_avx512<4>(xt, ldx, in, wp, tile); break;
      case 3: first ? tile_avx512<3, true>(xt, ldx, in, wp, tile) : tile_avx512<3>(xt, ldx, in, wp, tile); break;
      case 2: first ? tile_avx512<2, true>(xt, ldx, in, wp, tile) : tile_avx512<2>(xt, ldx, in, wp, tile); break;
      case 1: tile_avx512<1>(xt, ldx, in, wp, tile); break;
      default: break;
    }
    put(tile, rows - t, P, n, y + static_cast<std::ptrdiff_t>(t) * out, out, o0);
  }
}


/// e^x in each lane (Cephes' expf: x = n ln 2 + r, a degree-7 polynomial
/// in r, times 2^n), within 2 ulp; lanes below -87.3 give 2^-126.
SWARMFLOW_LM_AVX2 inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f)), _mm256_set1_ps(88.3762626647949f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/// Loads lanes [0, n) of p (n < 8), the others `fill`.
SWARMFLOW_LM_AVX2 inline __m256 load_part(const float* p, int n, float fill) {
  alignas(32) float buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = i < n ? p[i] : fill;
  return _mm256_load_ps(buf);
}

SWARMFLOW_LM_AVX2 inline float sum_lanes(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

SWARMFLOW_LM_AVX2 void softmax_avx2(float* scores, int n) {
  float mx = scores[0];
  for (int j = 1; j < n; ++j) mx = std::max(mx, scores[j]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), m));
    _mm256_storeu_ps(scores + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < n) {
    alignas(32) float e[8];
    // The lanes past the end are computed on a copy and left out of the sum.
    _mm256_store_ps(e, exp_avx2(_mm256_sub_ps(load_part(scores + j, n - j, mx), m)));
    for (int i = j; i < n; ++i) scores[i] = e[i - j];
    sum = _mm256_add_ps(sum, load_part(e, n - j, 0.0f));
  }
  const __m256 total = _mm256_set1_ps(sum_lanes(sum));
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(scores + j, _mm256_div_ps(_mm256_loadu_ps(scores + j), total));
  const float t = _mm_cvtss_f32(_mm256_castps256_ps128(total));
  for (; j < n; ++j) scores[j] /= t;
}

SWARMFLOW_LM_AVX2 void swiglu_avx2(float* gate, const float* up, int n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(gate + i);
    const __m256 sig = _mm256_div_ps(a, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), a))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(sig, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

/// The sum over i < n of e^(x[i] - shift), the exponentials in 8 float
/// lanes, summed in double.
SWARMFLOW_LM_AVX2 double sum_exp_avx2(const float* x, int n, float shift) {
  const __m256 m = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(lo, hi));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - shift);
  return sum;
}

// Attention with head_dim a multiple of 8 (the AVX-512 kernel uses it too:
// a head is a few vectors long, and wider ones gain nothing here).
/// NB blocks of W positions of one head's scores: a multiply-add chain over
/// the head's dimensions for each position, W positions to a register.
template <int NB>
SWARMFLOW_LM_AVX2 void scores_avx2(const float* q, const float* kt, int hd, float scale, float* out) {
  __m256 acc[NB];
  const std::ptrdiff_t block = static_cast<std::ptrdiff_t>(hd) * 8;
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) acc[b] = _mm256_mul_ps(_mm256_set1_ps(q[0]), _mm256_loadu_ps(kt + b * block));
  for (int i = 1; i < hd; ++i) {
    const __m256 qi = _mm256_set1_ps(q[i]);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) acc[b] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kt + b * block + i * 8), acc[b]);
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + 8 * b, _mm256_mul_ps(acc[b], _mm256_set1_ps(scale)));
}

/// out[h] = sum over j < n of scores[h][j] v_j for NH heads of NV vectors
/// (head_dim = 8 NV) from h0, their sums in registers over the positions.
template <int NH, int NV>
SWARMFLOW_LM_AVX2 void values_avx2(const float* scores, int kt_blocks, const float* v, std::ptrdiff_t vs,
                                   std::ptrdiff_t vh_stride, int n, int h0, int group, float* out) {
  __m256 acc[NH][NV];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) acc[h][c] = _mm256_setzero_ps();
  }
  const float* vh[NH];
  const float* sh[NH];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    vh[h] = v + ((h0 + h) / group) * vh_stride;
    sh[h] = scores + static_cast<std::ptrdiff_t>(h0 + h) * kt_blocks * 8;
  }
  for (int j = 0; j < n; ++j) {
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m256 a = _mm256_set1_ps(sh[h][j]);
      const float* vj = vh[h] + j * vs;
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) acc[h][c] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vj + 8 * c), acc[h][c]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out + (h0 + h) * NV * 8 + 8 * c, acc[h][c]);
  }
}

SWARMFLOW_LM_AVX2 void attend_avx2(const float* q, const float* kt, int kt_blocks, const float* v, std::ptrdiff_t vs,
                                   std::ptrdiff_t vh_stride, int n, int heads, int group, int hd, float scale,
                                   float* scores, float* out) {
  const int blocks = (n + 7) / 8;  // the lanes past n read the cache's padding and are not used
  const std::ptrdiff_t block = static_cast<std::ptrdiff_t>(hd) * 8;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * hd;
    const float* kh = kt + static_cast<std::ptrdiff_t>(h / group) * kt_blocks * block;
    float* sh = scores + static_cast<std::ptrdiff_t>(h) * kt_blocks * 8;
    int b = 0;
    for (; b + 4 <= blocks; b += 4) scores_avx2<4>(qh, kh + b * block, hd, scale, sh + 8 * b);
    switch (blocks - b) {
      case 3: scores_avx2<3>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
      case 2: scores_avx2<2>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
      case 1: scores_avx2<1>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
      default: break;
    }
    softmax_avx2(sh, n);
  }
  if (hd == 32) {
    // Two heads at a time, their 8 vectors of sums in registers over the
    // positions (the same chain of multiply-adds per value as below).
    int h = 0;
    for (; h + 2 <= heads; h += 2) values_avx2<2, 4>(scores, kt_blocks, v, vs, vh_stride, n, h, group, out);
    if (h < heads) values_avx2<1, 4>(scores, kt_blocks, v, vs, vh_stride, n, h, group, out);
    return;
  }
  if (hd == 64) {
    for (int h = 0; h < heads; ++h) values_avx2<1, 8>(scores, kt_blocks, v, vs, vh_stride, n, h, group, out);
    return;
  }
  // Position by position, every head.
  std::fill(out, out + heads * hd, 0.0f);
  for (int j = 0; j < n; ++j) {
    for (int h = 0; h < heads; ++h) {
      const __m256 a = _mm256_set1_ps(scores[static_cast<std::ptrdiff_t>(h) * kt_blocks * 8 + j]);
      const float* vh = v + (h / group) * vh_stride + j * vs;
      float* oh = out + h * hd;
      for (int i = 0; i < hd; i += 8) _mm256_storeu_ps(oh + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(vh + i), _mm256_loadu_ps(oh + i)));
    }
  }
}

// -- attention on the AVX-512 kernel ---------------------------------------
// The same multiply-adds in the same order as the AVX2 code above, so the
// same bits; only more of them are in flight at once. A token's attention
// reads its own KV cache, which no batch shares and which comes from memory
// when the batch's caches and the weights overflow the cache: with more
// independent streams at once, more of those reads overlap.

/// NB blocks of 8 positions of one head of HD dimensions (up to 12 blocks,
/// 12 chains in flight instead of 4): as scores_avx2<NB>, with the blocks'
/// offsets known at compile time.
template <int NB, int HD>
SWARMFLOW_LM_AVX512_FMA void scores_wide(const float* q, const float* kt, float scale, float* out) {
  constexpr std::ptrdiff_t block = static_cast<std::ptrdiff_t>(HD) * 8;
  __m256 acc[NB];
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) acc[b] = _mm256_mul_ps(_mm256_set1_ps(q[0]), _mm256_loadu_ps(kt + b * block));
  for (int i = 1; i < HD; ++i) {
    const __m256 qi = _mm256_set1_ps(q[i]);
    const float* ki = kt + static_cast<std::ptrdiff_t>(i) * 8;
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[b] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(ki + b * block), acc[b]);
  }
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + 8 * b, _mm256_mul_ps(acc[b], _mm256_set1_ps(scale)));
}

template <int HD>
SWARMFLOW_LM_AVX512_FMA void scores_wide_n(int nb, const float* q, const float* kt, float scale, float* out) {
  switch (nb) {
    case 12: return scores_wide<12, HD>(q, kt, scale, out);
    case 11: return scores_wide<11, HD>(q, kt, scale, out);
    case 10: return scores_wide<10, HD>(q, kt, scale, out);
    case 9: return scores_wide<9, HD>(q, kt, scale, out);
    case 8: return scores_wide<8, HD>(q, kt, scale, out);
    case 7: return scores_wide<7, HD>(q, kt, scale, out);
    case 6: return scores_wide<6, HD>(q, kt, scale, out);
    case 5: return scores_wide<5, HD>(q, kt, scale, out);
    case 4: return scores_wide<4, HD>(q, kt, scale, out);
    case 3: return scores_wide<3, HD>(q, kt, scale, out);
    case 2: return scores_wide<2, HD>(q, kt, scale, out);
    default: return scores_wide<1, HD>(q, kt, scale, out);
  }
}

/// out[h] = sum over j < n of scores[h][j] v_j for NH heads of NV zmm
/// vectors (head_dim = 16 NV) from h0: as values_avx2, up to 6 heads (6
/// streams of values) at a time, their sums in 24 registers.
template <int NH, int NV>
SWARMFLOW_LM_AVX512_FMA void values_avx512(const float* scores, int kt_blocks, const float* v, std::ptrdiff_t vs,
                                       std::ptrdiff_t vh_stride, int n, int h0, int group, float* out) {
  __m512 acc[NH][NV];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) acc[h][c] = _mm512_setzero_ps();
  }
  const float* vh[NH];
  const float* sh[NH];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    vh[h] = v + ((h0 + h) / group) * vh_stride;
    sh[h] = scores + static_cast<std::ptrdiff_t>(h0 + h) * kt_blocks * 8;
  }
  for (int j = 0; j < n; ++j) {
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m512 a = _mm512_set1_ps(sh[h][j]);
      const float* vj = vh[h] + j * vs;
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) acc[h][c] = _mm512_fmadd_ps(a, _mm512_loadu_ps(vj + 16 * c), acc[h][c]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(out + (h0 + h) * NV * 16 + 16 * c, acc[h][c]);
  }
}

template <int NV>
SWARMFLOW_LM_AVX512_FMA void values_avx512_n(int nh, const float* scores, int kt_blocks, const float* v, std::ptrdiff_t vs,
                                         std::ptrdiff_t vh_stride, int n, int h0, int group, float* out) {
  switch (nh) {
    case 1: return values_avx512<1, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
    case 2: return values_avx512<2, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
    case 3: return values_avx512<3, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
    case 4: return values_avx512<4, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
    case 5: return values_avx512<5, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
    default: return values_avx512<6, NV>(scores, kt_blocks, v, vs, vh_stride, n, h0, group, out);
  }
}

/// Attention with head_dim 16, 32, 48 or 64, on the AVX-512 kernel.
SWARMFLOW_LM_AVX512_FMA void attend_avx512(const float* q, const float* kt, int kt_blocks, const float* v,
                                       std::ptrdiff_t vs, std::ptrdiff_t vh_stride, int n, int heads, int group,
                                       int hd, float scale, float* scores, float* out) {
  const int blocks = (n + 7) / 8;  // the lanes past n read the cache's padding and are not used
  const std::ptrdiff_t block = static_cast<std::ptrdiff_t>(hd) * 8;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * hd;
    const float* kh = kt + static_cast<std::ptrdiff_t>(h / group) * kt_blocks * block;
    float* sh = scores + static_cast<std::ptrdiff_t>(h) * kt_blocks * 8;
    if (hd == 64) {
      // Runs of at most 12 blocks, of nearly equal length (13: 7 + 6, not 12 + 1).
      const int runs = (blocks + 11) / 12;
      for (int r = 0, b = 0; r < runs; ++r) {
        const int nb = (blocks - b + (runs - r) - 1) / (runs - r);
        scores_wide_n<64>(nb, qh, kh + b * block, scale, sh + 8 * b);
        b += nb;
      }
    } else {
      int b = 0;
      for (; b + 4 <= blocks; b += 4) scores_avx2<4>(qh, kh + b * block, hd, scale, sh + 8 * b);
      switch (blocks - b) {
        case 3: scores_avx2<3>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
        case 2: scores_avx2<2>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
        case 1: scores_avx2<1>(qh, kh + b * block, hd, scale, sh + 8 * b); break;
        default: break;
      }
    }
    softmax_avx2(sh, n);
  }
  for (int h = 0; h < heads; h += 6) {  // heads of 16 to 64: up to 6 at a time, in 24 registers
    const int nh = std::min(6, heads - h);
    switch (hd / 16) {
      case 1: values_avx512_n<1>(nh, scores, kt_blocks, v, vs, vh_stride, n, h, group, out); break;
      case 2: values_avx512_n<2>(nh, scores, kt_blocks, v, vs, vh_stride, n, h, group, out); break;
      case 3: values_avx512_n<3>(nh, scores, kt_blocks, v, vs, vh_stride, n, h, group, out); break;
      default: values_avx512_n<4>(nh, scores, kt_blocks, v, vs, vh_stride, n, h, group, out); break;
    }
  }
}

// -- per-token arithmetic on the AVX-512 kernel ---------------------------
// The scalar code's operations, lane by lane, so the same bits: the
// compiler must not fuse a product and a sum into one multiply-add here
// (the scalar code, built for any x86-64, has none to fuse them with).
// (The maskz forms with every lane on are the plain intrinsics without GCC
// 12's uninitialised-register warning.)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

SWARMFLOW_LM_AVX512 void rmsnorm_avx512(const float* x, const float* weight, int dim, float eps, float* out) {
  __m512d part = _mm512_setzero_pd();  // lane k: the squares of x[i] with i = k mod 8
  int i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m512d v = _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(x + i));
    part = _mm512_add_pd(part, _mm512_mul_pd(v, v));
  }
  alignas(64) double p[8];
  _mm512_store_pd(p, part);
  for (; i < dim; ++i) p[0] += static_cast<double>(x[i]) * x[i];
  const double ss = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
  const __m512 s = _mm512_set1_ps(scale);
  for (i = 0; i + 16 <= dim; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), s), _mm512_loadu_ps(weight + i)));
  }
  for (; i < dim; ++i) out[i] = x[i] * scale * weight[i];
}

/// head_dim a multiple of 16: 8 pairs to a register.
SWARMFLOW_LM_AVX512 void rotate_pairs_avx512(float* v, int heads, int hd, const float* cos, const float* sin) {
  const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);  // pair i's lanes 2i, 2i+1
  const __m512 sign = _mm512_set_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
  for (int i = 0; i < hd / 2; i += 8) {
    const __m512 c = _mm512_maskz_permutexvar_ps(0xffff, twice, _mm512_maskz_loadu_ps(0xff, cos + i));
    const __m512 s = _mm512_mul_ps(sign, _mm512_maskz_permutexvar_ps(0xffff, twice, _mm512_maskz_loadu_ps(0xff, sin + i)));
    for (int h = 0; h < heads; ++h) {
      float* at = v + static_cast<std::ptrdiff_t>(h) * hd + 2 * i;
      const __m512 a = _mm512_loadu_ps(at);
      const __m512 swapped = _mm512_maskz_permute_ps(0xffff, a, 0xB1);  // (b, a) in each pair
      // lane 2i: a cos - b sin, as a cos + b (-sin); lane 2i+1: b cos + a sin
      _mm512_storeu_ps(at, _mm512_add_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(swapped, s)));
    }
  }
}
#pragma GCC pop_options

#endif

}  // namespace

bool kernel_supported(Kernel kernel) {
  switch (kernel) {
    case Kernel::portable: return true;
#if defined(SWARMFLOW_LM_X86)
    case Kernel::sse2: return __builtin_cpu_supports("sse2");
    case Kernel::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Kernel::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    default: return false;
#endif
  }
  return false;
}

Kernel best_kernel() {
  static const Kernel best = [] {
    for (Kernel k : {Kernel::avx512, Kernel::avx2, Kernel::sse2}) {
      if (kernel_supported(k)) return k;
    }
    return Kernel::portable;
  }();
  return best;
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::avx512: return "avx512";
    case Kernel::avx2: return "avx2";
    case Kernel::sse2: return "sse2";
    case Kernel::portable: break;
  }
  return "portable";
}

std::vector<Kernel> all_kernels() { return {Kernel::portable, Kernel::sse2, Kernel::avx2, Kernel::avx512}; }

void PackedMatrix::Free::operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }

PackedMatrix::PackedMatrix(const std::vector<std::pair<int, const float*>>& parts, int in, Kernel kernel)
    : in_(in), panel_(panel_of(kernel)), kernel_(kernel) {
  for (const auto& part : parts) out_ += part.first;
  const int panels = (out_ + panel_ - 1) / panel_;
  const std::size_t size = static_cast<std::size_t>(panels) * panel_ * in_;
  float* p = static_cast<float*>(::operator new[](sizeof(float) * std::max<std::size_t>(size, 1), std::align_val_t{64}));
  std::fill(p, p + size, 0.0f);
  data_ = std::shared_ptr<float>(p, Free{});
  int row = 0;
  for (const auto& part : parts) {
    for (int r = 0; r < part.first; ++r, ++row) {
      const float* src = part.second + static_cast<std::ptrdiff_t>(r) * in_;
      float* dst = p + static_cast<std::ptrdiff_t>(row / panel_) * in_ * panel_ + row % panel_;
      for (int k = 0; k < in_; ++k) dst[static_cast<std::ptrdiff_t>(k) * panel_] = src[k];
    }
  }
}

void matmul(const float* x, int rows, const PackedMatrix& w, float* y, int x_stride) {
  const int ldx = x_stride > 0 ? x_stride : w.in();
  if (rows <= 0 || w.out() == 0) return;
  switch (w.kernel()) {
#if defined(SWARMFLOW_LM_X86)
    case Kernel::avx512: matmul_avx512(x, rows, w, y, ldx); return;
    case Kernel::avx2: matmul_avx2(x, rows, w, y, ldx); return;
    case Kernel::sse2: matmul_sse2(x, rows, w, y, ldx); return;
#endif
    default: matmul_portable(x, rows, w, y, ldx); return;
  }
}


void attend(const float* q, const float* kt, int kt_blocks, const float* v, std::ptrdiff_t v_stride,
            std::ptrdiff_t v_head_stride, int n, int heads, int kv_heads, int head_dim, float scale, float* scores,
            float* out, Kernel kernel) {
  const int group = heads / kv_heads;
  if (n <= 0) {
    std::fill(out, out + heads * head_dim, 0.0f);
    return;
  }
#if defined(SWARMFLOW_LM_X86)
  if (kernel == Kernel::avx512 && head_dim % 16 == 0 && head_dim <= 64) {
    return attend_avx512(q, kt, kt_blocks, v, v_stride, v_head_stride, n, heads, group, head_dim, scale, scores, out);
  }
  if ((kernel == Kernel::avx2 || kernel == Kernel::avx512) && head_dim % 8 == 0) {
    return attend_avx2(q, kt, kt_blocks, v, v_stride, v_head_stride, n, heads, group, head_dim, scale, scores, out);
  }
#else
  (void)kernel;
#endif
  const std::ptrdiff_t per_head = static_cast<std::ptrdiff_t>(kt_blocks) * head_dim * 8;
  for (int h = 0; h < heads; ++h) {
    const int g = h / group;
    attend_portable(q + h * head_dim, kt + g * per_head, v + g * v_head_stride, v_stride, n,
                    head_dim, scale, scores + static_cast<std::ptrdiff_t>(h) * kt_blocks * 8, out + h * head_dim);
  }
}


double sum_exp(const float* x, int n, float shift) {
#if defined(SWARMFLOW_LM_X86)
  static const bool avx2 = kernel_supported(Kernel::avx2);
  if (avx2) return sum_exp_avx2(x, n, shift);
#endif
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - shift);
  return sum;
}

void rmsnorm(const float* x, const float* weight, int dim, float eps, float* out, Kernel kernel) {
#if defined(SWARMFLOW_LM_X86)
  if (kernel == Kernel::avx512) return rmsnorm_avx512(x, weight, dim, eps, out);
#else
  (void)kernel;
#endif
  // Eight independent sums, so that the squares are not one long chain of
  // additions (the compiler keeps the order of a single one).
  double part[8] = {};
  int i = 0;
  for (; i + 8 <= dim; i += 8) {
    for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (; i < dim; ++i) part[0] += static_cast<double>(x[i]) * x[i];
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
  for (i = 0; i < dim; ++i) out[i] = x[i] * scale * weight[i];
}

void rotate_pairs(float* v, int heads, int head_dim, const float* cos, const float* sin, Kernel kernel) {
#if defined(SWARMFLOW_LM_X86)
  if (kernel == Kernel::avx512 && head_dim % 16 == 0) return rotate_pairs_avx512(v, heads, head_dim, cos, sin);
#else
  (void)kernel;
#endif
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* head = v + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = head[2 * i], b = head[2 * i + 1];
      head[2 * i] = a * cos[i] - b * sin[i];
      head[2 * i + 1] = a * sin[i] + b * cos[i];
    }
  }
}

void swiglu(float* gate, const float* up, int n, Kernel kernel) {
#if defined(SWARMFLOW_LM_X86)
  if (kernel == Kernel::avx2 || kernel == Kernel::avx512) return swiglu_avx2(gate, up, n);
#else
  (void)kernel;
#endif
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace swarmflow::lm
