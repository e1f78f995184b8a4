// Strong types for the quantities hzp computes with: bytes, floating-point
// operations and time. Conversions to bare numbers happen only at the edges
// (JSON, printing, SimGrid seconds, CUDA milliseconds).
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>

namespace hzp::core {

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

/// Simulated or measured time, integer nanoseconds.
class Duration {
 public:
  constexpr Duration() = default;
  [[nodiscard]] static constexpr Duration ns(std::int64_t n) { return Duration(n); }
  /// Rounds to the nearest nanosecond; saturates at kMaxSeconds (about 146
  /// years: any longer simulated time is meaningless, and must not overflow).
  static constexpr double kMaxSeconds = 4.6e9;
  [[nodiscard]] static Duration seconds(double s) {
    if (!(s < kMaxSeconds)) s = kMaxSeconds;  // also catches NaN and +inf
    if (s < 0) s = 0;
    return Duration(static_cast<std::int64_t>(std::llround(s * 1e9)));
  }
  [[nodiscard]] static Duration us(double u) { return seconds(u * 1e-6); }
  [[nodiscard]] constexpr std::int64_t count_ns() const { return ns_; }
  [[nodiscard]] constexpr double to_seconds() const { return static_cast<double>(ns_) * 1e-9; }
  [[nodiscard]] constexpr double to_ms() const { return static_cast<double>(ns_) * 1e-6; }
  [[nodiscard]] constexpr double to_us() const { return static_cast<double>(ns_) * 1e-3; }

  constexpr Duration& operator+=(Duration o) {
    ns_ += o.ns_;
    return *this;
  }
  friend constexpr Duration operator+(Duration a, Duration b) { return Duration(a.ns_ + b.ns_); }
  friend constexpr Duration operator-(Duration a, Duration b) { return Duration(a.ns_ - b.ns_); }
  friend constexpr auto operator<=>(Duration, Duration) = default;

 private:
  constexpr explicit Duration(std::int64_t n) : ns_(n) {}
  std::int64_t ns_ = 0;
};

/// Time on the simulated or measured clock (the step starts at zero).
using TimePoint = Duration;

}  // namespace hzp::core
