#include <swarmflow/envelope.hpp>

#include <chrono>
#include <cstring>

namespace swarmflow {

std::shared_ptr<const Payload> Payload::from_builder(flatbuffers::FlatBufferBuilder& builder) {
  auto p = std::make_shared<Payload>(Key{});
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

std::string_view Payload::identifier() const {
  constexpr std::size_t kOffset = sizeof(flatbuffers::uoffset_t);
  if (size_ < kOffset + flatbuffers::kFileIdentifierLength) return {};
  return {reinterpret_cast<const char*>(data_ + kOffset), flatbuffers::kFileIdentifierLength};
}

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace swarmflow
