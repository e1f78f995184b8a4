// Caching allocator model (see caching_allocator.hpp).
#include "sim/caching_allocator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hzp::sim {

void CachingAllocator::pool_insert(FreePool& pool, const FreeKey& key) {
  pool.insert(std::lower_bound(pool.begin(), pool.end(), key), key);
}

void CachingAllocator::pool_erase(FreePool& pool, const FreeKey& key) {
  auto it = std::lower_bound(pool.begin(), pool.end(), key);
  if (it == pool.end() || *it != key) throw std::logic_error("caching allocator: free block not in its pool");
  pool.erase(it);
}

void CachingAllocator::allocate(std::string_view buffer, core::Bytes bytes) {
  const std::int64_t request = bytes.count();
  if (request <= 0) {
    live_[buffer] = {-1, 0, 0};
    return;
  }
  const std::int64_t size = (request + kMinBlock - 1) / kMinBlock * kMinBlock;
  const bool small = size <= kSmallSize;
  FreePool& pool = small ? free_small_ : free_large_;
  auto it = std::lower_bound(pool.begin(), pool.end(), FreeKey{size, -1, -1});
  int seg_id = 0;
  std::int64_t offset = 0;
  if (it != pool.end()) {
    const auto [block_size, s, off] = *it;
    pool.erase(it);
    seg_id = s;
    offset = off;
    Segment& seg = segments_.at(static_cast<std::size_t>(s));
    auto b = std::lower_bound(seg.blocks.begin(), seg.blocks.end(), off,
                              [](const Block& x, std::int64_t o) { return x.offset < o; });
    b->free = false;
    // Split when the remainder is worth keeping (PyTorch: > 512 B small, > 1 MiB large).
    const std::int64_t rest = block_size - size;
    if (rest > (small ? kMinBlock : kSmallSize)) {
      b->size = size;
      seg.blocks.insert(b + 1, Block{off + size, rest, true});
      pool_insert(pool, {rest, s, off + size});
    }
  } else {
    std::int64_t segment = small                   ? kSmallSegment
                           : size < kMinLargeAlloc ? kLargeSegment
                                                   : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    seg_id = static_cast<int>(segments_.size());
    Segment& seg = segments_.emplace_back();
    seg.small = small;
    seg.blocks.push_back(Block{0, size, false});
    if (segment > size) {
      seg.blocks.push_back(Block{size, segment - size, true});
      pool_insert(pool, {segment - size, seg_id, size});
    }
    reserved_ += segment;
  }
  if (!live_.emplace(buffer, std::tuple{seg_id, offset, request}).second) {
    throw std::logic_error("caching allocator: buffer '" + std::string(buffer) + "' allocated twice");
  }
  allocated_ += request;
}

void CachingAllocator::free(std::string_view buffer) {
  auto lit = live_.find(buffer);
  if (lit == live_.end())
    throw std::logic_error("caching allocator: buffer '" + std::string(buffer) + "' is not allocated");
  auto [seg_id, offset, request] = lit->second;
  live_.erase(lit);
  allocated_ -= request;
  if (seg_id < 0) return;
  Segment& seg = segments_.at(static_cast<std::size_t>(seg_id));
  FreePool& pool = seg.small ? free_small_ : free_large_;
  auto it = std::lower_bound(seg.blocks.begin(), seg.blocks.end(), offset,
                             [](const Block& x, std::int64_t o) { return x.offset < o; });
  it->free = true;
  // Coalesce with the free neighbours.
  auto next = std::next(it);
  if (next != seg.blocks.end() && next->free) {
    pool_erase(pool, {next->size, seg_id, next->offset});
    it->size += next->size;
    it = std::prev(seg.blocks.erase(next));
  }
  if (it != seg.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->free) {
      pool_erase(pool, {prev->size, seg_id, prev->offset});
      prev->size += it->size;
      it = std::prev(seg.blocks.erase(it));
    }
  }
  pool_insert(pool, {it->size, seg_id, it->offset});
}

}  // namespace hzp::sim
