#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <swarmflow/library_threads.hpp>

namespace swarmflow {
namespace {

/// A library whose pool is a number, and which remembers every change. Its
/// registration outlives the test, so each test's pool is static.
struct FakePool {
  int threads = 4;
  std::vector<int> set_to;
};

void register_fake(const std::string& name, FakePool& pool) {
  register_library_threads(name, {[&pool] { return pool.threads; },
                                  [&pool](int n) {
                                    pool.threads = n;
                                    pool.set_to.push_back(n);
                                  }});
}

TEST(LibraryThreads, AHoldSetsThePoolAndItsEndSetsBackWhatItFound) {
  static FakePool pool;
  pool = FakePool{};
  register_fake("test.hold", pool);
  EXPECT_TRUE(library_threads_registered("test.hold"));
  {
    LibraryThreadsHold hold;
    ASSERT_TRUE(hold.hold("test.hold", 1).ok());
    EXPECT_TRUE(hold.held());
    EXPECT_EQ(pool.threads, 1);
  }
  EXPECT_EQ(pool.threads, 4);
  EXPECT_EQ(pool.set_to, (std::vector<int>{1, 4}));
}

TEST(LibraryThreads, OverlappingHoldsGiveBackTheSizeFromBeforeTheFirstWhenTheLastEnds) {
  static FakePool pool;
  pool = FakePool{};
  register_fake("test.overlap", pool);
  LibraryThreadsHold first;
  LibraryThreadsHold second;
  ASSERT_TRUE(first.hold("test.overlap", 1).ok());
  ASSERT_TRUE(second.hold("test.overlap", 2).ok());
  EXPECT_EQ(pool.threads, 2);  // the latest hold's size applies
  first.release();
  EXPECT_EQ(pool.threads, 2);  // still held by the second
  second.release();
  EXPECT_EQ(pool.threads, 4);
  second.release();  // twice is once
  EXPECT_EQ(pool.set_to, (std::vector<int>{1, 2, 4}));
}

TEST(LibraryThreads, APoolAlreadyAtTheSizeIsNotSetAgain) {
  static FakePool pool;
  pool = FakePool{};
  pool.threads = 1;
  register_fake("test.same", pool);
  {
    LibraryThreadsHold hold;
    ASSERT_TRUE(hold.hold("test.same", 1).ok());
  }
  EXPECT_TRUE(pool.set_to.empty());
  EXPECT_EQ(pool.threads, 1);
}

TEST(LibraryThreads, AnUnknownLibraryOrTooFewThreadsAreRefusedAndNothingIsHeld) {
  LibraryThreadsHold hold;
  const Status unknown = hold.hold("test.nowhere", 2);
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("no stage pack in this process registered the threads of test.nowhere"),
            std::string::npos)
      << unknown.message();
  EXPECT_FALSE(hold.held());
  EXPECT_FALSE(library_threads_registered("test.nowhere"));

  static FakePool pool;
  pool = FakePool{};
  register_fake("test.zero", pool);
  EXPECT_FALSE(hold.hold("test.zero", 0).ok());
  EXPECT_FALSE(hold.held());
  EXPECT_TRUE(pool.set_to.empty());
}

}  // namespace
}  // namespace swarmflow
