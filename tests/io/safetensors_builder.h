#pragma once
// Builds safetensors file images in memory, for tests and fuzz seeds. It
// writes what it is told, including nonsense: the header is raw JSON text and
// the length prefix can be overridden. Header-only (the fuzz seed tool uses it).

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace nanoserve::testing {

struct SafetensorsBuilder {
  struct Entry {
    std::string name, dtype, shape;  // shape as JSON text, e.g. "[2, 3]"
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  std::vector<uint8_t> data;
  std::string metadata;  // JSON object text, or empty for none
  std::optional<std::string> raw_header;
  std::optional<uint64_t> length_override;
  size_t pad_to = 8;  // the header is space-padded to a multiple of this, as the reference writer does

  // Appends `bytes` to the data section and lists the tensor over them.
  SafetensorsBuilder& tensor(const std::string& name, const std::string& dtype, const std::string& shape,
                             const std::vector<uint8_t>& bytes) {
    entries.push_back({name, dtype, shape, data.size(), data.size() + bytes.size()});
    data.insert(data.end(), bytes.begin(), bytes.end());
    return *this;
  }
  // Lists a tensor over any range, without adding bytes.
  SafetensorsBuilder& entry(const std::string& name, const std::string& dtype, const std::string& shape,
                            uint64_t begin, uint64_t end) {
    entries.push_back({name, dtype, shape, begin, end});
    return *this;
  }
  SafetensorsBuilder& bytes(size_t n, uint8_t v = 0) {
    data.insert(data.end(), n, v);
    return *this;
  }

  std::string header() const {
    if (raw_header) return *raw_header;
    std::string h = "{";
    if (!metadata.empty()) h += "\"__metadata__\":" + metadata;
    for (const Entry& e : entries) {
      if (h.size() > 1) h += ",";
      h += "\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":" + e.shape + ",\"data_offsets\":[" +
           std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
    }
    return h + "}";
  }

  std::vector<uint8_t> build() const {
    std::string h = header();
    while (pad_to > 1 && (8 + h.size()) % pad_to != 0) h += ' ';
    const uint64_t n = length_override ? *length_override : h.size();
    // One allocation, filled by memcpy (GCC 12 warns falsely on inserts into a fresh 8-byte vector).
    std::vector<uint8_t> out(8 + h.size() + data.size());
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
    if (!h.empty()) std::memcpy(out.data() + 8, h.data(), h.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + h.size(), data.data(), data.size());
    return out;
  }
};

inline std::vector<uint8_t> f32_le(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace nanoserve::testing
