// Workload variability: the seeded draws of each rank class (packed documents,
// compute jitter, expert loads) and how they scale an op of the step graph.
#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "plan/doc_lengths.hpp"
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

// Document draws one distribution may spend on an empirical sample of a
// synchronisation period's attention factor, 2^21 ≈ 2.1e6 (about 50 ms):
// kMaxSample periods at most, and at least kMinSample (or 8 per rank behind
// the slowest class) for the sample to be used; otherwise a pilot of single
// packings fits mean, σ and skewness and the factor is taken from those.
constexpr double kDocumentDrawBudget = 2097152.0;
constexpr double kMaxSample = 16384, kMinSample = 2048;
// Packings in that pilot: 256, fewer (down to 16) where a sequence holds so
// many documents that 256 would overrun the budget; the factor is then nearly
// normal and narrow.
constexpr double kPilotPackings = 256, kMinPilotPackings = 16;

// Documents drawn from `lengths` packed into a sequence of s tokens, the last
// one cut at the end: Σ lenᵢ² / s².
double packed_attention(Rng& rng, double s, const DocLengths& lengths) {
  double filled = 0, squares = 0;
  while (filled < s) {
    const double u = rng.uniform();
    const double len = std::min(lengths.draw(u, rng.uniform()), s - filled);
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

std::vector<double> expected_order_statistics(const std::vector<double>& x, const std::vector<double>& cdf, double n,
                                              int classes) {
  // P(k-th smallest of D maxima ≤ x) = P(Binomial(D, F(x)^n) ≥ k); its steps
  // at the points weight x. The binomial's probabilities go through logs (D
  // may be large), all D tails at once for each point: O(points · D).
  const auto d = static_cast<std::size_t>(classes);
  std::vector<double> log_choose(d + 1), expected(d, 0.0), tail(d + 1, 0.0), previous(d + 1, 0.0);
  for (int j = 0; j <= classes; ++j) {
    log_choose[static_cast<std::size_t>(j)] =
        std::lgamma(classes + 1.0) - std::lgamma(j + 1.0) - std::lgamma(classes - j + 1.0);
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double g = cdf[i] >= 1.0 ? 1.0 : std::exp(n * std::log(cdf[i]));  // F^n: the class maximum's CDF
    // tail[k] = P(Binomial(D, g) ≥ k), k = 1..D.
    if (g >= 1.0) {
      std::fill(tail.begin(), tail.end(), 1.0);
    } else if (g * classes < 1e-300) {
      std::fill(tail.begin(), tail.end(), 0.0);
    } else {
      const double lg = std::log(g), l1g = std::log1p(-g);
      double above = 0;
      for (std::size_t j = d; j >= 1; --j) {
        above += std::exp(log_choose[j] + static_cast<double>(j) * lg + static_cast<double>(d - j) * l1g);
        tail[j] = std::min(1.0, above);
      }
    }
    for (std::size_t k = 1; k <= d; ++k) expected[k - 1] += x[i] * (tail[k] - previous[k]);
    std::swap(tail, previous);
  }
  return expected;
}

}  // namespace detail

namespace {

// A quantile function as points for detail::expected_order_statistics: 2,048
// equal steps of probability up to 0.99, then 2,048 steps of the upper tail
// down to 10⁻¹² (its last step closes at 1), each valued at its middle.
template <class Quantile>
void quantile_points(Quantile q, std::vector<double>& x, std::vector<double>& cdf) {
  constexpr int kBody = 2048, kTail = 2048;
  double last = 0;
  for (int i = 1; i <= kBody; ++i) {
    const double p = 0.99 * i / kBody;
    x.push_back(q(0.5 * (last + p), 0.0));
    cdf.push_back(p);
    last = p;
  }
  double last_upper = 0.01;
  for (int i = 1; i <= kTail; ++i) {
    const double upper = std::pow(10.0, -2.0 - 10.0 * i / kTail);  // 1 − p
    x.push_back(q(0.0, std::sqrt(last_upper * upper)));            // geometric middle of the upper tail
    cdf.push_back(i == kTail ? 1.0 : 1.0 - upper);
    last_upper = upper;
  }
}

// The rank's attention factor over one synchronisation period (the mean of
// micro_batch × period packings), as points of its distribution: an empirical
// sample where the budget affords enough periods for the slowest of `ranks`,
// else the pilot's mean, σ and skewness through the Cornish–Fisher quantile
// μ + σ·(z + γ(z² − 1)/6), clamped to [1/seq, 1] (without the γ term the
// maximum came out up to 30 % low where few documents fill a sequence).
void attention_points(const PlanOptions& o, const DocLengths& lengths, const WorkloadShape& w, std::vector<double>& x,
                      std::vector<double>& cdf) {
  const double s = static_cast<double>(w.seq_len);
  const double per_period = static_cast<double>(w.micro_batch * w.period);
  const double documents = s / std::max(1.0, lengths.mean()) + 1.0;
  const double affordable = kDocumentDrawBudget / (per_period * documents);
  const double needed = std::max(kMinSample, 8.0 * static_cast<double>(w.ranks) * w.classes);
  Rng rng{mix(o.seed ^ 0x9170f5a3ULL, static_cast<std::uint64_t>(w.seq_len))};
  if (affordable >= needed) {
    const auto k = static_cast<std::size_t>(std::min(affordable, kMaxSample));
    x.resize(k);
    for (double& v : x) {
      double sum = 0;
      for (double j = 0; j < per_period; ++j) sum += packed_attention(rng, s, lengths);
      v = sum / per_period;
    }
    std::sort(x.begin(), x.end());
    for (std::size_t i = 1; i <= k; ++i) cdf.push_back(static_cast<double>(i) / static_cast<double>(k));
    return;
  }
  const int packings = static_cast<int>(std::clamp(kDocumentDrawBudget / documents, kMinPilotPackings, kPilotPackings));
  std::vector<double> pilot(static_cast<std::size_t>(packings));
  double mean = 0, m2 = 0, m3 = 0;
  for (double& f : pilot) mean += (f = packed_attention(rng, s, lengths));
  mean /= packings;
  for (double f : pilot) {
    m2 += (f - mean) * (f - mean);
    m3 += (f - mean) * (f - mean) * (f - mean);
  }
  const double sd1 = std::sqrt(m2 / (packings - 1));
  const double skew1 = sd1 > 0 ? m3 / packings / (sd1 * sd1 * sd1) : 0.0;
  // A mean of N independent packings: σ/√N, skewness γ/√N.
  const double sd = sd1 / std::sqrt(per_period), skew = skew1 / std::sqrt(per_period);
  quantile_points(
      [&](double p, double upper) {
        const double z = upper > 0 ? detail::normal_upper_quantile(upper) : detail::normal_quantile(p);
        return std::clamp(mean + sd * (z + skew * (z * z - 1.0) / 6.0), 1.0 / s, 1.0);
      },
      x, cdf);
  // The expansion turns back far in the tail the skew points away from: hold
  // the points to a quantile function (non-decreasing).
  for (std::size_t i = 1; i < x.size(); ++i) x[i] = std::max(x[i], x[i - 1]);
}

}  // namespace

// Stragglers as expected order statistics. Every data-parallel rank draws its
// own documents and jitter; ranks wait for each other at the synchronisations
// of the plan (every micro-batch where parameters are gathered or tokens
// routed across data-parallel ranks, else once a step), so what a rank brings
// to a synchronisation is its mean factor over the period. A class of n ranks
// runs the slowest of them, and of the D classes the k-th slowest runs the
// expected k-th order statistic of D such maxima: the slowest class is the
// expected slowest of all n·D ranks, computed, not drawn. The classes rotate
// through the order statistics from one period to the next (the straggler
// moves), so each period has one class of each rank.
Stragglers expected_stragglers(const PlanOptions& o, const WorkloadShape& w) {
  Stragglers out;
  out.period = std::max<std::int64_t>(1, w.period);
  out.at_mean = w.at_mean;
  const auto d = static_cast<std::size_t>(std::max(1, w.classes));
  const double n = static_cast<double>(std::max<std::int64_t>(1, w.ranks));
  // The expected order statistics of D maxima of n draws, or at the mean:
  // every class the expectation of one draw.
  auto statistics = [&](const std::vector<double>& x, const std::vector<double>& cdf) {
    if (w.at_mean) return std::vector<double>(d, detail::expected_order_statistics(x, cdf, 1, 1).front());
    return detail::expected_order_statistics(x, cdf, n, static_cast<int>(d));
  };
  out.attention.assign(d, 1.0);
  out.compute.assign(d, 1.0);
  const std::optional<DocLengths> lengths = doc_lengths(o);
  if (lengths) {
    std::vector<double> x, cdf;
    attention_points(o, *lengths, w, x, cdf);
    out.attention = statistics(x, cdf);
  }
  if (o.compute_jitter > 0) {
    // Each micro-batch's factor is 1 + σ·z (z standard normal), floored at
    // 0.5; a period's mean has σ/√period.
    const double sd = o.compute_jitter / std::sqrt(static_cast<double>(out.period));
    std::vector<double> x, cdf;
    quantile_points(
        [&](double p, double upper) {
          const double z = upper > 0 ? detail::normal_upper_quantile(upper) : detail::normal_quantile(p);
          return std::max(0.5, 1.0 + sd * z);
        },
        x, cdf);
    out.compute = statistics(x, cdf);
  }
  return out;
}

Workload class_workload(const PlanOptions& o, const Stragglers& s, std::int64_t micro_batches, int data_class,
                        int expert_rank, int ep, int experts) {
  Workload w;
  const auto m = static_cast<std::size_t>(micro_batches);
  w.attention.assign(m, 1.0);
  w.compute.assign(m, 1.0);
  const auto d = static_cast<std::int64_t>(s.attention.size());
  for (std::size_t mb = 0; mb < m; ++mb) {
    const auto rank = static_cast<std::size_t>((data_class + static_cast<std::int64_t>(mb) / s.period) % d);
    w.attention[mb] = s.attention[rank];
    w.compute[mb] = s.compute[rank];
  }
  if (o.moe_skew > 0 && ep > 1 && experts > 0 && !s.at_mean) {
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

std::optional<DocLengths> doc_lengths(const PlanOptions& o) {
  if (o.doc_lengths) {
    DocLengths d;
    const std::vector<core::Problem> problems = parse_doc_lengths(*o.doc_lengths, d);
    if (!problems.empty()) throw core::ProblemError(problems);
    return d;
  }
  if (o.doc_mean_tokens > 0) return exponential_doc_lengths(o.doc_mean_tokens);
  return std::nullopt;
}

namespace detail {

double scale_factor(const models::GraphOp& op, double compute, double attention, double experts) {
  double factor = compute;
  const bool attention_core = op.kind == core::ComputeKind::Attention ||
                              op.attention == models::AttentionPart::Scores ||
                              op.attention == models::AttentionPart::Context;
  if (attention_core) factor *= attention;
  if (op.param_class == core::ParamClass::Expert) factor *= experts;
  return factor;
}

models::GraphOp scale_op(const models::GraphOp& op, double compute, double attention, double experts) {
  const bool expert = op.param_class == core::ParamClass::Expert;
  const double factor = scale_factor(op, compute, attention, experts);
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
