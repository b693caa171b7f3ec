// Replays the wire fuzzer's committed corpus through the fuzzer's own entry
// logic, so every compiler and CI run checks the seeds: valid_*.bin decode,
// reject_<reason>-*.bin are refused for that reason (a pack: its framing or
// its first bad record), and every file returns.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/wire_fuzz_entry.hpp"

namespace swarmflow::transport {
namespace {

namespace fs = std::filesystem;

struct Seed {
  std::string name;
  std::vector<std::uint8_t> bytes;
};

std::vector<Seed> corpus() {
  std::vector<Seed> seeds;
  const fs::path dir = fs::path(SWARMFLOW_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "wire";
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    Seed s{entry.path().filename().string(),
           std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())};
    seeds.push_back(std::move(s));
  }
  std::sort(seeds.begin(), seeds.end(), [](const Seed& a, const Seed& b) { return a.name < b.name; });
  return seeds;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

/// The rejection a seed's name promises: "reject_<reason>-<what>.bin".
std::optional<Rejection> promised(const std::string& name) {
  for (Rejection r : {Rejection::part_count, Rejection::destination, Rejection::header_size,
                      Rejection::header_invalid, Rejection::payload_size, Rejection::payload_type,
                      Rejection::payload_invalid}) {
    if (starts_with(name, std::string("reject_") + to_string(r) + "-")) return r;
  }
  return std::nullopt;
}

TEST(WireCorpus, EverySeedReturns) {
  const auto seeds = corpus();
  ASSERT_FALSE(seeds.empty());
  for (const auto& s : seeds) {
    SCOPED_TRACE(s.name);
    fuzz::wire_fuzz_one(s.bytes.data(), s.bytes.size());
  }
}

TEST(WireCorpus, ValidSeedsDecode) {
  std::size_t valid = 0;
  for (const auto& s : corpus()) {
    if (!starts_with(s.name, "valid_")) continue;
    SCOPED_TRACE(s.name);
    ++valid;
    const auto split = fuzz::split_wire_input(s.bytes.data(), s.bytes.size());
    std::vector<fuzz::DecodedMessage> messages;
    const Rejection why = fuzz::decode_split_input(split, &messages);
    EXPECT_EQ(why, Rejection::none) << to_string(why);
    ASSERT_FALSE(messages.empty());
    for (const auto& m : messages) EXPECT_TRUE(m.inbound.has_value()) << to_string(m.why);
  }
  EXPECT_GE(valid, 11U) << "a valid seed of each kind and each built-in payload type, and packs";
}

TEST(WireCorpus, MalformedSeedsAreRefusedForTheirReason) {
  std::size_t malformed = 0;
  for (const auto& s : corpus()) {
    if (!starts_with(s.name, "reject_")) continue;
    SCOPED_TRACE(s.name);
    const auto expected = promised(s.name);
    ASSERT_TRUE(expected.has_value()) << "name a malformed seed reject_<reason>-<what>.bin";
    ++malformed;
    const auto split = fuzz::split_wire_input(s.bytes.data(), s.bytes.size());
    std::vector<fuzz::DecodedMessage> messages;
    const Rejection why = fuzz::decode_split_input(split, &messages);
    EXPECT_STREQ(to_string(why), to_string(*expected));
  }
  EXPECT_GE(malformed, 7U) << "a malformed seed for each reason";
}

}  // namespace
}  // namespace swarmflow::transport
