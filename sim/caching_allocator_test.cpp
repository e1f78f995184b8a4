// The caching allocator model against allocation sequences worked out by hand.
#include "sim/caching_allocator.hpp"

#include <gtest/gtest.h>

namespace hzp::sim {
namespace {

constexpr std::int64_t MiB = 1 << 20;

TEST(CachingAllocator, ReusesAndSplitsBestFit) {
  CachingAllocator a;
  a.allocate("x", core::Bytes(100 * MiB));  // new segment of 100 MiB (rounded to 2 MiB)
  EXPECT_EQ(a.reserved().count(), 100 * MiB);
  a.free("x");
  a.allocate("y", core::Bytes(60 * MiB));  // served from the cached 100 MiB block, split 60 + 40
  a.allocate("z", core::Bytes(40 * MiB));  // the 40 MiB remainder
  EXPECT_EQ(a.reserved().count(), 100 * MiB);
  EXPECT_EQ(a.allocated().count(), 100 * MiB);
}

TEST(CachingAllocator, FragmentationWhenHolesAreTooSmall) {
  // Two 50 MiB buffers, free the first, then ask for 80 MiB: the 50 MiB hole
  // cannot serve it, so a new 80 MiB segment is reserved. 130 MiB allocated,
  // 180 MiB reserved — the 50 MiB hole is fragmentation.
  CachingAllocator a;
  a.allocate("a", core::Bytes(50 * MiB));
  a.allocate("b", core::Bytes(50 * MiB));
  a.free("a");
  a.allocate("c", core::Bytes(80 * MiB));
  EXPECT_EQ(a.allocated().count(), 130 * MiB);
  EXPECT_EQ(a.reserved().count(), 180 * MiB);
}

TEST(CachingAllocator, CoalescesNeighbours) {
  CachingAllocator a;
  a.allocate("big", core::Bytes(96 * MiB));
  a.free("big");
  a.allocate("p", core::Bytes(32 * MiB));
  a.allocate("q", core::Bytes(32 * MiB));
  a.allocate("r", core::Bytes(32 * MiB));
  a.free("p");
  a.free("q");  // p and q merge into one 64 MiB free block
  a.allocate("s", core::Bytes(64 * MiB));
  EXPECT_EQ(a.reserved().count(), 96 * MiB);
}

TEST(CachingAllocator, CoalescesBothSidesThenServesTheWholeBlock) {
  CachingAllocator a;
  a.allocate("big", core::Bytes(100 * MiB));
  a.free("big");                                                                    // one cached 100 MiB block
  for (const char* n : {"a", "b", "c", "d"}) a.allocate(n, core::Bytes(20 * MiB));  // 0, 20, 40, 60; 20 left at 80
  a.free("a");
  a.free("c");
  a.free("b");                             // a, b and c merge into 60 MiB at 0
  a.allocate("e", core::Bytes(60 * MiB));  // the 60 MiB block, whole
  a.allocate("f", core::Bytes(20 * MiB));  // the 20 MiB at 80
  EXPECT_EQ(a.reserved().count(), 100 * MiB);
  EXPECT_EQ(a.allocated().count(), 100 * MiB);
  a.free("d");
  a.free("f");                             // d and f merge into 40 MiB at 60
  a.allocate("g", core::Bytes(30 * MiB));  // split from it: 10 MiB stay cached
  a.allocate("h", core::Bytes(10 * MiB));
  EXPECT_EQ(a.reserved().count(), 100 * MiB);
  a.allocate("i", core::Bytes(8 * MiB));  // nothing cached fits; under 10 MiB: a new 20 MiB segment
  EXPECT_EQ(a.reserved().count(), 120 * MiB);
  EXPECT_EQ(a.allocated().count(), 108 * MiB);
}

TEST(CachingAllocator, SmallRequestsUseSmallSegments) {
  CachingAllocator a;
  a.allocate("t", core::Bytes(1000));  // rounded to 1024, from a 2 MiB small segment
  EXPECT_EQ(a.reserved().count(), 2 * MiB);
  a.allocate("u", core::Bytes(5 * MiB));  // large pool: a 20 MiB segment
  EXPECT_EQ(a.reserved().count(), 22 * MiB);
}

}  // namespace
}  // namespace hzp::sim
