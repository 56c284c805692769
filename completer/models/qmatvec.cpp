// y = x @ W^T (+ bias) (+ residual) with W kept in the 4-bit / 8-bit blocks of a GGUF file (Q4_0, Q4_1, Q8_0):
// the weights stay as small as the file has them (SmolLM2-135M: ~85 MB where float32 is 540 MB) and each step
// streams those bytes, not a dequantised copy (see completer/models/kernels.py and completer/models/blocks.py).
//
// The arithmetic is llama.cpp's for Q4_1 x Q8_1: every weight is w = d * u + m in blocks of 32 along K, u an
// unsigned integer (0..15 for 4 bits, 0..255 for 8; Q4_0 is m = -8d, Q8_0 u = q + 128 and m = -128d); each input
// row is quantised per block of 32 to int8 (dx = max|x| / 127, qx = round(x / dx), sx = dx * sum(qx)), so a block's
// dot product is d * dx * sum(u * qx) + m * sx, the integer sum exact (AVX-512 VNNI: vpdpbusd multiplies unsigned
// by signed bytes and adds 4 products into each 32-bit lane).
//
// Layout (``pack_q`` in completer/models/blocks.py writes it): output rows in groups of 16 (one per 32-bit lane), per
// group and block of 32 inputs 64-byte chunks whose 32-bit lane r holds row r's u for 4 consecutive inputs; 4 bits:
// 4 chunks, low nibbles inputs 8j..8j+3 and high nibbles 8j+4..8j+7 of chunk j; 8 bits: 8 chunks, chunk t inputs
// 4t..4t+3. d and m: float16 [groups, blocks, 16]. A row's sum runs over the blocks in order in one lane, the same
// way whatever the number of input rows or threads, so a decode step and a (k+1)-token verification give the same
// numbers (lossless speculation relies on it).
#include "kernel_common.h"

namespace completer_kernels {
namespace {

constexpr int64_t QK = 32;         // inputs per block (GGUF's)
constexpr int64_t QLANES = 16;     // output rows per group
constexpr int64_t QMING = 4;       // fewest 16-row groups a thread gets
constexpr int64_t QMB = 8;         // input rows per pass over a group's weights

// rows [M, K] float32 -> int8 per block of 32 (q), its scale (d) and d * sum(q) (s), as llama.cpp's Q8_1; sum(q)
// itself in qs (the AVX2 8-bit sums need it)
void quantise_rows(const float* x, int64_t M, int64_t K, int8_t* q, float* d, float* s, int32_t* qs) {
  const int64_t nb = K / QK;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + m * K + b * QK;
      int8_t* qb = q + m * K + b * QK;
      float amax = 0.f;
      for (int64_t i = 0; i < QK; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float dd = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
      int sum = 0;
      for (int64_t i = 0; i < QK; ++i) {
        const int v = static_cast<int>(std::nearbyint(xb[i] * id));
        qb[i] = static_cast<int8_t>(v);
        sum += v;
      }
      d[m * nb + b] = dd;
      s[m * nb + b] = dd * static_cast<float>(sum);
      qs[m * nb + b] = sum;
    }
}

#ifdef COMPLETER_VNNI
inline int32_t load4(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return v; }

// C consecutive 16-row groups from g against MB input rows
template <int BITS, int C, int MB>
inline void qgroups(const int8_t* xq, const float* xd, const float* xs, int64_t K, const uint8_t* w,
                    const uint16_t* wd, const uint16_t* wm, float* out, int64_t N, int64_t g, const float* bias,
                    const float* residual) {
  constexpr int64_t BLK = QLANES * QK * BITS / 8;          // bytes per group and block: 256 or 512
  const int64_t nb = K / QK;
  __m512 acc[C][MB];
  for (int c = 0; c < C; ++c)
    for (int m = 0; m < MB; ++m) acc[c][m] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i iacc[C][MB];
    for (int c = 0; c < C; ++c)
      for (int m = 0; m < MB; ++m) iacc[c][m] = _mm512_setzero_si512();
    const int8_t* xb = xq + b * QK;
    if constexpr (BITS == 4) {
      for (int j = 0; j < 4; ++j)
        for (int c = 0; c < C; ++c) {
          const __m512i raw = _mm512_loadu_si512(w + ((g + c) * nb + b) * BLK + j * 64);
          const __m512i lo = _mm512_and_si512(raw, low);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
          for (int m = 0; m < MB; ++m) {
            iacc[c][m] = _mm512_dpbusd_epi32(iacc[c][m], lo, _mm512_set1_epi32(load4(xb + m * K + 8 * j)));
            iacc[c][m] = _mm512_dpbusd_epi32(iacc[c][m], hi, _mm512_set1_epi32(load4(xb + m * K + 8 * j + 4)));
          }
        }
    } else {
      for (int t = 0; t < 8; ++t)
        for (int c = 0; c < C; ++c) {
          const __m512i raw = _mm512_loadu_si512(w + ((g + c) * nb + b) * BLK + t * 64);
          for (int m = 0; m < MB; ++m)
            iacc[c][m] = _mm512_dpbusd_epi32(iacc[c][m], raw, _mm512_set1_epi32(load4(xb + m * K + 4 * t)));
        }
    }
    for (int c = 0; c < C; ++c) {
      const int64_t o = ((g + c) * nb + b) * QLANES;
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + o)));
      const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wm + o)));
      for (int m = 0; m < MB; ++m) {
        acc[c][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[c][m]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[m * nb + b])),
                                    acc[c][m]);
        acc[c][m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs[m * nb + b]), acc[c][m]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    const int64_t j = (g + c) * QLANES;
    if (j >= N) break;
    const int64_t nl = std::min<int64_t>(QLANES, N - j);
    const __mmask16 keep = (__mmask16)((nl == 16) ? 0xFFFFu : ((1u << nl) - 1u));
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(keep, bias + j) : _mm512_setzero_ps();
    for (int m = 0; m < MB; ++m) {
      __m512 y = _mm512_add_ps(acc[c][m], bv);
      if (residual) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(keep, residual + m * N + j));
      _mm512_mask_storeu_ps(out + m * N + j, keep, y);
    }
  }
}

// groups [g0, g1) against MB input rows, C groups at a time (C * MB accumulator pairs fit the 32 registers)
template <int BITS, int MB>
void qblock(const int8_t* xq, const float* xd, const float* xs, int64_t K, const uint8_t* w, const uint16_t* wd,
            const uint16_t* wm, float* out, int64_t N, int64_t g0, int64_t g1, const float* bias,
            const float* residual) {
  constexpr int C = MB <= 2 ? 4 : MB <= 4 ? 2 : 1;
  int64_t g = g0;
  for (; g + C <= g1; g += C) qgroups<BITS, C, MB>(xq, xd, xs, K, w, wd, wm, out, N, g, bias, residual);
  for (; g < g1; ++g) qgroups<BITS, 1, MB>(xq, xd, xs, K, w, wd, wm, out, N, g, bias, residual);
}

template <int BITS>
void qrows(const int8_t* xq, const float* xd, const float* xs, int64_t M, int64_t K, const uint8_t* w,
           const uint16_t* wd, const uint16_t* wm, float* out, int64_t N, int64_t g0, int64_t g1, const float* bias,
           const float* residual) {
  const int64_t nb = K / QK;
  // a few groups at a time against every input row, so a prompt's rows reuse those weights from the cache
  for (int64_t ga = g0; ga < g1; ga += 4) {
    const int64_t gb = std::min(g1, ga + 4);
    for (int64_t m0 = 0; m0 < M; m0 += QMB) {
      const int64_t mb = std::min<int64_t>(QMB, M - m0);
      const int8_t* q = xq + m0 * K;
      const float* d = xd + m0 * nb;
      const float* s = xs + m0 * nb;
      float* o = out + m0 * N;
      const float* r = residual ? residual + m0 * N : nullptr;
      switch (mb) {
        case 1: qblock<BITS, 1>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 2: qblock<BITS, 2>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 3: qblock<BITS, 3>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 4: qblock<BITS, 4>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 5: qblock<BITS, 5>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 6: qblock<BITS, 6>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        case 7: qblock<BITS, 7>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
        default: qblock<BITS, 8>(q, d, s, K, w, wd, wm, o, N, ga, gb, bias, r); break;
      }
    }
  }
}
#elif defined(COMPLETER_AVX2)
inline int32_t load4(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return v; }
constexpr int64_t QMB2 = 4;        // input rows per pass with 16 ymm registers

// group g (both 8-row halves of its 64-byte chunks) against MB input rows. AVX2 has no vpdpbusd: vpmaddubsw
// multiplies unsigned by signed bytes and adds pairs into int16, vpmaddwd adds those pairs into int32 lanes. 4 bits:
// the 8 products of a block's 4 chunks (lo and hi nibbles) stay in int16 (at most 16 * 15 * 127 = 30480 per lane).
// 8 bits: u * x can pass int16 in pairs, so u - 128 is multiplied instead (|u - 128| as unsigned, x with its sign),
// each chunk widened to int32, and 128 * sum(x) of the block added back. The integer sums are exact, as VNNI's.
template <int BITS, int MB>
inline void qgroup_avx2(const int8_t* xq, const float* xd, const float* xs, const int32_t* xqs, int64_t K,
                        const uint8_t* w, const uint16_t* wd, const uint16_t* wm, float* out, int64_t N, int64_t g,
                        const float* bias, const float* residual) {
  constexpr int64_t BLK = QLANES * QK * BITS / 8;
  const int64_t nb = K / QK;
  const __m256i low = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int h = 0; h < 2; ++h) {      // rows 8h..8h+7 of the group
    const int64_t j = g * QLANES + 8 * h;
    if (j >= N) break;
    __m256 acc[MB];
    for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* wb = w + (g * nb + b) * BLK + 32 * h;
      const int8_t* xb = xq + b * QK;
      __m256i isum[MB];
      if constexpr (BITS == 4) {
        __m256i s16[MB];
        for (int m = 0; m < MB; ++m) s16[m] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64));
          const __m256i lo = _mm256_and_si256(raw, low);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
          for (int m = 0; m < MB; ++m) {
            s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xb + m * K + 8 * j))));
            s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xb + m * K + 8 * j + 4))));
          }
        }
        for (int m = 0; m < MB; ++m) isum[m] = _mm256_madd_epi16(s16[m], ones);
      } else {
        for (int m = 0; m < MB; ++m) isum[m] = _mm256_set1_epi32(128 * xqs[m * nb + b]);
        for (int t = 0; t < 8; ++t) {
          const __m256i q = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64)), flip);
          const __m256i aq = _mm256_abs_epi8(q);
          for (int m = 0; m < MB; ++m) {
            const __m256i xs4 = _mm256_sign_epi8(_mm256_set1_epi32(load4(xb + m * K + 4 * t)), q);
            isum[m] = _mm256_add_epi32(isum[m], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, xs4), ones));
          }
        }
      }
      const int64_t o = (g * nb + b) * QLANES + 8 * h;
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + o)));
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wm + o)));
      for (int m = 0; m < MB; ++m) {   // the scalar code's two fmas, in its order
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[m]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[m * nb + b])), acc[m]);
        acc[m] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xs[m * nb + b]), acc[m]);
      }
    }
    const int64_t nl = std::min<int64_t>(8, N - j);
    for (int m = 0; m < MB; ++m) {
      alignas(32) float y[8];
      _mm256_store_ps(y, acc[m]);
      store_rows(y, nl, bias ? bias + j : nullptr, residual ? residual + m * N + j : nullptr, out + m * N + j);
    }
  }
}

template <int BITS>
void qrows_avx2(const int8_t* xq, const float* xd, const float* xs, const int32_t* xqs, int64_t M, int64_t K,
                const uint8_t* w, const uint16_t* wd, const uint16_t* wm, float* out, int64_t N, int64_t g0,
                int64_t g1, const float* bias, const float* residual) {
  const int64_t nb = K / QK;
  for (int64_t ga = g0; ga < g1; ga += 4) {       // as qrows: a few groups against every input row
    const int64_t gb = std::min(g1, ga + 4);
    for (int64_t m0 = 0; m0 < M; m0 += QMB2) {
      const int64_t mb = std::min<int64_t>(QMB2, M - m0), mo = m0 * nb;
      const float* r = residual ? residual + m0 * N : nullptr;
      for (int64_t g = ga; g < gb; ++g) switch (mb) {
        case 1: qgroup_avx2<BITS, 1>(xq + m0 * K, xd + mo, xs + mo, xqs + mo, K, w, wd, wm, out + m0 * N, N, g, bias, r); break;
        case 2: qgroup_avx2<BITS, 2>(xq + m0 * K, xd + mo, xs + mo, xqs + mo, K, w, wd, wm, out + m0 * N, N, g, bias, r); break;
        case 3: qgroup_avx2<BITS, 3>(xq + m0 * K, xd + mo, xs + mo, xqs + mo, K, w, wd, wm, out + m0 * N, N, g, bias, r); break;
        default: qgroup_avx2<BITS, 4>(xq + m0 * K, xd + mo, xs + mo, xqs + mo, K, w, wd, wm, out + m0 * N, N, g, bias, r); break;
      }
    }
  }
}
#endif

// the same sums one value at a time (a CPU without AVX-512 VNNI or AVX2)
void qrows_scalar(const int8_t* xq, const float* xd, const float* xs, int64_t M, int64_t K, const uint8_t* w,
                  const uint16_t* wd, const uint16_t* wm, float* out, int64_t N, int64_t g0, int64_t g1, int64_t bits,
                  const float* bias, const float* residual) {
  const int64_t nb = K / QK, blk = QLANES * QK * bits / 8;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t r = 0; r < QLANES; ++r) {
        const int64_t j = g * QLANES + r;
        if (j >= N) break;
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* wb = w + (g * nb + b) * blk;
          int32_t isum = 0;
          for (int64_t k = 0; k < QK; ++k) {
            int u;
            if (bits == 4) {
              const int64_t jj = k / 8, i = k % 8;
              const uint8_t byte = wb[jj * 64 + r * 4 + (i & 3)];
              u = i < 4 ? (byte & 0x0F) : (byte >> 4);
            } else {
              u = wb[(k / 4) * 64 + r * 4 + (k % 4)];
            }
            isum += u * xq[m * K + b * QK + k];
          }
          const int64_t o = (g * nb + b) * QLANES + r;
          const float dw = static_cast<float>(c10::Half(wd[o], c10::Half::from_bits()));
          const float mw = static_cast<float>(c10::Half(wm[o], c10::Half::from_bits()));
          acc = std::fma(static_cast<float>(isum), dw * xd[m * nb + b], acc);
          acc = std::fma(mw, xs[m * nb + b], acc);
        }
        if (bias) acc += bias[j];
        if (residual) acc += residual[m * N + j];
        out[m * N + j] = acc;
      }
}

// A LoRA delta beside the blocks, its factors float16 (as shipped): t = x A^T for one input row (A^T [K, R]), then
// out[n0:n1] += t B^T (B^T [R, N]). Each output is summed in a fixed order with fused multiply-adds, on the vector
// path and off it, so its value depends neither on the other rows nor on how the outputs are split over threads.
inline float half_bits(uint16_t h) { return static_cast<float>(c10::Half(h, c10::Half::from_bits())); }

void low_rank_in(const float* x, int64_t K, const uint16_t* a, int64_t R, float* t) {
  int64_t j0 = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  // up to 8 columns of 8 at once: independent FMA chains (one chain waits ~4 cycles per step)
  for (; j0 + 8 <= R; j0 += 64) {
    const int64_t nb = std::min<int64_t>(8, (R - j0) / 8);
    __m256 acc[8];
    for (int64_t jb = 0; jb < nb; ++jb) acc[jb] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      const __m256 xk = _mm256_set1_ps(x[k]);
      const uint16_t* ak = a + k * R + j0;
      for (int64_t jb = 0; jb < nb; ++jb)
        acc[jb] = _mm256_fmadd_ps(xk, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ak + 8 * jb))),
                                  acc[jb]);
    }
    for (int64_t jb = 0; jb < nb; ++jb) _mm256_storeu_ps(t + j0 + 8 * jb, acc[jb]);
    if (nb < 8) { j0 += 8 * nb; break; }
  }
#endif
  for (int64_t j = j0; j < R; ++j) {
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k) acc = std::fma(x[k], half_bits(a[k * R + j]), acc);
    t[j] = acc;
  }
}

void low_rank_out(const float* t, int64_t R, const uint16_t* b, int64_t N, int64_t n0, int64_t n1, float* out) {
  int64_t n = n0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  auto bv = [&](int64_t j, int64_t at) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + j * N + at)));
  };
  for (; n + 32 <= n1; n += 32) {              // four independent FMA chains
    __m256 a0 = _mm256_loadu_ps(out + n), a1 = _mm256_loadu_ps(out + n + 8);
    __m256 a2 = _mm256_loadu_ps(out + n + 16), a3 = _mm256_loadu_ps(out + n + 24);
    for (int64_t j = 0; j < R; ++j) {
      const __m256 tj = _mm256_set1_ps(t[j]);
      a0 = _mm256_fmadd_ps(tj, bv(j, n), a0);
      a1 = _mm256_fmadd_ps(tj, bv(j, n + 8), a1);
      a2 = _mm256_fmadd_ps(tj, bv(j, n + 16), a2);
      a3 = _mm256_fmadd_ps(tj, bv(j, n + 24), a3);
    }
    _mm256_storeu_ps(out + n, a0);
    _mm256_storeu_ps(out + n + 8, a1);
    _mm256_storeu_ps(out + n + 16, a2);
    _mm256_storeu_ps(out + n + 24, a3);
  }
  for (; n + 8 <= n1; n += 8) {
    __m256 acc = _mm256_loadu_ps(out + n);
    for (int64_t j = 0; j < R; ++j) acc = _mm256_fmadd_ps(_mm256_set1_ps(t[j]), bv(j, n), acc);
    _mm256_storeu_ps(out + n, acc);
  }
#endif
  for (; n < n1; ++n) {
    float acc = out[n];
    for (int64_t j = 0; j < R; ++j) acc = std::fma(t[j], half_bits(b[j * N + n]), acc);
    out[n] = acc;
  }
}

}  // namespace

// x [..., K] float32 (or [..., 2K] with ``glu``), w uint8 [G, K/32, 16*32*bits/8], wd / wm float16 [G, K/32, 16],
// bias [N] / residual [..., N] float32 or none -> [..., N]; ``norm`` and ``glu`` as linear_f16's. ``lora_a`` [K, r]
// and ``lora_b`` [r, N] float16 (A^T and B^T of a LoRA delta beside the blocks, llama.py QuantLinear.add_delta):
// each output also gets the input row (as the blocks multiply it) times A^T B^T (low_rank_in / low_rank_out).
at::Tensor linear_q(const at::Tensor& x, const at::Tensor& w, const at::Tensor& wd, const at::Tensor& wm, int64_t N,
                    int64_t bits, const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& residual,
                    const c10::optional<at::Tensor>& norm, double eps, bool glu,
                    const c10::optional<at::Tensor>& lora_a, const c10::optional<at::Tensor>& lora_b) {
  TORCH_CHECK(bits == 4 || bits == 8, "linear_q: bits 4 or 8");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kByte && wd.scalar_type() == at::kHalf &&
              wm.scalar_type() == at::kHalf, "linear_q: float32 x, uint8 w, float16 scales");
  TORCH_CHECK(w.dim() == 3 && w.is_contiguous() && w.size(2) == QLANES * QK * bits / 8 && wd.is_contiguous() &&
              wm.is_contiguous() && wd.dim() == 3 && wd.size(0) == w.size(0) && wd.size(1) == w.size(1) &&
              wd.size(2) == QLANES && wm.sizes() == wd.sizes(), "linear_q: w, wd, wm from pack_q");
  const int64_t G = w.size(0), nb = w.size(1), K = nb * QK;
  TORCH_CHECK(G * QLANES >= N && G * QLANES < N + QLANES, "linear_q: N does not match the packed rows");
  TORCH_CHECK(x.size(-1) == (glu ? 2 : 1) * K, "linear_q: x's last dimension does not match the weights");
  const at::Tensor xc = prepared_input(x, K, norm, eps, glu);
  const int64_t M = xc.size(0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor out = at::empty(shape, x.options());
  if (M == 0) return out;
  const float* b = nullptr;
  at::Tensor bc, rc;
  if (bias.has_value() && bias->defined()) {
    bc = bias->contiguous();
    TORCH_CHECK(bc.scalar_type() == at::kFloat && bc.numel() == N, "linear_q: bias [N] float32");
    b = bc.data_ptr<float>();
  }
  const float* r = nullptr;
  if (residual.has_value() && residual->defined()) {
    rc = residual->contiguous();
    TORCH_CHECK(rc.scalar_type() == at::kFloat && rc.numel() == M * N, "linear_q: residual [..., N] float32");
    r = rc.data_ptr<float>();
  }
  const bool low_rank = lora_a.has_value() && lora_a->defined() && lora_a->numel() > 0;
  int64_t R = 0;
  std::vector<float> t;                       // the input rows times A^T, [M, r]
  const uint16_t* lb = nullptr;
  if (low_rank) {
    TORCH_CHECK(lora_b.has_value() && lora_b->defined() && lora_a->is_contiguous() && lora_b->is_contiguous() &&
                lora_a->scalar_type() == at::kHalf && lora_b->scalar_type() == at::kHalf && lora_a->dim() == 2 &&
                lora_a->size(0) == K && lora_b->dim() == 2 && lora_b->size(0) == lora_a->size(1) &&
                lora_b->size(1) == N, "linear_q: lora_a [K, r] and lora_b [r, N] float16");
    R = lora_a->size(1);
    t.assign(M * R, 0.f);
    const uint16_t* la = reinterpret_cast<const uint16_t*>(lora_a->data_ptr<at::Half>());
    at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) low_rank_in(xc.data_ptr<float>() + m * K, K, la, R, t.data() + m * R);
    });
    lb = reinterpret_cast<const uint16_t*>(lora_b->data_ptr<at::Half>());
  }
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * nb), xs(M * nb);
  std::vector<int32_t> xqs(M * nb);
  quantise_rows(xc.data_ptr<float>(), M, K, xq.data(), xd.data(), xs.data(), xqs.data());
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(wd.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(wm.data_ptr<at::Half>());
  float* op = out.data_ptr<float>();
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), G / QMING));
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t g0 = G * p / parts, g1 = G * (p + 1) / parts;
#ifdef COMPLETER_VNNI
      if (bits == 4) qrows<4>(xq.data(), xd.data(), xs.data(), M, K, wp, dp, mp, op, N, g0, g1, b, r);
      else qrows<8>(xq.data(), xd.data(), xs.data(), M, K, wp, dp, mp, op, N, g0, g1, b, r);
#elif defined(COMPLETER_AVX2)
      if (bits == 4) qrows_avx2<4>(xq.data(), xd.data(), xs.data(), xqs.data(), M, K, wp, dp, mp, op, N, g0, g1, b, r);
      else qrows_avx2<8>(xq.data(), xd.data(), xs.data(), xqs.data(), M, K, wp, dp, mp, op, N, g0, g1, b, r);
#else
      qrows_scalar(xq.data(), xd.data(), xs.data(), M, K, wp, dp, mp, op, N, g0, g1, bits, b, r);
#endif
      if (low_rank) {                         // this part's outputs: + (x A^T) B^T
        for (int64_t m = 0; m < M; ++m)
          low_rank_out(t.data() + m * R, R, lb, N, g0 * QLANES, std::min(N, g1 * QLANES), op + m * N);
      }
    }
  });
  return out;
}

}  // namespace completer_kernels

TORCH_LIBRARY_FRAGMENT(completer_kernels, m) {
  m.def("linear_q(Tensor x, Tensor w, Tensor wd, Tensor wm, int n, int bits, Tensor? bias=None, "
        "Tensor? residual=None, Tensor? norm=None, float eps=0.0, bool glu=False, Tensor? lora_a=None, "
        "Tensor? lora_b=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(completer_kernels, CPU, m) {
  m.impl("linear_q", &completer_kernels::linear_q);
}
