#pragma once
// Builds GGUF file images in memory, for tests and fuzz seeds. It writes what
// it is told, including nonsense: counts, types and offsets can be overridden
// to craft malformed files. Header-only so the fuzz seed tool can use it too.

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace nanoserve::testing {

// ggml tensor type ids, as stored in GGUF.
enum GgmlType : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ4_1 = 3,
  kGgmlQ5_0 = 6,
  kGgmlQ8_0 = 8,
  kGgmlQ4_K = 12,
  kGgmlQ5_K = 13,
  kGgmlQ6_K = 14,
  kGgmlQ8_K = 15,
  kGgmlI32 = 26,
  kGgmlBF16 = 30,
};

// GGUF metadata value type ids.
enum GgufTypeId : uint32_t {
  kTU8 = 0,
  kTI8 = 1,
  kTU16 = 2,
  kTI16 = 3,
  kTU32 = 4,
  kTI32 = 5,
  kTF32 = 6,
  kTBool = 7,
  kTString = 8,
  kTArray = 9,
  kTU64 = 10,
  kTI64 = 11,
  kTF64 = 12,
};

// Little-endian byte sink.
struct ByteWriter {
  std::vector<uint8_t> bytes;

  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.insert(bytes.end(), b, b + sizeof(T));
  }
  void u8(uint8_t v) { put(v); }
  void u16(uint16_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void raw(const std::vector<uint8_t>& b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
  void pad_to(uint64_t align) {
    while (bytes.size() % align != 0) bytes.push_back(0);
  }
  size_t size() const { return bytes.size(); }
  template <typename T>
  void patch(size_t at, T v) {
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
};

class GgufBuilder {
 public:
  using ValueWriter = std::function<void(ByteWriter&)>;

  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  // Padding used for the data section and tensor offsets. Does not add the
  // general.alignment key: call kv_u32("general.alignment", a) for that.
  GgufBuilder& pad_alignment(uint64_t a) {
    align_ = a;
    return *this;
  }
  GgufBuilder& magic(uint32_t m) {
    magic_ = m;
    return *this;
  }
  GgufBuilder& n_kv_override(uint64_t n) {
    n_kv_ = n;
    return *this;
  }
  GgufBuilder& n_tensors_override(uint64_t n) {
    n_tensors_ = n;
    return *this;
  }

  // A key whose value bytes (after the u32 type) are written by `w`.
  GgufBuilder& kv(const std::string& key, uint32_t type, ValueWriter w) {
    kvs_.push_back({key, type, std::move(w)});
    return *this;
  }
  GgufBuilder& kv_u8(const std::string& k, uint8_t v) {
    return kv(k, kTU8, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_i8(const std::string& k, int8_t v) {
    return kv(k, kTI8, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_u16(const std::string& k, uint16_t v) {
    return kv(k, kTU16, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_i16(const std::string& k, int16_t v) {
    return kv(k, kTI16, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_u32(const std::string& k, uint32_t v) {
    return kv(k, kTU32, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_i32(const std::string& k, int32_t v) {
    return kv(k, kTI32, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_u64(const std::string& k, uint64_t v) {
    return kv(k, kTU64, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_i64(const std::string& k, int64_t v) {
    return kv(k, kTI64, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_f32(const std::string& k, float v) {
    return kv(k, kTF32, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_f64(const std::string& k, double v) {
    return kv(k, kTF64, [v](ByteWriter& b) { b.put(v); });
  }
  GgufBuilder& kv_bool(const std::string& k, bool v) {
    return kv(k, kTBool, [v](ByteWriter& b) { b.u8(v ? 1 : 0); });
  }
  GgufBuilder& kv_string(const std::string& k, const std::string& v) {
    return kv(k, kTString, [v](ByteWriter& b) { b.str(v); });
  }
  GgufBuilder& kv_string_array(const std::string& k, const std::vector<std::string>& v) {
    return kv(k, kTArray, [v](ByteWriter& b) {
      b.u32(kTString);
      b.u64(v.size());
      for (const auto& s : v) b.str(s);
    });
  }
  GgufBuilder& kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    return kv(k, kTArray, [v](ByteWriter& b) {
      b.u32(kTI32);
      b.u64(v.size());
      for (int32_t x : v) b.put(x);
    });
  }
  GgufBuilder& kv_f32_array(const std::string& k, const std::vector<float>& v) {
    return kv(k, kTArray, [v](ByteWriter& b) {
      b.u32(kTF32);
      b.u64(v.size());
      for (float x : v) b.put(x);
    });
  }

  // A tensor; ne is innermost first, as GGUF stores it. Its offset is the next
  // aligned spot in the data section unless `offset` is given.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type,
                      std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({name, std::move(ne), ggml_type, std::move(data), offset});
    return *this;
  }

  // A tensor at `offset` whose data is written there even where it lands on
  // another tensor's bytes: for files whose tensors overlap. The file is
  // extended to hold it.
  GgufBuilder& placed_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type,
                             std::vector<uint8_t> data, uint64_t offset) {
    tensors_.push_back({name, std::move(ne), ggml_type, std::move(data), offset, /*placed=*/true});
    return *this;
  }

  std::vector<uint8_t> build() const {
    ByteWriter w;
    w.u32(magic_);
    w.u32(version_);
    w.u64(n_tensors_.value_or(tensors_.size()));
    w.u64(n_kv_.value_or(kvs_.size()));
    for (const auto& kv : kvs_) {
      w.str(kv.key);
      w.u32(kv.type);
      kv.write(w);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      if (!t.offset) next = (off + t.data.size() + align_ - 1) / align_ * align_;
      w.str(t.name);
      w.u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) w.u64(d);
      w.u32(t.type);
      w.u64(off);
    }
    if (tensors_.empty()) return w.bytes;
    w.pad_to(align_);
    const size_t data_start = w.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].offset) continue;  // explicit offsets are for malformed files: no data written here
      w.bytes.resize(data_start + offsets[i], 0);
      w.raw(tensors_[i].data);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorEntry& t = tensors_[i];
      if (!t.placed) continue;
      const size_t at = data_start + offsets[i];
      if (w.bytes.size() < at + t.data.size()) w.bytes.resize(at + t.data.size(), 0);
      if (!t.data.empty()) std::memcpy(w.bytes.data() + at, t.data.data(), t.data.size());
    }
    return w.bytes;
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    ValueWriter write;
  };
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset;
    bool placed = false;  // explicit offset, data written there anyway
  };

  uint32_t magic_ = 0x46554747;  // "GGUF"
  uint32_t version_;
  uint64_t align_ = 32;
  std::optional<uint64_t> n_kv_;
  std::optional<uint64_t> n_tensors_;
  std::vector<Kv> kvs_;
  std::vector<TensorEntry> tensors_;
};

// f32 values as little-endian bytes.
inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace nanoserve::testing
