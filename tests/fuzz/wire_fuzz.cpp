// libFuzzer target for the data-plane wire format: see wire_fuzz_entry.hpp for
// how an input becomes a multipart message, and docs/wire.md for how to run it.

#include <cstddef>
#include <cstdint>

#include "fuzz/wire_fuzz_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  swarmflow::transport::fuzz::wire_fuzz_one(data, size);
  return 0;
}
