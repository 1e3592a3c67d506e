#include "core/dtype.h"

#include "core/check.h"

namespace nanoserve {

namespace {
constexpr DTypeInfo kInfos[] = {
    {"F32", 1, 4, false},      {"F16", 1, 2, false},      {"BF16", 1, 2, false},
    {"Q8_0", 32, 34, true},    {"Q4_0", 32, 18, true},    {"Q4_1", 32, 20, true},
    {"Q4_K", 256, 144, true},  {"Q6_K", 256, 210, true},  {"I32", 1, 4, false},
    {"Q5_0", 32, 22, true},    {"Q5_1", 32, 24, true},    {"Q2_K", 256, 84, true},
    {"Q3_K", 256, 110, true},  {"Q5_K", 256, 176, true},  {"F8_E4M3", 1, 1, false},
    {"U8", 1, 1, false},       {"MXFP4", 32, 17, true},
};
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  NS_CHECK(i < std::size(kInfos)) << "bad dtype " << i;
  return kInfos[i];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kInfos); ++i) {
    if (name == kInfos[i].name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

int64_t dtype_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  NS_CHECK(n % info.block_elems == 0) << n << " elements of " << info.name;
  return n / info.block_elems * info.block_bytes;
}

}  // namespace nanoserve
