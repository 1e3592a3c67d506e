// The tile kernels (attend_tile.h) against the plain definition written out
// here, bit for bit, on fresh random inputs, with planted errors that the
// comparison must see: a lane order changed, a key order swapped, one input
// one ulp off.

#include "ops/attention/attend_tile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace nanoserve {
namespace {

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

float next_up(float x) {
  return std::nextafter(x, std::numeric_limits<float>::infinity());
}

// The definition, one operation at a time (attend_tile.h).
float combine8(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}
// Planted: the lanes paired in another order.
float combine8_other(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

float def_score(const float* q, const float* k, int64_t hd, float scale, bool planted = false) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t d = 0; d < hd; ++d) acc[d % 8] = std::fma(q[d], k[d], acc[d % 8]);
  return (planted ? combine8_other(acc) : combine8(acc)) * scale;
}

// Planted: one running sum in position order instead of 8 lanes.
void def_softmax(float* s, int64_t len, bool planted = false) {
  float m = -INFINITY;
  for (int64_t p = 0; p < len; ++p) m = s[p] > m ? s[p] : m;
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float running = 0.0f;
  for (int64_t p = 0; p < len; ++p) {
    s[p] = attn_exp(s[p] - m);
    lanes[p % 8] = lanes[p % 8] + s[p];
    running = running + s[p];
  }
  const float inv = 1.0f / (planted ? running : combine8(lanes));
  for (int64_t p = 0; p < len; ++p) s[p] = s[p] * inv;
}

// Planted: the first two keys taken in the other order.
void def_pv(const float* w, const std::vector<const float*>& v, int64_t hd, float* out, bool first,
            bool planted = false) {
  if (first) std::fill(out, out + hd, 0.0f);
  for (size_t j = 0; j < v.size(); ++j) {
    const size_t p = planted && v.size() > 1 && j < 2 ? 1 - j : j;
    for (int64_t d = 0; d < hd; ++d) out[d] = std::fma(w[p], v[p][d], out[d]);
  }
}

TEST(AttendTile, ExpIsWithinTwoUlpsAndExactAtTheEnds) {
  RecordProperty("isa", attn_tile_isa());
  float worst = 0.0f;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.3f * static_cast<float>(i) / 200000.0f;
    const float got = attn_exp(x);
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    const float err = static_cast<float>(std::fabs(got - want) / ulp);
    worst = std::max(worst, err);
    ASSERT_LE(err, 2.0f) << "x " << x << ": " << got << " vs " << want;
  }
  RecordProperty("worst_ulps", testing::PrintToString(worst));
  EXPECT_EQ(attn_exp(0.0f), 1.0f);
  EXPECT_EQ(attn_exp(-0.0f), 1.0f);
  EXPECT_EQ(attn_exp(-87.4f), 0.0f);
  EXPECT_EQ(attn_exp(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(attn_exp(std::numeric_limits<float>::quiet_NaN())));
}

struct Data {
  std::vector<std::vector<float>> q, k, v;
};

Data make_data(std::mt19937& rng, int64_t n_rows, int64_t n_keys, int64_t hd) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Data d;
  auto fill = [&](std::vector<std::vector<float>>& rows, int64_t n) {
    rows.assign(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(hd)));
    for (auto& r : rows)
      for (float& x : r) x = g(rng);
  };
  fill(d.q, n_rows);
  fill(d.k, n_keys);
  fill(d.v, n_keys);
  return d;
}

std::vector<const float*> ptrs(const std::vector<std::vector<float>>& rows) {
  std::vector<const float*> p;
  for (const auto& r : rows) p.push_back(r.data());
  return p;
}

// Each kernel bit for bit the definition, over row counts around the
// register tiles (1-9), key counts around the key tiles (1-33) and head
// dims that are and are not whole vectors; each planted error is seen.
TEST(AttendTile, KernelsAreBitwiseTheDefinitionAndPlantedErrorsAreSeen) {
  std::mt19937 rng(20261205);
  int planted_qk = 0, planted_ulp = 0, planted_sum = 0, planted_pv = 0, cases = 0;
  for (int64_t hd : {8, 20, 64, 72, 128}) {
    for (int64_t n_rows : {1, 2, 3, 4, 5, 9}) {
      for (int64_t n_keys : {1, 3, 4, 7, 8, 17, 32, 33}) {
        SCOPED_TRACE(testing::Message() << "hd " << hd << " rows " << n_rows << " keys " << n_keys);
        ++cases;
        Data d = make_data(rng, n_rows, n_keys, hd);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // QK^T into rows of a wider buffer (the kernel writes only n_keys).
        const int64_t stride = n_keys + 5;
        std::vector<float> s(static_cast<size_t>(n_rows * stride), -1234.0f);
        std::vector<float*> sp;
        for (int64_t r = 0; r < n_rows; ++r) sp.push_back(s.data() + r * stride);
        const auto qp = ptrs(d.q);
        const auto kp = ptrs(d.k);
        attn::qk_block(qp.data(), n_rows, kp.data(), n_keys, hd, scale, sp.data());
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t c = 0; c < n_keys; ++c) {
            const float want = def_score(qp[r], kp[c], hd, scale);
            ASSERT_TRUE(same_bits(sp[r][c], want))
                << "score " << r << "," << c << ": " << sp[r][c] << " vs " << want;
            planted_qk += !same_bits(sp[r][c], def_score(qp[r], kp[c], hd, scale, /*planted=*/true));
          }
          for (int64_t c = n_keys; c < stride; ++c) ASSERT_EQ(sp[r][c], -1234.0f) << "wrote past the keys";
        }
        // One K element one ulp up: the kernel's score of that key moves.
        {
          Data e = d;
          e.k[0][hd / 2] = next_up(e.k[0][hd / 2]);
          const auto ep = ptrs(e.k);
          std::vector<float> s1(static_cast<size_t>(n_rows * stride));
          std::vector<float*> s1p;
          for (int64_t r = 0; r < n_rows; ++r) s1p.push_back(s1.data() + r * stride);
          attn::qk_block(qp.data(), n_rows, ep.data(), n_keys, hd, scale, s1p.data());
          for (int64_t r = 0; r < n_rows; ++r) planted_ulp += !same_bits(s1p[r][0], sp[r][0]);
        }
        // Softmax of each score row.
        for (int64_t r = 0; r < n_rows; ++r) {
          std::vector<float> got(sp[r], sp[r] + n_keys), want = got, other = got;
          attn::softmax_row(got.data(), n_keys);
          def_softmax(want.data(), n_keys);
          def_softmax(other.data(), n_keys, /*planted=*/true);
          for (int64_t c = 0; c < n_keys; ++c) {
            ASSERT_TRUE(same_bits(got[c], want[c]))
                << "weight " << r << "," << c << ": " << got[c] << " vs " << want[c];
            planted_sum += !same_bits(got[c], other[c]);
          }
          std::copy(got.begin(), got.end(), sp[r]);
        }
        // PV: all keys from zero, then once more accumulating on top.
        std::vector<std::vector<float>> out(static_cast<size_t>(n_rows), std::vector<float>(hd, NAN));
        std::vector<float*> op;
        for (auto& o : out) op.push_back(o.data());
        std::vector<const float*> wp(sp.begin(), sp.end());
        const auto vp = ptrs(d.v);
        for (bool first : {true, false}) {
          std::vector<std::vector<float>> want = out, other = out;
          attn::pv_block(wp.data(), n_rows, vp.data(), n_keys, hd, op.data(), first);
          for (int64_t r = 0; r < n_rows; ++r) {
            def_pv(wp[r], vp, hd, want[r].data(), first);
            def_pv(wp[r], vp, hd, other[r].data(), first, /*planted=*/true);
            for (int64_t i = 0; i < hd; ++i) {
              ASSERT_TRUE(same_bits(out[r][i], want[r][i]))
                  << "out " << r << "," << i << (first ? " first" : " on top") << ": " << out[r][i] << " vs "
                  << want[r][i];
              planted_pv += !same_bits(out[r][i], other[r][i]);
            }
          }
        }
      }
    }
  }
  // Every planted error shows somewhere (a changed order can round the same
  // way on one element, so per element is too strict), and the ulp in K moves
  // the scores of most cases.
  EXPECT_GT(planted_qk, 0) << "another lane order would pass";
  EXPECT_GT(planted_sum, 0) << "a running sum would pass";
  EXPECT_GT(planted_pv, 0) << "swapped keys would pass";
  EXPECT_GT(planted_ulp, cases / 2) << "a K element one ulp off goes unseen";
}

// attend_tile over rows with different key ranges (a causal chunk with a
// window) equals each row attended alone, bit for bit, whatever the rows
// beside it; an accessor that misplaces one position is seen.
TEST(AttendTile, RowsOfATileEqualTheRowAlone) {
  std::mt19937 rng(77);
  const int64_t hd = 64, ctx = 150;
  Data d = make_data(rng, 24, ctx, hd);
  const auto kp = ptrs(d.k), vp = ptrs(d.v);
  auto k_block = [&](int64_t p0, int64_t) { return kp.data() + p0; };
  auto v_block = [&](int64_t p0, int64_t) { return vp.data() + p0; };
  const float scale = 0.125f;
  for (int64_t window : {0, 20}) {
    // 8 tokens at positions 100..107 x 3 heads.
    std::vector<AttnRow> rows;
    std::vector<std::vector<float>> out(24, std::vector<float>(hd, NAN)), alone = out;
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t pos = 100 + i, begin = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
      for (int64_t h = 0; h < 3; ++h)
        rows.push_back({d.q[i * 3 + h].data(), out[i * 3 + h].data(), begin, pos + 1});
    }
    std::vector<float> scores(24 * ctx);
    attend_tile(rows.data(), 24, hd, scale, k_block, v_block, scores.data());
    for (size_t r = 0; r < rows.size(); ++r) {
      AttnRow one = rows[r];
      one.out = alone[r].data();
      attend_tile(&one, 1, hd, scale, k_block, v_block, scores.data());
      ASSERT_EQ(std::memcmp(out[r].data(), alone[r].data(), hd * sizeof(float)), 0) << "row " << r;
    }
    // Planted: position 50 read from 51.
    auto k_shifted = [&](int64_t p0, int64_t n) {
      static std::vector<const float*> buf;
      buf.assign(kp.begin() + p0, kp.begin() + p0 + n);
      if (p0 <= 50 && 50 < p0 + n) buf[50 - p0] = kp[51];
      return static_cast<const float* const*>(buf.data());
    };
    std::vector<float> shifted(hd);
    AttnRow one = rows[0];
    one.out = shifted.data();
    attend_tile(&one, 1, hd, scale, k_shifted, v_block, scores.data());
    if (one.begin <= 50) {
      EXPECT_NE(std::memcmp(shifted.data(), out[0].data(), hd * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace nanoserve
