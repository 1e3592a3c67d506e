#pragma once
// Crafted malformed GGUF images, one per check in the reader, with the status
// code expected and fragments the message must contain (the field and its byte
// offset). Used by tests/io/gguf_bad_test.cc and, as seeds, by the fuzzer
// (fuzz/gguf_seeds.cc writes them out).

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf_builder.h"

namespace nanoserve::testing {

struct BadGguf {
  std::string name;
  std::vector<uint8_t> bytes;
  StatusCode code;
  std::vector<std::string> needles;  // each must appear in the message
  bool seed = true;                  // small enough to seed the fuzzer
};

// A valid file with metadata of several types and two tensors; the corpus and
// the tests derive broken variants from it.
inline GgufBuilder rich_gguf(uint32_t version = 3) {
  std::vector<float> w(4 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  std::vector<uint8_t> q(2 * 34, 0x11);
  GgufBuilder b(version);
  b.kv_string("general.architecture", "llama")
      .kv_u32("general.alignment", 32)
      .kv_string_array("tokenizer.ggml.tokens", {"a", "bc", ""})
      .kv_i32_array("tokenizer.ggml.token_type", {1, 2, 3})
      .kv_f32("x.f32", 1.5f)
      .kv_bool("x.bool", true)
      .tensor("w", {8, 4}, kGgmlF32, f32_bytes(w))
      .tensor("q", {64}, kGgmlQ8_0, q);
  return b;
}

// Header is 24 bytes; a key "k" (8 + 1 bytes) is followed by its u32 type at
// 33 and its value at 37.
inline std::vector<BadGguf> bad_gguf_corpus() {
  std::vector<BadGguf> c;
  auto add = [&c](std::string name, std::vector<uint8_t> bytes, StatusCode code,
                  std::vector<std::string> needles, bool seed = true) {
    c.push_back({std::move(name), std::move(bytes), code, std::move(needles), seed});
  };
  const StatusCode kDL = StatusCode::kDataLoss;

  add("empty_file", {}, kDL, {"magic at offset 0", "truncated"});
  add("bad_magic", GgufBuilder().magic(0x46554748).build(), kDL, {"magic at offset 0", "not a GGUF file"});
  add("version_1", GgufBuilder(1).build(), kDL, {"version at offset 4", "version 1"});
  add("version_4", GgufBuilder(4).build(), kDL, {"version at offset 4", "unsupported GGUF version 4"});
  add("big_endian", GgufBuilder(0x03000000).build(), kDL, {"version at offset 4", "big-endian"});
  {
    auto b = GgufBuilder().build();
    b.resize(10);
    add("truncated_header", b, kDL, {"n_tensors at offset 8", "needs 8 bytes"});
  }
  add("n_tensors_huge", rich_gguf().n_tensors_override(uint64_t{1} << 60).build(), kDL,
      {"n_tensors at offset 8", "cannot fit"});
  add("n_kv_huge", rich_gguf().n_kv_override(0xFFFFFFFFFFFFFFFFull).build(), kDL,
      {"n_kv at offset 16", "cannot fit"});
  add("n_kv_one_too_many", GgufBuilder().kv_string("k", std::string(20, 'x')).n_kv_override(2).build(), kDL,
      {"metadata #1", "metadata key at offset 65", "needs 8 bytes"});
  {
    auto b = GgufBuilder().kv_u32("k", 1).build();
    ByteWriter w{b};
    w.patch<uint64_t>(24, uint64_t{1} << 40);
    add("key_length_past_eof", w.bytes, kDL, {"metadata key at offset 24", "string length 1099511627776"});
  }
  add("string_value_past_eof",
      GgufBuilder()
          .kv("k", kTString,
              [](ByteWriter& w) {
                w.u64(1000);
                w.u8('a');
              })
          .build(),
      kDL, {"metadata 'k'", "string value at offset 37", "string length 1000"});
  add("array_count_past_eof",
      GgufBuilder()
          .kv("k", kTArray,
              [](ByteWriter& w) {
                w.u32(kTU32);
                w.u64(uint64_t{1} << 62);
              })
          .build(),
      kDL, {"metadata 'k'", "array count at offset 41"});
  add("string_array_count_past_eof",
      GgufBuilder()
          .kv("k", kTArray,
              [](ByteWriter& w) {
                w.u32(kTString);
                w.u64(5);
                w.str("ab");
              })
          .build(),
      kDL, {"metadata 'k'", "array count at offset 41", "5 string elements"});
  add("string_array_element_past_eof",
      GgufBuilder()
          .kv("k", kTArray,
              [](ByteWriter& w) {
                w.u32(kTString);
                w.u64(2);
                w.str("ab");
                w.u64(99);
                w.u64(0);
              })
          .build(),
      kDL, {"metadata 'k'", "array element 1", "string value at offset 59"});
  add("unknown_value_type", GgufBuilder().kv("k", 13, [](ByteWriter& w) { w.u64(0); }).build(), kDL,
      {"metadata 'k'", "value type at offset 33", "unknown value type 13"});
  add("unknown_array_type",
      GgufBuilder()
          .kv("k", kTArray,
              [](ByteWriter& w) {
                w.u32(99);
                w.u64(0);
              })
          .build(),
      kDL, {"metadata 'k'", "array element type at offset 37", "unknown value type 99"});
  add("bool_not_0_or_1", GgufBuilder().kv("k", kTBool, [](ByteWriter& w) { w.u8(2); }).build(), kDL,
      {"metadata 'k'", "bool value at offset 37"});
  add("duplicate_key", GgufBuilder().kv_u32("k", 1).kv_u32("k", 2).build(), kDL,
      {"metadata 'k'", "key at offset 41", "duplicate key"});
  add("nested_too_deep",
      GgufBuilder()
          .kv("k", kTArray,
              [](ByteWriter& w) {
                for (int i = 0; i < 9; ++i) {
                  w.u32(kTArray);
                  w.u64(1);
                }
                w.u32(kTU8);
                w.u64(0);
              })
          .build(),
      kDL, {"metadata 'k'", "nested deeper than 8"});
  add("alignment_zero", GgufBuilder().kv_u32("general.alignment", 0).build(), kDL,
      {"general.alignment' at offset 49", "not a positive power of two"});
  add("alignment_not_power_of_two", GgufBuilder().kv_u32("general.alignment", 48).build(), kDL,
      {"general.alignment' at offset 49", "48"});
  add("alignment_wrong_type", GgufBuilder().kv_string("general.alignment", "32").build(), kDL,
      {"general.alignment' at offset 49", "expected an integer"});

  // Tensor infos. With no metadata, the first tensor info starts at 24: name "t"
  // (8 + 1), n_dims at 33, ne[0] at 37.
  const std::vector<uint8_t> f32x4(16, 0);
  add("duplicate_tensor_name",
      GgufBuilder().tensor("t", {4}, kGgmlF32, f32x4).tensor("t", {4}, kGgmlF32, f32x4).build(), kDL,
      {"tensor 't'", "duplicate tensor name"});
  add("too_many_dims", GgufBuilder().tensor("t", {1, 1, 1, 1, 4}, kGgmlF32, f32x4).build(), kDL,
      {"tensor 't'", "n_dims at offset 33", "5 dimensions"});
  add("dim_product_overflow",
      GgufBuilder().tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, kGgmlF32, {}).build(), kDL,
      {"tensor 't'", "ne[1] at offset 45", "overflows"});
  // A zero dimension must not hide an overflowing product of the others.
  add("dim_product_overflow_after_zero",
      GgufBuilder().tensor("t", {0, uint64_t{1} << 34, uint64_t{1} << 49}, kGgmlF32, {}).build(), kDL,
      {"tensor 't'", "ne[2] at offset 53", "overflows"});
  add("dim_above_int64", GgufBuilder().tensor("t", {uint64_t{1} << 63}, kGgmlF32, {}).build(), kDL,
      {"tensor 't'", "ne[0] at offset 37"});
  add("byte_size_overflow", GgufBuilder().tensor("t", {uint64_t{1} << 62}, kGgmlF32, {}).build(), kDL,
      {"tensor 't'", "overflow the byte size"});
  add("unknown_tensor_type", GgufBuilder().tensor("t", {4}, 99, f32x4).build(), kDL,
      {"tensor 't'", "type at offset 45", "unknown tensor type 99"});
  add("unsupported_tensor_type",
      GgufBuilder().tensor("t", {256}, kGgmlQ8_K, std::vector<uint8_t>(292)).build(),
      StatusCode::kUnimplemented, {"tensor 't'", "Q8_K", "offset 45"});
  add("partial_block", GgufBuilder().tensor("t", {33}, kGgmlQ8_0, std::vector<uint8_t>(68)).build(), kDL,
      {"tensor 't'", "ne[0] at offset 37", "not a multiple of the Q8_0 block size 32"});
  add("misaligned_offset", GgufBuilder().tensor("t", {4}, kGgmlF32, f32x4, 4).build(), kDL,
      {"tensor 't'", "offset at offset 49", "not a multiple of the alignment 32"});
  add("data_misaligned_for_dtype",
      GgufBuilder().pad_alignment(1).kv_u32("general.alignment", 1).tensor("t", {4}, kGgmlF32, f32x4).build(),
      kDL, {"tensor 't'", "offset at offset 82", "file offset 90 is not aligned to 4 bytes for F32"});
  add("data_past_eof", GgufBuilder().tensor("t", {4}, kGgmlF32, f32x4, uint64_t{1} << 20).build(), kDL,
      {"tensor 't'", "offset at offset 49", "runs past end of file"});
  add("data_offset_overflow", GgufBuilder().tensor("t", {4}, kGgmlF32, f32x4, 0xFFFFFFFFFFFFFFE0ull).build(),
      kDL, {"tensor 't'", "runs past end of file"});
  {
    auto b = rich_gguf().build();
    b.pop_back();
    add("truncated_tensor_data", b, kDL, {"tensor 'q'", "runs past end of file"});
  }
  {
    // Cut inside the tensor infos: the data section cannot start.
    auto b = GgufBuilder().tensor("t", {4}, kGgmlF32, f32x4).build();
    b.resize(56);
    add("truncated_tensor_info", b, kDL, {"tensor 't'", "offset at offset 49", "needs 8 bytes but only 7"});
  }
  // Overlapping tensor data. attn_k's info is at 24 (name 14 bytes, n_dims at 38,
  // ne[0] at 42, type at 50, offset at 54), attn_q's at 62 (offset at 92); the
  // data section starts at 128.
  const std::vector<uint8_t> f32x8(32, 0), f32x16(64, 0);
  add("tensor_over_another",
      GgufBuilder()
          .tensor("attn_k", {16}, kGgmlF32, f32x16)
          .placed_tensor("attn_q", {8}, kGgmlF32, f32x8, 32)
          .build(),
      kDL,
      {"tensor 'attn_q': offset at offset 92", "data [160, 192) overlaps tensor 'attn_k' at [128, 192)"});
  add("two_tensors_at_one_offset",
      GgufBuilder()
          .tensor("attn_k", {8}, kGgmlF32, f32x8)
          .placed_tensor("attn_q", {8}, kGgmlF32, f32x8, 0)
          .build(),
      kDL, {"tensor 'attn_q'", "data [128, 160) overlaps tensor 'attn_k' at [128, 160)"});
  // A later tensor placed over an earlier one in the data, listed first.
  add("earlier_info_over_later_data",
      GgufBuilder()
          .placed_tensor("attn_q", {8}, kGgmlF32, f32x8, 64)
          .tensor("attn_k", {8}, kGgmlF32, f32x8)
          .tensor("attn_v", {16}, kGgmlF32, f32x16)
          .build(),
      kDL, {"tensor 'attn_v'", "overlaps tensor 'attn_q'"});
  {
    GgufBuilder b;
    for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                             "blk.0.attn_v.weight", "output_norm.weight"}) {
      b.placed_tensor(name, {16}, kGgmlF32, f32x16, 0);
    }
    add("every_tensor_at_offset_0", b.build(), kDL,
        {"tensor 'blk.0.attn_q.weight'", "overlaps tensor 'token_embd.weight'"});
  }
  {
    // 4M + 1 one-byte values: more metadata values than the reader will widen.
    GgufBuilder big;
    big.kv("k", kTArray, [](ByteWriter& w) {
      w.u32(kTU8);
      w.u64((uint64_t{1} << 22) + 1);
      w.bytes.resize(w.bytes.size() + (uint64_t{1} << 22) + 1, 0);
    });
    add("too_many_metadata_values", big.build(), kDL,
        {"metadata 'k'", "array count at offset 41", "metadata values"},
        /*seed=*/false);
  }
  return c;
}

}  // namespace nanoserve::testing
