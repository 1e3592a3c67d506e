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

class Tensor {
 public:
  Tensor() = default;

  // Owning CPU tensor, 64-byte aligned, contents uninitialised.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  // Owning CPU tensor filled with zeros.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // A view over memory kept alive by `owner` (may be null for borrowed memory).
  static Tensor view(void* data, DType dtype, std::vector<int64_t> shape,
                     std::shared_ptr<void> owner, Device device = Device::kCPU);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
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
  Tensor reshape(std::vector<int64_t> shape) const;

  std::string shape_string() const;  // "[49152, 576]"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::shared_ptr<void> owner_;
};

}  // namespace nanoserve
