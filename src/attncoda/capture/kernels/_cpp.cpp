// The ``cpp`` kernel of the fast path: one flash-style pass of attention over each query's
// content keys, its statistics riding the same rescaling as the output, and its epilogue:
// each row's sink keys, statistics and output.
//
// Built on first use by attncoda.capture.kernels._cpp through torch.utils.cpp_extension
// (docs/design.md, "The fused CPU kernel"), which holds the contract; this file holds the
// arithmetic. Per (batch, key/value head, block of queries) the queries of the heads sharing
// the key/value head are packed into one block of rows. For each block of keys the rows'
// dot products are one matrix product (ATen's cpublas::brgemm, float32); one vectorised
// sweep per row scales them into scores ``z``, takes their maximum, and with the running
// maximum ``m`` adds ``exp(z - m)`` to ``l`` and ``exp(z - m) z`` to ``t``, rescaling
// ``l``, ``t`` and the accumulated output when ``m`` grows; the probabilities then multiply
// the block of values (a second brgemm). At the end of its block of queries each row has
// ``lse_C = m + log l``, ``E_q[z] = t / l`` and ``o_C``, the accumulated output over ``l``.
//
// A row sees key ``j`` when ``lo[b] <= j < hi[b]``, ``j <= i + Lk - Lq`` (causal) and
// ``i + Lk - Lq - j < window`` (a sliding window); the document's sink keys among them are
// left out of the pass. Key blocks no row of a query block sees are skipped, so a windowed
// layer costs its window.
//
// ``content_pass`` returns that pass's ``o_C``, ``lse_C`` and ``E_q[z]``. ``attention``
// goes on, row by row, with the statistics of attncoda.capture.stats.split_rows (the one
// definition; this is it for one row, in the same float64 steps), in named steps:
// ``sink_scores`` (the visible sink keys' float32 dot products, scaled), ``split_row``
// (``lse = logaddexp(lse_C, logsumexp(z_S))``, each sink's probability, ``log(1 - s) =
// lse_C - lse`` with no subtraction from 1, ``H = -sum_S p log p + (1 - s) (H(q) - log(1 -
// s))`` with ``H(q) = lse_C - E_q[z]``, the entropy within the sink set), ``sink_balance``
// (whose mean content score comes from a float64 prefix sum of the keys,
// ``key_prefix_sums``), and ``write_output`` (``(1 - s) o_C + sum_S p_j v_j``, in the
// model's layout ``(batch, query_pos, head, head_dim)``).
//
// ``read_layer`` checks every tensor and index it hands the loops (shapes, dtypes, device,
// each document's run ``0 <= lo <= hi <= Lk``, sinks in ``[-1, Lk)``): the second line
// behind attncoda.capture.kernels._cpp, whose checks say what to do; no call reads out of
// bounds.
//
// Arithmetic: IEEE float32 throughout the pass. The dot products are float32 matrix
// products, scaled once; every exp is ATen's Vectorized<float>::exp (SLEEF's u10 functions:
// at most 1 ulp; in the portable ``default`` build, std::exp, glibc's expf, also within 1
// ulp); the row sums are float32 adds. Rows that see no content key get a zero content
// output, ``lse_C = -inf`` and ``E_q[z] = 0``.
//
// Headers: the two ATen ops it calls and torch's pybind11 casters, not <torch/extension.h>
// (all of torch's C++ API): the first build takes 15 s instead of 37 s on a 2-core CPU.
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kVec = Vec::size();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kNegInf64 = -std::numeric_limits<double>::infinity();

float reduce_max(Vec v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

float reduce_sum(Vec v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v);
}

void fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

// x[0:n] *= a
void scale_by(float* x, int64_t n, float a) {
  const Vec va(a);
  int64_t j = 0;
  for (; j + kVec <= n; j += kVec) (Vec::loadu(x + j) * va).store(x + j);
  for (; j < n; ++j) x[j] *= a;
}

// x[c0:c1] *= scale; returns the largest (sink columns hold -inf and stay so).
float scale_and_max(float* x, int64_t c0, int64_t c1, float scale) {
  const Vec vs(scale);
  Vec vmax(kNegInf);
  int64_t j = c0;
  for (; j + kVec <= c1; j += kVec) {
    const Vec z = Vec::loadu(x + j) * vs;
    z.store(x + j);
    vmax = at::vec::maximum(vmax, z);
  }
  float best = reduce_max(vmax);
  for (; j < c1; ++j) {
    x[j] *= scale;
    best = std::max(best, x[j]);
  }
  return best;
}

// x[c0:c1] = exp(z - m); returns sum exp(z - m) and adds sum exp(z - m) z to *weighted.
float exp_and_sums(float* x, int64_t c0, int64_t c1, float m, float* weighted) {
  const Vec vm(m);
  Vec vsum(0.f), vdot(0.f);
  int64_t j = c0;
  for (; j + kVec <= c1; j += kVec) {
    const Vec z = Vec::loadu(x + j);
    const Vec e = (z - vm).exp();
    e.store(x + j);
    vsum = vsum + e;
    vdot = at::vec::fmadd(e, z, vdot);
  }
  float sum = reduce_sum(vsum), dot = reduce_sum(vdot);
  for (; j < c1; ++j) {
    const float z = x[j], e = std::exp(z - m);
    x[j] = e;
    sum += e;
    dot += e * z;
  }
  *weighted = dot;
  return sum;
}

float dot(const float* a, const float* b, int64_t n) {
  Vec acc(0.f);
  int64_t j = 0;
  for (; j + kVec <= n; j += kVec) acc = at::vec::fmadd(Vec::loadu(a + j), Vec::loadu(b + j), acc);
  float sum = reduce_sum(acc);
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

double logaddexp(double a, double b) {
  if (a == kNegInf64) return b;
  if (b == kNegInf64) return a;
  const double top = std::max(a, b);
  return top + std::log1p(std::exp(-std::abs(a - b)));
}

// What one call sees: the layer's tensors and the keys each row sees.
struct Layer {
  int64_t B, H, G, Lq, Lk, D, group, offset, n_sinks, window;
  bool causal;
  float scale;
  const float* q;
  const float* k;
  at::Tensor kt_owner;  // (B, G, D, Lk): the keys transposed, the score product's right factor
  const float* kt;
  const float* v;
  const int64_t* lo;
  const int64_t* hi;
  const int64_t* sinks;  // (B, n_sinks), -1: none
  int64_t qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2;

  // The first key row (query ``i``) sees and one past its last.
  void run_of(int64_t b, int64_t i, int64_t* first, int64_t* stop) const {
    const int64_t p = i + offset;
    *first = lo[b];
    *stop = hi[b];
    if (window > 0) *first = std::max(*first, p - window + 1);
    if (causal) *stop = std::min(*stop, p + 1);
  }
};

// The layer's tensors and index tensors as the pass reads them. attncoda.capture.kernels._cpp
// checks every one of them first, with errors that say what to do; these checks are the
// second line, so that no malformed call (one that bypasses that module) reads out of
// bounds: a handful of comparisons and one read of each document's run and sinks.
Layer read_layer(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& lo, const at::Tensor& hi, const at::Tensor& sinks,
                 bool causal, int64_t window, double scale, int64_t q_block, int64_t kv_block) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "the cpp kernel takes 4-d queries, keys and values");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() &&
                  lo.device().is_cpu() && hi.device().is_cpu() && sinks.device().is_cpu(),
              "the cpp kernel takes cpu tensors");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat,
              "the cpp kernel takes float32 queries, keys and values");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
              "the cpp kernel takes a last stride of 1");
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == q.size(0) && k.size(3) == q.size(3),
              "the cpp kernel takes keys and values of one shape, with the query's batch "
              "and head dim");
  TORCH_CHECK(q.numel() > 0 && k.numel() > 0 && q.size(1) % k.size(1) == 0,
              "the cpp kernel takes non-empty tensors, each key/value head serving as many "
              "query heads");
  TORCH_CHECK(q.size(2) <= k.size(2), "the cpp kernel takes no more queries than keys");
  const int64_t B = q.size(0), Lk = k.size(2);
  TORCH_CHECK(lo.is_contiguous() && hi.is_contiguous() && sinks.is_contiguous() &&
                  lo.scalar_type() == at::kLong && hi.scalar_type() == at::kLong &&
                  sinks.scalar_type() == at::kLong,
              "the cpp kernel takes contiguous int64 runs and sinks");
  TORCH_CHECK(lo.dim() == 1 && lo.size(0) == B && hi.dim() == 1 && hi.size(0) == B &&
                  sinks.dim() == 2 && sinks.size(0) == B,
              "the cpp kernel takes runs (batch,) and sinks (batch, width)");
  const int64_t* lo_p = lo.data_ptr<int64_t>();
  const int64_t* hi_p = hi.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(0 <= lo_p[b] && lo_p[b] <= hi_p[b] && hi_p[b] <= Lk,
                "the cpp kernel takes runs with 0 <= lo <= hi <= key_pos");
  const int64_t* sinks_p = sinks.data_ptr<int64_t>();
  for (int64_t s = 0; s < sinks.numel(); ++s)
    TORCH_CHECK(-1 <= sinks_p[s] && sinks_p[s] < Lk, "the cpp kernel takes sinks in [-1, key_pos)");
  TORCH_CHECK(window >= 0, "the cpp kernel takes a window of 0 (none) or more keys");
  TORCH_CHECK(q_block > 0 && kv_block > 0, "the cpp kernel takes blocks of one row or more");
  Layer L;
  L.kt_owner = k.transpose(2, 3).contiguous();
  L.B = B, L.H = q.size(1), L.Lq = q.size(2), L.D = q.size(3);
  L.G = k.size(1), L.Lk = Lk, L.group = L.H / L.G, L.offset = L.Lk - L.Lq;
  L.n_sinks = sinks.size(1), L.window = window, L.causal = causal;
  L.scale = static_cast<float>(scale);
  L.q = q.data_ptr<float>(), L.k = k.data_ptr<float>(), L.kt = L.kt_owner.data_ptr<float>();
  L.v = v.data_ptr<float>();
  L.lo = lo_p, L.hi = hi_p;
  L.sinks = sinks_p;
  L.qs0 = q.stride(0), L.qs1 = q.stride(1), L.qs2 = q.stride(2);
  L.ks0 = k.stride(0), L.ks1 = k.stride(1), L.ks2 = k.stride(2);
  L.vs0 = v.stride(0), L.vs1 = v.stride(1), L.vs2 = v.stride(2);
  return L;
}

// The rows of one block of queries after the pass: packed (rows = group x qB), row ``rr``
// being head ``g group + rr / qB`` and query ``m0 + rr % qB``.
struct Rows {
  int64_t b, g, m0, qB;
  const float* Qb;   // (rows, D): the queries
  const float* mx;   // running maximum
  const float* sm;   // l
  const float* tz;   // t
  float* acc;        // (rows, D): the output, not yet divided by l
};

// The pass: every (batch, key/value head, block of queries), the longest first, in the
// threads of ATen's pool; ``finish(rows)`` at the end of each block.
template <class Finish>
void run_pass(const Layer& L, int64_t q_block, int64_t kv_block, Finish finish) {
  const int64_t blocks = (L.Lq + q_block - 1) / q_block;
  const int64_t total = L.B * L.G * blocks, D = L.D, group = L.group;
  std::atomic<int64_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    const int64_t R = group * q_block;
    std::vector<float> S(R * kv_block), mx(R), sm(R), tz(R), acc(R * D), Qb(R * D);
    for (int64_t w = next++; w < total; w = next++) {
      // The longest blocks of a causal layer first, so that no thread is left with one.
      const int64_t b = w / (L.G * blocks), g = (w / blocks) % L.G;
      const int64_t m0 = (blocks - 1 - w % blocks) * q_block;
      const int64_t qB = std::min(q_block, L.Lq - m0), rows = group * qB;
      for (int64_t hh = 0; hh < group; ++hh) {
        const float* src = L.q + b * L.qs0 + (g * group + hh) * L.qs1 + m0 * L.qs2;
        for (int64_t r = 0; r < qB; ++r)
          std::copy(src + r * L.qs2, src + r * L.qs2 + D, Qb.data() + (hh * qB + r) * D);
      }
      fill(mx.data(), rows, kNegInf);
      fill(sm.data(), rows, 0.f);
      fill(tz.data(), rows, 0.f);
      fill(acc.data(), rows * D, 0.f);
      const int64_t* doc_sinks = L.sinks + b * L.n_sinks;
      // The keys some row of the block sees.
      int64_t k_start, k_stop, unused;
      L.run_of(b, m0, &k_start, &unused);
      L.run_of(b, m0 + qB - 1, &unused, &k_stop);
      const float* kt_b = L.kt + (b * L.G + g) * D * L.Lk;
      const float* v_b = L.v + b * L.vs0 + g * L.vs1;
      for (int64_t n0 = k_start; n0 < k_stop; n0 += kv_block) {
        const int64_t kB = std::min(kv_block, k_stop - n0);
        at::native::cpublas::brgemm(rows, kB, D, D, L.Lk, kv_block, false, Qb.data(),
                                    kt_b + n0, S.data());
        for (int64_t rr = 0; rr < rows; ++rr) {
          float* row = S.data() + rr * kv_block;
          int64_t first, stop;
          L.run_of(b, m0 + rr % qB, &first, &stop);
          const int64_t c0 = std::clamp<int64_t>(first - n0, 0, kB);
          const int64_t c1 = std::clamp<int64_t>(stop - n0, c0, kB);
          for (int64_t s = 0; s < L.n_sinks; ++s) {
            const int64_t col = doc_sinks[s] - n0;
            if (doc_sinks[s] >= 0 && col >= c0 && col < c1) row[col] = kNegInf;
          }
          const float block_max = c1 > c0 ? scale_and_max(row, c0, c1, L.scale) : kNegInf;
          const float new_max = std::max(mx[rr], block_max);
          if (new_max == kNegInf) {  // no key seen yet: nothing to add
            fill(row, kB, 0.f);
            continue;
          }
          // A sink's column weighs exp(-1000) = 0 exactly, without a 0 * inf.
          for (int64_t s = 0; s < L.n_sinks; ++s) {
            const int64_t col = doc_sinks[s] - n0;
            if (doc_sinks[s] >= 0 && col >= c0 && col < c1) row[col] = new_max - 1000.f;
          }
          float weighted = 0.f;
          const float block_sum = exp_and_sums(row, c0, c1, new_max, &weighted);
          fill(row, c0, 0.f);
          fill(row + c1, kB - c1, 0.f);
          if (mx[rr] != new_max && mx[rr] != kNegInf) {
            const float alpha = std::exp(mx[rr] - new_max);
            sm[rr] *= alpha;
            tz[rr] *= alpha;
            scale_by(acc.data() + rr * D, D, alpha);
          }
          sm[rr] += block_sum;
          tz[rr] += weighted;
          mx[rr] = new_max;
        }
        // acc (rows x D) += P (rows x kB) V (kB x D).
        at::native::cpublas::brgemm(rows, D, kB, kv_block, L.vs2, D, true, S.data(),
                                    v_b + n0 * L.vs2, acc.data());
      }
      finish(Rows{b, g, m0, qB, Qb.data(), mx.data(), sm.data(), tz.data(), acc.data()});
    }
  });
}

// The content pass of one row: ``o_C`` into ``out`` (divided by ``l``), ``lse_C`` and
// ``E_q[z]`` as float32 (``-inf`` and 0 for a row without content).
void content_of(int64_t rr, const Rows& rows, int64_t D, float* out, float* lse, float* ez) {
  const float l = rows.sm[rr];
  if (l == 0.f) {
    fill(out, D, 0.f);
    *lse = kNegInf;
    *ez = 0.f;
    return;
  }
  std::copy(rows.acc + rr * D, rows.acc + rr * D + D, out);
  scale_by(out, D, 1.f / l);
  *lse = rows.mx[rr] + std::log(l);
  *ez = rows.tz[rr] / l;
}

// The epilogue of one row, in named steps: the statistics of
// attncoda.capture.stats.split_rows for one row, in the same float64 steps.
struct RowView {
  int64_t b, g;          // batch, key/value head
  int64_t first, stop;   // the run of keys the row sees
  const float* qrow;     // its query (D floats)
};

// The sink keys the row sees, and their scores (float32 dot products, scaled in float64):
// their keys' positions into ``at_sink`` and scores into ``z``; returns how many.
int64_t sink_scores(const Layer& L, const RowView& row, double* z, int64_t* at_sink) {
  const int64_t* doc_sinks = L.sinks + row.b * L.n_sinks;
  int64_t ks = 0;
  for (int64_t s = 0; s < L.n_sinks; ++s) {
    const int64_t j = doc_sinks[s];
    if (j < 0 || j < row.first || j >= row.stop) continue;
    const float* key = L.k + row.b * L.ks0 + row.g * L.ks1 + j * L.ks2;
    z[ks] = static_cast<double>(dot(row.qrow, key, L.D)) * static_cast<double>(L.scale);
    at_sink[ks++] = j;
  }
  return ks;
}

// The float64 split of one row from its content pass (``lse_C``, ``E_q[z]`` in float32)
// and its ``ks`` sink scores: each sink's probability into ``ps``, and the statistics.
struct RowSplit {
  double mass, entropy, content_entropy, within, share, log_sum, lse;
};

RowSplit split_row(float lse32, float ez32, bool content, const double* z, int64_t ks,
                   double* ps) {
  const double lse_c = content ? static_cast<double>(lse32) : kNegInf64;
  const double h_c = content ? static_cast<double>(lse32) - static_cast<double>(ez32) : 0.0;
  double lse_s = kNegInf64;
  if (ks > 0) {
    const double top = *std::max_element(z, z + ks);
    double sum = 0.0;
    for (int64_t s = 0; s < ks; ++s) sum += std::exp(z[s] - top);
    lse_s = top + std::log(sum);
  }
  const double lse = logaddexp(lse_c, lse_s);
  const double safe = std::isfinite(lse) ? lse : 0.0;
  double mass = 0.0, plogp = 0.0, log_sum = 0.0, within = 0.0;
  for (int64_t s = 0; s < ks; ++s) {
    const double log_p = z[s] - safe;
    ps[s] = std::exp(log_p);
    mass += ps[s];
    plogp += ps[s] * log_p;
    log_sum += log_p;
    if (ks > 1) {
      const double log_q = z[s] - lse_s;
      within -= std::exp(log_q) * log_q;
    }
  }
  const double log_content = content ? lse_c - safe : 0.0;
  const double share = content ? std::exp(log_content) : 0.0;
  return {mass, -plogp + share * (h_c - log_content), h_c, ks > 1 ? within : 0.0,
          share, log_sum, safe};
}

// The sink balance of a row with content and sinks: the mean log-probability of its sink
// keys less that of its content keys, times sqrt(ks m / n). The content keys' summed score
// is the query against the float64 prefix sum of the keys over the row's run, less the
// sinks' scores.
double sink_balance(const Layer& L, const double* prefix, const RowView& row, const double* z,
                    int64_t ks, int64_t m, int64_t n, const RowSplit& split) {
  const int64_t D = L.D;
  const double* pb = prefix + (row.b * L.G + row.g) * (L.Lk + 1) * D;
  double summed = 0.0;
  for (int64_t t = 0; t < D; ++t)
    summed += static_cast<double>(row.qrow[t]) * (pb[row.stop * D + t] - pb[row.first * D + t]);
  summed *= static_cast<double>(L.scale);
  for (int64_t s = 0; s < ks; ++s) summed -= z[s];
  const double mean_sink = split.log_sum / static_cast<double>(ks);
  const double mean_content = summed / static_cast<double>(m) - split.lse;
  const double factor = std::sqrt(static_cast<double>(ks) * static_cast<double>(m) /
                                  static_cast<double>(std::max<int64_t>(n, 1)));
  return factor * (mean_sink - mean_content);
}

// The row's output ``(1 - s) o_C + sum_S p_j v_j`` into ``orow``, a row of the model's
// layout ``(batch, query_pos, head, head_dim)``.
void write_output(const Layer& L, const RowView& row, const float* o_c, double share,
                  const double* ps, const int64_t* at_sink, int64_t ks, float* orow) {
  const float kept = static_cast<float>(share);
  for (int64_t t = 0; t < L.D; ++t) orow[t] = kept * o_c[t];
  for (int64_t s = 0; s < ks; ++s) {
    const float* value = L.v + row.b * L.vs0 + row.g * L.vs1 + at_sink[s] * L.vs2;
    const float weight = static_cast<float>(ps[s]);
    for (int64_t t = 0; t < L.D; ++t) orow[t] += weight * value[t];
  }
}

// Each (batch, key/value head)'s keys summed from key 0, in float64: (B, G, Lk + 1, D).
at::Tensor key_prefix_sums(const Layer& L, const at::TensorOptions& f64) {
  const int64_t G = L.G, Lk = L.Lk, D = L.D;
  auto prefix = at::zeros({L.B, G, Lk + 1, D}, f64);
  double* pre_p = prefix.data_ptr<double>();
  at::parallel_for(0, L.B * G, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bg = begin; bg < end; ++bg) {
      const float* kb = L.k + (bg / G) * L.ks0 + (bg % G) * L.ks1;
      double* pb = pre_p + bg * (Lk + 1) * D;
      for (int64_t j = 0; j < Lk; ++j)
        for (int64_t t = 0; t < D; ++t)
          pb[(j + 1) * D + t] = pb[j * D + t] + static_cast<double>(kb[j * L.ks2 + t]);
    }
  });
  return prefix;
}

}  // namespace

// q (B, H, Lq, D), k and v (B, G, Lk, D): float32, last stride 1. lo, hi (B,): int64, each
// document's run of real keys. sinks (B, S): int64 key positions left out (-1: none).
// Returns o_C (B, H, Lq, D), lse_C (B, H, Lq) and E_q[z] (B, H, Lq), float32, contiguous.
// Head h reads key/value head h / (H / G).
std::vector<at::Tensor> content_pass(const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& lo,
                                     const at::Tensor& hi, const at::Tensor& sinks, bool causal,
                                     int64_t window, double scale, int64_t q_block,
                                     int64_t kv_block) {
  const Layer L = read_layer(q, k, v, lo, hi, sinks, causal, window, scale, q_block, kv_block);
  auto out = at::empty({L.B, L.H, L.Lq, L.D}, q.options());
  auto lse = at::empty({L.B, L.H, L.Lq}, q.options());
  auto ez = at::empty({L.B, L.H, L.Lq}, q.options());
  float* out_p = out.data_ptr<float>();
  float* lse_p = lse.data_ptr<float>();
  float* ez_p = ez.data_ptr<float>();
  run_pass(L, q_block, kv_block, [&](const Rows& rows) {
    for (int64_t rr = 0; rr < L.group * rows.qB; ++rr) {
      const int64_t h = rows.g * L.group + rr / rows.qB;
      const int64_t at = (rows.b * L.H + h) * L.Lq + rows.m0 + rr % rows.qB;
      content_of(rr, rows, L.D, out_p + at * L.D, lse_p + at, ez_p + at);
    }
  });
  return {out, lse, ez};
}

// The whole fast path of one layer: the pass, then each row's sink keys, statistics and
// output (see the top of this file). Returns the output (B, Lq, H, D), float32, and the
// statistics (B, H, Lq): n_keys, n_sink (int64), sink_mass, entropy, content_entropy,
// within_sink_entropy and sink_balance (float64, nats).
std::vector<at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& lo, const at::Tensor& hi,
                                  const at::Tensor& sinks, bool causal, int64_t window,
                                  double scale, int64_t q_block, int64_t kv_block) {
  const Layer L = read_layer(q, k, v, lo, hi, sinks, causal, window, scale, q_block, kv_block);
  const int64_t B = L.B, H = L.H, Lq = L.Lq, D = L.D;
  auto out = at::empty({B, Lq, H, D}, q.options());
  const auto f64 = q.options().dtype(at::kDouble), i64 = q.options().dtype(at::kLong);
  auto n_keys = at::empty({B, H, Lq}, i64), n_sink = at::empty({B, H, Lq}, i64);
  std::vector<at::Tensor> floats;
  for (int s = 0; s < 5; ++s) floats.push_back(at::empty({B, H, Lq}, f64));
  const auto prefix = key_prefix_sums(L, f64);
  const double* pre_p = prefix.data_ptr<double>();
  float* out_p = out.data_ptr<float>();
  int64_t* nk_p = n_keys.data_ptr<int64_t>();
  int64_t* ns_p = n_sink.data_ptr<int64_t>();
  double* mass_p = floats[0].data_ptr<double>();
  double* ent_p = floats[1].data_ptr<double>();
  double* cent_p = floats[2].data_ptr<double>();
  double* within_p = floats[3].data_ptr<double>();
  double* bal_p = floats[4].data_ptr<double>();
  run_pass(L, q_block, kv_block, [&](const Rows& rows) {
    std::vector<float> o_c(D);
    std::vector<double> z(L.n_sinks), ps(L.n_sinks);
    std::vector<int64_t> at_sink(L.n_sinks);
    for (int64_t rr = 0; rr < L.group * rows.qB; ++rr) {
      const int64_t h = rows.g * L.group + rr / rows.qB, i = rows.m0 + rr % rows.qB;
      const int64_t at = (rows.b * H + h) * Lq + i;
      RowView row{rows.b, rows.g, 0, 0, rows.Qb + rr * D};
      float lse32, ez32;
      content_of(rr, rows, D, o_c.data(), &lse32, &ez32);
      L.run_of(rows.b, i, &row.first, &row.stop);
      const int64_t n = std::max<int64_t>(row.stop - row.first, 0);
      const int64_t ks = sink_scores(L, row, z.data(), at_sink.data());
      const int64_t m = n - ks;
      const RowSplit split = split_row(lse32, ez32, m > 0, z.data(), ks, ps.data());
      nk_p[at] = n;
      ns_p[at] = ks;
      mass_p[at] = split.mass;
      ent_p[at] = split.entropy;
      cent_p[at] = split.content_entropy;
      within_p[at] = split.within;
      bal_p[at] = m > 0 && ks > 0 ? sink_balance(L, pre_p, row, z.data(), ks, m, n, split) : 0.0;
      write_output(L, row, o_c.data(), split.share, ps.data(), at_sink.data(), ks,
                   out_p + ((rows.b * Lq + i) * H + h) * D);
    }
  });
  return {out, n_keys, n_sink, floats[0], floats[1], floats[2], floats[3], floats[4]};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("content_pass", &content_pass,
        "attention over each query's content keys: (output, lse, E[z]) (attncoda)");
  m.def("attention", &attention,
        "the fast path of one layer: (output, n_keys, n_sink, sink_mass, entropy, "
        "content_entropy, within_sink_entropy, sink_balance) (attncoda)");
}
