// libFuzzer target for the GGUF reader: parses the input, then reads every
// metadata value, checks that no two tensors share bytes, reads every byte of
// every tensor view (dequantizing what has a float form), and derives a
// ModelConfig. Built with ASan + UBSan by scripts/fuzz.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"
#include "ops/dequantize/dequantize.h"

namespace {

using nanoserve::GgufArray;
using nanoserve::GgufValue;

// Folds a value into h so that the reads cannot be optimised away.
uint64_t touch(const GgufValue& v, uint64_t h) {
  h = h * 31 + static_cast<uint64_t>(v.type);
  if (auto i = v.as_int()) h ^= static_cast<uint64_t>(*i);
  if (auto f = v.as_float()) h += *f == *f ? 1 : 2;
  if (auto b = v.as_bool()) h += *b;
  if (const std::string* s = v.as_string()) {
    for (char c : *s) h = h * 131 + static_cast<unsigned char>(c);
  }
  if (const GgufArray* a = v.as_array()) {
    for (const GgufValue& item : a->items) h = touch(item, h);
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so any read past the end is an ASan report.
  auto owned = std::make_shared<std::vector<uint8_t>>(data, data + size);
  auto parsed = nanoserve::GgufFile::parse(owned->empty() ? nullptr : owned->data(), owned->size(), owned);
  if (!parsed.ok()) return 0;
  const nanoserve::GgufFile& f = **parsed;
  volatile uint64_t sink = 0;
  uint64_t h = 0;
  for (const auto& [key, value] : f.metadata()) {
    h = touch(value, h ^ key.size());
    if (f.find(key) != &value) __builtin_trap();  // keys are unique, the index must agree
    (void)f.get_int(key);
    (void)f.get_float(key);
    (void)f.get_string(key);
  }
  // Listed tensors never share a byte (checked pairwise: inputs are at most
  // max_len bytes, so a few hundred tensors).
  const auto& ts = f.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    for (size_t j = i + 1; j < ts.size(); ++j) {
      const uint64_t lo = std::max(ts[i].offset, ts[j].offset);
      const uint64_t hi = std::min(ts[i].offset + static_cast<uint64_t>(ts[i].nbytes),
                                   ts[j].offset + static_cast<uint64_t>(ts[j].nbytes));
      if (lo < hi) __builtin_trap();
    }
  }
  std::vector<float> row;
  for (const auto& info : f.tensors()) {
    auto t = f.tensor(info.name);
    if (!t.ok()) __builtin_trap();  // listed tensors always have views
    const auto* bytes = static_cast<const uint8_t*>(t->data());
    for (int64_t i = 0; i < info.nbytes; ++i) h += bytes[i];
    if (t->dtype() == nanoserve::DType::kI32 || t->ndim() == 0) continue;
    const int64_t inner = t->dim(-1);
    if (inner == 0 || inner > (int64_t{1} << 20)) continue;
    row.resize(static_cast<size_t>(inner));
    const int64_t rows = t->numel() / inner;
    const int64_t row_bytes = nanoserve::dtype_bytes(t->dtype(), inner);
    for (int64_t r = 0; r < rows && r < 64; ++r) {
      nanoserve::dequantize_row(t->dtype(), bytes + r * row_bytes, row.data(), inner);
      h += row[0] == row[0];
    }
  }
  auto config = nanoserve::config_from_gguf(f);
  if (config.ok()) h += static_cast<uint64_t>(config->n_layers) + config->to_string().size();
  sink = h;
  (void)sink;
  return 0;
}
