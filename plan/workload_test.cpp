// Stragglers as order statistics: a rank class's workload draw is the slowest
// of the data-parallel ranks it stands for, so the slowest class is the slowest
// of all ranks and grows with their number (plan/workload.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "plan/lowering.hpp"
#include "plan/plan.hpp"

namespace hzp::plan {
namespace {

struct Sample {
  double mean = 0, variance = 0;  // the sample's mean and unbiased variance
  std::size_t n = 0;
  [[nodiscard]] double se2() const { return variance / static_cast<double>(n); }  // squared standard error
};

Sample sample(const std::vector<double>& v) {
  Sample s;
  s.n = v.size();
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(s.n);
  for (double x : v) s.variance += (x - s.mean) * (x - s.mean);
  s.variance /= static_cast<double>(s.n - 1);
  return s;
}

// Four standard errors of the difference of two independent sample means.
double tolerance(const Sample& a, const Sample& b) { return 4.0 * std::sqrt(a.se2() + b.se2()); }

// Per micro-batch, the largest of the classes' factors (attention or compute):
// N data-parallel ranks in K classes of N / K, as lowering draws them.
std::vector<double> slowest_class(const PlanOptions& o, std::int64_t seq_len, std::int64_t micro_batches, int ranks,
                                  int classes, bool attention) {
  std::vector<double> out(static_cast<std::size_t>(micro_batches), 0.0);
  for (int c = 0; c < classes; ++c) {
    const Workload w = draw_workload(o, seq_len, micro_batches, c, 0, 0, 1, 0, ranks / classes);
    const std::vector<double>& f = attention ? w.attention : w.compute;
    for (std::size_t mb = 0; mb < out.size(); ++mb) out[mb] = std::max(out[mb], f[mb]);
  }
  return out;
}

TEST(OrderStatistics, InverseNormalCdf) {
  EXPECT_EQ(detail::normal_quantile(0.5), 0.0);
  EXPECT_NEAR(detail::normal_quantile(0.975), 1.959963985, 1e-9);
  EXPECT_NEAR(detail::normal_quantile(0.025), -1.959963985, 1e-9);
  EXPECT_NEAR(detail::normal_quantile(1 - 1e-9), 5.997807015, 1e-6);
  EXPECT_NEAR(detail::normal_upper_quantile(1e-9), 5.997807015, 1e-8);
  EXPECT_NEAR(detail::normal_quantile(0.8413447460685429), 1.0, 1e-12);  // Φ(1)
  EXPECT_NEAR(detail::normal_quantile(1e-300), -37.0470963, 1e-6);       // deep in the lower tail
  // Round trips through Φ(x) = erfc(−x/√2)/2 across both branches of the
  // approximation: lower-tail probabilities hold full precision (as do the
  // upper-tail ones the other function takes); p near 1 only where Φ⁻¹ is well
  // conditioned.
  for (double x = -8; x <= 0; x += 0.37) {
    const double p = 0.5 * std::erfc(-x / std::sqrt(2.0));
    EXPECT_NEAR(detail::normal_quantile(p), x, 1e-9 * std::max(1.0, -x)) << x;
    EXPECT_NEAR(detail::normal_upper_quantile(p), -x, 1e-9 * std::max(1.0, -x)) << x;
    if (x > -3) {
      EXPECT_NEAR(detail::normal_quantile(1.0 - p), -x, 1e-9) << x;
    }
  }
  // The maximum of n normals at U: Φ⁻¹(U^{1/n}), precise however close to 1 U^{1/n} gets.
  EXPECT_NEAR(detail::max_normal_quantile(0.3, 1), detail::normal_quantile(0.3), 1e-12);
  EXPECT_NEAR(detail::max_normal_quantile(0.5, 1e9), detail::normal_upper_quantile(-std::expm1(std::log(0.5) / 1e9)),
              1e-12);
  EXPECT_NEAR(detail::max_normal_quantile(0.5, 1e9), 6.0570628, 1e-6);  // median of the max of 1e9: Φ⁻¹(1 − ln2/1e9)
}

// Compute jitter: the slowest of K = 4 classes of 256 ranks is the slowest of
// 1,024 ranks, and the slowest rank grows with the number of ranks.
TEST(OrderStatistics, JitterStragglerIsTheMaxOverAllRanks) {
  PlanOptions o;
  o.compute_jitter = 0.05;
  o.seed = 7;
  constexpr int kDraws = 2000;
  const Sample modelled = sample(slowest_class(o, 4096, kDraws, 1024, 4, false));

  std::mt19937_64 gen(12345);
  std::normal_distribution<double> normal;
  std::vector<double> direct(kDraws);
  for (double& v : direct) {
    double z = -HUGE_VAL;
    for (int r = 0; r < 1024; ++r) z = std::max(z, normal(gen));
    v = 1.0 + o.compute_jitter * z;
  }
  const Sample reference = sample(direct);
  EXPECT_NEAR(modelled.mean, reference.mean, tolerance(modelled, reference));
  EXPECT_NEAR(modelled.mean, 1.0 + 0.05 * 3.2482, 0.003);  // E max of 1,024 normals ≈ 3.2482

  // 64 ranks in the same four classes: a visibly faster slowest rank.
  const Sample fewer = sample(slowest_class(o, 4096, kDraws, 64, 4, false));
  EXPECT_GT(modelled.mean, fewer.mean + tolerance(modelled, fewer));
  EXPECT_NEAR(fewer.mean, 1.0 + 0.05 * 2.3437, 0.003);  // E max of 64 normals ≈ 2.3437
}

// Packed documents (exponential lengths, mean 512, in 4,096-token sequences):
// the slowest of 2 classes of 128 ranks against 256 independent packings
// written here from the spec.
TEST(OrderStatistics, DocumentStragglerIsTheMaxOverAllRanks) {
  PlanOptions o;
  o.doc_mean_tokens = 512;
  o.seed = 11;
  constexpr std::int64_t kSeq = 4096;
  constexpr int kDraws = 400;  // 128 ranks × 400 × ~9 documents: exact, within the draw budget
  const Sample modelled = sample(slowest_class(o, kSeq, kDraws, 256, 2, true));

  std::mt19937_64 gen(54321);
  std::exponential_distribution<double> length(1.0 / o.doc_mean_tokens);
  auto packing = [&](double s) {
    double filled = 0, squares = 0;
    while (filled < s) {
      const double len = std::min(std::max(1.0, std::round(length(gen))), s - filled);
      filled += len;
      squares += len * len;
    }
    return squares / (s * s);
  };
  std::vector<double> direct(kDraws);
  for (double& v : direct) {
    v = 0;
    for (int r = 0; r < 256; ++r) v = std::max(v, packing(static_cast<double>(kSeq)));
  }
  const Sample reference = sample(direct);
  EXPECT_NEAR(modelled.mean, reference.mean, tolerance(modelled, reference));

  // Above the budget (512 ranks × 64 micro-batches × 65 documents of 512 in
  // 32,768 tokens), the pilot-fitted order statistic: within 15 % of the
  // slowest of 512 packings.
  constexpr std::int64_t kLong = 32768;
  constexpr int kFew = 64;
  const Sample approx = sample(slowest_class(o, kLong, kFew, 512, 1, true));
  std::vector<double> long_direct(kFew);
  for (double& v : long_direct) {
    v = 0;
    for (int r = 0; r < 512; ++r) v = std::max(v, packing(static_cast<double>(kLong)));
  }
  const Sample long_reference = sample(long_direct);
  EXPECT_NEAR(approx.mean, long_reference.mean, 0.15 * long_reference.mean);
}

TEST(OrderStatistics, DeterministicAndOffWithoutVariability) {
  PlanOptions o;
  for (std::int64_t ranks : {1, 16, 100000}) {
    const Workload off = draw_workload(o, 8192, 8, 3, 1, 0, 1, 0, ranks);
    EXPECT_EQ(off.attention, std::vector<double>(8, 1.0));
    EXPECT_EQ(off.compute, std::vector<double>(8, 1.0));
    EXPECT_EQ(off.experts, 1.0);
  }
  o.doc_mean_tokens = 512;
  o.compute_jitter = 0.1;
  for (std::int64_t ranks : {1, 16, 100000}) {  // exact, exact, approximated documents
    const Workload a = draw_workload(o, 8192, 8, 3, 1, 0, 1, 0, ranks);
    const Workload b = draw_workload(o, 8192, 8, 3, 1, 0, 1, 0, ranks);
    EXPECT_EQ(a.attention, b.attention);
    EXPECT_EQ(a.compute, b.compute);
    // A class's draw does not depend on the other classes' draws (or on how
    // many micro-batches follow).
    const Workload shorter = draw_workload(o, 8192, 4, 3, 1, 0, 1, 0, ranks);
    EXPECT_EQ(std::vector<double>(a.attention.begin(), a.attention.begin() + 4), shorter.attention);
    EXPECT_EQ(std::vector<double>(a.compute.begin(), a.compute.begin() + 4), shorter.compute);
    for (double f : a.attention) {
      EXPECT_GT(f, 0.0);
      EXPECT_LE(f, 1.0);
    }
  }
  // More ranks behind a class: a slower class, micro-batch by micro-batch for jitter
  // (the same uniform mapped through a larger order statistic).
  const Workload one = draw_workload(o, 8192, 8, 3, 1, 0, 1, 0, 1);
  const Workload many = draw_workload(o, 8192, 8, 3, 1, 0, 1, 0, 64);
  for (std::size_t mb = 0; mb < 8; ++mb) EXPECT_GT(many.compute[mb], one.compute[mb]);
}

}  // namespace
}  // namespace hzp::plan
