#include "io/tensor_source.h"

#include "io/gguf.h"

namespace nanoserve {

std::string GgufTensorSource::describe() const {
  return "gguf";
}

bool GgufTensorSource::contains(std::string_view name) const {
  return file_->find_tensor(name) != nullptr;
}

StatusOr<Tensor> GgufTensorSource::tensor(std::string_view name) const {
  return file_->tensor(name);
}

}  // namespace nanoserve
