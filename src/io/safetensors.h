#pragma once
// safetensors reader. Layout: an 8-byte little-endian header length N, N bytes
// of JSON, then the data section. The JSON maps each tensor name to
//   {"dtype": "F32" | "F16" | "BF16" | "F8_E4M3", "shape": [d0, ...], "data_offsets": [begin, end]}
// with offsets relative to the data section; "__metadata__" maps strings to strings.
//
// Hardened: N is at most kMaxHeaderBytes and inside the file; the header is
// parsed by nlohmann with its size bounded; each tensor's dtype is one this
// build computes with (F8_E4M3: the weights of FP8 checkpoints, model/hf_fp8.h;
// I8, F8_E5M2, F64, ... are refused by name as
// "unsupported dtype"); its rank is at most kMaxRank and its element count
// cannot overflow; its range lies inside the data section and holds exactly
// numel * dtype size bytes; no two ranges overlap (the error names both
// tensors); names are unique. Every error is a DATA_LOSS (UNIMPLEMENTED for a
// known but unsupported dtype) whose message starts with the file name and
// names the tensor and field:
//   "model.safetensors: tensor 'w': data_offsets [0, 12] hold 12 bytes, shape [2, 2] F32 needs 16"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace nanoserve {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (as stored)
  uint64_t begin = 0;          // byte range in the data section, [begin, end)
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // 100 MiB
  static constexpr size_t kMaxRank = 8;
  static constexpr size_t kMaxTensors = size_t{1} << 20;

  // mmap's the file (io/mapped_file) and parses it. Messages start with `path`.
  static StatusOr<std::shared_ptr<const SafetensorsFile>> open(const std::string& path);
  // Parses bytes already in memory; `owner` keeps them alive for tensor views;
  // `name` starts every message.
  static StatusOr<std::shared_ptr<const SafetensorsFile>> parse(const uint8_t* data, size_t size,
                                                                std::shared_ptr<void> owner,
                                                                std::string name = "safetensors");

  const std::string& name() const { return name_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + N

  // Tensors in file-offset order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;
  // A read-only view into the mapping that keeps it alive. A tensor whose
  // bytes are not aligned to its element size is copied into owned memory
  // (the format does not promise alignment). NOT_FOUND naming the tensor.
  StatusOr<Tensor> tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  SafetensorsFile(const SafetensorsFile&) = delete;  // index_ points into tensors_
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  friend class SafetensorsParser;

  std::string name_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::shared_ptr<void> owner_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> index in tensors_
  std::map<std::string, std::string> metadata_;
};

// The dtype a safetensors dtype string names: F32, F16, BF16, F8_E4M3. UNIMPLEMENTED
// "unsupported dtype 'I8'" for the other types of the format, DATA_LOSS for a
// string that is not a safetensors dtype at all.
StatusOr<DType> safetensors_dtype(std::string_view name);

}  // namespace nanoserve
