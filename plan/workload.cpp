// Workload variability: the seeded draws of each rank class (packed documents,
// compute jitter, expert loads) and how they scale an op of the step graph.
#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "plan/lowering.hpp"

namespace hzp::plan {

namespace {

// splitmix64: a seeded, portable stream of 64-bit values (std:: distributions
// differ between standard libraries; these transforms do not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }               // [0, 1)
  double open_uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return Rng{a ^ (b * 0x9e3779b97f4a7c15ULL)}.next(); }

// Document draws one call may spend on the exact maximum over a class's ranks
// (ranks × micro-batches × expected documents per sequence), 2^21 ≈ 2.1e6
// (about 50 ms); above it the attention factor's maximum is approximated.
constexpr double kDocumentDrawBudget = 2097152.0;
// Packings in the pilot sample of that approximation: 256, fewer (down to
// 16) where a sequence holds so many documents that 256 would overrun the
// budget; the factor is then nearly normal and narrow.
constexpr double kPilotPackings = 256, kMinPilotPackings = 16;

// Documents of exponential length (mean `mean`, rounded, at least one token)
// packed into a sequence of s tokens, the last one cut at the end: Σ lenᵢ² / s².
double packed_attention(Rng& rng, double s, double mean) {
  double filled = 0, squares = 0;
  while (filled < s) {
    const double len = std::min(std::max(1.0, std::round(rng.exponential(mean))), s - filled);
    filled += len;
    squares += len * len;
  }
  return squares / (s * s);
}

// x ≤ 0 with Φ(x) = p for p in (0, 0.5]: P. J. Acklam's rational
// approximation of the inverse normal CDF ("An algorithm for computing the
// inverse normal cumulative distribution function", 2003; relative error
// below 1.15e-9), refined by one Halley step on Φ(x) − p with Φ(x) =
// erfc(−x/√2)/2, accurate in the lower tail, which leaves full double precision.
double lower_quantile(double p) {
  if (p <= 0) return -HUGE_VAL;
  constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                          1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
                          -1.328068155288572e+01};
  constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                          -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  double x;
  if (p < 0.02425) {  // tail: rational in sqrt(−2 log p)
    const double r = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) /
        ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1.0);
  } else {  // centre: rational in (p − 1/2)²
    const double r = p - 0.5, t = r * r;
    x = (((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5]) * r /
        (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1.0);
  }
  // Halley: e = Φ(x) − p, u = e / φ(x), x ← x − u / (1 + x·u/2).
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2.0 * 3.14159265358979323846) * std::exp(0.5 * x * x);
  return x - u / (1.0 + 0.5 * x * u);
}

}  // namespace

namespace detail {

double normal_quantile(double p) { return p > 0.5 ? -lower_quantile(1.0 - p) : lower_quantile(p); }

double normal_upper_quantile(double q) { return q >= 0.5 ? lower_quantile(1.0 - q) : -lower_quantile(q); }

double max_normal_quantile(double u, double n) {
  // log p with p = U^{1/n}; near 1 the quantile goes through 1 − p = −expm1(log p),
  // which keeps its precision however close to 1 p gets (large n).
  const double log_p = std::log(u) / n;
  if (log_p < -std::log(2.0)) return normal_quantile(std::exp(log_p));
  return normal_upper_quantile(-std::expm1(log_p));
}

}  // namespace detail

// Each rank class stands for `ranks` data-parallel ranks drawing independent
// workloads; every synchronising collective waits for the slowest of them, so
// the class's factor per micro-batch is the maximum over its ranks (an order
// statistic), and the slowest class is then the maximum over all ranks.
//  - Compute jitter: each rank's factor is 1 + σ·z, z standard normal, floored
//    at 0.5; the maximum of n iid normals is exactly Φ⁻¹(U^{1/n}) for one
//    uniform U, so that draw costs O(1) whatever n.
//  - Packed documents (no closed form): exact while ranks × micro-batches ×
//    expected documents per sequence (seq / max(1, mean) + 1) stays within
//    kDocumentDrawBudget, and always for one rank: the n ranks' packings are
//    drawn and the largest Σ lenᵢ² / seq² taken. Above the budget, an
//    approximation: mean μ, standard deviation σ and skewness γ of the factor
//    from a pilot sample of up to kPilotPackings packings (the same for every
//    class), and per micro-batch the normal order statistic z = Φ⁻¹(U^{1/n})
//    with the Cornish–Fisher skewness term, μ + σ·(z + γ(z² − 1)/6), clamped
//    to [1/seq, 1]. The factor is right-skewed when few documents fill a
//    sequence: without the γ term its maximum came out up to 30 % low in the
//    cases measured, with it within about ±10 %; with many documents per
//    sequence the factor tends to a normal and the approximation to exact.
// Seed streams per (class, micro-batch) (and stage, for jitter): a class's draw
// does not depend on how many other classes draw. With one rank per class the
// documents are today's single draw, bit for bit.
Workload draw_workload(const PlanOptions& o, std::int64_t seq_len, std::int64_t micro_batches, int variability_class,
                       int stage, int expert_rank, int ep, int experts, std::int64_t ranks) {
  Workload w;
  const auto m = static_cast<std::size_t>(micro_batches);
  w.attention.assign(m, 1.0);
  w.compute.assign(m, 1.0);
  const auto vc = static_cast<std::uint64_t>(variability_class);
  const std::int64_t n = std::max<std::int64_t>(1, ranks);
  const double s = static_cast<double>(seq_len);
  if (o.doc_mean_tokens > 0) {
    // Data belongs to the data-parallel rank: the same on every stage.
    const double documents = s / std::max(1.0, o.doc_mean_tokens) + 1.0;
    const bool exact =
        n == 1 || static_cast<double>(n) * static_cast<double>(micro_batches) * documents <= kDocumentDrawBudget;
    double mean = 0, sd = 0, skew = 0;
    if (!exact) {
      Rng rng{mix(o.seed ^ 0x9170f5a3ULL, static_cast<std::uint64_t>(seq_len))};
      const int packings =
          static_cast<int>(std::clamp(kDocumentDrawBudget / documents, kMinPilotPackings, kPilotPackings));
      std::vector<double> pilot(static_cast<std::size_t>(packings));
      for (double& f : pilot) f = packed_attention(rng, s, o.doc_mean_tokens);
      for (double f : pilot) mean += f;
      mean /= packings;
      double m2 = 0, m3 = 0;
      for (double f : pilot) {
        m2 += (f - mean) * (f - mean);
        m3 += (f - mean) * (f - mean) * (f - mean);
      }
      sd = std::sqrt(m2 / (packings - 1));
      skew = sd > 0 ? m3 / packings / (sd * sd * sd) : 0.0;
    }
    for (std::size_t mb = 0; mb < m; ++mb) {
      Rng rng{mix(mix(o.seed, vc), mb)};
      if (exact) {
        double slowest = 0;
        for (std::int64_t r = 0; r < n; ++r) slowest = std::max(slowest, packed_attention(rng, s, o.doc_mean_tokens));
        w.attention[mb] = slowest;
      } else {
        const double z = detail::max_normal_quantile(rng.open_uniform(), static_cast<double>(n));
        w.attention[mb] = std::clamp(mean + sd * (z + skew * (z * z - 1.0) / 6.0), 1.0 / s, 1.0);
      }
    }
  }
  if (o.compute_jitter > 0) {
    for (std::size_t mb = 0; mb < m; ++mb) {
      Rng rng{mix(mix(mix(o.seed ^ 0x6a177e5ULL, vc), static_cast<std::uint64_t>(stage)), mb)};
      const double z = detail::max_normal_quantile(rng.open_uniform(), static_cast<double>(n));
      w.compute[mb] = std::max(0.5, 1.0 + o.compute_jitter * z);
    }
  }
  if (o.moe_skew > 0 && ep > 1 && experts > 0) {
    // Zipf loads over experts; rank e holds experts [e·E/ep, (e+1)·E/ep).
    double total = 0, mine = 0;
    const int per_rank = experts / ep;
    for (int j = 0; j < experts; ++j) {
      const double load = 1.0 / std::pow(j + 1.0, o.moe_skew);
      total += load;
      if (j / per_rank == expert_rank) mine += load;
    }
    w.experts = mine / total * ep;
  }
  return w;
}

namespace detail {

models::GraphOp scale_op(const models::GraphOp& op, double compute, double attention, double experts) {
  const bool expert = op.param_class == core::ParamClass::Expert;
  double factor = compute;
  const bool attention_core = op.kind == core::ComputeKind::Attention ||
                              op.attention == models::AttentionPart::Scores ||
                              op.attention == models::AttentionPart::Context;
  if (attention_core) factor *= attention;
  if (expert) factor *= experts;
  models::GraphOp out = op;
  if (factor == 1.0) return out;
  out.flops = op.flops * factor;
  if (expert && out.gemm) {
    // More (or fewer) rows per expert: the GEMM's m (or k, for the weight gradient).
    auto rows = [&](std::int64_t v) {
      return std::max<std::int64_t>(1, std::llround(static_cast<double>(v) * experts));
    };
    if (out.phase == models::Phase::BackwardWeight) {
      out.gemm->k = rows(out.gemm->k);
    } else {
      out.gemm->m = rows(out.gemm->m);
    }
    out.bytes = core::Bytes(static_cast<std::int64_t>(static_cast<double>(op.bytes.count()) * experts));
  }
  return out;
}

}  // namespace detail
}  // namespace hzp::plan
