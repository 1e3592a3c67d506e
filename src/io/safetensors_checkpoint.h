#pragma once
// The weights of a Hugging Face folder: one model.safetensors, or shards
// listed by model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
//
// Checks, each an error naming the file and tensor:
//   - every shard is a plain file name inside the folder: no absolute path,
//     no "..", nothing that resolves (through links) outside it;
//   - every tensor of weight_map exists in the shard the map names;
//   - no tensor name is in two shards;
//   - each shard passes SafetensorsFile's own checks.
// Without an index the folder must hold model.safetensors, or exactly one
// *.safetensors file.

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace nanoserve {

class SafetensorsCheckpoint {
 public:
  static constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;

  static StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> open(const std::string& folder);

  const std::string& folder() const { return folder_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;
  // A view that keeps its shard's mapping alive; NOT_FOUND naming the tensor.
  StatusOr<Tensor> tensor(std::string_view name) const;

 private:
  SafetensorsCheckpoint() = default;
  struct Entry {
    const SafetensorsFile* file;
    const SafetensorsTensorInfo* info;
  };
  std::string folder_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace nanoserve
