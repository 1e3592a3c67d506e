#include "ops/dequantize/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "core/half.h"
#include "io/gguf.h"

namespace nanoserve {
namespace {

const std::string kFixtureDir = NS_SOURCE_DIR "/tests/fixtures/gguf/dequant/";
const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Output pre-filled with NaN so an unwritten element fails.
std::vector<float> run(DType t, const std::vector<uint8_t>& src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  dequantize_row(t, src.data(), out.data(), n);
  return out;
}

TEST(Dequantize, Q8_0HandBuiltBlocks) {
  std::vector<uint8_t> b(2 * 34);
  put_f16(&b[0], 0.5f);
  put_f16(&b[34], -0.25f);
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));  // -128 .. 120
    b[36 + j] = static_cast<uint8_t>(static_cast<int8_t>(127 - j));
  }
  auto y = run(DType::kQ8_0, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;
    EXPECT_EQ(y[32 + j], -0.25f * static_cast<float>(127 - j)) << j;
  }
}

TEST(Dequantize, Q4_0HandBuiltBlock) {
  // Byte j holds element j in its low nibble and element j+16 in its high nibble.
  std::vector<uint8_t> b(18);
  put_f16(&b[0], 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = run(DType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(15 - j - 8));
  }
}

TEST(Dequantize, Q4_1HandBuiltBlock) {
  std::vector<uint8_t> b(20);
  put_f16(&b[0], 0.25f);
  put_f16(&b[2], -1.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(((j * 3) & 15) | (j << 4));
  auto y = run(DType::kQ4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>((j * 3) & 15) - 1.0f);
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(j) - 1.0f);
  }
}

// Q4_K: 8 sub-blocks of 32 with 6-bit scales sc[] and mins mn[] packed in 12 bytes:
//   bytes 0-3:  sc[0..3] low 6 bits | sc[4..7] bits 4-5 in the top 2 bits
//   bytes 4-7:  mn[0..3] low 6 bits | mn[4..7] bits 4-5 in the top 2 bits
//   bytes 8-11: sc[4..7] low 4 bits | mn[4..7] low 4 bits in the high nibble
// Quants: 4 chunks of 32 bytes; chunk c holds sub-block 2c (low nibbles), 2c+1 (high).
TEST(Dequantize, Q4_KHandBuiltBlock) {
  const int sc[8] = {1, 63, 17, 32, 5, 48, 63, 33};
  const int mn[8] = {0, 7, 63, 40, 62, 19, 1, 50};
  std::vector<uint8_t> b(144);
  put_f16(&b[0], 0.125f);
  put_f16(&b[2], 0.0625f);
  for (int j = 0; j < 4; ++j) {
    b[4 + j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b[8 + j] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b[12 + j] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  auto q = [](int sub, int i) { return (sub * 5 + i * 3) & 15; };
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 32; ++i)
      b[16 + 32 * c + i] = static_cast<uint8_t>(q(2 * c, i) | (q(2 * c + 1, i) << 4));
  }
  auto y = run(DType::kQ4_K, b, 256);
  for (int sub = 0; sub < 8; ++sub) {
    for (int i = 0; i < 32; ++i) {
      const float want = 0.125f * static_cast<float>(sc[sub]) * static_cast<float>(q(sub, i)) -
                         0.0625f * static_cast<float>(mn[sub]);
      ASSERT_EQ(y[32 * sub + i], want) << "sub-block " << sub << " element " << i;
    }
  }
}

// Q6_K: value p = 128h + 32k + l (h half, k quarter, l 0..31) has its low 4 bits in
// ql[64h + l + 32(k&1)] (low nibble for k < 2, high for k >= 2), its high 2 bits in
// qh[32h + l] bits 2k..2k+1, and scale scales[8h + 2k + l/16]; x = d * scale * (q - 32).
TEST(Dequantize, Q6_KHandBuiltBlock) {
  std::vector<uint8_t> b(210, 0);
  auto qv = [](int p) { return (p * 37 + 11) & 63; };
  int8_t scales[16];
  for (int s = 0; s < 16; ++s) scales[s] = static_cast<int8_t>(s % 2 ? -(s * 8) : s * 7 + 1);
  for (int p = 0; p < 256; ++p) {
    const int h = p / 128, k = (p % 128) / 32, l = p % 32;
    const int q = qv(p);
    uint8_t& low = b[static_cast<size_t>(64 * h + l + 32 * (k & 1))];
    low = static_cast<uint8_t>(low | ((q & 15) << (k >= 2 ? 4 : 0)));
    b[static_cast<size_t>(128 + 32 * h + l)] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
  std::memcpy(&b[192], scales, 16);
  put_f16(&b[208], 0.5f);
  auto y = run(DType::kQ6_K, b, 256);
  for (int p = 0; p < 256; ++p) {
    const int h = p / 128, k = (p % 128) / 32, l = p % 32;
    const float want =
        0.5f * static_cast<float>(scales[8 * h + 2 * k + l / 16]) * static_cast<float>(qv(p) - 32);
    ASSERT_EQ(y[p], want) << p;
  }
}

TEST(Dequantize, PlainTypes) {
  std::vector<float> x = {1.5f, -2.0f, 0.0f, 3.25e-5f};
  std::vector<uint8_t> f32(16), f16(8), bf16(8);
  std::memcpy(f32.data(), x.data(), 16);
  for (int i = 0; i < 4; ++i) {
    const uint16_t h = f32_to_fp16(x[i]), b = f32_to_bf16(x[i]);
    std::memcpy(&f16[2 * i], &h, 2);
    std::memcpy(&bf16[2 * i], &b, 2);
  }
  EXPECT_EQ(run(DType::kF32, f32, 4), x);
  auto h = run(DType::kF16, f16, 4);
  auto b = run(DType::kBF16, bf16, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h[i], fp16_to_f32(f32_to_fp16(x[i])));
    EXPECT_NEAR(h[i], x[i], std::abs(x[i]) * 1e-3);
    EXPECT_EQ(b[i], bf16_to_f32(f32_to_bf16(x[i])));
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Both equal, or both NaN. The reference and gguf's numpy decoder do the same
// float32 operations in the same order, so they agree bit for bit.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << name << " [" << i << "]";
    } else {
      ASSERT_EQ(got[i], want[i]) << name << " [" << i << "]";
    }
  }
}

// Every case of the fixture made by tests/fixtures/gguf/make_dequant_fixture.py
// (oracle: gguf.quants.dequantize). Real-model cases are also read through the
// GGUF reader, so the tensor views' offsets are checked too.
TEST(Dequantize, MatchesGgufPackageOnFixture) {
  std::ifstream mf(kFixtureDir + "manifest.json");
  ASSERT_TRUE(mf.good());
  const auto manifest = nlohmann::json::parse(mf);
  auto model = GgufFile::open(kModelPath);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::set<std::string> dtypes_seen;
  int model_cases = 0;
  for (const auto& c : manifest["cases"]) {
    const std::string name = c["name"];
    const auto dtype = dtype_from_name(c["dtype"].get<std::string>());
    ASSERT_TRUE(dtype.has_value()) << name;
    dtypes_seen.insert(dtype_name(*dtype));
    const int64_t n = c["n"];
    const std::vector<uint8_t> src = read_file(kFixtureDir + name + ".src.bin");
    const std::vector<uint8_t> raw = read_file(kFixtureDir + name + ".f32.bin");
    ASSERT_EQ(static_cast<int64_t>(src.size()), dtype_bytes(*dtype, n)) << name;
    ASSERT_EQ(static_cast<int64_t>(raw.size()), n * 4) << name;
    std::vector<float> want(static_cast<size_t>(n));
    std::memcpy(want.data(), raw.data(), raw.size());
    expect_same(run(*dtype, src, n), want, name);
    if (c.contains("tensor")) {
      ++model_cases;
      auto t = (*model)->tensor(c["tensor"].get<std::string>());
      ASSERT_TRUE(t.ok()) << name;
      ASSERT_EQ(t->dtype(), *dtype);
      const int64_t rows = c["rows"];
      ASSERT_EQ(t->dim(-1) * rows, n);
      ASSERT_EQ(std::memcmp(t->data(), src.data(), src.size()), 0) << name << ": view bytes differ";
      std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
      for (int64_t r = 0; r < rows; ++r) {
        const Tensor row = t->slice_rows(r, r + 1);
        dequantize_row(*dtype, row.data(), out.data() + r * t->dim(-1), t->dim(-1));
      }
      expect_same(out, want, name + " via GgufFile");
    }
  }
  EXPECT_EQ(model_cases, 4);
  for (const char* d : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q5_0", "Q5_1", "Q2_K",
                        "Q3_K", "Q5_K", "MXFP4"}) {
    EXPECT_TRUE(dtypes_seen.count(d)) << "no fixture case for " << d;
  }
}

}  // namespace
}  // namespace nanoserve
