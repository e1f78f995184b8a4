// Caching allocator model (see caching_allocator.hpp).
#include "sim/caching_allocator.hpp"

#include <stdexcept>
#include <string>

namespace hzp::sim {

void CachingAllocator::allocate(std::string_view buffer, core::Bytes bytes) {
  const std::int64_t request = bytes.count();
  if (request <= 0) {
    live_[buffer] = {-1, 0, 0};
    return;
  }
  const std::int64_t size = (request + kMinBlock - 1) / kMinBlock * kMinBlock;
  const bool small = size <= kSmallSize;
  auto& pool = small ? free_small_ : free_large_;
  auto it = pool.lower_bound({size, -1, -1});
  int seg_id = 0;
  std::int64_t offset = 0;
  if (it != pool.end()) {
    auto [block_size, s, off] = *it;
    pool.erase(it);
    seg_id = s;
    offset = off;
    Segment& seg = segments_.at(static_cast<std::size_t>(s));
    // Split when the remainder is worth keeping (PyTorch: > 512 B small, > 1 MiB large).
    const std::int64_t rest = block_size - size;
    if (rest > (small ? kMinBlock : kSmallSize)) {
      seg.blocks[off] = Block{size, false};
      seg.blocks[off + size] = Block{rest, true};
      pool.insert({rest, s, off + size});
    } else {
      seg.blocks[off].free = false;
    }
  } else {
    std::int64_t segment = small                   ? kSmallSegment
                           : size < kMinLargeAlloc ? kLargeSegment
                                                   : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    seg_id = static_cast<int>(segments_.size());
    Segment& seg = segments_.emplace_back();
    seg.small = small;
    seg.blocks[0] = Block{size, false};
    if (segment > size) {
      seg.blocks[size] = Block{segment - size, true};
      pool.insert({segment - size, seg_id, size});
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
  if (lit == live_.end()) throw std::logic_error("caching allocator: buffer '" + std::string(buffer) + "' is not allocated");
  auto [seg_id, offset, request] = lit->second;
  live_.erase(lit);
  allocated_ -= request;
  if (seg_id < 0) return;
  Segment& seg = segments_.at(static_cast<std::size_t>(seg_id));
  auto& pool = seg.small ? free_small_ : free_large_;
  auto it = seg.blocks.find(offset);
  it->second.free = true;
  // Coalesce with the free neighbours.
  auto next = std::next(it);
  if (next != seg.blocks.end() && next->second.free) {
    pool.erase({next->second.size, seg_id, next->first});
    it->second.size += next->second.size;
    seg.blocks.erase(next);
  }
  if (it != seg.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      pool.erase({prev->second.size, seg_id, prev->first});
      prev->second.size += it->second.size;
      seg.blocks.erase(it);
      it = prev;
    }
  }
  pool.insert({it->second.size, seg_id, it->first});
}

}  // namespace hzp::sim
