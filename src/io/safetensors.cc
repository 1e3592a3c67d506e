#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "io/mapped_file.h"

namespace nanoserve {

namespace {

using nlohmann::json;

constexpr int kMaxJsonDepth = 8;  // {"t": {"shape": [..]}} is depth 3
constexpr size_t kMaxNameBytes = 4096;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A name as it may appear in a message: at most 96 bytes, control bytes escaped.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 96; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += "0123456789abcdef"[c >> 4];
      out += "0123456789abcdef"[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 96) out += "...";
  return out;
}

// Nesting depth of a JSON text, outside strings; refuses a header that would
// make the parser (and the value's destructor) recurse deeply.
int json_depth(const char* p, size_t n) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = p[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

StatusOr<DType> safetensors_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  // The weights of FP8 checkpoints (their scales are tensors of their own).
  if (name == "F8_E4M3") return DType::kF8E4M3;
  // Bytes: gpt-oss's MXFP4 blocks and E8M0 scales (model/hf_gptoss.h).
  if (name == "U8") return DType::kU8;
  static constexpr const char* kKnown[] = {"BOOL",    "I8",  "I16", "U16",         "I32",        "U32",
                                           "I64",     "U64", "F64", "F8_E5M2",     "F8_E8M0",    "F6_E2M3",
                                           "F6_E3M2", "F4",  "C64", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
  for (const char* k : kKnown) {
    if (name == k) {
      return unimplemented("unsupported dtype '" + std::string(name) +
                           "' (F32, F16, BF16, F8_E4M3 and U8 are read)");
    }
  }
  return data_loss("unknown dtype '" + printable(name) + "'");
}

class SafetensorsParser {
 public:
  SafetensorsParser(SafetensorsFile& f) : f_(f) {}

  Status parse() {
    const uint64_t size = f_.size_;
    if (size < 8)
      return fail("header length at offset 0: the file has " + std::to_string(size) + " bytes, needs 8");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | f_.data_[i];
    if (n > SafetensorsFile::kMaxHeaderBytes) {
      return fail("header length " + std::to_string(n) + " exceeds the limit of " +
                  std::to_string(SafetensorsFile::kMaxHeaderBytes) + " bytes");
    }
    if (n > size - 8) {
      return fail("header length " + std::to_string(n) + " runs past the end of the file (" +
                  std::to_string(size - 8) + " bytes after the length)");
    }
    if (n < 2) return fail("header length " + std::to_string(n) + ": too short for a JSON object");
    f_.data_offset_ = 8 + n;
    const char* text = reinterpret_cast<const char*>(f_.data_ + 8);
    if (text[0] != '{') return fail("header: does not start with '{'");
    if (json_depth(text, n) > kMaxJsonDepth) {
      return fail("header: JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    }

    // nlohmann keeps the last of duplicate keys; the callback sees every one.
    std::unordered_set<std::string> seen;
    std::string duplicate;
    auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && duplicate.empty()) {
        std::string key = parsed.get<std::string>();
        if (!seen.insert(key).second) duplicate = std::move(key);
      }
      return true;
    };
    json header = json::parse(text, text + n, callback, /*allow_exceptions=*/false);
    if (header.is_discarded()) return fail("header: not valid JSON");
    if (!duplicate.empty()) return fail("tensor '" + printable(duplicate) + "': duplicate name");
    if (!header.is_object()) return fail("header: not a JSON object");
    if (header.size() > SafetensorsFile::kMaxTensors + 1) {
      return fail("header: " + std::to_string(header.size()) + " entries exceed the limit of " +
                  std::to_string(SafetensorsFile::kMaxTensors));
    }

    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        NS_RETURN_IF_ERROR(parse_metadata(it.value()));
        continue;
      }
      NS_RETURN_IF_ERROR(parse_tensor(it.key(), it.value()));
    }
    NS_RETURN_IF_ERROR(check_overlaps());
    for (size_t i = 0; i < f_.tensors_.size(); ++i) f_.index_.emplace(f_.tensors_[i].name, i);
    return Status::ok_status();
  }

 private:
  Status fail(const std::string& m) const { return data_loss(f_.name_ + ": " + m); }

  Status parse_metadata(const json& m) {
    if (!m.is_object()) return fail("__metadata__: not an object of strings");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string()) {
        return fail("__metadata__ '" + printable(it.key()) + "': value is not a string");
      }
      f_.metadata_.emplace(it.key(), it.value().get<std::string>());
    }
    return Status::ok_status();
  }

  Status parse_tensor(const std::string& name, const json& v) {
    const std::string where = "tensor '" + printable(name) + "'";
    if (name.empty()) return fail("tensor '': empty name");
    if (name.size() > kMaxNameBytes)
      return fail(where + ": name longer than " + std::to_string(kMaxNameBytes));
    if (!v.is_object()) return fail(where + ": entry is not an object");
    SafetensorsTensorInfo t;
    t.name = name;

    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return fail(where + ": dtype missing or not a string");
    StatusOr<DType> dtype = safetensors_dtype(dt->get_ref<const std::string&>());
    if (!dtype.ok())
      return Status(dtype.status().code(), f_.name_ + ": " + where + ": " + dtype.status().message());
    t.dtype = *dtype;

    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return fail(where + ": shape missing or not an array");
    if (sh->size() > SafetensorsFile::kMaxRank) {
      return fail(where + ": shape has rank " + std::to_string(sh->size()) + ", more than " +
                  std::to_string(SafetensorsFile::kMaxRank));
    }
    // The product of the non-zero dimensions must stay under 2^62, a zero
    // dimension or not: strides and sizes are computed from it.
    uint64_t numel = 1;
    bool overflow = false, zero = false;
    for (size_t i = 0; i < sh->size(); ++i) {
      const json& d = (*sh)[i];
      if (!d.is_number_unsigned()) {
        return fail(where + ": shape[" + std::to_string(i) + "] is not a non-negative integer");
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail(where + ": shape[" + std::to_string(i) + "] = " + std::to_string(dim) + " is too large");
      }
      t.shape.push_back(static_cast<int64_t>(dim));
      if (dim == 0) {
        zero = true;
      } else if (!overflow && numel > (uint64_t{1} << 62) / dim) {
        overflow = true;
      } else if (!overflow) {
        numel *= dim;
      }
    }
    if (overflow) return fail(where + ": shape " + shape_str(t.shape) + " has too many elements");
    if (zero) numel = 0;
    const uint64_t elem = static_cast<uint64_t>(dtype_bytes(t.dtype, 1));
    if (numel > (uint64_t{1} << 62) / elem) {
      return fail(where + ": shape " + shape_str(t.shape) + " has too many elements");
    }
    const uint64_t need = numel * elem;

    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return fail(where + ": data_offsets must be [begin, end], two non-negative integers");
    }
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    const uint64_t data_size = f_.size_ - f_.data_offset_;
    const std::string range = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.begin > t.end) return fail(where + ": " + range + ": begin is after end");
    if (t.end > data_size) {
      return fail(where + ": " + range + " run past the data section (" + std::to_string(data_size) +
                  " bytes)");
    }
    if (t.end - t.begin != need) {
      return fail(where + ": " + range + " hold " + std::to_string(t.end - t.begin) + " bytes, shape " +
                  shape_str(t.shape) + " " + dtype_name(t.dtype) + " needs " + std::to_string(need));
    }
    f_.tensors_.push_back(std::move(t));
    return Status::ok_status();
  }

  // Sorted by begin, each non-empty range must start at or after the furthest
  // end so far; the error names both tensors.
  Status check_overlaps() {
    auto& ts = f_.tensors_;
    std::sort(ts.begin(), ts.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
    });
    const SafetensorsTensorInfo* furthest = nullptr;
    for (const SafetensorsTensorInfo& t : ts) {
      if (t.begin == t.end) continue;  // an empty range overlaps nothing
      if (furthest != nullptr && t.begin < furthest->end) {
        return fail("tensor '" + printable(t.name) + "' [" + std::to_string(t.begin) + ", " +
                    std::to_string(t.end) + ") overlaps tensor '" + printable(furthest->name) + "' [" +
                    std::to_string(furthest->begin) + ", " + std::to_string(furthest->end) + ")");
      }
      if (furthest == nullptr || t.end > furthest->end) furthest = &t;
    }
    return Status::ok_status();
  }

  SafetensorsFile& f_;
};

StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  NS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> m, MappedFile::open(path));
  const uint8_t* data = m->data();
  const size_t size = m->size();
  return parse(data, size, std::move(m), path);
}

StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                                        std::shared_ptr<void> owner,
                                                                        std::string name) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = std::move(name);
  f->data_ = data;
  f->size_ = data == nullptr ? 0 : size;
  f->owner_ = std::move(owner);
  SafetensorsParser p(*f);
  NS_RETURN_IF_ERROR(p.parse());
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<Tensor> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensorInfo* t = find_tensor(name);
  if (t == nullptr) return not_found(name_ + ": no tensor '" + printable(name) + "'");
  const uint8_t* p = data_ + data_offset_ + t->begin;
  const uint64_t nbytes = t->end - t->begin;
  const size_t elem = static_cast<size_t>(dtype_bytes(t->dtype, 1));
  if (nbytes == 0 || reinterpret_cast<uintptr_t>(p) % elem != 0) {
    Tensor copy = Tensor::empty(t->dtype, t->shape);
    if (nbytes > 0) std::memcpy(copy.data(), p, nbytes);
    return copy;
  }
  return Tensor::view(const_cast<uint8_t*>(p), t->dtype, t->shape, owner_);
}

}  // namespace nanoserve
