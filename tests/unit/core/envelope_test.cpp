#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/blob_generated.h>

#include "core/small_block_cache.hpp"

namespace swarmflow {
namespace {

PayloadPtr make_blob(std::uint64_t seq, std::size_t bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* data = nullptr;
  auto v = fbb.CreateUninitializedVector(bytes, &data);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i);
  fbb.Finish(schema::CreateBlob(fbb, 1, seq, v), schema::BlobIdentifier());
  return Payload::from_builder(fbb);
}

TEST(Envelope, PayloadFromBuilderKeepsIdentifierAndContent) {
  auto p = make_blob(42, 100);
  EXPECT_EQ(p->identifier(), "SFBL");
  const auto* blob = p->root<schema::Blob>();
  ASSERT_NE(blob, nullptr);
  EXPECT_EQ(blob->seq(), 42U);
  ASSERT_EQ(blob->data()->size(), 100U);
  EXPECT_EQ(blob->data()->Get(99), 99);
}

TEST(Envelope, CopyingAnEnvelopeSharesThePayloadBytes) {
  EnvelopeHeader h;
  h.stream = 3;
  h.seq = 7;
  Envelope a(h, make_blob(7, 1000));
  Envelope b = a;
  Envelope c = a.with_header(EnvelopeHeader{});
  EXPECT_EQ(a.payload().get(), b.payload().get());
  EXPECT_EQ(a.payload()->data(), c.payload()->data());
  EXPECT_EQ(b.header().seq, 7U);
  EXPECT_EQ(c.header().seq, 0U);
}

TEST(Envelope, HopTraceKeepsTheOldestWhenFull) {
  EnvelopeHeader h;
  for (int i = 0; i < static_cast<int>(kMaxHops) + 3; ++i) h.add_hop(i);
  EXPECT_EQ(h.hop_count, kMaxHops);
  EXPECT_EQ(h.hop_ns[0], 0);
  EXPECT_EQ(h.hop_ns[kMaxHops - 1], static_cast<std::int64_t>(kMaxHops) - 1);
}

TEST(Envelope, ShortBufferHasNoIdentifier) {
  std::uint8_t bytes[3] = {1, 2, 3};
  EXPECT_TRUE(Payload::copy_of(bytes, sizeof bytes)->identifier().empty());
}

TEST(Envelope, ViewsOfOneBufferShareItAndKeepItAlive) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(64);
  for (std::size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<std::uint8_t>(i);
  const std::weak_ptr<std::vector<std::uint8_t>> watch = bytes;
  const std::vector<Payload::Range> ranges{{bytes->data(), 8}, {bytes->data() + 8, 0}, {bytes->data() + 16, 48}};
  std::vector<PayloadPtr> views;
  Payload::wrap_views(ranges.data(), ranges.size(), std::move(bytes), &views);
  ASSERT_EQ(views.size(), 3U);
  EXPECT_EQ(views[0]->data(), ranges[0].data);  // the buffer's own bytes, not a copy
  EXPECT_EQ(views[0]->size(), 8U);
  EXPECT_EQ(views[1]->size(), 0U);
  EXPECT_EQ(views[2]->data()[0], 16);
  EXPECT_EQ(views[2]->size(), 48U);
  // Any one view keeps the buffer alive; the last one gone frees it.
  PayloadPtr last = views[2];
  views.clear();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(last->data()[47], 63);
  last.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(PayloadAllocator, ReusesALargeBlockForTheNextPayloadOfItsSize) {
  const std::size_t bytes = kPooledPayloadBytes * 2;
  const std::uint8_t* first_data = nullptr;
  {
    flatbuffers::FlatBufferBuilder fbb(bytes + 256, &payload_allocator());
    std::uint8_t* data = nullptr;
    auto v = fbb.CreateUninitializedVector(bytes, &data);
    fbb.Finish(schema::CreateBlob(fbb, 1, 1, v), schema::BlobIdentifier());
    PayloadPtr p = Payload::from_builder(fbb);
    first_data = p->data();
  }  // the payload is gone: its block is kept
  flatbuffers::FlatBufferBuilder fbb(bytes + 256, &payload_allocator());
  std::uint8_t* data = nullptr;
  auto v = fbb.CreateUninitializedVector(bytes, &data);
  fbb.Finish(schema::CreateBlob(fbb, 1, 2, v), schema::BlobIdentifier());
  PayloadPtr second = Payload::from_builder(fbb);
  EXPECT_EQ(second->data(), first_data) << "the same block, at the same place in it";
  EXPECT_EQ(second->root<schema::Blob>()->seq(), 2U);
}

TEST(PayloadAllocator, KeepsNoMoreThanItsLimit) {
  flatbuffers::Allocator& a = payload_allocator();
  const std::size_t block = kPooledPayloadLimit / 2 + 1;  // two of these do not fit
  std::uint8_t* one = a.allocate(block);
  std::uint8_t* two = a.allocate(block);
  a.deallocate(one, block);
  a.deallocate(two, block);  // over the limit: freed, not kept
  std::uint8_t* again = a.allocate(block);
  EXPECT_EQ(again, one);
  std::uint8_t* another = a.allocate(block);  // nothing kept any more: fresh memory
  a.deallocate(again, block);
  a.deallocate(another, block);
  // Small blocks are never kept.
  std::uint8_t* small = a.allocate(64);
  a.deallocate(small, 64);
}



PayloadPtr make_small(std::uint64_t seq) {
  flatbuffers::FlatBufferBuilder fbb(64 + 256, &payload_allocator());
  std::uint8_t* data = nullptr;
  auto v = fbb.CreateUninitializedVector(64, &data);
  std::memset(data, static_cast<int>(seq), 64);
  fbb.Finish(schema::CreateBlob(fbb, 1, seq, v), schema::BlobIdentifier());
  return Payload::from_builder(fbb);
}

TEST(PayloadAllocator, ReusesSmallBlocksFreedOnTheSameThread) {
  std::vector<PayloadPtr> burst;
  std::vector<const void*> buffers;
  std::vector<const void*> payloads;
  for (std::uint64_t i = 1; i <= 100; ++i) {  // not 0: a default seq is left out, and the table is shorter
    burst.push_back(make_small(i));
    buffers.push_back(burst.back()->data());
    payloads.push_back(burst.back().get());
  }
  burst.clear();  // a burst of releases, as an ack brings
  for (std::uint64_t i = 0; i < 100; ++i) {
    PayloadPtr p = make_small(i + 100);
    EXPECT_EQ(p->root<schema::Blob>()->seq(), i + 100);
    EXPECT_EQ(p->root<schema::Blob>()->data()->Get(1), static_cast<std::uint8_t>(i + 100));
    burst.push_back(std::move(p));
  }
  // Every buffer and every Payload comes from the ones just freed (the last
  // freed is handed out first).
  std::size_t reused_buffers = 0;
  std::size_t reused_payloads = 0;
  for (const auto& p : burst) {
    reused_buffers += std::count(buffers.begin(), buffers.end(), static_cast<const void*>(p->data()));
    reused_payloads += std::count(payloads.begin(), payloads.end(), static_cast<const void*>(p.get()));
  }
  EXPECT_EQ(reused_buffers, burst.size());
  EXPECT_EQ(reused_payloads, burst.size());
}

thread_local PayloadPtr t_kept;

TEST(PayloadAllocator, APayloadFreedAfterItsThreadsCacheIsGoneGoesToTheHeap) {
  const std::uint64_t before = small_blocks_freed_after_thread_cache();
  bool reused = false;
  std::thread t([&] {
    t_kept.reset();  // constructed first, so destroyed after the cache
    PayloadPtr made = make_small(1);
    const void* buffer = made->data();
    const void* payload = made.get();
    made.reset();  // the cache now exists and holds its blocks
    t_kept = make_small(2);
    // t_kept's two blocks (its buffer and its Payload) are the ones the
    // cache just held: they are of the sizes it keeps.
    reused = t_kept->data() == buffer && t_kept.get() == payload;
  });
  t.join();  // t_kept is freed at the thread's exit, after the cache
  EXPECT_TRUE(reused);
  EXPECT_EQ(small_blocks_freed_after_thread_cache() - before, 2U)
      << "t_kept's buffer and Payload, freed after the cache, go to the heap";
  // Nothing was written into the destroyed cache: another thread's cache,
  // and this one's, still hand out sound payloads and reuse their blocks.
  for (int round = 0; round < 2; ++round) {
    auto check = [] {
      std::vector<PayloadPtr> kept;
      for (std::uint64_t i = 1; i <= 50; ++i) kept.push_back(make_small(i));
      kept.clear();
      for (std::uint64_t i = 1; i <= 50; ++i) {
        PayloadPtr p = make_small(i + 50);
        ASSERT_EQ(p->root<schema::Blob>()->seq(), i + 50);
        ASSERT_EQ(p->root<schema::Blob>()->data()->Get(63), static_cast<std::uint8_t>(i + 50));
        kept.push_back(std::move(p));
      }
    };
    if (round == 0) {
      std::thread other(check);
      other.join();
    } else {
      check();
    }
  }
  EXPECT_EQ(small_blocks_freed_after_thread_cache() - before, 2U)
      << "threads whose cache outlives their payloads free nothing past it";
}

/// Minor page faults of the calling thread so far.
long thread_minor_faults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// As ZeroMQ's I/O thread mallocs every frame it receives and a sink on
// another thread frees it: with glibc's defaults the receiving thread's heap
// is trimmed after every burst and the next frames fault in fresh pages.
TEST(FrameHeap, FramesFreedByAnotherThreadAreReusedWithoutFreshPages) {
  if (!keep_freed_frames_in_heap()) {
    GTEST_SKIP() << "malloc's parameters are set by the environment, or the C library is not glibc";
  }
  EXPECT_TRUE(keep_freed_frames_in_heap()) << "a second call reports the settings in force";
  constexpr std::size_t kFrame = 1920 * 1080 * 3;
  constexpr std::size_t kPagesPerFrame = kFrame / 4096;
  constexpr int kInFlight = 4;
  constexpr int kRounds = 6;
  std::vector<long> faults;
  std::thread receiver([&] {
    for (int round = 0; round < kRounds; ++round) {
      const long before = thread_minor_faults();
      std::vector<void*> frames;
      for (int i = 0; i < kInFlight; ++i) {
        void* f = std::malloc(kFrame);
        ASSERT_NE(f, nullptr);
        std::memset(f, round, kFrame);
        frames.push_back(f);
      }
      faults.push_back(thread_minor_faults() - before);
      std::thread sink([&] {
        for (void* f : frames) std::free(f);
      });
      sink.join();
    }
  });
  receiver.join();
  ASSERT_EQ(faults.size(), static_cast<std::size_t>(kRounds));
  // The first round (or two, while the heap grows to its size) may fault;
  // after that every frame reuses memory already in the heap.
  long later = 0;
  for (int round = 2; round < kRounds; ++round) later += faults[static_cast<std::size_t>(round)];
  EXPECT_LT(later, static_cast<long>(kPagesPerFrame)) << "faults per round: " << ::testing::PrintToString(faults);
}
}  // namespace
}  // namespace swarmflow
