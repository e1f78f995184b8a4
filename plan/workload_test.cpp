// Stragglers as expected order statistics: a rank class runs the expected
// slowest of the data-parallel ranks it stands for, the classes the expected
// order statistics of those maxima, so the slowest class is the expected
// slowest of all ranks and grows with their number (plan/workload.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "plan/doc_lengths.hpp"
#include "plan/lowering.hpp"
#include "plan/plan.hpp"

namespace hzp::plan {
namespace {

struct Sample {
  double mean = 0, variance = 0;  // the sample's mean and unbiased variance
  std::size_t n = 0;
  [[nodiscard]] double se() const { return std::sqrt(variance / static_cast<double>(n)); }  // standard error
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

WorkloadShape shape(std::int64_t seq_len, int classes, std::int64_t ranks, std::int64_t period = 1) {
  WorkloadShape w;
  w.seq_len = seq_len;
  w.classes = classes;
  w.ranks = ranks;
  w.period = period;
  return w;
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
}

// By hand, for X = 0 or 1 with probability 1/2 each: the maximum of n draws
// is 1 unless all are 0, E = 1 − 2⁻ⁿ; of two classes of n the slower has
// E = 1 − 2⁻²ⁿ, the faster (both maxima 1) (1 − 2⁻ⁿ)².
TEST(OrderStatistics, ExpectedOrderStatisticsByHand) {
  const std::vector<double> x{0, 1}, cdf{0.5, 1};
  EXPECT_NEAR(detail::expected_order_statistics(x, cdf, 1, 1)[0], 0.5, 1e-15);
  EXPECT_NEAR(detail::expected_order_statistics(x, cdf, 3, 1)[0], 0.875, 1e-15);
  const std::vector<double> two = detail::expected_order_statistics(x, cdf, 2, 2);
  EXPECT_NEAR(two[0], 0.5625, 1e-15);  // (3/4)²
  EXPECT_NEAR(two[1], 0.9375, 1e-15);  // 1 − 1/16
  // U uniform on [0, 1] as 1,000 equal steps: E max of 9 = 9/10, E min of 4 = 1/5.
  std::vector<double> ux, ucdf;
  for (int i = 1; i <= 1000; ++i) {
    ux.push_back((i - 0.5) / 1000);
    ucdf.push_back(i / 1000.0);
  }
  EXPECT_NEAR(detail::expected_order_statistics(ux, ucdf, 9, 1)[0], 0.9, 1e-4);
  EXPECT_NEAR(detail::expected_order_statistics(ux, ucdf, 1, 4)[0], 0.2, 1e-4);
  // Many classes: the k-th of D uniforms has E = k / (D + 1).
  const std::vector<double> many = detail::expected_order_statistics(ux, ucdf, 1, 500);
  EXPECT_NEAR(many[0], 1.0 / 501, 1e-4);
  EXPECT_NEAR(many[249], 250.0 / 501, 1e-4);
  EXPECT_NEAR(many[499], 500.0 / 501, 1e-4);
}

// Compute jitter 0.05: the slowest class is 1 + 0.05·E[max of N standard
// normals] with N all the ranks, whatever the split into classes (tabled:
// N = 2: 1/√π = 0.564190, 10: 1.538753, 64: 2.343701, 1,024: 3.248112
// (Harter 1961, Expected values of normal order statistics)), and the
// maxima grow with N; synchronising once every 4 micro-batches halves σ.
TEST(OrderStatistics, JitterStragglerIsTheExpectedMaxOverAllRanks) {
  PlanOptions o;
  o.compute_jitter = 0.05;
  const double pairs[][2] = {{2, 0.564190}, {10, 1.538753}, {64, 2.343701}, {1024, 3.248112}};
  for (const auto& [n, z] : pairs) {
    const auto ranks = static_cast<std::int64_t>(n);
    EXPECT_NEAR(expected_stragglers(o, shape(4096, 1, ranks)).compute.back(), 1 + 0.05 * z, 1e-4) << n;
    if (ranks % 2 == 0) {
      const Stragglers split = expected_stragglers(o, shape(4096, 2, ranks / 2));
      EXPECT_NEAR(split.compute.back(), 1 + 0.05 * z, 1e-4) << n;
      EXPECT_LT(split.compute.front(), split.compute.back());
    }
  }
  EXPECT_NEAR(expected_stragglers(o, shape(4096, 4, 256, 4)).compute.back(), 1 + 0.025 * 3.248112, 1e-4);
  // The straggler moves: class c runs order statistic (c + period) mod D.
  const Stragglers s = expected_stragglers(o, shape(4096, 4, 16, 2));
  const Workload c1 = class_workload(o, s, 6, 1, 0, 1, 0);
  EXPECT_EQ(c1.compute,
            (std::vector<double>{s.compute[1], s.compute[1], s.compute[2], s.compute[2], s.compute[3], s.compute[3]}));
}

// Packed documents (exponential lengths, mean 512, in 4,096-token sequences):
// the expected slowest of 256 ranks (2 classes of 128) against the mean of
// 400 maxima of 256 packings written here from the spec.
TEST(OrderStatistics, DocumentStragglerIsTheExpectedMaxOverAllRanks) {
  PlanOptions o;
  o.doc_mean_tokens = 512;
  o.seed = 11;
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
  auto slowest = [&](int draws, int ranks, double s, int per_rank) {
    std::vector<double> v(static_cast<std::size_t>(draws), 0.0);
    for (double& m : v) {
      for (int r = 0; r < ranks; ++r) {
        double sum = 0;
        for (int j = 0; j < per_rank; ++j) sum += packing(s);
        m = std::max(m, sum / per_rank);
      }
    }
    return sample(v);
  };
  const Stragglers exact = expected_stragglers(o, shape(4096, 2, 128));  // an empirical sample of 16,384 packings
  const Sample reference = slowest(400, 256, 4096, 1);
  EXPECT_NEAR(exact.attention.back(), reference.mean, 4 * reference.se());
  EXPECT_GT(exact.attention.back(), expected_stragglers(o, shape(4096, 2, 32)).attention.back());  // 64 ranks

  // 512 ranks meeting once every 8 micro-batches of 32,768 tokens (65
  // documents each): over the budget for a sample, the pilot-fitted quantile;
  // within 5 % of the mean of 32 maxima of 512 ranks' 8-packing means.
  const Stragglers fitted = expected_stragglers(o, shape(32768, 1, 512, 8));
  const Sample long_reference = slowest(32, 512, 32768, 8);
  EXPECT_NEAR(fitted.attention.back(), long_reference.mean, 0.05 * long_reference.mean);
}

// Histograms: documents all longer than the sequence fill it (Σ len² = s²);
// one-token documents give s·1 / s² = 1/s.
TEST(OrderStatistics, HistogramDocumentLengths) {
  PlanOptions o;
  o.doc_lengths = "10000:0,20000:1";
  const Stragglers full = expected_stragglers(o, shape(8192, 3, 100));
  EXPECT_EQ(full.attention, (std::vector<double>{1.0, 1.0, 1.0}));
  o.doc_lengths = "1:1";
  for (double f : expected_stragglers(o, shape(8192, 3, 100)).attention) EXPECT_NEAR(f, 1.0 / 8192, 1e-12);

  DocLengths d;
  EXPECT_TRUE(parse_doc_lengths("512:3, 2048:1", d).empty());
  ASSERT_EQ(d.parts.size(), 2u);
  EXPECT_EQ(d.draw(0.0, 0.0), 512.0);   // the first bin's top
  EXPECT_EQ(d.draw(0.74, 0.5), 256.0);  // its middle
  EXPECT_EQ(d.draw(0.76, 0.5), 1280.0);
  EXPECT_NEAR(d.mean(), 0.75 * 256 + 0.25 * 1280, 1e-9);
  // Dolma v1: its tokens over its documents, 3,085.4 billion / 5,244.952 million.
  ASSERT_TRUE(parse_doc_lengths("dolma-v1", d).empty());
  EXPECT_NEAR(d.mean(), 3085.4e9 / 5244.952e6, 1e-6);
  for (const char* bad : {"", "512", "512:1,", "512:1,256:1", "512:-1", "512:0", "x:1", "4000000:1", "512:nan"}) {
    const std::vector<core::Problem> p = parse_doc_lengths(bad, d);
    ASSERT_EQ(p.size(), 1u) << bad;
    EXPECT_EQ(p[0].field, "doc_lengths");
  }
}

TEST(OrderStatistics, DeterministicAndOffWithoutVariability) {
  PlanOptions o;
  for (std::int64_t ranks : {1, 16, 100000}) {
    const Workload off = class_workload(o, expected_stragglers(o, shape(8192, 4, ranks)), 8, 3, 0, 1, 0);
    EXPECT_EQ(off.attention, std::vector<double>(8, 1.0));
    EXPECT_EQ(off.compute, std::vector<double>(8, 1.0));
    EXPECT_EQ(off.experts, 1.0);
  }
  o.doc_mean_tokens = 512;
  o.compute_jitter = 0.1;
  for (std::int64_t ranks : {1, 16, 100000}) {  // sampled, sampled, fitted documents
    const Stragglers a = expected_stragglers(o, shape(8192, 4, ranks));
    const Stragglers b = expected_stragglers(o, shape(8192, 4, ranks));
    EXPECT_EQ(a.attention, b.attention);
    EXPECT_EQ(a.compute, b.compute);
    EXPECT_TRUE(std::is_sorted(a.attention.begin(), a.attention.end()));
    for (double f : a.attention) {
      EXPECT_GT(f, 0.0);
      EXPECT_LE(f, 1.0);
    }
  }
  // One rank per class, one class: the mean factor (E of one packing), below
  // the expected slowest of many.
  EXPECT_LT(expected_stragglers(o, shape(8192, 1, 1)).attention[0],
            expected_stragglers(o, shape(8192, 1, 64)).attention[0]);
}

// At the mean (the straggler term's reference): every class runs the mean
// of one rank's work, whatever the ranks and classes: the mean factor of
// one draw, as for one rank in one class; experts carry the mean load 1.
TEST(OrderStatistics, AtTheMeanEveryClassRunsTheMeanWork) {
  PlanOptions o;
  o.doc_mean_tokens = 512;
  o.compute_jitter = 0.1;
  o.moe_skew = 1.2;
  const Stragglers one = expected_stragglers(o, shape(8192, 1, 1));
  WorkloadShape w = shape(8192, 4, 64);
  w.at_mean = true;
  const Stragglers mean = expected_stragglers(o, w);
  EXPECT_EQ(mean.attention, std::vector<double>(4, one.attention[0]));
  EXPECT_EQ(mean.compute, std::vector<double>(4, one.compute[0]));
  EXPECT_NEAR(mean.compute[0], 1.0, 1e-3);  // 1 + 0.1·z floored at 0.5: E = 1 to within 1e-6
  // Zipf 1.2 over 8 experts on 2 ranks: rank 0's share is above 1 unless at the mean.
  EXPECT_GT(class_workload(o, expected_stragglers(o, shape(8192, 4, 64)), 2, 0, 0, 2, 8).experts, 1.0);
  EXPECT_EQ(class_workload(o, mean, 2, 0, 0, 2, 8).experts, 1.0);
}

}  // namespace
}  // namespace hzp::plan
