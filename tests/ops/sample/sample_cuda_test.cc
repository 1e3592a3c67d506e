// sample_cuda against the CPU Sampler (engine/sampler.h), which is its truth:
// for the same logits, params and uniform the device token must EQUAL the
// Sampler's (same ranking, filters and f64 sums in the same order), on
// random rows of V = 1, 7, 1000, 1024, 1025, 4099, 32000, 49152, 128256 and
// 151936 (not multiples of the block or of 1024 among them), with exact ties,
// -inf (masked) tokens, a peaked row, tiny and large temperatures, top_k of 1,
// 1024, 1025, 5000, V - 1, V and V + 5, top_p 1 / 0.999 / 0.9 / 0.5 / 0.05 and
// min_p 0 / 0.05 / 0.3 / 1. A row the device hands back (kSampleOnHost) must
// be one whose walk really is longer than the device window. Then the
// Sampler's frequency test and a chi-square test through the kernel, and the
// logprobs against Sampler::logprobs. Tokens are poisoned (-7) before each call.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "ops/argmax/argmax_cuda.cuh"
#include "ops/cuda_op_check.h"
#include "ops/sample/sample_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

constexpr int32_t kPoison = -7;

struct DeviceResult {
  std::vector<int32_t> tokens;
  std::vector<SampleRowLogprobs> logprobs;
};

// Runs the kernel over [R, V] host logits with one params entry per row.
DeviceResult run_device(const std::vector<float>& logits, int64_t V,
                        const std::vector<SampleRowParams>& params, bool want_logprobs) {
  const int64_t R = static_cast<int64_t>(params.size());
  NS_CHECK(static_cast<int64_t>(logits.size()) == R * V) << "logits size";
  Tensor host = Tensor::empty(DType::kF32, {R, V});
  std::copy(logits.begin(), logits.end(), host.data_as<float>());
  Tensor dev = cuda::to_device(host);
  Tensor p = cuda::empty(DType::kI32, {R * static_cast<int64_t>(sizeof(SampleRowParams) / 4)});
  cuda::copy_bytes_to_device(p.data(), params.data(), R * static_cast<int64_t>(sizeof(SampleRowParams)));
  Tensor argmax = cuda::empty(DType::kI32, {R});
  Tensor tokens = cuda::empty(DType::kI32, {R});
  Tensor lp = cuda::empty(DType::kI32, {R * static_cast<int64_t>(sizeof(SampleRowLogprobs) / 4)});
  std::vector<int32_t> poison(static_cast<size_t>(R), kPoison);
  cuda::copy_bytes_to_device(tokens.data(), poison.data(), R * 4);
  argmax_cuda(dev, argmax.data_as<int32_t>(), nullptr);
  const Tensor scaled = cuda::empty(DType::kF32, {R, V});
  sample_cuda(dev, scaled, p.data_as<const SampleRowParams>(), argmax.data_as<const int32_t>(),
              tokens.data_as<int32_t>(), want_logprobs ? lp.data_as<SampleRowLogprobs>() : nullptr, nullptr);
  cuda::synchronize();
  DeviceResult out;
  Tensor th = cuda::to_host(tokens);
  out.tokens.assign(th.data_as<const int32_t>(), th.data_as<const int32_t>() + R);
  if (want_logprobs) {
    Tensor lh = cuda::to_host(lp);
    const auto* l = reinterpret_cast<const SampleRowLogprobs*>(lh.data());
    out.logprobs.assign(l, l + R);
  }
  return out;
}

SamplingParams to_sampling(const SampleRowParams& d) {
  SamplingParams p;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  return p;
}

std::string describe(const SampleRowParams& p, int64_t V) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "V=%lld T=%.9g top_k=%d top_p=%.9g min_p=%.9g u=%.17g",
                static_cast<long long>(V), p.temperature, p.top_k, p.top_p, p.min_p, p.u);
  return buf;
}

// Rank of `id` in the Sampler's order over the processed row (0 = best).
int64_t rank_of(const float* row, int64_t V, float T, int32_t id) {
  auto v = [&](int64_t i) { return T != 1.0f && T != 0.0f ? row[i] / T : row[i]; };
  int64_t r = 0;
  for (int64_t i = 0; i < V; ++i) r += v(i) > v(id) || (v(i) == v(id) && i < id);
  return r;
}

// A row of one of several shapes: uniform of a random spread, quantized (many
// exact ties), with -inf tokens, peaked (one token dominant), or a flat row.
void fill_row(float* row, int64_t V, int kind, Rng& gen) {
  const double spread = 0.5 + 12.0 * gen.next_double();
  for (int64_t i = 0; i < V; ++i) row[i] = static_cast<float>(spread * (gen.next_double() - 0.5));
  switch (kind % 5) {
    case 0: break;
    case 1:
      for (int64_t i = 0; i < V; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
      break;
    case 2:
      for (int64_t i = 0; i < V; i += 3) row[i] = -std::numeric_limits<float>::infinity();
      if (V > 1) row[V - 1] = -std::numeric_limits<float>::infinity();
      row[0] = 1.0f;  // one finite at least
      break;
    case 3: row[gen.next_u64() % V] = static_cast<float>(spread + 8.0); break;
    case 4: std::fill(row, row + V, 0.25f); break;
  }
}

// The device token for every row equals the Sampler's; counts the rows handed back.
void check_rows(int64_t V, int rows, uint64_t seed) {
  SCOPED_TRACE("V " + std::to_string(V) + ", seed " + std::to_string(seed));
  Rng gen(seed);
  const float temps[] = {1.0f, 0.7f, 1.5f, 1e-3f, 0.0f, 3.0f};
  const int32_t ks[] = {-1,
                        1,
                        2,
                        50,
                        1024,
                        1025,
                        5000,
                        static_cast<int32_t>(V) - 1,
                        static_cast<int32_t>(V),
                        static_cast<int32_t>(V) + 5,
                        0};
  const float top_ps[] = {1.0f, 0.999f, 0.9f, 0.5f, 0.05f};
  const float min_ps[] = {0.0f, 0.05f, 0.3f, 1.0f};
  std::vector<float> logits(static_cast<size_t>(rows * V));
  std::vector<SampleRowParams> params(static_cast<size_t>(rows));
  std::vector<Rng> rngs;
  for (int r = 0; r < rows; ++r) {
    fill_row(logits.data() + r * V, V, r, gen);
    SampleRowParams& p = params[r];
    p.temperature = temps[gen.next_u64() % 6];
    p.top_k = ks[gen.next_u64() % 11];
    p.top_p = gen.next_u64() % 2 ? 1.0f : top_ps[gen.next_u64() % 5];
    p.min_p = gen.next_u64() % 2 ? 0.0f : min_ps[gen.next_u64() % 4];
    rngs.emplace_back(gen.next_u64());
    Rng copy = rngs.back();
    p.u = p.temperature == 0.0f ? 0.0 : copy.next_double();
  }
  const DeviceResult dev = run_device(logits, V, params, false);
  Sampler s(static_cast<int32_t>(V));
  int handed_back = 0;
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * V;
    const SamplingParams sp = to_sampling(params[r]);
    const int32_t cpu = s.sample({row, static_cast<size_t>(V)}, sp, {}, {}, rngs[r]);
    const int32_t gpu = dev.tokens[r];
    if (gpu == kSampleOnHost) {
      ++handed_back;
      // Only a walk longer than the window may come back.
      const int32_t k = (sp.top_k > 0 && sp.top_k < V) ? sp.top_k : static_cast<int32_t>(V);
      const bool filtered = sp.top_p < 1.0f || sp.min_p > 0.0f;
      // (a cut at exactly kSampleWindow is seen only past the window: handed back too)
      const bool long_walk =
          filtered ? s.candidates().size() >= static_cast<size_t>(kSampleWindow) : k > kSampleWindow;
      EXPECT_TRUE(long_walk) << "row " << r << " handed back with " << s.candidates().size()
                             << " candidates: " << describe(params[r], V);
      continue;
    }
    if (gpu != cpu) {
      const float T = params[r].temperature;
      ADD_FAILURE() << "row " << r << ": device " << gpu << " (logit "
                    << (gpu >= 0 && gpu < V ? row[gpu] : NAN) << ", rank "
                    << (gpu >= 0 && gpu < V ? rank_of(row, V, T, gpu) : -1) << ") vs CPU " << cpu
                    << " (logit " << row[cpu] << ", rank " << rank_of(row, V, T, cpu) << "), "
                    << s.candidates().size() << " CPU candidates; " << describe(params[r], V) << "; row kind "
                    << r % 5;
    }
  }
  std::printf("V %lld: %d rows, %d handed back to the host\n", static_cast<long long>(V), rows, handed_back);
}

TEST(SampleCuda, EqualsCpuSamplerSmallVocabularies) {
  NS_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  for (int64_t V : {1, 2, 7, 1000, 1024, 1025, 4099}) check_rows(V, 300, seed + static_cast<uint64_t>(V));
}

TEST(SampleCuda, EqualsCpuSamplerModelVocabularies) {
  NS_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  for (int64_t V : {32000, 49152, 128256, 151936}) check_rows(V, 96, seed + static_cast<uint64_t>(V));
}

// Top-p over a flat row keeps more than the window: the row comes back, and
// a nucleus of just under the window is drawn on the device and equals the CPU.
TEST(SampleCuda, WindowEdgeIsHandedBackOrExact) {
  NS_SKIP_WITHOUT_GPU();
  const int64_t V = 20000;
  std::vector<float> logits(static_cast<size_t>(3 * V), 0.0f);
  std::vector<SampleRowParams> params(3);
  for (int r = 0; r < 3; ++r) {
    params[r].temperature = 1.0f;
    params[r].u = 0.37 + 0.2 * r;
  }
  params[0].top_p = 0.9f;               // 18000 of 20000 flat tokens: past the window
  params[1].top_k = kSampleWindow + 1;  // pure top-k past the window
  params[2].top_p = (kSampleWindow - 10) / static_cast<float>(V);  // just inside
  const DeviceResult dev = run_device(logits, V, params, false);
  EXPECT_EQ(dev.tokens[0], kSampleOnHost);
  EXPECT_EQ(dev.tokens[1], kSampleOnHost);
  // On a flat row every kept weight is 1, so the draw takes rank floor(u * n)
  // of the n candidates (ids in order); the CPU Sampler gives n.
  Sampler s(static_cast<int32_t>(V));
  Rng rng(1);
  SamplingParams sp = to_sampling(params[2]);
  ASSERT_NE(dev.tokens[2], kSampleOnHost);
  s.sample({logits.data() + 2 * V, static_cast<size_t>(V)}, sp, {}, {}, rng);
  const size_t n = s.candidates().size();
  ASSERT_LE(n, static_cast<size_t>(kSampleWindow));
  const int64_t expect = static_cast<int64_t>(std::floor(params[2].u * static_cast<double>(n)));
  EXPECT_EQ(dev.tokens[2], s.candidates()[static_cast<size_t>(expect)]) << n << " candidates";
}

// Boundaries where the cut is decided by an exact equality: on flat rows
// every weight is 1, so top-p's target top_p * V is an integer for these
// top_p and the token whose running mass reaches it exactly is the last kept
// (cum >= target, not >); min_p = 1 keeps every token of weight exactly 1
// (w < min_p, not <=); top_k = V - 1 over ties keeps the lowest ids. u near 1
// draws the last kept token, so a cut one off changes the token.
TEST(SampleCuda, ExactBoundariesOnFlatRows) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t V : {1024, 4096, 1000}) {
    const float top_ps[] = {0.5f, 0.25f, 0.125f, 0.75f};
    const double us[] = {0.0, 0.4999, 0.999999, 0.5};
    std::vector<SampleRowParams> params;
    for (float tp : top_ps) {
      for (double u : us) {
        SampleRowParams p;
        p.temperature = 1.0f;
        p.top_p = tp;
        p.u = u;
        params.push_back(p);
        p.top_p = 1.0f;
        p.min_p = 1.0f;
        params.push_back(p);
        p.min_p = 0.0f;
        p.top_k = static_cast<int32_t>(V) - 1;
        params.push_back(p);
        p.top_p = tp;  // top-p relative to the top-k set
        params.push_back(p);
      }
    }
    std::vector<float> logits(params.size() * static_cast<size_t>(V), 1.5f);
    const DeviceResult dev = run_device(logits, V, params, false);
    Sampler s(static_cast<int32_t>(V));
    for (size_t r = 0; r < params.size(); ++r) {
      const int32_t cpu = s.sample_uniform({logits.data() + r * V, static_cast<size_t>(V)},
                                           to_sampling(params[r]), {}, {}, params[r].u);
      EXPECT_EQ(dev.tokens[r], cpu) << "row " << r << ": " << describe(params[r], V) << ", "
                                    << s.candidates().size() << " CPU candidates";
    }
  }
}

// Sampler's DrawsFollowTheDistribution through the kernel: 40000 rows of the
// same 4 logits, each with the next uniform of one stream; frequencies within
// 5 sigma, for the no-filter (id-order) and the ranked walk.
TEST(SampleCuda, DrawsFollowTheDistribution) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<double> probs{0.5, 0.25, 0.15, 0.10};
  const int n = 40000;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    for (double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  }
  for (bool filtered : {false, true}) {
    std::vector<SampleRowParams> params(n);
    Rng rng(123);
    for (SampleRowParams& p : params) {
      p.temperature = 1.0f;
      p.top_k = filtered ? 4 : -1;
      p.u = rng.next_double();
    }
    const DeviceResult dev = run_device(logits, 4, params, false);
    std::vector<int> hits(4, 0);
    for (int32_t t : dev.tokens) {
      ASSERT_TRUE(t >= 0 && t < 4) << "token " << t;
      ++hits[t];
    }
    for (int t = 0; t < 4; ++t) {
      const double sd = std::sqrt(probs[t] * (1 - probs[t]) / n);
      EXPECT_NEAR(hits[t] / double(n), probs[t], 5 * sd) << "token " << t << " filtered " << filtered;
    }
  }
}

// Chi-square of 20000 draws over the renormalised candidates of top-k / top-p
// / min-p on a random 512-wide row (the CPU Sampler's candidate_probs as the
// expectation); bins with expected count < 5 pooled.
TEST(SampleCuda, ChiSquareAgainstCandidateProbabilities) {
  NS_SKIP_WITHOUT_GPU();
  const int64_t V = 512;
  const int n = 20000;
  Rng gen(99);
  std::vector<float> row(V);
  for (float& x : row) x = static_cast<float>(4.0 * (gen.next_double() - 0.5));
  SamplingParams cases[4];
  cases[0].temperature = 0.8f;
  cases[1].top_k = 40;
  cases[2].top_p = 0.7f;
  cases[3].min_p = 0.2f;
  cases[3].temperature = 1.3f;
  for (const SamplingParams& sp : cases) {
    Sampler s(static_cast<int32_t>(V));
    Rng probe(1);
    s.sample(row, sp, {}, {}, probe);
    std::vector<double> expect(V, 0.0);
    for (size_t j = 0; j < s.candidates().size(); ++j) expect[s.candidates()[j]] = s.candidate_probs()[j];
    std::vector<float> logits;
    std::vector<SampleRowParams> params(n);
    Rng rng(7);
    for (SampleRowParams& p : params) {
      p.temperature = sp.temperature;
      p.top_k = sp.top_k;
      p.top_p = sp.top_p;
      p.min_p = sp.min_p;
      p.u = rng.next_double();
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const DeviceResult dev = run_device(logits, V, params, false);
    std::vector<int> hits(V, 0);
    for (int32_t t : dev.tokens) {
      ASSERT_TRUE(t >= 0 && t < V) << "token " << t;
      ASSERT_GT(expect[t], 0.0) << "token " << t << " is outside the candidates";
      ++hits[t];
    }
    double chi2 = 0.0, pooled_e = 0.0, pooled_o = 0.0;
    int bins = 0;
    for (int64_t t = 0; t < V; ++t) {
      const double e = expect[t] * n;
      if (e == 0.0) continue;
      if (e < 5.0) {
        pooled_e += e;
        pooled_o += hits[t];
        continue;
      }
      chi2 += (hits[t] - e) * (hits[t] - e) / e;
      ++bins;
    }
    if (pooled_e > 0.0) {
      chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
      ++bins;
    }
    const double df = std::max(1, bins - 1);
    // About 6 sigma above the mean of a chi-square with df degrees of freedom.
    EXPECT_LT(chi2, df + 6.0 * std::sqrt(2.0 * df))
        << bins << " bins, T=" << sp.temperature << " top_k=" << sp.top_k << " top_p=" << sp.top_p
        << " min_p=" << sp.min_p;
  }
}

// Logprobs of the raw row against Sampler::logprobs, for sampled and greedy
// rows and n = 0, 1, 5, 20: top ids exactly, logprobs to 1e-6 (the two sides'
// f64 log may differ in the last bit).
TEST(SampleCuda, LogprobsMatchCpuSampler) {
  NS_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t V : {7, 1025, 49152, 128256}) {
    Rng gen(seed + static_cast<uint64_t>(V));
    const int rows = 40;
    std::vector<float> logits(static_cast<size_t>(rows * V));
    std::vector<SampleRowParams> params(rows);
    std::vector<Rng> rngs;
    const int32_t ns[] = {0, 1, 5, 20};
    for (int r = 0; r < rows; ++r) {
      fill_row(logits.data() + r * V, V, r, gen);
      SampleRowParams& p = params[r];
      p.temperature = r % 3 == 0 ? 0.0f : 0.9f;
      p.top_k = r % 2 ? 20 : -1;
      p.num_logprobs = ns[r % 4];
      rngs.emplace_back(gen.next_u64());
      Rng copy = rngs.back();
      p.u = p.temperature == 0.0f ? 0.0 : copy.next_double();
    }
    const DeviceResult dev = run_device(logits, V, params, true);
    Sampler s(static_cast<int32_t>(V));
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * V, static_cast<size_t>(V));
      const int32_t token = s.sample(row, to_sampling(params[r]), {}, {}, rngs[r]);
      ASSERT_EQ(dev.tokens[r], token) << "row " << r << ": " << describe(params[r], V);
      std::vector<TokenLogprob> top;
      const float lp = s.logprobs(row, token, params[r].num_logprobs, top);
      const SampleRowLogprobs& d = dev.logprobs[r];
      // -inf (a masked token's) equals itself; EXPECT_NEAR would see inf - inf = NaN.
      auto near = [](float a, float b) {
        return a == b || std::fabs(a - b) <= 1e-6 * std::max(1.0f, std::fabs(b));
      };
      EXPECT_TRUE(near(d.logprob, lp)) << "row " << r << " V " << V << ": " << d.logprob << " vs " << lp;
      ASSERT_EQ(d.n, static_cast<int32_t>(top.size())) << "row " << r << " V " << V;
      for (int32_t j = 0; j < d.n; ++j) {
        EXPECT_EQ(d.top_ids[j], top[j].token) << "row " << r << " V " << V << " rank " << j;
        EXPECT_TRUE(near(d.top_logprobs[j], top[j].logprob))
            << "row " << r << " V " << V << " rank " << j << ": " << d.top_logprobs[j] << " vs "
            << top[j].logprob;
      }
    }
  }
}

// Rows the CPU Sampler refuses (no finite logit, or T so small that l / T
// overflows) and NaN: the device still returns an id in range, the argmax.
TEST(SampleCuda, NonFiniteRowsTakeTheArgmax) {
  NS_SKIP_WITHOUT_GPU();
  const int64_t V = 3000;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits(static_cast<size_t>(4 * V), -inf);
  logits[1 * V + 5] = 30.0f;  // row 1: T = 1e-38 overflows it to +inf
  logits[1 * V + 9] = 30.0f;
  std::fill(logits.begin() + 2 * V, logits.begin() + 3 * V, nan);  // row 2: all NaN
  for (int64_t i = 0; i < V; ++i) logits[3 * V + i] = i % 2 ? nan : static_cast<float>(i % 7);  // row 3
  std::vector<SampleRowParams> params(4);
  for (SampleRowParams& p : params) {
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    p.u = 0.5;
  }
  params[1].temperature = 1e-38f;
  const DeviceResult dev = run_device(logits, V, params, false);
  EXPECT_EQ(dev.tokens[0], 0);  // the argmax of a row of -inf
  EXPECT_EQ(dev.tokens[1], 5);  // the first of the two +inf
  EXPECT_EQ(dev.tokens[2], V - 1);
  ASSERT_TRUE(dev.tokens[3] >= 0 && dev.tokens[3] < V);
  EXPECT_EQ(dev.tokens[3] % 7, 6) << "NaN ranks as -inf: the draw is among the largest finite logits";
}

}  // namespace
}  // namespace nanoserve
