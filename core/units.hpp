// Strong types for the quantities hzp computes with: bytes, floating-point
// operations, time, bandwidth and compute rate. Unit conversions happen only here; to bare
// numbers only at the edges (JSON, printing, SimGrid seconds, CUDA milliseconds).
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace hzp::core {

/// A NaN, negative or infinite count given to a Duration factory. Throws
/// UnitError (core/error.hpp) naming the unit and the value.
[[noreturn]] void throw_bad_duration(const char* unit, double value);

/// A byte count. Signed so that memory deltas (free = negative) stay in type.
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(std::int64_t n) : n_(n) {}
  [[nodiscard]] constexpr std::int64_t count() const { return n_; }
  [[nodiscard]] constexpr double gib() const { return static_cast<double>(n_) / (1024.0 * 1024.0 * 1024.0); }
  [[nodiscard]] constexpr double gb() const { return static_cast<double>(n_) / 1e9; }

  constexpr Bytes& operator+=(Bytes o) {
    n_ += o.n_;
    return *this;
  }
  constexpr Bytes& operator-=(Bytes o) {
    n_ -= o.n_;
    return *this;
  }
  friend constexpr Bytes operator+(Bytes a, Bytes b) { return Bytes(a.n_ + b.n_); }
  friend constexpr Bytes operator-(Bytes a, Bytes b) { return Bytes(a.n_ - b.n_); }
  friend constexpr Bytes operator-(Bytes a) { return Bytes(-a.n_); }
  friend constexpr Bytes operator*(Bytes a, std::int64_t k) { return Bytes(a.n_ * k); }
  friend constexpr Bytes operator*(std::int64_t k, Bytes a) { return Bytes(a.n_ * k); }
  friend constexpr auto operator<=>(Bytes, Bytes) = default;

 private:
  std::int64_t n_ = 0;
};

[[nodiscard]] constexpr Bytes gib(double g) { return Bytes(static_cast<std::int64_t>(g * 1024.0 * 1024.0 * 1024.0)); }

/// A count of floating-point operations (multiply and add count as two).
/// A double: a training step of a large model exceeds 2^63 FLOPs.
class Flops {
 public:
  constexpr Flops() = default;
  constexpr explicit Flops(double f) : f_(f) {}
  [[nodiscard]] constexpr double count() const { return f_; }
  constexpr Flops& operator+=(Flops o) {
    f_ += o.f_;
    return *this;
  }
  friend constexpr Flops operator+(Flops a, Flops b) { return Flops(a.f_ + b.f_); }
  friend constexpr Flops operator*(Flops a, double k) { return Flops(a.f_ * k); }
  friend constexpr Flops operator*(double k, Flops a) { return Flops(a.f_ * k); }
  friend constexpr auto operator<=>(Flops, Flops) = default;

 private:
  double f_ = 0;
};

/// std::llround without the library call (the engines round every kernel's
/// and transfer's duration): to the nearest integer, halves away from zero.
/// Exact wherever llround is defined (|x| < 2^63): the truncation toward zero
/// and its difference from x are exact in doubles.
[[nodiscard]] constexpr std::int64_t round_nearest(double x) {
  auto t = static_cast<std::int64_t>(x);
  const double f = x - static_cast<double>(t);
  if (f >= 0.5) {
    ++t;
  } else if (f <= -0.5) {
    --t;
  }
  return t;
}

/// Simulated or measured time, integer nanoseconds. The factories that take
/// a floating-point count throw UnitError on NaN, on a negative count and on
/// +infinity; finite counts beyond kMaxSeconds saturate there.
class Duration {
 public:
  constexpr Duration() = default;
  [[nodiscard]] static constexpr Duration ns(std::int64_t n) { return Duration(n); }
  /// Rounds to the nearest nanosecond; saturates at kMaxSeconds (about 146
  /// years: any longer simulated time is meaningless, and must not overflow).
  static constexpr double kMaxSeconds = 4.6e9;
  [[nodiscard]] static Duration seconds(double s) {
    if (!(s >= 0) || s == kInfinity) throw_bad_duration("seconds", s);  // !(s >= 0) also catches NaN
    if (s > kMaxSeconds) s = kMaxSeconds;
    return Duration(round_nearest(s * 1e9));
  }
  [[nodiscard]] static Duration ms(double m) {
    if (!(m >= 0)) throw_bad_duration("milliseconds", m);
    return seconds(m * 1e-3);
  }
  [[nodiscard]] static Duration us(double u) {
    if (!(u >= 0)) throw_bad_duration("microseconds", u);
    return seconds(u * 1e-6);
  }
  [[nodiscard]] constexpr std::int64_t count_ns() const { return ns_; }
  [[nodiscard]] constexpr double to_seconds() const { return static_cast<double>(ns_) * 1e-9; }
  /// The same arithmetic as the printing they replaced (the validation
  /// report's milliseconds, the Chrome trace's issued_us), bit for bit.
  [[nodiscard]] constexpr double to_ms() const { return to_seconds() * 1e3; }
  [[nodiscard]] constexpr double to_us() const { return static_cast<double>(ns_) / 1e3; }

  constexpr Duration& operator+=(Duration o) {
    ns_ = add(ns_, o.ns_);
    return *this;
  }
  friend constexpr Duration operator+(Duration a, Duration b) { return Duration(add(a.ns_, b.ns_)); }
  friend constexpr Duration operator-(Duration a, Duration b) { return Duration(sub(a.ns_, b.ns_)); }
  friend constexpr auto operator<=>(Duration, Duration) = default;

 private:
  // Sums and differences saturate at the int64 range (about 292 years)
  // instead of overflowing: a Schedule of many ops that each saturate at
  // kMaxSeconds (a GEMM of 1e300 FLOPs) still has defined times.
  static constexpr std::int64_t add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
  }
  static constexpr std::int64_t sub(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
  }
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  constexpr explicit Duration(std::int64_t n) : ns_(n) {}
  std::int64_t ns_ = 0;
};

/// A point on the simulated or measured clock, nanoseconds since the step
/// started. Points subtract to a Duration; a Duration moves a point.
class TimePoint {
 public:
  constexpr TimePoint() = default;
  [[nodiscard]] static constexpr TimePoint ns(std::int64_t n) { return TimePoint(Duration::ns(n)); }
  [[nodiscard]] static constexpr TimePoint at(Duration since_start) { return TimePoint(since_start); }
  /// A clock reading in seconds (SimGrid's clock); as Duration::seconds.
  [[nodiscard]] static TimePoint seconds(double s) { return TimePoint(Duration::seconds(s)); }
  [[nodiscard]] constexpr Duration since_start() const { return d_; }
  [[nodiscard]] constexpr std::int64_t count_ns() const { return d_.count_ns(); }

  constexpr TimePoint& operator+=(Duration d) {
    d_ += d;
    return *this;
  }
  friend constexpr TimePoint operator+(TimePoint t, Duration d) { return TimePoint(t.d_ + d); }
  friend constexpr TimePoint operator+(Duration d, TimePoint t) { return TimePoint(t.d_ + d); }
  friend constexpr TimePoint operator-(TimePoint t, Duration d) { return TimePoint(t.d_ - d); }
  friend constexpr Duration operator-(TimePoint a, TimePoint b) { return a.d_ - b.d_; }
  friend constexpr auto operator<=>(TimePoint, TimePoint) = default;

 private:
  constexpr explicit TimePoint(Duration d) : d_(d) {}
  Duration d_{};
};

/// A data rate, bytes per second (a double: rates are model inputs and
/// efficiencies scale them). Catalogs give GB/s (1e9 B/s) for memory and
/// scale-up links and Gb/s (1e9 bit/s) for NICs.
class Bandwidth {
 public:
  constexpr Bandwidth() = default;
  [[nodiscard]] static constexpr Bandwidth from_bytes_per_s(double b) { return Bandwidth(b); }
  [[nodiscard]] static constexpr Bandwidth from_GBps(double g) { return Bandwidth(g * 1e9); }
  [[nodiscard]] static constexpr Bandwidth from_Gbps(double g) { return Bandwidth(g / 8 * 1e9); }
  [[nodiscard]] constexpr double bytes_per_s() const { return b_; }
  [[nodiscard]] constexpr double GBps() const { return b_ / 1e9; }

  /// Scaled by a factor: an efficiency, one over an oversubscription.
  friend constexpr Bandwidth operator*(Bandwidth a, double k) { return Bandwidth(a.b_ * k); }
  friend constexpr Bandwidth operator*(double k, Bandwidth a) { return Bandwidth(a.b_ * k); }
  friend constexpr Bandwidth operator/(Bandwidth a, double k) { return Bandwidth(a.b_ / k); }
  /// The ratio of two rates (a share of a link).
  friend constexpr double operator/(Bandwidth a, Bandwidth b) { return a.b_ / b.b_; }
  friend constexpr auto operator<=>(Bandwidth, Bandwidth) = default;

 private:
  constexpr explicit Bandwidth(double b) : b_(b) {}
  double b_ = 0;
};

/// A compute rate, floating-point operations per second. Catalogs give
/// TFLOP/s (1e12 FLOP/s).
class FlopRate {
 public:
  constexpr FlopRate() = default;
  [[nodiscard]] static constexpr FlopRate from_flops_per_s(double f) { return FlopRate(f); }
  [[nodiscard]] static constexpr FlopRate from_TFLOPs(double t) { return FlopRate(t * 1e12); }
  [[nodiscard]] constexpr double flops_per_s() const { return f_; }
  [[nodiscard]] constexpr double TFLOPs() const { return f_ / 1e12; }

  /// Scaled by a factor: an efficiency.
  friend constexpr FlopRate operator*(FlopRate a, double k) { return FlopRate(a.f_ * k); }
  friend constexpr FlopRate operator*(double k, FlopRate a) { return FlopRate(a.f_ * k); }
  friend constexpr auto operator<=>(FlopRate, FlopRate) = default;

 private:
  constexpr explicit FlopRate(double f) : f_(f) {}
  double f_ = 0;
};

/// Seconds to compute `flops` at `rate`, unrounded.
[[nodiscard]] constexpr double compute_seconds(Flops flops, FlopRate rate) {
  return flops.count() / rate.flops_per_s();
}

/// Seconds to move `bytes` at `bw`, unrounded: the performance model adds
/// these to latencies before rounding the sum to a Duration.
[[nodiscard]] constexpr double transfer_seconds(double bytes, Bandwidth bw) { return bytes / bw.bytes_per_s(); }
[[nodiscard]] constexpr double transfer_seconds(Bytes bytes, Bandwidth bw) {
  return transfer_seconds(static_cast<double>(bytes.count()), bw);
}
/// The same, rounded to the nearest nanosecond. Throws UnitError where that
/// time is not a Duration (a zero, negative or NaN bandwidth).
[[nodiscard]] inline Duration operator/(Bytes bytes, Bandwidth bw) {
  return Duration::seconds(transfer_seconds(bytes, bw));
}

/// Catalog latencies (µs) and CUDA event times (ms) as unrounded seconds, for
/// the performance model's and the microbenchmarks' floating-point sums.
[[nodiscard]] constexpr double us_to_seconds(double us) { return us * 1e-6; }
[[nodiscard]] constexpr double ms_to_seconds(double ms) { return ms * 1e-3; }
/// Seconds as microseconds, for catalog values written back (calibration).
[[nodiscard]] constexpr double seconds_to_us(double s) { return s * 1e6; }
/// A NIC's line rate (Gb/s) as GB/s, for sums kept in the catalog's units.
[[nodiscard]] constexpr double Gbps_to_GBps(double g) { return g / 8; }

}  // namespace hzp::core
