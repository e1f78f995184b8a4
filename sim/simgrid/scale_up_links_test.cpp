// Max-min fair sharing of a scale-up domain's links, by hand.
#include "sim/simgrid/scale_up_links.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace hzp::sim::simgrid {
namespace {

// Four devices behind a switch: out ports 0-3, in ports 4-7, 100 B/s each.
constexpr int kOut = 0, kIn = 4;
const std::vector<double> kPorts(8, 100.0);

TEST(MaxMinRates, FlowsLeavingOnePortShareItEvenly) {
  // 0->1, 0->2, 0->3 share out port 0; 1->2 is alone on out 1 but shares in 2 with 0->2.
  const std::vector<LinkPair> routes{
      {kOut + 0, kIn + 1}, {kOut + 0, kIn + 2}, {kOut + 0, kIn + 3}, {kOut + 1, kIn + 2}};
  std::vector<double> rates(routes.size());
  max_min_rates(kPorts, routes, rates);
  // Out 0 is the bottleneck (100/3 each); in 2 then has 100 - 100/3 left for 1->2.
  EXPECT_DOUBLE_EQ(rates[0], 100.0 / 3);
  EXPECT_DOUBLE_EQ(rates[1], 100.0 / 3);
  EXPECT_DOUBLE_EQ(rates[2], 100.0 / 3);
  EXPECT_DOUBLE_EQ(rates[3], 100.0 - 100.0 / 3);
}

TEST(MaxMinRates, ARingGetsEveryPortWhole) {
  const std::vector<LinkPair> routes{{0, 5}, {1, 6}, {2, 7}, {3, 4}};
  std::vector<double> rates(routes.size());
  max_min_rates(kPorts, routes, rates);
  for (double r : rates) EXPECT_DOUBLE_EQ(r, 100.0);
}

TEST(MaxMinRates, SingleLinkRoutesAndTheUnboundedFlow) {
  // A full mesh's pair links: two flows on link 0 (10 B/s), one on link 1 (30 B/s).
  const std::vector<double> pairs{10.0, 30.0};
  const std::vector<LinkPair> routes{{0, -1}, {0, -1}, {1, -1}, {-1, -1}};
  std::vector<double> rates(routes.size());
  max_min_rates(pairs, routes, rates);
  EXPECT_DOUBLE_EQ(rates[0], 5.0);
  EXPECT_DOUBLE_EQ(rates[1], 5.0);
  EXPECT_DOUBLE_EQ(rates[2], 30.0);
  EXPECT_TRUE(std::isinf(rates[3]));
}

TEST(ScaleUpLinks, FlowsSpeedUpWhenOthersEnd) {
  // 0->1 (100 B) and 0->2 (300 B) share out 0 at 50 B/s: the first ends at
  // t = 2 s, having sent 100; the second has 200 left, now at 100 B/s: t = 4 s.
  // A third flow 3->2 (50 B) joins at t = 3 s and shares in 2: 50 B/s each, so
  // it ends at 4 s and 0->2 (100 B left at 3 s) at 3 + 1 + 50/100 = 4.5 s.
  ScaleUpLinks<std::string> links(kPorts);
  std::vector<std::string> ended;
  auto end = [&](const std::string& who) { ended.push_back(who); };
  links.add({kOut + 0, kIn + 1}, 100, "a");
  links.add({kOut + 0, kIn + 2}, 300, "b");
  links.solve();
  EXPECT_DOUBLE_EQ(links.next_end(), 2.0);
  links.finish_due(2.0, end);
  EXPECT_EQ(ended, std::vector<std::string>{"a"});
  EXPECT_DOUBLE_EQ(links.next_end(), 4.0);
  links.advance(3.0);
  links.add({kOut + 3, kIn + 2}, 50, "c");
  links.solve();
  EXPECT_DOUBLE_EQ(links.next_end(), 4.0);
  links.finish_due(4.0, end);
  EXPECT_EQ(ended, (std::vector<std::string>{"a", "c"}));
  EXPECT_DOUBLE_EQ(links.next_end(), 4.5);
  links.finish_due(4.5, end);
  EXPECT_EQ(ended, (std::vector<std::string>{"a", "c", "b"}));
  EXPECT_EQ(links.flows(), 0u);
  EXPECT_TRUE(std::isinf(links.next_end()));
}

TEST(ScaleUpLinks, FlowsThatEndTogetherEndAtOneTimer) {
  ScaleUpLinks<int> links(kPorts);
  links.add({0, 5}, 100, 1);
  links.add({1, 6}, 100, 2);
  links.add({2, 7}, 200, 3);
  links.solve();
  std::vector<int> ended;
  links.finish_due(links.next_end(), [&](int who) { ended.push_back(who); });
  EXPECT_EQ(ended, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(links.next_end(), 2.0);
}

}  // namespace
}  // namespace hzp::sim::simgrid
