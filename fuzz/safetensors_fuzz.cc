// libFuzzer target for the safetensors reader: parses the input, then reads
// every byte of every tensor view and checks the invariants the reader
// promises (ranges inside the data section, sorted and disjoint, unique
// names, byte size = numel * element size). Built with ASan + UBSan by scripts/fuzz.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so any read past the end is an ASan report.
  auto owned = std::make_shared<std::vector<uint8_t>>(data, data + size);
  auto parsed = nanoserve::SafetensorsFile::parse(owned->empty() ? nullptr : owned->data(), owned->size(),
                                                  owned, "fuzz.safetensors");
  if (!parsed.ok()) {
    if (parsed.status().message().rfind("fuzz.safetensors: ", 0) != 0)
      __builtin_trap();  // errors name the file
    return 0;
  }
  const nanoserve::SafetensorsFile& f = **parsed;
  const uint64_t data_size = f.file_size() - f.data_offset();
  uint64_t prev_end = 0;
  volatile uint64_t sink = 0;
  uint64_t h = 0;
  for (const auto& info : f.tensors()) {
    if (info.end > data_size || info.begin > info.end) __builtin_trap();
    if (info.begin != info.end) {
      if (info.begin < prev_end) __builtin_trap();  // overlap
      prev_end = info.end;
    }
    if (f.find_tensor(info.name) != &info) __builtin_trap();  // names are unique, the index agrees
    auto t = f.tensor(info.name);
    if (!t.ok()) __builtin_trap();
    if (static_cast<uint64_t>(t->nbytes()) != info.end - info.begin) __builtin_trap();
    const auto* bytes = static_cast<const uint8_t*>(t->data());
    for (int64_t i = 0; i < t->nbytes(); ++i) h += bytes[i];
  }
  for (const auto& [k, v] : f.metadata()) h += k.size() + v.size();
  sink = h;
  (void)sink;
  return 0;
}
