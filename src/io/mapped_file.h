#pragma once
// A read-only memory mapping of a whole file. Tensor views into a model keep
// the mapping alive through the shared_ptr owner.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace nanoserve {

class MappedFile {
 public:
  // NOT_FOUND if the file cannot be opened, INVALID_ARGUMENT if it is not a
  // regular file, INTERNAL if mmap fails. An empty file maps to size 0, data null.
  static StatusOr<std::shared_ptr<MappedFile>> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace nanoserve
