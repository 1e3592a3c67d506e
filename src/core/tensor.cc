#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/check.h"

namespace nanoserve {

void Dims::assign(const int64_t* p, size_t n) {
  NS_CHECK(n <= static_cast<size_t>(kMaxDims)) << n << " dimensions, at most " << kMaxDims;
  for (size_t i = 0; i < n; ++i) d_[i] = p[i];
  n_ = static_cast<int8_t>(n);
}

namespace {
Dims contiguous_strides(const Dims& shape) {
  Dims strides = shape;
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}
}  // namespace

Tensor Tensor::view(void* data, DType dtype, const Dims& shape, std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  for (int64_t d : shape) NS_CHECK(d >= 0) << "negative dimension";
  t.strides_ = contiguous_strides(shape);
  t.shape_ = shape;
  t.owner_ = std::move(owner);
  if (!t.shape_.empty()) {
    NS_CHECK(t.shape_.back() % dtype_info(dtype).block_elems == 0)
        << "innermost dim " << t.shape_.back() << " is not whole blocks of " << dtype_name(dtype);
  }
  return t;
}

Tensor Tensor::empty(DType dtype, const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = d == 0 ? 0 : n;  // an empty shape has 0 elements whatever its others
  for (int64_t d : shape) n *= n == 0 ? 1 : d;
  const int64_t bytes = std::max<int64_t>(64, (dtype_bytes(dtype, n) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, static_cast<size_t>(bytes));
  NS_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return view(p, dtype, shape, std::move(owner), Device::kCPU);
}

Tensor Tensor::zeros(DType dtype, const Dims& shape) {
  Tensor t = empty(dtype, shape);
  std::memset(t.data(), 0, static_cast<size_t>(t.nbytes()));
  return t;
}

int64_t Tensor::dim(int i) const {
  if (i < 0) i += ndim();
  NS_CHECK(i >= 0 && i < ndim()) << "dim " << i << " of " << shape_string();
  return shape_[static_cast<size_t>(i)];
}

int64_t Tensor::numel() const {
  // An empty shape has 0 elements whatever its other dimensions.
  for (int64_t d : shape_) {
    if (d == 0) return 0;
  }
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

int64_t Tensor::nbytes() const { return dtype_bytes(dtype_, numel()); }

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  NS_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0])
      << "rows [" << begin << ", " << end << ") of " << shape_string();
  Tensor t = *this;
  const int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.data_ = static_cast<char*>(data_) + dtype_bytes(dtype_, begin * row_elems);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::reshape(const Dims& shape) const {
  NS_CHECK(is_contiguous()) << "reshape of a strided tensor";
  Tensor t = view(data_, dtype_, shape, owner_, device_);
  NS_CHECK(t.numel() == numel()) << "reshape " << shape_string() << " to " << t.shape_string();
  return t;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

}  // namespace nanoserve
