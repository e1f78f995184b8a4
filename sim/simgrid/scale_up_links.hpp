// The links of one scale-up domain (NVLink through an NVSwitch, or a full
// mesh) and the flows on them, shared as SimGrid's CM02 model shares them on
// this platform (no latency on these links, TCP-gamma 0, one weight for every
// flow): max-min fairly. Flows between two devices of one domain use only the
// domain's own links (platform.cpp), so the SimGrid engine solves them here
// rather than as SimGrid network actions: they are most of `--ranks all`'s
// flows, and each costs SimGrid an activity, a route and a solver variable.
// Pure bookkeeping, no SimGrid: the engine sets its timers from next_end().
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace hzp::sim::simgrid {

/// A flow's links inside its domain: one (a full mesh's pair link) or two
/// (the sender's NVSwitch port out, the receiver's port in); -1 for none.
using LinkPair = std::array<int, 2>;

/// Max-min fair rates (progressive filling): every flow on the link whose
/// capacity left over its unfixed flows is the smallest gets that share,
/// which is taken from the other link it crosses, until every flow is fixed.
/// `capacity` in bytes/s per link; `rates` gets one rate per route.
void max_min_rates(std::span<const double> capacity, std::span<const LinkPair> routes, std::span<double> rates);

/// The flows in flight on one domain's links. `Owner` is what the engine
/// wants back when a flow ends (who waits for it).
template <class Owner>
class ScaleUpLinks {
 public:
  explicit ScaleUpLinks(std::vector<double> capacity) : capacity_(std::move(capacity)) {}

  /// Progresses every flow to `now` (seconds; not before the last call).
  void advance(double now) {
    const double dt = now - last_;
    if (dt <= 0) return;  // SimGrid's clock may land a rounding short of a timer's date
    for (std::size_t f = 0; f < routes_.size(); ++f) remaining_[f] -= rates_[f] * dt;
    last_ = now;
  }
  /// Puts a flow of `bytes` over the links of `route` at the time of the last
  /// advance(); rates are stale until solve().
  void add(LinkPair route, double bytes, Owner owner) {
    routes_.push_back(route);
    remaining_.push_back(bytes);
    rates_.push_back(0);
    ends_.push_back(std::numeric_limits<double>::infinity());
    owners_.push_back(owner);
  }
  /// Shares the links among the flows on them now, and when each would end.
  void solve() {
    max_min_rates(capacity_, routes_, rates_);
    next_end_ = std::numeric_limits<double>::infinity();
    for (std::size_t f = 0; f < routes_.size(); ++f) {
      ends_[f] = last_ + std::max(0.0, remaining_[f]) / rates_[f];
      next_end_ = std::min(next_end_, ends_[f]);
    }
  }
  /// When the next flow ends (infinity when none is on the links).
  [[nodiscard]] double next_end() const { return next_end_; }
  [[nodiscard]] std::size_t flows() const { return routes_.size(); }

  /// At `now` (a next_end()): takes off every flow due by then, handing each
  /// one's owner to `ended`, progresses the others and shares the links again.
  template <class Ended>
  void finish_due(double now, Ended&& ended) {
    advance(now);
    // Ends computed from the same sums as next_end(); a picosecond per
    // simulated second absorbs the rounding of two flows that end together.
    const double due = now + 1e-12 * std::max(1.0, now);
    std::size_t kept = 0;
    for (std::size_t f = 0; f < routes_.size(); ++f) {
      if (ends_[f] <= due) {
        ended(owners_[f]);
        continue;
      }
      routes_[kept] = routes_[f];
      remaining_[kept] = remaining_[f];
      owners_[kept] = owners_[f];
      ++kept;
    }
    routes_.resize(kept);
    remaining_.resize(kept);
    rates_.resize(kept);
    ends_.resize(kept);
    owners_.resize(kept);
    solve();
  }

 private:
  std::vector<double> capacity_;
  double last_ = 0;
  double next_end_ = std::numeric_limits<double>::infinity();
  // One entry per flow in flight, in the order they were added.
  std::vector<LinkPair> routes_;
  std::vector<double> remaining_, rates_, ends_;
  std::vector<Owner> owners_;
};

}  // namespace hzp::sim::simgrid
