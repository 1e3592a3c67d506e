#pragma once
// Tensor: a view over memory. dtype, shape, strides (in elements, row-major)
// and device, plus a shared owner that keeps the storage alive. It does no math.
//
// Shapes are row-major, outermost first: a GGUF weight with ne = [576, 1536]
// (ne[0] innermost) is shape {1536, 576}. Quantized tensors are contiguous
// and their innermost dimension is a whole number of blocks.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace nanoserve {

enum class Device : uint8_t { kCPU, kCUDA };

// Dimensions (or strides) held inline, up to kMaxDims: copying a Tensor, a
// view, a slice or a reshape never touches the heap (the decode step makes
// such views every layer).
class Dims {
 public:
  static constexpr int kMaxDims = 8;
  Dims() = default;
  Dims(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  Dims(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }  // NOLINT: implicit

  size_t size() const { return static_cast<size_t>(n_); }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](size_t i) { return d_[i]; }
  int64_t operator[](size_t i) const { return d_[i]; }
  int64_t back() const { return d_[n_ - 1]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT: implicit

  friend bool operator==(const Dims& a, const Dims& b) {
    if (a.n_ != b.n_) return false;
    for (int i = 0; i < a.n_; ++i) {
      if (a.d_[i] != b.d_[i]) return false;
    }
    return true;
  }
  friend bool operator==(const Dims& a, const std::vector<int64_t>& b) { return a == Dims(b); }

 private:
  void assign(const int64_t* p, size_t n);
  int64_t d_[kMaxDims] = {};
  int8_t n_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // Owning CPU tensor, 64-byte aligned, contents uninitialised.
  static Tensor empty(DType dtype, const Dims& shape);
  // Owning CPU tensor filled with zeros.
  static Tensor zeros(DType dtype, const Dims& shape);
  // A view over memory kept alive by `owner` (may be null for borrowed memory).
  static Tensor view(void* data, DType dtype, const Dims& shape, std::shared_ptr<void> owner,
                     Device device = Device::kCPU);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const;
  int64_t nbytes() const;    // of a contiguous tensor
  bool is_contiguous() const;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Rows [begin, end) of dim 0, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same storage, new shape with the same element count. PRECOND: contiguous.
  Tensor reshape(const Dims& shape) const;

  std::string shape_string() const;  // "[49152, 576]"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
  Dims shape_;
  Dims strides_;
  std::shared_ptr<void> owner_;
};

}  // namespace nanoserve
