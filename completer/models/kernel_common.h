// What the engine's two CPU kernel files share (matvec.cpp: half-precision weights, attention, a whole layer;
// qmatvec.cpp: GGUF's 4/8-bit blocks): intrinsics, e^x, silu, the input a matmul multiplies (RMSNorm / silu(gate)*up
// done in place of separate torch ops) and the quantised matmul that matvec.cpp's layer step calls.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <c10/util/Half.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <cstdint>
#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>
#define COMPLETER_AVX512 1
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define COMPLETER_VNNI 1
#endif
// AVX2 + FMA + F16C (AMD before Zen 4, most laptops' Intel cores: no AVX-512): the same sums 8 lanes at a time, used
// where the AVX-512 code is not (without them every kernel ran its scalar loops there: SmolLM2's Q4 blocks ~10x
// slower than torch's float32 matmuls); the 4/8-bit blocks use them on AVX-512 CPUs without VNNI too
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define COMPLETER_AVX2 1
#endif

namespace completer_kernels {

#ifdef COMPLETER_AVX512
// e^x for x <= 0 (softmax after subtracting the max, and silu's e^-|a|): range reduction by ln 2 and a degree-6
// polynomial, ~1 ulp; e^x underflows to 0 below -87.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
#endif

#ifdef COMPLETER_AVX2
// exp512's range reduction and polynomial, 8 lanes; 2^n built in the exponent field (n >= -126 for x >= -87)
inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// the sum of 8 lanes
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// the vector kernels' last step for the nl rows of a group that exist: out = (y + bias) + residual (bias, residual
// null when absent), in the AVX-512 code's order
inline void store_rows(const float* y, int64_t nl, const float* bias, const float* residual, float* out) {
  for (int64_t l = 0; l < nl; ++l) {
    float v = y[l] + (bias ? bias[l] : 0.f);
    if (residual) v += residual[l];
    out[l] = v;
  }
}

// silu(a) * b = a / (1 + e^-a) * b over n values
inline void silu_mul(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
#ifdef COMPLETER_AVX512
  for (; i + 16 <= n; i += 16) {
    const __m512 av = _mm512_loadu_ps(a + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(av)));   // e^-|a|
    // sigmoid(a) = 1/(1+e^-a) for a >= 0, e^a/(1+e^a) for a < 0 (no overflow either way)
    const __m512 sig_pos = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    const __m512 sig = _mm512_mask_mul_ps(sig_pos, _mm512_cmp_ps_mask(av, _mm512_setzero_ps(), _CMP_LT_OQ), e,
                                          sig_pos);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(av, sig), _mm512_loadu_ps(b + i)));
  }
#elif defined(COMPLETER_AVX2)
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i);
    const __m256 e = exp256(_mm256_sub_ps(zero, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), av)));   // e^-|a|
    const __m256 sig_pos = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 sig = _mm256_blendv_ps(sig_pos, _mm256_mul_ps(e, sig_pos), _mm256_cmp_ps(av, zero, _CMP_LT_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(av, sig), _mm256_loadu_ps(b + i)));
  }
#endif
  for (; i < n; ++i) out[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

// The rows a matmul multiplies, [M, K] float32 contiguous: x [..., K] as it is, or with ``glu`` x [..., 2K] =
// [gate, up] -> silu(gate) * up, then with ``norm`` [K] each row RMS-normalised (x * rsqrt(mean(x^2) + eps) * norm,
// as F.rms_norm), which on a small model costs more as separate torch ops than the arithmetic it does.
inline at::Tensor prepared_input(const at::Tensor& x, int64_t K, const c10::optional<at::Tensor>& norm, double eps,
                                 bool glu) {
  at::Tensor xc = x.contiguous();
  const int64_t M = xc.numel() / (glu ? 2 * K : K);
  if (glu) {   // x = [gate, up] side by side: the input is silu(gate) * up
    at::Tensor act = at::empty({M, K}, x.options());
    for (int64_t m = 0; m < M; ++m)
      silu_mul(xc.data_ptr<float>() + m * 2 * K, xc.data_ptr<float>() + m * 2 * K + K, act.data_ptr<float>() + m * K, K);
    xc = act;
  }
  if (norm.has_value() && norm->defined()) {
    const at::Tensor nc = norm->contiguous();
    TORCH_CHECK(nc.scalar_type() == at::kFloat && nc.numel() == K, "linear: norm [K] float32");
    at::Tensor xn = at::empty({M, K}, x.options());
    const float* src = xc.data_ptr<float>();
    const float* nw = nc.data_ptr<float>();
    float* dst = xn.data_ptr<float>();
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = src + m * K;
      float ss = 0.f;
      for (int64_t k = 0; k < K; ++k) ss += xr[k] * xr[k];
      const float r = 1.f / std::sqrt(ss / static_cast<float>(K) + static_cast<float>(eps));
      for (int64_t k = 0; k < K; ++k) dst[m * K + k] = (xr[k] * r) * nw[k];
    }
    xc = xn;
  }
  return xc.view({M, K});
}

// qmatvec.cpp: y = prepared_input(x) @ W^T (+ bias) (+ residual) (+ a LoRA delta's x A^T B^T) with W in GGUF-style
// blocks (see there)
at::Tensor linear_q(const at::Tensor& x, const at::Tensor& w, const at::Tensor& wd, const at::Tensor& wm, int64_t N,
                    int64_t bits, const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& residual,
                    const c10::optional<at::Tensor>& norm, double eps, bool glu,
                    const c10::optional<at::Tensor>& lora_a, const c10::optional<at::Tensor>& lora_b);

}  // namespace completer_kernels
