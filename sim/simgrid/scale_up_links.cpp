// Max-min fair rates on a scale-up domain's links (see scale_up_links.hpp).
#include "sim/simgrid/scale_up_links.hpp"

namespace hzp::sim::simgrid {

void max_min_rates(std::span<const double> capacity, std::span<const LinkPair> routes, std::span<double> rates) {
  // A domain holds a few dozen flows on a few dozen links: plain scans.
  std::vector<double> left(capacity.begin(), capacity.end());
  std::vector<int> unfixed(capacity.size(), 0);
  for (const LinkPair& r : routes) {
    for (int l : r) {
      if (l >= 0) ++unfixed[static_cast<std::size_t>(l)];
    }
  }
  std::vector<char> fixed(routes.size(), 0);
  std::size_t open = routes.size();
  while (open > 0) {
    int bottleneck = -1;
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < left.size(); ++l) {
      if (unfixed[l] > 0 && left[l] / unfixed[l] < share) {
        share = left[l] / unfixed[l];
        bottleneck = static_cast<int>(l);
      }
    }
    for (std::size_t f = 0; f < routes.size(); ++f) {
      const LinkPair& r = routes[f];
      // A flow on no link at all is unbounded (infinite share, ends at once).
      if (fixed[f] || (bottleneck >= 0 && r[0] != bottleneck && r[1] != bottleneck)) continue;
      rates[f] = share;
      fixed[f] = 1;
      --open;
      for (int l : r) {
        if (l < 0) continue;
        left[static_cast<std::size_t>(l)] -= share;
        --unfixed[static_cast<std::size_t>(l)];
      }
    }
  }
}

}  // namespace hzp::sim::simgrid
