#include "sim/caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace pipecast {

Bytes AllocatorRoundSize(Bytes size) {
  if (size < kAllocMinBlockSize) return kAllocMinBlockSize;
  return kAllocMinBlockSize * ((size + kAllocMinBlockSize - 1) / kAllocMinBlockSize);
}

Bytes AllocatorSegmentSize(Bytes rounded) {
  if (rounded <= kAllocSmallSize) return kAllocSmallBuffer;
  if (rounded < kAllocMinLargeAlloc) return kAllocLargeBuffer;
  return kAllocRoundLarge * ((rounded + kAllocRoundLarge - 1) / kAllocRoundLarge);
}

std::map<Bytes, CachingAllocator::Block>::iterator CachingAllocator::Neighbour(
    std::map<Bytes, Block>::iterator it, bool next) {
  if (next) {
    auto n = std::next(it);
    return n != blocks_.end() && n->second.segment == it->second.segment ? n : blocks_.end();
  }
  if (it == blocks_.begin()) return blocks_.end();
  auto p = std::prev(it);
  return p->second.segment == it->second.segment ? p : blocks_.end();
}

Bytes CachingAllocator::FindFree(bool small, int stream, Bytes size) {
  std::set<FreeKey>& pool = PoolOf(small);
  auto it = pool.lower_bound({stream, size, 0});
  if (it == pool.end() || std::get<0>(*it) != stream) return -1;
  const Bytes address = std::get<2>(*it);
  pool.erase(it);
  return address;
}

Bytes CachingAllocator::NewSegment(Bytes segment_size, bool small, int stream) {
  if (capacity_ > 0 && stats_.reserved + segment_size > capacity_) return -1;
  const Bytes address = next_address_;
  next_address_ += segment_size;
  blocks_[address] = Block{.size = segment_size,
                           .segment = next_segment_++,
                           .stream = stream,
                           .small = small,
                           .allocated = false};
  stats_.reserved += segment_size;
  reserved_by_stream_[stream] += segment_size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.cuda_mallocs;
  return address;
}

void CachingAllocator::ReleaseCached() {
  for (bool small : {false, true}) {
    std::set<FreeKey>& pool = PoolOf(small);
    std::vector<FreeKey> whole;
    for (const FreeKey& key : pool) {
      auto it = blocks_.find(std::get<2>(key));
      if (Neighbour(it, false) == blocks_.end() && Neighbour(it, true) == blocks_.end()) {
        whole.push_back(key);
      }
    }
    for (const FreeKey& key : whole) {
      pool.erase(key);
      stats_.reserved -= std::get<1>(key);
      reserved_by_stream_[std::get<0>(key)] -= std::get<1>(key);
      ++stats_.cuda_frees;
      blocks_.erase(std::get<2>(key));
    }
  }
}

Result<int64_t> CachingAllocator::Malloc(Bytes orig_size, int stream) {
  const Bytes size = AllocatorRoundSize(orig_size);
  const bool small = size <= kAllocSmallSize;
  Bytes address = FindFree(small, stream, size);
  if (address < 0) {
    const Bytes segment_size = AllocatorSegmentSize(size);
    address = NewSegment(segment_size, small, stream);
    if (address < 0) {
      ReleaseCached();
      ++stats_.retries;
      address = NewSegment(segment_size, small, stream);
    }
    if (address < 0) {
      return Status::FailedPrecondition(
          fmt::format("caching allocator: out of memory for {} B on stream {} ({} B reserved, {} B "
                      "allocated, capacity {} B)",
                      orig_size, stream, stats_.reserved, stats_.allocated, capacity_));
    }
  }
  Block& block = blocks_.at(address);
  const Bytes remaining = block.size - size;
  const bool split = small ? remaining >= kAllocMinBlockSize : remaining > kAllocSmallSize;
  if (split) {
    Block rest = block;
    rest.size = remaining;
    block.size = size;
    blocks_[address + size] = rest;
    PoolOf(small).insert({stream, remaining, address + size});
  }
  Block& found = blocks_.at(address);
  found.allocated = true;
  stats_.allocated += found.size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  const int64_t id = next_id_++;
  live_[id] = address;
  return id;
}

void CachingAllocator::Free(int64_t id) {
  auto live = live_.find(id);
  if (live == live_.end()) return;
  auto it = blocks_.find(live->second);
  live_.erase(live);
  it->second.allocated = false;
  stats_.allocated -= it->second.size;
  std::set<FreeKey>& pool = PoolOf(it->second.small);
  for (bool next : {false, true}) {
    auto n = Neighbour(it, next);
    if (n == blocks_.end() || n->second.allocated) continue;
    pool.erase({n->second.stream, n->second.size, n->first});
    if (next) {
      it->second.size += n->second.size;
      blocks_.erase(n);
    } else {
      n->second.size += it->second.size;
      n->second.allocated = false;
      blocks_.erase(it);
      it = n;
    }
  }
  pool.insert({it->second.stream, it->second.size, it->first});
}

void CachingAllocator::ResetPeaks() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace pipecast
