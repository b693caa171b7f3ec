#pragma once
// A first-in, first-out queue on one growing ring of slots. Unlike std::deque,
// which allocates a block every few elements of the size of an envelope, it
// allocates only when it outgrows its largest size so far, so a queue that
// fills and drains all day allocates nothing.

#include <cstddef>
#include <utility>
#include <vector>

namespace swarmflow::runtime {

template <class T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }

  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return slots_[(head_ + size_ - 1) % slots_.size()]; }
  /// The i-th oldest element (0 = front).
  const T& at(std::size_t i) const { return slots_[(head_ + i) % slots_.size()]; }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) % slots_.size()] = std::move(value);
    ++size_;
  }

  /// Removes the oldest element; its slot is reset, so what it held (a
  /// payload reference, say) is released now rather than when overwritten.
  void pop_front() {
    slots_[head_] = T{};
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace swarmflow::runtime
