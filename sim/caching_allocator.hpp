// A model of PyTorch's CUDA caching allocator, for the memory a plan really
// reserves: requests are rounded, served best-fit from cached free blocks
// (split when the rest is worth keeping), and only when nothing fits is a new
// segment reserved from the device; freed blocks coalesce with free
// neighbours of the same segment but are never returned. Reserved minus
// allocated is the fragmentation a plan pays for allocating per use.
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/units.hpp"

namespace hzp::sim {

class CachingAllocator {
 public:
  // Block rounding and segment sizes, from PyTorch's CUDACachingAllocator.cpp
  // (kMinBlockSize 512 B, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer
  // 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB).
  static constexpr std::int64_t kMinBlock = 512;
  static constexpr std::int64_t kSmallSize = 1 << 20;
  static constexpr std::int64_t kSmallSegment = 2 << 20;
  static constexpr std::int64_t kLargeSegment = 20 << 20;
  static constexpr std::int64_t kMinLargeAlloc = 10 << 20;
  static constexpr std::int64_t kRoundLarge = 2 << 20;

  /// Buffers are named by view: a name must outlive its allocation (callers
  /// pass the Schedule's own op.buffer strings).
  void allocate(std::string_view buffer, core::Bytes bytes);
  void free(std::string_view buffer);

  [[nodiscard]] core::Bytes allocated() const { return core::Bytes(allocated_); }
  [[nodiscard]] core::Bytes reserved() const { return core::Bytes(reserved_); }

 private:
  struct Block {
    std::int64_t offset = 0, size = 0;
    bool free = true;
  };
  struct Segment {
    bool small = false;
    std::vector<Block> blocks;  // by offset, covering the segment
  };
  using FreeKey = std::tuple<std::int64_t, int, std::int64_t>;  // size, segment, offset
  // Cached free blocks, best fit first. Sorted vectors, not trees: a step
  // holds tens of segments and free blocks, where a binary search and a
  // short move beat a tree's node per insert.
  using FreePool = std::vector<FreeKey>;
  static void pool_insert(FreePool& pool, const FreeKey& key);
  static void pool_erase(FreePool& pool, const FreeKey& key);

  std::vector<Segment> segments_;  // by id
  FreePool free_small_, free_large_;
  std::unordered_map<std::string_view, std::tuple<int, std::int64_t, std::int64_t>>
      live_;  // buffer -> segment, offset, requested
  std::int64_t allocated_ = 0, reserved_ = 0;
};

}  // namespace hzp::sim
