#pragma once
// GGUF reader (versions 2 and 3). The file is mmap'd; metadata is parsed into
// values, tensor data stays in the mapping and is exposed as Tensor views.
//
// Hardened: every count, length, offset and dimension product is checked
// against the file size with overflow-safe arithmetic. A malformed file gives
// a DATA_LOSS Status naming the field and its byte offset, never a crash:
//   "gguf: metadata 'k': array count at offset 41: 5 string elements cannot fit in the 10 bytes left"
// Each tensor's data must lie inside the file, and no two tensors may share a
// byte (io/byte_ranges.h): the error names both tensors.
// Counts are bounded by the bytes left before anything is allocated from them,
// arrays nest at most 8 deep, and at most 4M metadata values are parsed (each
// is widened to a GgufValue). A tensor type that ggml knows but this build
// cannot compute with (IQ*, TQ*, ...) is UNIMPLEMENTED; an unknown one is DATA_LOSS.
// Version 1 (32-bit counts) and big-endian files are rejected.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace nanoserve {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufArray;

// One metadata value. Integers are widened to u64/i64, floats to double;
// `type` keeps the stored type.
struct GgufValue {
  GgufType type = GgufType::kU8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<const GgufArray>> v;

  std::optional<int64_t> as_int() const;   // any integer type that fits
  std::optional<double> as_float() const;  // any float or integer type
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;  // null unless a string
  const GgufArray* as_array() const;     // null unless an array
};

struct GgufArray {
  GgufType elem_type = GgufType::kU8;
  std::vector<GgufValue> items;  // nested arrays allowed
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (GGUF ne reversed)
  uint64_t offset = 0;         // from the start of the data section
  int64_t nbytes = 0;
};

class GgufFile {
 public:
  // mmap's the file and parses it.
  static StatusOr<std::shared_ptr<const GgufFile>> open(const std::string& path);
  // Parses bytes already in memory; `owner` keeps them alive for tensor views.
  static StatusOr<std::shared_ptr<const GgufFile>> parse(const uint8_t* data, size_t size,
                                                         std::shared_ptr<void> owner);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // Typed lookups: NOT_FOUND if absent, INVALID_ARGUMENT naming the key on a type mismatch.
  StatusOr<int64_t> get_int(std::string_view key) const;
  StatusOr<double> get_float(std::string_view key) const;
  StatusOr<bool> get_bool(std::string_view key) const;
  StatusOr<std::string> get_string(std::string_view key) const;
  StatusOr<const GgufArray*> get_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // A view of the tensor's bytes in the mapping, in its stored dtype; it keeps
  // the mapping alive. Read-only: the mapping is PROT_READ.
  StatusOr<Tensor> tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  GgufFile(const GgufFile&) = delete;  // the indexes below point into kv_ and tensors_
  GgufFile& operator=(const GgufFile&) = delete;
  friend class GgufParser;

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::shared_ptr<void> owner_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;  // start of the tensor data section
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;      // key -> index in kv_
  std::unordered_map<std::string_view, size_t> tensor_index_;  // name -> index in tensors_
};

}  // namespace nanoserve
