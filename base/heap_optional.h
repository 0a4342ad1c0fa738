// An optional value kept on the heap: an empty one costs a pointer. For a large
// value that most holders never have (the planner holds up to 500,000 candidates
// while it searches, and simulates a few thousand of them: a SimResult in place
// was 576 of a candidate's 816 bytes). Copies copy the value; moves move the
// pointer. The subset of std::optional's interface the project uses.
#ifndef PIPECAST_BASE_HEAP_OPTIONAL_H_
#define PIPECAST_BASE_HEAP_OPTIONAL_H_

#include <memory>
#include <optional>
#include <utility>

namespace pipecast {

template <typename T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}  // NOLINT: as std::optional
  HeapOptional(T value) : value_(std::make_unique<T>(std::move(value))) {}  // NOLINT
  HeapOptional(const HeapOptional& o) : value_(o ? std::make_unique<T>(*o) : nullptr) {}
  HeapOptional(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(const HeapOptional& o) {
    if (this != &o) value_ = o ? std::make_unique<T>(*o) : nullptr;
    return *this;
  }
  HeapOptional& operator=(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(std::nullopt_t) {
    value_.reset();
    return *this;
  }
  HeapOptional& operator=(T value) {
    value_ = std::make_unique<T>(std::move(value));
    return *this;
  }

  bool has_value() const { return value_ != nullptr; }
  explicit operator bool() const { return has_value(); }
  void reset() { value_.reset(); }
  // REQUIRES: has_value() (as std::optional's operator*, unchecked).
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return value_.get(); }
  const T* operator->() const { return value_.get(); }
  T& value() { return *value_; }
  const T& value() const { return *value_; }

 private:
  std::unique_ptr<T> value_;
};

}  // namespace pipecast

#endif  // PIPECAST_BASE_HEAP_OPTIONAL_H_
