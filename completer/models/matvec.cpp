// y = x @ W^T (+ bias) (+ residual) for a few rows of x, with W stored in half precision: the matmul of a decode or
// speculative-verification step, where streaming the weights is the whole cost (see completer/models/kernels.py).
//
// Each weight is read once per group of up to 6 input rows and converted to float32 in registers; products and
// sums are float32. Output rows are split over torch's intra-op threads (at::parallel_for, which runs serially unless
// this file is compiled with -fopenmp: kernels.py does), so the thread count the engine chose (torch.set_num_threads)
// is the one used. Every input row is computed the same way whatever the
// number of rows, so a one-token decode and a (k+1)-token verification give the same numbers (lossless speculation
// relies on it).
#include "kernel_common.h"
#include <type_traits>

using namespace completer_kernels;

namespace {

// Weights are packed by ``pack_f16``: rows in groups of 16, each group stored k-major ([N/16][K][16] halves), so one
// 32-byte load is weight k of 16 output rows. An output row's sum then runs over k in order in one vector lane, with
// no horizontal reductions, the same way whatever the number of input rows.
constexpr int64_t LANES = 16;
constexpr int64_t CB = 4;          // 16-row groups per block: 64 output rows, CB*MB independent FMA chains

#ifdef COMPLETER_AVX512
// C (1..CB) 16-row groups at g against MB input rows: acc[c][m] runs over k in order from zero, then + bias,
// + residual, the same for every C, so how the groups are cut into blocks (and threads) never changes a number.
template <int C, int MB>
inline void groups_avx512(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g,
                          const float* bias, const float* residual) {
  __m512 acc[C][MB];
  for (int c = 0; c < C; ++c)
    for (int m = 0; m < MB; ++m) acc[c][m] = _mm512_setzero_ps();
  const uint16_t* wg = w + g * K * LANES;
  for (int64_t k = 0; k < K; ++k) {
    __m512 wv[C];
    for (int c = 0; c < C; ++c)
      wv[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + (c * K + k) * LANES)));
    for (int m = 0; m < MB; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * K + k]);
      for (int c = 0; c < C; ++c) acc[c][m] = _mm512_fmadd_ps(wv[c], xv, acc[c][m]);
    }
  }
  for (int c = 0; c < C; ++c) {
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

template <int MB>
void block_avx512(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g0, int64_t g1,
                  const float* bias, const float* residual) {
  static_assert(CB == 4, "blocks of 4 groups");
  for (int64_t g = g0; g < g1; g += CB) {
    switch (std::min<int64_t>(CB, g1 - g)) {
      case 4: groups_avx512<4, MB>(x, w, out, K, N, g, bias, residual); break;
      case 3: groups_avx512<3, MB>(x, w, out, K, N, g, bias, residual); break;
      case 2: groups_avx512<2, MB>(x, w, out, K, N, g, bias, residual); break;
      default: groups_avx512<1, MB>(x, w, out, K, N, g, bias, residual); break;
    }
  }
}
#elif defined(COMPLETER_AVX2)
// groups_avx512 in 8 lanes: a 16-row group is two halves (rows 0-7, 8-15), each row's sum over k in order in one lane
template <int C, int MB>
inline void groups_avx2(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g,
                        const float* bias, const float* residual) {
  __m256 acc[C][MB][2];
  for (int c = 0; c < C; ++c)
    for (int m = 0; m < MB; ++m) acc[c][m][0] = acc[c][m][1] = _mm256_setzero_ps();
  const uint16_t* wg = w + g * K * LANES;
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[C][2];
    for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h)
        wv[c][h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wg + (c * K + k) * LANES + 8 * h)));
    for (int m = 0; m < MB; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * K + k);
      for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h) acc[c][m][h] = _mm256_fmadd_ps(wv[c][h], xv, acc[c][m][h]);
    }
  }
  for (int c = 0; c < C; ++c) {
    const int64_t j = (g + c) * LANES;
    if (j >= N) break;
    const int64_t nl = std::min<int64_t>(LANES, N - j);
    for (int m = 0; m < MB; ++m) {
      alignas(32) float y[LANES];
      _mm256_store_ps(y, acc[c][m][0]);
      _mm256_store_ps(y + 8, acc[c][m][1]);
      store_rows(y, nl, bias ? bias + j : nullptr, residual ? residual + m * N + j : nullptr, out + m * N + j);
    }
  }
}

// 16 ymm registers: 4 groups against one row (8 accumulators), 2 against two, one group against up to 6 rows
template <int MB>
void block_avx2(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g0, int64_t g1,
                const float* bias, const float* residual) {
  constexpr int C = MB == 1 ? 4 : MB == 2 ? 2 : 1;
  int64_t g = g0;
  for (; g + C <= g1; g += C) groups_avx2<C, MB>(x, w, out, K, N, g, bias, residual);
  for (; g < g1; ++g) groups_avx2<1, MB>(x, w, out, K, N, g, bias, residual);
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

constexpr int64_t MING = 8;        // fewest 16-row groups (128 output rows) a thread gets
constexpr int64_t MAXMB = 6;       // input rows per pass over the weights (CB*MB accumulators fit 32 registers)

#if defined(COMPLETER_AVX512) || defined(COMPLETER_AVX2)
// the vector code this CPU has
template <int MB>
inline void block_vec(const float* x, const uint16_t* w, float* out, int64_t K, int64_t N, int64_t g0, int64_t g1,
                      const float* bias, const float* residual) {
#ifdef COMPLETER_AVX512
  block_avx512<MB>(x, w, out, K, N, g0, g1, bias, residual);
#else
  block_avx2<MB>(x, w, out, K, N, g0, g1, bias, residual);
#endif
}
#endif

void groups(const float* x, const uint16_t* w, float* out, int64_t M, int64_t K, int64_t N, int64_t g0, int64_t g1,
            const float* bias, const float* residual) {
#if defined(COMPLETER_AVX512) || defined(COMPLETER_AVX2)
  for (int64_t m0 = 0; m0 < M; m0 += MAXMB) {
    const int64_t mb = std::min<int64_t>(MAXMB, M - m0);
    const float* xm = x + m0 * K;
    float* om = out + m0 * N;
    const float* rm = residual ? residual + m0 * N : nullptr;
    switch (mb) {
      case 1: block_vec<1>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 2: block_vec<2>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 3: block_vec<3>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 4: block_vec<4>(xm, w, om, K, N, g0, g1, bias, rm); break;
      case 5: block_vec<5>(xm, w, om, K, N, g0, g1, bias, rm); break;
      default: block_vec<6>(xm, w, om, K, N, g0, g1, bias, rm); break;
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
// With ``glu``, x is [..., 2K] = [gate, up] and the input is silu(gate) * up (the MLP's down projection).
// With ``norm`` [K] float32: x is first RMS-normalised per row (x * rsqrt(mean(x^2) + eps) * norm, as F.rms_norm),
// which on a small model costs more as separate torch ops than the arithmetic it does.
at::Tensor linear_f16(const at::Tensor& x, const at::Tensor& w, int64_t N, const c10::optional<at::Tensor>& bias,
                      const c10::optional<at::Tensor>& residual, const c10::optional<at::Tensor>& norm,
                      double eps, bool glu) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kHalf, "linear_f16: float32 x, packed w");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == LANES && w.is_contiguous() && x.size(-1) == (glu ? 2 : 1) * w.size(1) &&
              w.size(0) * LANES >= N && w.size(0) * LANES < N + LANES, "linear_f16: w from pack_f16");
  const int64_t K = w.size(1), G = w.size(0);
  const at::Tensor xc = prepared_input(x, K, norm, eps, glu);
  const int64_t M = xc.size(0);
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
  // the 16-row groups split evenly over the threads (a 320-row output: 10 groups each of 2 threads, where whole
  // 64-row blocks split 3:2), at least MING groups per thread so that a split pays for its fork/join
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), G / MING));
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      groups(xp, wp, op, M, K, N, G * p / parts, G * (p + 1) / parts, b, r);
  });
  return out;
}

// One attention step after the cached positions, for one sequence: q/k/v of T new tokens side by side
// (qkv [T, (H+2Hkv)*D], the q/k/v matmul's output), rotary (x*cos + roll(x, D/2)*sin, sin with the rotate-half sign
// folded in, as the model), k and v written into the cache at start..start+T-1 (kc, vc: [Hkv, capacity, D] views
// of the layer's cache), then causal attention of each new query over keys 0..its own position, grouped-query (H/Hkv
// query heads per key head) -> [T, H*D]. Keys are processed in fixed blocks of 128 positions, split over the
// threads, and the blocks' partial softmaxes are combined in order, so a query's numbers depend on neither the
// number of threads nor the number of new tokens (a decode step and a verification step agree).
constexpr int64_t KEYS = 128;

// The cache holds float32 or float16 keys/values (a 16-bit cache halves what attention reads per token at long
// contexts, as llama.cpp's default F16 cache): loads and stores of 16 values either way.
#ifdef COMPLETER_AVX512
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#elif defined(COMPLETER_AVX2)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
inline float value(float x) { return x; }
inline float value(uint16_t x) { return static_cast<float>(c10::Half(x, c10::Half::from_bits())); }
inline void store(float* p, float x) { *p = x; }
inline void store(uint16_t* p, float x) { *p = c10::Half(x).x; }

template <typename CT>
at::Tensor attend_impl(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& kc,
                       const at::Tensor& vc, int64_t start, int64_t H, int64_t Hkv) {
  const int64_t D = kc.size(2), T = qkv.numel() / ((H + 2 * Hkv) * D), S = start + T, rep = H / Hkv;
  TORCH_CHECK(T * (H + 2 * Hkv) * D == qkv.numel() && H % Hkv == 0 && S <= kc.size(1) && D % 16 == 0,
              "attend: shapes");
  const at::Tensor qc = qkv.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
  TORCH_CHECK(cc.numel() == T * D && sc.numel() == T * D, "attend: cos/sin [T, D]");
  const float* src = qc.data_ptr<float>();
  const float* cp = cc.data_ptr<float>();
  const float* sp = sc.data_ptr<float>();
  CT* kp = reinterpret_cast<CT*>(kc.data_ptr());
  CT* vp = reinterpret_cast<CT*>(vc.data_ptr());
  const int64_t ks0 = kc.stride(0), ks1 = kc.stride(1), vs0 = vc.stride(0), vs1 = vc.stride(1);
  const int64_t W = (H + 2 * Hkv) * D, half = D / 2;
  at::Tensor qr = at::empty({T, H, D}, qkv.options());
  float* q = qr.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> kr(D);
  auto rope = [&](const float* x, float* y, int64_t t) {
    for (int64_t i = 0; i < D; ++i) {
      const float rolled = x[i < half ? i + half : i - half];
      y[i] = x[i] * cp[t * D + i] + rolled * sp[t * D + i];
    }
  };
  for (int64_t t = 0; t < T; ++t) {
    const float* row = src + t * W;
    for (int64_t h = 0; h < H; ++h) {
      rope(row + h * D, q + (t * H + h) * D, t);
      for (int64_t i = 0; i < D; ++i) q[(t * H + h) * D + i] *= scale;
    }
    for (int64_t g = 0; g < Hkv; ++g) {
      rope(row + (H + g) * D, kr.data(), t);
      CT* kd = kp + g * ks0 + (start + t) * ks1;
      CT* vd = vp + g * vs0 + (start + t) * vs1;
      const float* vsrc = row + (H + Hkv + g) * D;
      for (int64_t i = 0; i < D; ++i) { store(kd + i, kr[i]); store(vd + i, vsrc[i]); }
    }
  }
  const int64_t blocks = (S + KEYS - 1) / KEYS, R = rep * T;      // rows per key head: its query heads x tokens
  // partial results per (key head, block, row): max, sum, D outputs
  std::vector<float> pm(Hkv * blocks * R), pl(Hkv * blocks * R), po(Hkv * blocks * R * D);
  at::parallel_for(0, Hkv * blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> sc_(KEYS);
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t g = task / blocks, blk = task % blocks, j0 = blk * KEYS;
      const CT* kg = kp + g * ks0;
      const CT* vg = vp + g * vs0;
      for (int64_t r = 0; r < R; ++r) {
        const int64_t t = r % T, h = g * rep + r / T;
        const int64_t idx = (g * blocks + blk) * R + r;
        const int64_t j1 = std::min(j0 + KEYS, start + t + 1);  // keys this query sees in the block
        float* o = po.data() + idx * D;
        if (j1 <= j0) { pm[idx] = -INFINITY; pl[idx] = 0.f; std::fill(o, o + D, 0.f); continue; }
        const float* qv = q + (t * H + h) * D;
        float mx = -INFINITY;
        for (int64_t j = j0; j < j1; ++j) {
          const CT* kj = kg + j * ks1;
          float d;
#ifdef COMPLETER_AVX512
          __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qv), load16(kj));
          for (int64_t i = 16; i < D; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qv + i), load16(kj + i), acc);
          d = _mm512_reduce_add_ps(acc);
#elif defined(COMPLETER_AVX2)
          __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qv), load8(kj));
          for (int64_t i = 8; i < D; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(qv + i), load8(kj + i), acc);
          d = hsum256(acc);
#else
          d = 0.f;
          for (int64_t i = 0; i < D; ++i) d += qv[i] * value(kj[i]);
#endif
          sc_[j - j0] = d;
          mx = std::max(mx, d);
        }
        const int64_t n = j1 - j0;
        float l = 0.f;
        int64_t jj = 0;
#ifdef COMPLETER_AVX512
        __m512 lv = _mm512_setzero_ps();
        for (; jj + 16 <= n; jj += 16) {
          const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(sc_.data() + jj), _mm512_set1_ps(mx)));
          _mm512_storeu_ps(sc_.data() + jj, e);
          lv = _mm512_add_ps(lv, e);
        }
        l = _mm512_reduce_add_ps(lv);
#elif defined(COMPLETER_AVX2)
        __m256 lv = _mm256_setzero_ps();
        for (; jj + 8 <= n; jj += 8) {
          const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(sc_.data() + jj), _mm256_set1_ps(mx)));
          _mm256_storeu_ps(sc_.data() + jj, e);
          lv = _mm256_add_ps(lv, e);
        }
        l = hsum256(lv);
#endif
        for (; jj < n; ++jj) { sc_[jj] = std::exp(sc_[jj] - mx); l += sc_[jj]; }
#ifdef COMPLETER_AVX512
        if constexpr (std::is_same_v<CT, uint16_t>) {   // o[i..i+15] = sum_j p_j v_j[i..i+15], j in order
          for (int64_t i = 0; i < D; i += 16) {
            __m512 ov = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; ++j)
              ov = _mm512_fmadd_ps(_mm512_set1_ps(sc_[j]), load16(vg + (j0 + j) * vs1 + i), ov);
            _mm512_storeu_ps(o + i, ov);
          }
        } else
#elif defined(COMPLETER_AVX2)
        if constexpr (std::is_same_v<CT, uint16_t>) {   // o[i..i+7] = sum_j p_j v_j[i..i+7], j in order
          for (int64_t i = 0; i < D; i += 8) {
            __m256 ov = _mm256_setzero_ps();
            for (int64_t j = 0; j < n; ++j)
              ov = _mm256_fmadd_ps(_mm256_set1_ps(sc_[j]), load8(vg + (j0 + j) * vs1 + i), ov);
            _mm256_storeu_ps(o + i, ov);
          }
        } else
#endif
        {
          std::fill(o, o + D, 0.f);
          for (int64_t j = 0; j < n; ++j) {
            const float p = sc_[j];
            const CT* vj = vg + (j0 + j) * vs1;
            for (int64_t i = 0; i < D; ++i) o[i] += p * value(vj[i]);
          }
        }
        pm[idx] = mx;
        pl[idx] = l;
      }
    }
  });
  at::Tensor out = at::empty({T, H * D}, qkv.options());
  float* op = out.data_ptr<float>();
  for (int64_t g = 0; g < Hkv; ++g)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r % T, h = g * rep + r / T;
      float M = -INFINITY;
      for (int64_t blk = 0; blk < blocks; ++blk) M = std::max(M, pm[(g * blocks + blk) * R + r]);
      float L = 0.f;
      float* y = op + t * H * D + h * D;
      std::fill(y, y + D, 0.f);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t idx = (g * blocks + blk) * R + r;
        if (pl[idx] == 0.f) continue;
        const float c = std::exp(pm[idx] - M);
        L += pl[idx] * c;
        const float* o = po.data() + idx * D;
        for (int64_t i = 0; i < D; ++i) y[i] += o[i] * c;
      }
      const float inv = 1.0f / L;
      for (int64_t i = 0; i < D; ++i) y[i] *= inv;
    }
  return out;
}

at::Tensor attend(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& kc, const at::Tensor& vc,
                  int64_t start, int64_t H, int64_t Hkv) {
  TORCH_CHECK(qkv.scalar_type() == at::kFloat && kc.scalar_type() == vc.scalar_type() &&
              (kc.scalar_type() == at::kFloat || kc.scalar_type() == at::kHalf),
              "attend: float32 q/k/v, a float32 or float16 cache");
  TORCH_CHECK(kc.dim() == 3 && vc.dim() == 3 && kc.size(0) == Hkv && kc.stride(2) == 1 && vc.stride(2) == 1 &&
              kc.sizes() == vc.sizes(), "attend: cache views [Hkv, capacity, D]");
  if (kc.scalar_type() == at::kHalf) return attend_impl<uint16_t>(qkv, cos, sin, kc, vc, start, H, Hkv);
  return attend_impl<float>(qkv, cos, sin, kc, vc, start, H, Hkv);
}

// A whole decoder layer of a decode/verification step in one call (on a small model each call through torch.ops
// costs microseconds of dispatch): x -> qkv (RMSNorm n1 inside) -> attend -> o_proj (+x) -> gate/up (RMSNorm n2
// inside) -> down_proj of silu(gate)*up (+residual). The same kernels as the separate ops, so the same numbers.
at::Tensor layer_step(const at::Tensor& x, const at::Tensor& wqkv, int64_t nqkv, const c10::optional<at::Tensor>& bqkv,
                      const at::Tensor& wo, int64_t no, const at::Tensor& wgu, int64_t ngu, const at::Tensor& wd,
                      int64_t nd, const at::Tensor& n1, const at::Tensor& n2, double eps, const at::Tensor& cos,
                      const at::Tensor& sin, const at::Tensor& kc, const at::Tensor& vc, int64_t start, int64_t H,
                      int64_t Hkv) {
  const at::Tensor qkv = linear_f16(x, wqkv, nqkv, bqkv, c10::nullopt, n1, eps, false);
  const at::Tensor y = attend(qkv, cos, sin, kc, vc, start, H, Hkv);
  const at::Tensor x1 = linear_f16(y, wo, no, c10::nullopt, x, c10::nullopt, 0.0, false);
  const at::Tensor gu = linear_f16(x1, wgu, ngu, c10::nullopt, c10::nullopt, n2, eps, false);
  return linear_f16(gu, wd, nd, c10::nullopt, x1, c10::nullopt, 0.0, true).view(x.sizes());
}

// ``lora`` of layer_step_q: [A^T, B^T] per matmul of the layer (qkv, o, gate/up, down); [] or an empty A^T: none.
c10::optional<at::Tensor> low_rank(at::TensorList lora, int64_t i) {
  if (lora.size() != 8 || lora[i].numel() == 0) return c10::nullopt;
  return lora[i];
}

// layer_step with the weights in GGUF-style blocks (qmatvec.cpp: linear_q); each weight is [w, wd, wm] from
// pack_q and ``bits`` their widths in the order qkv, o, gate/up, down; ``lora``: a delta beside them (above),
// given to linear_q as QuantLinear.__call__ gives it.
at::Tensor layer_step_q(const at::Tensor& x, at::TensorList wqkv, int64_t nqkv, const c10::optional<at::Tensor>& bqkv,
                        at::TensorList wo, int64_t no, at::TensorList wgu, int64_t ngu, at::TensorList wd, int64_t nd,
                        at::IntArrayRef bits, const at::Tensor& n1, const at::Tensor& n2, double eps,
                        const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& kc, const at::Tensor& vc,
                        int64_t start, int64_t H, int64_t Hkv, at::TensorList lora) {
  TORCH_CHECK(wqkv.size() == 3 && wo.size() == 3 && wgu.size() == 3 && wd.size() == 3 && bits.size() == 4,
              "layer_step_q: [w, wd, wm] per weight and 4 widths");
  TORCH_CHECK(lora.empty() || lora.size() == 8, "layer_step_q: lora is [A^T, B^T] for each of the 4 matmuls, or []");
  const auto none = c10::nullopt;
  const at::Tensor qkv = linear_q(x, wqkv[0], wqkv[1], wqkv[2], nqkv, bits[0], bqkv, none, n1, eps, false,
                                  low_rank(lora, 0), low_rank(lora, 1));
  const at::Tensor y = attend(qkv, cos, sin, kc, vc, start, H, Hkv);
  const at::Tensor x1 = linear_q(y, wo[0], wo[1], wo[2], no, bits[1], none, x, none, 0.0, false,
                                 low_rank(lora, 2), low_rank(lora, 3));
  const at::Tensor gu = linear_q(x1, wgu[0], wgu[1], wgu[2], ngu, bits[2], none, none, n2, eps, false,
                                 low_rank(lora, 4), low_rank(lora, 5));
  return linear_q(gu, wd[0], wd[1], wd[2], nd, bits[3], none, x1, none, 0.0, true, low_rank(lora, 6),
                  low_rank(lora, 7)).view(x.sizes());
}

}  // namespace

TORCH_LIBRARY(completer_kernels, m) {
  m.def("pack_f16(Tensor w) -> Tensor");
  m.def("layer_step(Tensor x, Tensor wqkv, int nqkv, Tensor? bqkv, Tensor wo, int no, Tensor wgu, int ngu, Tensor wd, "
        "int nd, Tensor n1, Tensor n2, float eps, Tensor cos, Tensor sin, Tensor(a!) kc, Tensor(b!) vc, int start, "
        "int H, int Hkv) -> Tensor");
  m.def("layer_step_q(Tensor x, Tensor[] wqkv, int nqkv, Tensor? bqkv, Tensor[] wo, int no, Tensor[] wgu, int ngu, "
        "Tensor[] wd, int nd, int[] bits, Tensor n1, Tensor n2, float eps, Tensor cos, Tensor sin, Tensor(a!) kc, "
        "Tensor(b!) vc, int start, int H, int Hkv, Tensor[] lora) -> Tensor");
  m.def("attend(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) kc, Tensor(b!) vc, int start, int H, int Hkv) -> Tensor");
  m.def("linear_f16(Tensor x, Tensor w, int n, Tensor? bias=None, Tensor? residual=None, Tensor? norm=None, float eps=0.0, bool glu=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(completer_kernels, CPU, m) {
  m.impl("pack_f16", &pack_f16);
  m.impl("attend", &attend);
  m.impl("layer_step", &layer_step);
  m.impl("layer_step_q", &layer_step_q);
  m.impl("linear_f16", &linear_f16);
}
