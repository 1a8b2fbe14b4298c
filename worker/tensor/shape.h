// Shape: the dimensions of a tensor, outermost first (NCHW order for images whatever the memory
// layout: the layout says how those dimensions are laid out, the shape says what they are).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace phub::worker {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  // Product of the dimensions; 1 for rank 0 (a scalar).
  std::int64_t numel() const;
  // "[64, 3, 224, 224]".
  std::string ToString() const;

  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace phub::worker
