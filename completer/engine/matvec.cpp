// y = x @ W^T (+ bias) (+ residual) for a few rows of x, with W stored in half precision: the matmul of a decode or
// speculative-verification step, where streaming the weights is the whole cost (see completer/engine/kernels.py).
//
// Each weight is read once per group of up to 6 input rows and converted to float32 in registers; products and
// sums are float32. Output rows are split over torch's intra-op threads (at::parallel_for), so the thread count the
// engine chose (torch.set_num_threads) is the one used. Every input row is computed the same way whatever the
// number of rows, so a one-token decode and a (k+1)-token verification give the same numbers (lossless speculation
// relies on it).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <c10/util/Half.h>
#include <cmath>
#include <cstdint>
#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>
#define COMPLETER_AVX512 1
#endif

namespace {

// Weights are packed by ``pack_f16``: rows in groups of 16, each group stored k-major ([N/16][K][16] halves), so one
// 32-byte load is weight k of 16 output rows. An output row's sum then runs over k in order in one vector lane, with
// no horizontal reductions, the same way whatever the number of input rows.
constexpr int64_t LANES = 16;
constexpr int64_t CB = 4;          // 16-row groups per block: 64 output rows, CB*MB independent FMA chains

#ifdef COMPLETER_AVX512
template <int MB>
void block_avx512(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g0, int64_t g1,
                  const float* bias, const float* residual) {
  for (int64_t g = g0; g < g1; g += CB) {
    const int64_t cb = std::min<int64_t>(CB, g1 - g);
    __m512 acc[CB][MB];
    for (int c = 0; c < CB; ++c)
      for (int m = 0; m < MB; ++m) acc[c][m] = _mm512_setzero_ps();
    const uint16_t* wg = w + g * K * LANES;
    if (cb == CB) {
      for (int64_t k = 0; k < K; ++k) {
        __m512 wv[CB];
        for (int c = 0; c < CB; ++c)
          wv[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + (c * K + k) * LANES)));
        for (int m = 0; m < MB; ++m) {
          const __m512 xv = _mm512_set1_ps(x[m * K + k]);
          for (int c = 0; c < CB; ++c) acc[c][m] = _mm512_fmadd_ps(wv[c], xv, acc[c][m]);
        }
      }
    } else {
      for (int64_t k = 0; k < K; ++k)
        for (int c = 0; c < cb; ++c) {
          const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + (c * K + k) * LANES)));
          for (int m = 0; m < MB; ++m) acc[c][m] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[m * K + k]), acc[c][m]);
        }
    }
    for (int c = 0; c < cb; ++c) {
      const int64_t j = (g + c) * LANES;
      if (j >= N) break;
      const int64_t nl = std::min<int64_t>(LANES, N - j);
      const __mmask16 keep = (__mmask16)((nl == 16) ? 0xFFFFu : ((1u << nl) - 1u));
      const __m512 bv = bias ? _mm512_maskz_loadu_ps(keep, bias + j) : _mm512_setzero_ps();
      for (int m = 0; m < MB; ++m) {
        __m512 y = _mm512_add_ps(acc[c][m], bv);
        if (residual) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(keep, residual + m * N + j));
        _mm512_mask_storeu_ps(out + m * N + j, keep, y);
      }
    }
  }
}
#endif

void block_scalar(const float* x, const uint16_t* w, float* out, int64_t M, int64_t K, int64_t N, int64_t g0,
                  int64_t g1, const float* bias, const float* residual) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t l = 0; l < LANES; ++l) {
        const int64_t j = g * LANES + l;
        if (j >= N) break;
        float s = 0.f;
        for (int64_t k = 0; k < K; ++k)
          s += static_cast<float>(c10::Half(w[(g * K + k) * LANES + l], c10::Half::from_bits())) * x[m * K + k];
        if (bias) s += bias[j];
        if (residual) s += residual[m * N + j];
        out[m * N + j] = s;
      }
}

constexpr int64_t MAXMB = 6;       // input rows per pass over the weights (CB*MB accumulators fit 32 registers)

void groups(const float* x, const uint16_t* w, float* out, int64_t M, int64_t K, int64_t N, int64_t g0, int64_t g1,
            const float* bias, const float* residual) {
#ifdef COMPLETER_AVX512
  for (int64_t m0 = 0; m0 < M; m0 += MAXMB) {
    const int64_t mb = std::min<int64_t>(MAXMB, M - m0);
    const float* xm = x + m0 * K;
    float* om = out + m0 * N;
    const float* rm = residual ? residual + m0 * N : nullptr;
    switch (mb) {
      case 1: block_avx512<1>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 2: block_avx512<2>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 3: block_avx512<3>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 4: block_avx512<4>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 5: block_avx512<5>(xm, w, om, K, N, g0, g1, bias, rm); break;
      default: block_avx512<6>(xm, w, om, K, N, g0, g1, bias, rm); break;
    }
  }
#else
  block_scalar(x, w, out, M, K, N, g0, g1, bias, residual);
#endif
}

// w [N, K] float (any) -> packed float16 [ceil(N/16), K, 16] (rows past N are zero).
at::Tensor pack_f16(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "pack_f16: w [N, K]");
  const int64_t N = w.size(0), K = w.size(1), G = (N + LANES - 1) / LANES;
  at::Tensor padded = at::zeros({G * LANES, K}, w.options().dtype(at::kHalf));
  padded.narrow(0, 0, N).copy_(w);
  return padded.view({G, LANES, K}).permute({0, 2, 1}).contiguous();
}

// x [..., K] float32, w from pack_f16, bias [N] float32 or none, residual [..., N] float32 or none -> [..., N].
// With ``norm`` [K] float32: x is first RMS-normalised per row (x * rsqrt(mean(x^2) + eps) * norm, as F.rms_norm),
// which on a small model costs more as separate torch ops than the arithmetic it does.
at::Tensor linear_f16(const at::Tensor& x, const at::Tensor& w, int64_t N, const c10::optional<at::Tensor>& bias,
                      const c10::optional<at::Tensor>& residual, const c10::optional<at::Tensor>& norm,
                      double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kHalf, "linear_f16: float32 x, packed w");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == LANES && w.is_contiguous() && x.size(-1) == w.size(1) &&
              w.size(0) * LANES >= N && w.size(0) * LANES < N + LANES, "linear_f16: w from pack_f16");
  const int64_t K = w.size(1), G = w.size(0);
  at::Tensor xc = x.contiguous();
  const int64_t M = xc.numel() / K;
  if (norm.has_value() && norm->defined()) {
    const at::Tensor nc = norm->contiguous();
    TORCH_CHECK(nc.scalar_type() == at::kFloat && nc.numel() == K, "linear_f16: norm [K] float32");
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
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor out = at::empty(shape, x.options());
  const float* b = nullptr;
  at::Tensor bc, rc;
  if (bias.has_value() && bias->defined()) {
    bc = bias->contiguous();
    TORCH_CHECK(bc.scalar_type() == at::kFloat && bc.numel() == N, "linear_f16: bias [N] float32");
    b = bc.data_ptr<float>();
  }
  const float* r = nullptr;
  if (residual.has_value() && residual->defined()) {
    rc = residual->contiguous();
    TORCH_CHECK(rc.scalar_type() == at::kFloat && rc.numel() == M * N, "linear_f16: residual [..., N] float32");
    r = rc.data_ptr<float>();
  }
  const float* xp = xc.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::Half>());
  float* op = out.data_ptr<float>();
  // split whole blocks of CB groups over the threads, at least 4 blocks (256 rows) each so that a split pays
  const int64_t blocks = (G + CB - 1) / CB;
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
    groups(xp, wp, op, M, K, N, b0 * CB, std::min(G, b1 * CB), b, r);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(completer_kernels, m) {
  m.def("pack_f16(Tensor w) -> Tensor");
  m.def("linear_f16(Tensor x, Tensor w, int n, Tensor? bias=None, Tensor? residual=None, Tensor? norm=None, float eps=0.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(completer_kernels, CPU, m) {
  m.impl("pack_f16", &pack_f16);
  m.impl("linear_f16", &linear_f16);
}
