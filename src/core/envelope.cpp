#include <swarmflow/envelope.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/small_block_cache.hpp"

namespace swarmflow {

namespace {

/// Small blocks freed on this thread, kept by exact size for its next
/// allocation of that size. A source makes a payload (its buffer and its
/// Payload) per envelope and frees them in bursts of hundreds when acks
/// release them; glibc's own per-thread cache keeps 7 blocks a size, so
/// the rest went through its bins at a cost of 10-15% of a source's time
/// (docs/benchmarks.md). At most kMaxBins sizes and kMaxBytes in all per
/// thread; freed on the thread's exit.
class SmallBlockCache {
 public:
  static constexpr std::size_t kMaxBlockBytes = 4096;
  static constexpr std::size_t kMaxBytes = 1u << 20;
  static constexpr std::size_t kMaxBins = 8;

  SmallBlockCache() = default;
  SmallBlockCache(const SmallBlockCache&) = delete;
  SmallBlockCache& operator=(const SmallBlockCache&) = delete;
  ~SmallBlockCache();

  void* take(std::size_t size) {
    for (auto& bin : bins_) {
      if (bin.size != size) continue;
      if (bin.blocks.empty()) return nullptr;
      void* block = bin.blocks.back();
      bin.blocks.pop_back();
      bytes_ -= size;
      return block;
    }
    return nullptr;
  }

  bool keep(void* block, std::size_t size) {
    if (size > kMaxBlockBytes || bytes_ + size > kMaxBytes) return false;
    Bin* bin = nullptr;
    for (auto& b : bins_) {
      if (b.size == size) bin = &b;
    }
    // Called from destructors: out of memory here just frees the block.
    try {
      if (bin == nullptr) {
        if (bins_.size() >= kMaxBins) return false;
        bins_.reserve(kMaxBins);  // so that `bin` stays valid below
        bins_.push_back(Bin{size, {}});
        bin = &bins_.back();
      }
      bin->blocks.push_back(block);
    } catch (const std::bad_alloc&) {
      return false;
    }
    bytes_ += size;
    return true;
  }

 private:
  struct Bin {
    std::size_t size;
    std::vector<void*> blocks;
  };
  std::vector<Bin> bins_;
  std::size_t bytes_ = 0;
};

// Trivially destructible, so still readable by thread_local destructors that
// run after the cache's own: a block freed then goes straight to the heap.
thread_local bool t_cache_gone = false;

SmallBlockCache::~SmallBlockCache() {
  t_cache_gone = true;
  for (auto& bin : bins_) {
    for (void* block : bin.blocks) ::operator delete(block);
  }
}

SmallBlockCache* small_blocks() {
  if (t_cache_gone) return nullptr;
  thread_local SmallBlockCache cache;
  return &cache;
}

void* allocate_small(std::size_t size) {
  if (size <= SmallBlockCache::kMaxBlockBytes) {
    if (SmallBlockCache* c = small_blocks()) {
      if (void* block = c->take(size)) return block;
    }
  }
  return ::operator new(size);
}

/// Small blocks freed after their thread's cache was gone (small_block_cache.hpp).
std::atomic<std::uint64_t> g_freed_after_cache{0};

void free_small(void* block, std::size_t size) {
  if (block == nullptr) return;
  if (size <= SmallBlockCache::kMaxBlockBytes) {
    SmallBlockCache* c = small_blocks();
    if (c == nullptr) {
      g_freed_after_cache.fetch_add(1, std::memory_order_relaxed);
    } else if (c->keep(block, size)) {
      return;
    }
  }
  ::operator delete(block);
}

/// For the shared_ptr control block of payloads made per envelope.
template <class T>
struct SmallBlockAllocator {
  using value_type = T;
  SmallBlockAllocator() = default;
  template <class U>
  SmallBlockAllocator(const SmallBlockAllocator<U>&) {}  // NOLINT: rebinding, as allocators must
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_small(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { free_small(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const SmallBlockAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const SmallBlockAllocator<U>&) const {
    return false;
  }
};

}  // namespace

std::shared_ptr<const Payload> Payload::from_builder(flatbuffers::FlatBufferBuilder& builder) {
  auto p = std::allocate_shared<Payload>(SmallBlockAllocator<Payload>{}, Key{});
  p->detached_ = builder.Release();
  p->data_ = p->detached_.data();
  p->size_ = p->detached_.size();
  return p;
}

std::shared_ptr<const Payload> Payload::copy_of(const void* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  return adopt(std::move(bytes));
}

std::shared_ptr<const Payload> Payload::adopt(std::vector<std::uint8_t> bytes) {
  auto p = std::make_shared<Payload>(Key{});
  p->bytes_ = std::move(bytes);
  p->data_ = p->bytes_.data();
  p->size_ = p->bytes_.size();
  return p;
}

std::shared_ptr<const Payload> Payload::wrap(const std::uint8_t* data, std::size_t size,
                                            std::shared_ptr<const void> owner) {
  auto p = std::make_shared<Payload>(Key{});
  p->owner_ = std::move(owner);
  p->data_ = data;
  p->size_ = size;
  return p;
}

void Payload::wrap_views(const Range* ranges, std::size_t count, std::shared_ptr<const void> owner,
                         std::vector<std::shared_ptr<const Payload>>* out) {
  if (count == 0) return;
  // One block holds every view; each shared_ptr handed out aliases it.
  struct Block {
    std::shared_ptr<const void> owner;
    std::unique_ptr<std::optional<Payload>[]> views;
  };
  auto block = std::make_shared<Block>();
  block->owner = std::move(owner);
  block->views.reset(new std::optional<Payload>[count]);
  out->reserve(out->size() + count);
  for (std::size_t i = 0; i < count; ++i) {
    Payload& p = block->views[i].emplace(Key{});
    p.data_ = ranges[i].data;
    p.size_ = ranges[i].size;
    out->emplace_back(block, &p);
  }
}

std::string_view Payload::identifier() const {
  constexpr std::size_t kOffset = sizeof(flatbuffers::uoffset_t);
  if (size_ < kOffset + flatbuffers::kFileIdentifierLength) return {};
  return {reinterpret_cast<const char*>(data_ + kOffset), flatbuffers::kFileIdentifierLength};
}

namespace {

class PooledAllocator final : public flatbuffers::Allocator {
 public:
  std::uint8_t* allocate(std::size_t size) override {
    if (size <= SmallBlockCache::kMaxBlockBytes) return static_cast<std::uint8_t*>(allocate_small(size));
    if (size >= kPooledPayloadBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        std::uint8_t* block = it->second.back();
        it->second.pop_back();
        kept_ -= size;
        return block;
      }
    }
    return new std::uint8_t[size];
  }

  void deallocate(std::uint8_t* p, std::size_t size) override {
    if (p == nullptr) return;
    if (size <= SmallBlockCache::kMaxBlockBytes) {
      free_small(p, size);
      return;
    }
    if (size >= kPooledPayloadBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kept_ + size <= kPooledPayloadLimit) {
        free_[size].push_back(p);
        kept_ += size;
        return;
      }
    }
    delete[] p;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<std::uint8_t*>> free_;  // by exact size
  std::size_t kept_ = 0;
};

}  // namespace

std::uint64_t small_blocks_freed_after_thread_cache() {
  return g_freed_after_cache.load(std::memory_order_relaxed);
}

flatbuffers::Allocator& payload_allocator() {
  // Never destroyed: payloads that outlive static destruction still free into it.
  static auto* allocator = new PooledAllocator();
  return *allocator;
}

bool keep_freed_frames_in_heap() {
#if defined(__GLIBC__)
  static const bool applied = [] {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
    for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"}) {
      if (std::getenv(name) != nullptr) return false;
    }
    // Both at once: setting either one turns off glibc's own adjustment of
    // the other.
    return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kFrameHeapMmapBytes)) == 1 &&
           mallopt(M_TRIM_THRESHOLD, static_cast<int>(kFrameHeapTrimBytes)) == 1;
  }();
  return applied;
#else
  return false;
#endif
}

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace swarmflow
