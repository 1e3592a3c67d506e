// GgufValue and GgufFile accessors: typed metadata lookups and tensor views
// over a file the parser (gguf.cc) has already checked.

#include "io/gguf.h"

#include <limits>

namespace nanoserve {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "unknown";
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const {
  return std::get_if<std::string>(&v);
}

const GgufArray* GgufValue::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<const GgufArray>>(&v)) return a->get();
  return nullptr;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
Status type_mismatch(std::string_view key, const char* expected, const GgufValue& v) {
  return invalid_argument("metadata '" + std::string(key) + "': expected " + expected + ", found " +
                          gguf_type_name(v.type));
}
Status missing_key(std::string_view key) {
  return not_found("metadata key '" + std::string(key) + "' not found");
}
}  // namespace

StatusOr<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  std::optional<int64_t> x = v->as_int();
  if (!x) return type_mismatch(key, "an integer that fits in i64", *v);
  return *x;
}

StatusOr<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  std::optional<double> x = v->as_float();
  if (!x) return type_mismatch(key, "a number", *v);
  return *x;
}

StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  std::optional<bool> x = v->as_bool();
  if (!x) return type_mismatch(key, "a bool", *v);
  return *x;
}

StatusOr<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  const std::string* x = v->as_string();
  if (x == nullptr) return type_mismatch(key, "a string", *v);
  return *x;
}

StatusOr<const GgufArray*> GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  const GgufArray* x = v->as_array();
  if (x == nullptr) return type_mismatch(key, "an array", *v);
  return x;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<Tensor> GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) return not_found("tensor '" + std::string(name) + "' not found");
  // Bounds were checked at parse time. The mapping is read-only: never write through the view.
  auto* p = const_cast<uint8_t*>(data_ + data_offset_ + info->offset);
  return Tensor::view(p, info->dtype, info->shape, owner_);
}

}  // namespace nanoserve
