// The unit types: Bandwidth and FlopRate conversions, transfer and compute
// times, TimePoint
// arithmetic, Duration's rounding and its errors on NaN, negative and
// infinite counts.
#include "core/units.hpp"

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace hzp::core {

TEST(Bandwidth, ConvertsFromCatalogUnits) {
  EXPECT_EQ(Bandwidth::from_GBps(450).bytes_per_s(), 450e9);
  EXPECT_EQ(Bandwidth::from_Gbps(400).bytes_per_s(), 50e9);  // 400 Gb/s NIC = 50 GB/s
  EXPECT_EQ(Bandwidth::from_bytes_per_s(2.5e9).GBps(), 2.5);
  EXPECT_EQ(Bandwidth::from_Gbps(400), Bandwidth::from_GBps(50));
  EXPECT_EQ(Bandwidth{}.bytes_per_s(), 0);
}

TEST(Bandwidth, ScalesByFactors) {
  const Bandwidth nic = Bandwidth::from_GBps(50);
  EXPECT_EQ(nic * 0.5, Bandwidth::from_GBps(25));  // an efficiency
  EXPECT_EQ(0.5 * nic, Bandwidth::from_GBps(25));
  EXPECT_EQ(nic / 2, Bandwidth::from_GBps(25));  // 2:1 oversubscription
  EXPECT_LT(nic / 2, nic);
}

TEST(Bandwidth, TransferTime) {
  // 1 GB at 100 GB/s: 10 ms.
  EXPECT_EQ(Bytes(1'000'000'000) / Bandwidth::from_GBps(100), Duration::ns(10'000'000));
  EXPECT_EQ(transfer_seconds(Bytes(500), Bandwidth::from_bytes_per_s(1000)), 0.5);
  EXPECT_EQ(transfer_seconds(1e9, Bandwidth::from_Gbps(8)), 1.0);  // 8 Gb/s moves 1 GB per second
  EXPECT_EQ(Bytes(0) / Bandwidth::from_GBps(1), Duration{});
  // 1 B at 1 GB/s is 1 ns; 1 B at 3 GB/s rounds to 0.
  EXPECT_EQ(Bytes(1) / Bandwidth::from_GBps(1), Duration::ns(1));
  EXPECT_EQ(Bytes(1) / Bandwidth::from_GBps(3), Duration::ns(0));
}

TEST(Bandwidth, TransferAtNoBandwidthIsAnError) {
  EXPECT_THROW((void)(Bytes(1) / Bandwidth{}), UnitError);  // +inf seconds
  EXPECT_THROW((void)(Bytes(0) / Bandwidth{}), UnitError);  // NaN seconds
  EXPECT_THROW((void)(Bytes(1) / Bandwidth::from_GBps(-1)), UnitError);
}

TEST(RoundNearest, IsLlroundWithoutTheCall) {
  // Halves go away from zero; the largest double below one half stays at 0
  // (adding 0.5 and truncating would give 1); counts beyond 2^53 are whole.
  EXPECT_EQ(round_nearest(0.5), 1);
  EXPECT_EQ(round_nearest(2.5), 3);
  EXPECT_EQ(round_nearest(-2.5), -3);
  EXPECT_EQ(round_nearest(0.49999999999999994), 0);
  EXPECT_EQ(round_nearest(-0.49999999999999994), 0);
  EXPECT_EQ(round_nearest(4.6e18), 4600000000000000000LL);
  std::vector<double> xs{0.0,
                         -0.0,
                         1e-300,
                         0.5000000000000001,
                         9007199254740991.5,
                         4503599627370495.5,
                         1e10 + 0.5,
                         123456789.4999999,
                         -7.5,
                         3.2e12 * 1.1};
  for (int i = 0; i < 2000; ++i) xs.push_back(std::ldexp(static_cast<double>((i * 7919) % 1000003), i % 60 - 20) / 3);
  for (double x : xs) EXPECT_EQ(round_nearest(x), std::llround(x)) << x;
}

TEST(Duration, RoundsToNanoseconds) {
  EXPECT_EQ(Duration::seconds(1.5).count_ns(), 1'500'000'000);
  EXPECT_EQ(Duration::ms(2).count_ns(), 2'000'000);
  EXPECT_EQ(Duration::us(1.5).count_ns(), 1'500);
  EXPECT_EQ(Duration::seconds(1.4e-9).count_ns(), 1);
  EXPECT_EQ(Duration::seconds(1.6e-9).count_ns(), 2);
  EXPECT_EQ(Duration::seconds(0).count_ns(), 0);
  EXPECT_EQ(Duration::seconds(-0.0).count_ns(), 0);
  EXPECT_EQ(Duration::ns(1500).to_us(), 1.5);
  EXPECT_EQ(Duration::ns(2'000'000).to_ms(), 2.0);
  EXPECT_EQ(Duration::ns(1).to_us(), 0.001);  // divided: correctly rounded
  EXPECT_EQ(Duration::ns(500'000'000).to_seconds(), 0.5);
}

TEST(Duration, SaturatesFiniteHugeCounts) {
  const Duration max = Duration::seconds(Duration::kMaxSeconds);
  EXPECT_EQ(max.count_ns(), 4'600'000'000'000'000'000);
  EXPECT_EQ(Duration::seconds(1e300), max);
  EXPECT_EQ(Duration::us(1e300), max);
}

// Sums of saturated durations saturate too (issue 19, found by the probe: a
// Schedule of GEMMs of 1e300 FLOPs overflowed int64 in both engines and hzp-run).
TEST(Duration, SumsAndDifferencesSaturateInsteadOfOverflowing) {
  const Duration most = Duration::seconds(1e300);
  Duration sum{};
  for (int i = 0; i < 5; ++i) sum += most;
  EXPECT_EQ(sum.count_ns(), INT64_MAX);
  EXPECT_EQ((most + most + most).count_ns(), INT64_MAX);
  EXPECT_EQ((Duration{} - most - most - most).count_ns(), INT64_MIN);
  EXPECT_EQ((TimePoint{} + most + most + most).count_ns(), INT64_MAX);
  EXPECT_EQ((Duration::ns(5) + Duration::ns(7)).count_ns(), 12);
  EXPECT_EQ((Duration::ns(5) - Duration::ns(7)).count_ns(), -2);
}

TEST(Duration, NaNNegativeAndInfiniteAreErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW((void)Duration::seconds(nan), UnitError);
  EXPECT_THROW((void)Duration::seconds(-1), UnitError);
  EXPECT_THROW((void)Duration::seconds(-1e-12), UnitError);  // no rounding to zero first
  EXPECT_THROW((void)Duration::seconds(inf), UnitError);
  EXPECT_THROW((void)Duration::seconds(-inf), UnitError);
  EXPECT_THROW((void)Duration::ms(nan), UnitError);
  EXPECT_THROW((void)Duration::ms(-0.5), UnitError);
  EXPECT_THROW((void)Duration::us(nan), UnitError);
  EXPECT_THROW((void)Duration::us(-3), UnitError);
  EXPECT_THROW((void)Duration::us(inf), UnitError);
}

TEST(Duration, ErrorNamesTheUnitAndValue) {
  try {
    (void)Duration::us(-2.5);
    FAIL() << "expected UnitError";
  } catch (const UnitError& e) {
    EXPECT_EQ(std::string(e.what()), "a duration must be a finite, non-negative number of microseconds, got -2.5");
  }
  try {
    (void)Duration::seconds(std::numeric_limits<double>::quiet_NaN());
    FAIL() << "expected UnitError";
  } catch (const UnitError& e) {
    EXPECT_EQ(std::string(e.what()), "a duration must be a finite, non-negative number of seconds, got nan");
  }
}

TEST(TimePoint, Arithmetic) {
  const TimePoint start = TimePoint::ns(1'000);
  const TimePoint end = start + Duration::ns(250);
  EXPECT_EQ(end.count_ns(), 1'250);
  EXPECT_EQ(end - start, Duration::ns(250));
  EXPECT_EQ(start - end, Duration::ns(-250));  // a difference may be negative; a Duration::seconds may not
  EXPECT_EQ(Duration::ns(250) + start, end);
  EXPECT_EQ(end - Duration::ns(250), start);
  EXPECT_EQ(end.since_start(), Duration::ns(1'250));
  EXPECT_EQ(TimePoint::at(Duration::us(1.25)), end);
  EXPECT_EQ(TimePoint::seconds(1.25e-6), end);
  EXPECT_EQ(TimePoint{}.count_ns(), 0);
  TimePoint t = start;
  t += Duration::ns(5);
  EXPECT_EQ(t, TimePoint::ns(1'005));
}

TEST(TimePoint, Ordering) {
  EXPECT_LT(TimePoint::ns(1), TimePoint::ns(2));
  EXPECT_EQ(std::max(TimePoint::ns(7), TimePoint::ns(3)), TimePoint::ns(7));
  EXPECT_GE(TimePoint::ns(3), TimePoint{});
}

TEST(TimePoint, ClockReadingsFollowDurationRules) {
  EXPECT_THROW((void)TimePoint::seconds(-1e-9), UnitError);
  EXPECT_THROW((void)TimePoint::seconds(std::numeric_limits<double>::quiet_NaN()), UnitError);
}

TEST(FlopRate, ConvertsAndTimesCompute) {
  EXPECT_EQ(FlopRate::from_TFLOPs(989).flops_per_s(), 989e12);
  EXPECT_EQ(FlopRate::from_flops_per_s(5e14).TFLOPs(), 500);
  // 2e15 FLOPs at 1000 TFLOP/s and half efficiency: 4 s.
  EXPECT_EQ(compute_seconds(Flops(2e15), FlopRate::from_TFLOPs(1000) * 0.5), 4.0);
  EXPECT_EQ(0.5 * FlopRate::from_TFLOPs(1000), FlopRate::from_TFLOPs(500));
}

TEST(Units, FloatingConversions) {
  EXPECT_EQ(us_to_seconds(2), 2e-6);
  EXPECT_EQ(ms_to_seconds(1.5), 1.5e-3);
  EXPECT_EQ(seconds_to_us(2e-6), 2);
  EXPECT_EQ(Gbps_to_GBps(400), 50);
}

}  // namespace hzp::core
