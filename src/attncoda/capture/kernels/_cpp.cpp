// The ``cpp`` kernel of the fast path: one pass of attention over the values [V | K].
//
// Built on first use by attncoda.capture.kernels._cpp (docs/design.md, "The fused CPU
// kernel"), which holds the contract; this file holds the arithmetic. Per (batch, key/value
// head, block of queries) the queries of the heads sharing the key/value head are packed
// into one block of rows. For each block of keys the scores of those rows are one matrix
// product (sgemm, scaled by ``scale``); a flash-style loop keeps each row's running maximum
// ``m`` and ``l = sum exp(z - m)``, rescaling ``l`` and the accumulated output when ``m``
// grows; the probabilities then multiply the block of ``[V | K]`` (a second sgemm, ``E``
// columns wide). At the end each row is divided by ``l`` and ``lse = m + log l`` written.
// The scores are computed once: this is what the two SDPA calls of the ``sdpa`` kernel do
// twice.
//
// Arithmetic: IEEE float32 throughout. The products are BLAS's sgemm (the one PyTorch links,
// resolved from libtorch_cpu), every exp is SLEEF's expf8_u10 (at most 1 ulp, also resolved
// from libtorch_cpu), the row sums are float32 adds. Rows that see no key get a zero output
// and ``lse = -inf``.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*, const int*);
__m256 Sleef_expf8_u10(__m256);
}

namespace {

// Column-major C (m x n) = alpha op(A) op(B) + beta C, as BLAS has it.
void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm_(&ta, &tb, &mi, &ni, &ki, &alpha, a, &la, b, &lb, &beta, c, &lc);
}

float horizontal_max(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

float horizontal_sum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

void scale_row(float* x, int64_t n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), va));
  for (; j < n; ++j) x[j] *= a;
}

}  // namespace

// q (B, H, Lq, D), k (B, G, Lk, D), vk (B, G, Lk, E): float32, last stride 1, the other
// strides in qs, ks, vs (batch, head, position). mask: null, or an additive float32 mask
// read at mask + b ms[0] + h ms[1] + i ms[2] + j (a broadcast dimension has stride 0).
// causal: query i sees keys 0 .. i + Lk - Lq. out (B, H, Lq, E) and lse (B, H, Lq),
// contiguous. Head h reads key/value head h / (H / G).
extern "C" void attncoda_attention(const float* q, const float* k, const float* vk,
                                   const float* mask, float* out, float* lse, int64_t B,
                                   int64_t H, int64_t G, int64_t Lq, int64_t Lk, int64_t D,
                                   int64_t E, const int64_t* qs, const int64_t* ks,
                                   const int64_t* vs, const int64_t* ms, int causal,
                                   float scale, int64_t q_block, int64_t kv_block,
                                   int threads) {
  const int64_t group = H / G, offset = Lk - Lq;
  const int64_t blocks = (Lq + q_block - 1) / q_block;
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel num_threads(threads)
  {
    const int64_t R = group * q_block;
    std::vector<float> S(R * kv_block), mx(R), sm(R), acc(R * E), Qb(R * D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < B * G * blocks; ++w) {
      const int64_t b = w / (G * blocks), g = (w / blocks) % G;
      const int64_t m0 = (blocks - 1 - w % blocks) * q_block;  // the longest blocks first
      const int64_t qB = std::min(q_block, Lq - m0), rows = group * qB;
      for (int64_t hh = 0; hh < group; ++hh) {
        const float* src = q + b * qs[0] + (g * group + hh) * qs[1] + m0 * qs[2];
        for (int64_t r = 0; r < qB; ++r)
          std::copy(src + r * qs[2], src + r * qs[2] + D, Qb.data() + (hh * qB + r) * D);
      }
      const float* kp = k + b * ks[0] + g * ks[1];
      const float* vp = vk + b * vs[0] + g * vs[1];
      std::fill(mx.begin(), mx.begin() + rows, ninf);
      std::fill(sm.begin(), sm.begin() + rows, 0.f);
      std::fill(acc.begin(), acc.begin() + rows * E, 0.f);
      const int64_t k_end = causal ? std::min(Lk, m0 + qB + offset) : Lk;
      for (int64_t n0 = 0; n0 < k_end; n0 += kv_block) {
        const int64_t kB = std::min(kv_block, k_end - n0);
        // S (rows x kB, row-major) = scale Q K^T.
        gemm('T', 'N', kB, rows, D, scale, kp + n0 * ks[2], ks[2], Qb.data(), D, 0.f, S.data(),
             kB);
        for (int64_t rr = 0; rr < rows; ++rr) {
          const int64_t hh = rr / qB, r = rr % qB;
          float* row = S.data() + rr * kB;
          int64_t width = kB;  // the keys of this block the row may see
          if (causal) width = std::max<int64_t>(0, std::min(kB, m0 + r + offset - n0 + 1));
          if (mask) {
            const float* mrow = mask + b * ms[0] + (g * group + hh) * ms[1] + (m0 + r) * ms[2] + n0;
            for (int64_t j = 0; j < width; ++j) row[j] += mrow[j];
          }
          __m256 vmax = _mm256_set1_ps(ninf);
          int64_t j = 0;
          for (; j + 8 <= width; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
          float block_max = horizontal_max(vmax);
          for (; j < width; ++j) block_max = std::max(block_max, row[j]);
          const float new_max = std::max(mx[rr], block_max);
          if (new_max == ninf) {  // no key seen yet: nothing to add
            std::fill(row, row + kB, 0.f);
            continue;
          }
          const __m256 vm = _mm256_set1_ps(new_max);
          __m256 vsum = _mm256_setzero_ps();
          j = 0;
          for (; j + 8 <= width; j += 8) {
            const __m256 e = Sleef_expf8_u10(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
            _mm256_storeu_ps(row + j, e);
            vsum = _mm256_add_ps(vsum, e);
          }
          float block_sum = horizontal_sum(vsum);
          for (; j < width; ++j) {
            row[j] = std::exp(row[j] - new_max);
            block_sum += row[j];
          }
          std::fill(row + width, row + kB, 0.f);
          if (mx[rr] != new_max && mx[rr] != ninf) {
            const float alpha = std::exp(mx[rr] - new_max);
            sm[rr] *= alpha;
            scale_row(acc.data() + rr * E, E, alpha);
          }
          sm[rr] += block_sum;
          mx[rr] = new_max;
        }
        // acc (rows x E, row-major) += P [V | K].
        gemm('N', 'N', E, rows, kB, 1.f, vp + n0 * vs[2], vs[2], S.data(), kB, 1.f, acc.data(), E);
      }
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t hh = rr / qB, r = rr % qB, h = g * group + hh;
        float* orow = out + ((b * H + h) * Lq + m0 + r) * E;
        float* lp = lse + (b * H + h) * Lq + m0 + r;
        if (sm[rr] == 0.f) {
          std::fill(orow, orow + E, 0.f);
          *lp = ninf;
          continue;
        }
        std::copy(acc.data() + rr * E, acc.data() + rr * E + E, orow);
        scale_row(orow, E, 1.f / sm[rr]);
        *lp = mx[rr] + std::log(sm[rr]);
      }
    }
  }
}
