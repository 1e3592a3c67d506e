#pragma once
// Crafted malformed safetensors images, one per check in the reader, with the
// status code expected and fragments the message must contain (the tensor and
// field). Used by tests/io/safetensors_bad_test.cc and, as seeds, by the
// fuzzer (fuzz/safetensors_seeds.cc writes them out).

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors_builder.h"

namespace nanoserve::testing {

struct BadSafetensors {
  std::string name;
  std::vector<uint8_t> bytes;
  StatusCode code;
  std::vector<std::string> needles;  // each must appear in the message
};

// A valid file: metadata, an F32 [2, 3], a BF16 [4] and an F16 [2, 2].
inline SafetensorsBuilder good_safetensors() {
  SafetensorsBuilder b;
  b.metadata = "{\"format\":\"pt\"}";
  b.tensor("w", "F32", "[2, 3]", f32_le({0, 1, 2, 3, 4, 5}));
  b.tensor("b", "BF16", "[4]", {0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x80, 0x40});
  b.tensor("h", "F16", "[2, 2]", {0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44});
  return b;
}

inline std::vector<BadSafetensors> bad_safetensors_corpus() {
  std::vector<BadSafetensors> c;
  const StatusCode kDL = StatusCode::kDataLoss, kUn = StatusCode::kUnimplemented;
  auto add = [&c](std::string name, std::vector<uint8_t> bytes, StatusCode code,
                  std::vector<std::string> needles) {
    c.push_back({std::move(name), std::move(bytes), code, std::move(needles)});
  };
  auto with_header = [](const std::string& h, size_t data_bytes = 64) {
    SafetensorsBuilder b;
    b.raw_header = h;
    b.bytes(data_bytes);
    return b.build();
  };

  add("empty_file", {}, kDL, {"header length at offset 0", "needs 8"});
  add("seven_bytes", {1, 0, 0, 0, 0, 0, 0}, kDL, {"header length at offset 0"});
  {
    auto b = good_safetensors();
    b.length_override = (uint64_t{100} << 20) + 1;
    add("header_over_limit", b.build(), kDL, {"header length 104857601", "exceeds the limit"});
  }
  {
    auto b = good_safetensors();
    b.length_override = 0xFFFFFFFFFFFFFFFFull;
    add("header_length_huge", b.build(), kDL, {"header length 18446744073709551615", "exceeds"});
  }
  {
    auto b = good_safetensors();
    b.length_override = b.build().size();  // one past what follows the prefix
    add("header_past_eof", b.build(), kDL, {"runs past the end of the file"});
  }
  {
    SafetensorsBuilder b;
    b.raw_header = "{";
    b.pad_to = 1;
    add("header_too_short", b.build(), kDL, {"header length 1", "too short"});
  }
  add("not_json", with_header("{nope}"), kDL, {"not valid JSON"});
  add("not_object", with_header("[1, 2, 3]"), kDL, {"does not start with '{'"});
  add("deep_nesting", with_header("{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}"), kDL,
      {"nested deeper"});
  add("invalid_utf8_name", with_header("{\"\xff\xfe\":{}}"), kDL, {"not valid JSON"});
  add("entry_not_object", with_header("{\"w\": 5}"), kDL, {"tensor 'w'", "not an object"});
  add("dtype_missing", with_header("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}"), kDL,
      {"tensor 'w'", "dtype missing"});
  add("dtype_not_string", with_header("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}"), kDL,
      {"tensor 'w'", "dtype"});
  add("dtype_i8", SafetensorsBuilder().tensor("q", "I8", "[4]", {1, 2, 3, 4}).build(), kUn,
      {"tensor 'q'", "unsupported dtype 'I8'"});
  add("dtype_f8_e5m2", SafetensorsBuilder().tensor("q", "F8_E5M2", "[4]", {1, 2, 3, 4}).build(), kUn,
      {"tensor 'q'", "unsupported dtype 'F8_E5M2'"});
  add("dtype_f8_wrong_size", SafetensorsBuilder().tensor("q", "F8_E4M3", "[2, 3]", {1, 2, 3, 4}).build(), kDL,
      {"tensor 'q'", "hold 4 bytes", "F8_E4M3 needs 6"});
  add("dtype_f64", SafetensorsBuilder().tensor("d", "F64", "[1]", std::vector<uint8_t>(8)).build(), kUn,
      {"tensor 'd'", "unsupported dtype 'F64'"});
  add("dtype_unknown", SafetensorsBuilder().tensor("x", "Q4_K", "[4]", {1, 2, 3, 4}).build(), kDL,
      {"tensor 'x'", "unknown dtype 'Q4_K'"});
  add("shape_missing", with_header("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}"), kDL,
      {"tensor 'w'", "shape missing"});
  add("shape_negative", SafetensorsBuilder().tensor("w", "F32", "[-1]", f32_le({1})).build(), kDL,
      {"tensor 'w'", "shape[0]", "non-negative integer"});
  add("shape_float", SafetensorsBuilder().tensor("w", "F32", "[1.5]", f32_le({1})).build(), kDL,
      {"tensor 'w'", "shape[0]"});
  add("shape_rank_9", SafetensorsBuilder().tensor("w", "F32", "[1,1,1,1,1,1,1,1,1]", f32_le({1})).build(),
      kDL, {"tensor 'w'", "rank 9"});
  add("shape_dim_past_i64", SafetensorsBuilder().tensor("w", "F32", "[18446744073709551615]", {}).build(),
      kDL, {"tensor 'w'", "shape[0]", "too large"});
  add("shape_product_overflow",
      SafetensorsBuilder().tensor("w", "F32", "[4294967296, 4294967296, 4]", {}).build(), kDL,
      {"tensor 'w'", "too many elements"});
  // A zero dimension does not excuse the others: their product still sizes strides.
  add("shape_product_overflow_with_zero",
      SafetensorsBuilder().tensor("w", "F32", "[4294967296, 4294967296, 0]", {}).build(), kDL,
      {"tensor 'w'", "too many elements"});
  add("shape_bytes_overflow", SafetensorsBuilder().tensor("w", "F32", "[2305843009213693952]", {}).build(),
      kDL, {"tensor 'w'", "too many elements"});
  add("offsets_missing", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}"), kDL,
      {"tensor 'w'", "data_offsets"});
  add("offsets_three", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}"), kDL,
      {"tensor 'w'", "data_offsets must be [begin, end]"});
  add("offsets_reversed", SafetensorsBuilder().entry("w", "F32", "[1]", 8, 4).bytes(16).build(), kDL,
      {"tensor 'w'", "data_offsets [8, 4]", "begin is after end"});
  add("offsets_past_data", SafetensorsBuilder().entry("w", "F32", "[4]", 0, 16).bytes(12).build(), kDL,
      {"tensor 'w'", "data_offsets [0, 16]", "run past the data section (12 bytes)"});
  add("offsets_huge",
      SafetensorsBuilder()
          .entry("w", "F32", "[1]", 0xFFFFFFFFFFFFFFF0ull, 0xFFFFFFFFFFFFFFF4ull)
          .bytes(16)
          .build(),
      kDL, {"tensor 'w'", "run past the data section"});
  add("size_mismatch", SafetensorsBuilder().entry("w", "F32", "[2, 2]", 0, 12).bytes(16).build(), kDL,
      {"tensor 'w'", "hold 12 bytes", "[2, 2] F32 needs 16"});
  add("size_mismatch_bf16", SafetensorsBuilder().entry("b", "BF16", "[3]", 0, 8).bytes(8).build(), kDL,
      {"tensor 'b'", "hold 8 bytes", "needs 6"});
  add("overlap_partial",
      SafetensorsBuilder()
          .entry("attn_q", "F32", "[4]", 0, 16)
          .entry("attn_k", "F32", "[4]", 8, 24)
          .bytes(24)
          .build(),
      kDL, {"tensor 'attn_k'", "overlaps tensor 'attn_q'"});
  add("overlap_same_offset",
      SafetensorsBuilder().entry("a", "F32", "[2]", 0, 8).entry("b", "F32", "[2]", 0, 8).bytes(8).build(),
      kDL, {"overlaps", "'a'", "'b'"});
  add("overlap_inside",
      SafetensorsBuilder()
          .entry("big", "F32", "[8]", 0, 32)
          .entry("x", "F32", "[1]", 16, 20)
          .entry("y", "F32", "[1]", 32, 36)
          .bytes(36)
          .build(),
      kDL, {"tensor 'x'", "overlaps tensor 'big'"});
  add("overlap_every_tensor_at_zero",
      SafetensorsBuilder()
          .entry("t0", "F32", "[1]", 0, 4)
          .entry("t1", "F32", "[1]", 0, 4)
          .entry("t2", "F32", "[1]", 0, 4)
          .bytes(4)
          .build(),
      kDL, {"overlaps"});
  add("duplicate_name",
      with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}"),
      kDL, {"tensor 'w'", "duplicate name"});
  add("metadata_not_object", with_header("{\"__metadata__\":[1]}"), kDL, {"__metadata__", "not an object"});
  add("metadata_value_not_string", with_header("{\"__metadata__\":{\"format\":1}}"), kDL,
      {"__metadata__ 'format'", "not a string"});
  add("empty_name", with_header("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"), kDL,
      {"empty name"});
  return c;
}

}  // namespace nanoserve::testing
