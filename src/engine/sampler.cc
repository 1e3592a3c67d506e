#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "core/check.h"

namespace nanoserve {

namespace {

// The first partial sort of the top-p / min-p walk; grown 4x until the cut
// is found. Nuclei are usually far smaller than the vocabulary.
constexpr int32_t kFirstRankChunk = 64;
// top-k up to this size is selected with a heap, beyond with nth_element.
constexpr int32_t kHeapTopK = 1024;

// e^x for x <= 0 (x - max of a logit row), to ~1e-7 relative: Cody-Waite
// reduction to r in [-ln2/2, ln2/2], a degree-7 Taylor polynomial, and the
// power of two put in the exponent bits. Plain arithmetic, so the loops that
// call it vectorise; below -87 it returns 2^-126 (never a denormal), except
// -inf (a masked token), which is exactly 0.
inline float exp_nonpos(float x_in) {
  const float x = x_in < -87.0f ? -87.0f : x_in;
  // Round to nearest by the 1.5 * 2^23 trick (|x * log2(e)| < 2^22 here).
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x_in == -std::numeric_limits<float>::infinity() ? 0.0f : q * scale;
}

void exp_shifted(const float* __restrict l, float m, int32_t n, float* __restrict out) {
  for (int32_t i = 0; i < n; ++i) out[i] = exp_nonpos(l[i] - m);
}

// Max over 16 lanes, then across them: exact, so the order does not matter;
// written so it vectorises without -ffast-math.
float max_of(const float* l, int32_t n) {
  float lane[16];
  for (int j = 0; j < 16; ++j) lane[j] = l[0];
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lane[j] = lane[j] > l[i + j] ? lane[j] : l[i + j];
  }
  float m = l[0];
  for (int j = 0; j < 16; ++j) m = m > lane[j] ? m : lane[j];
  for (; i < n; ++i) m = m > l[i] ? m : l[i];
  return m;
}

// Sum in double over 8 interleaved lanes, combined in a fixed order: the
// same result on every call (deterministic), and a loop that vectorises.
double lane_sum(const float* w, int32_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(w[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(w[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The one order every whole-row sum of the sampler uses (the draw's total,
// top-p's z, the logprobs' normaliser): lane_sum over each block of
// kSumBlock ids, then the block sums added from 0 in block order. Fixed per
// id, so the device sampler (ops/sample) reproduces it bit for bit with one
// thread per (block, lane).
constexpr int32_t kSumBlock = 1024;

double block_total(const float* w, int32_t n) {
  double total = 0.0;
  for (int32_t b = 0; b < n; b += kSumBlock) total += lane_sum(w + b, std::min(kSumBlock, n - b));
  return total;
}

// block_total of a row that is zero outside `ids` (ascending): adding 0 to a
// non-negative sum changes nothing, so summing only the listed ids, each into
// its own (block, lane), gives the same bits.
double sparse_block_total(const int32_t* ids, int32_t n, const float* w) {
  double total = 0.0;
  for (int32_t i = 0; i < n;) {
    const int32_t b = ids[i] / kSumBlock;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (; i < n && ids[i] / kSumBlock == b; ++i) lane[ids[i] % 8] += static_cast<double>(w[ids[i]]);
    total += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
  return total;
}

}  // namespace

Sampler::Sampler(int32_t vocab_size, std::vector<int32_t> eos_ids)
    : vocab_size_(vocab_size),
      eos_ids_(std::move(eos_ids)),
      work_(vocab_size),
      weight_(vocab_size),
      probs_(vocab_size),
      block_sums_((vocab_size + kBlock - 1) / kBlock),
      lp_(vocab_size),
      masked_(vocab_size),
      ids_(vocab_size),
      order_(vocab_size),
      counts_(vocab_size, 0),
      seen_(vocab_size, 0) {
  static_assert(kBlock == kSumBlock, "the draw's block sums are block_total's blocks");
  NS_CHECK(vocab_size > 0) << "vocab_size " << vocab_size;
  for (int32_t id : eos_ids_) NS_CHECK(id >= 0 && id < vocab_size) << "eos id " << id;
}

bool Sampler::modifies(const SamplingParams& p, size_t num_generated) {
  return !p.greedy() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f || !p.logit_bias.empty() ||
         num_generated < static_cast<size_t>(std::max(0, p.min_tokens));
}

void Sampler::apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt,
                              std::span<const int32_t> output, float* l) {
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto penalise = [&](std::span<const int32_t> ids) {
      for (int32_t t : ids) {
        NS_CHECK(t >= 0 && t < vocab_size_) << "token " << t;
        if (seen_[t]) continue;
        seen_[t] = 1;
        l[t] = l[t] > 0.0f ? l[t] / r : l[t] * r;
      }
    };
    penalise(prompt);
    penalise(output);
    for (int32_t t : prompt) seen_[t] = 0;
    for (int32_t t : output) seen_[t] = 0;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t t : output) {
      NS_CHECK(t >= 0 && t < vocab_size_) << "token " << t;
      ++counts_[t];
    }
    for (int32_t t : output) {
      if (counts_[t] == 0) continue;  // already applied for this id
      l[t] -= p.frequency_penalty * static_cast<float>(counts_[t]) + p.presence_penalty;
      counts_[t] = 0;
    }
  }
}

void Sampler::process_logits(std::span<const float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output,
                             std::span<float> out) {
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_size_);
  NS_CHECK_EQ(static_cast<int64_t>(out.size()), vocab_size_);
  std::copy(logits.begin(), logits.end(), out.begin());
  for (const auto& [id, bias] : p.logit_bias) {
    NS_CHECK(id >= 0 && id < vocab_size_) << "logit_bias token " << id;
    out[id] += bias;
  }
  apply_penalties(p, prompt, output, out.data());
  if (output.size() < static_cast<size_t>(std::max(0, p.min_tokens))) {
    // vLLM's min_tokens: no end token may be drawn yet.
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    if (!p.ignore_eos) {
      for (int32_t id : eos_ids_) out[id] = kMasked;
    }
    for (int32_t id : p.stop_token_ids) {
      NS_CHECK(id >= 0 && id < vocab_size_) << "stop token " << id;
      out[id] = kMasked;
    }
  }
  if (!p.greedy() && p.temperature != 1.0f) {
    for (float& v : out) v /= p.temperature;
  }
}

void Sampler::rank(int32_t begin, int32_t mid, int32_t end) {
  const float* l = work_.data();
  auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::partial_sort(order_.begin() + begin, order_.begin() + mid, order_.begin() + end, better);
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                        std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng) {
  return sample(logits, p, prompt, output, &rng, 0.0);
}

int32_t Sampler::sample_uniform(std::span<const float> logits, const SamplingParams& p,
                                std::span<const int32_t> prompt, std::span<const int32_t> output, double u) {
  return sample(logits, p, prompt, output, nullptr, u);
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                        std::span<const int32_t> prompt, std::span<const int32_t> output, Rng* rng,
                        double uniform) {
  // The one draw, made only where the CPU walk needs it (greedy draws nothing).
  auto draw = [&] { return rng != nullptr ? rng->next_double() : uniform; };
  const int32_t V = vocab_size_;
  const float* l = logits.data();
  if (modifies(p, output.size())) {
    process_logits(logits, p, prompt, output, work_);
    l = work_.data();
  } else {
    // Greedy with nothing to apply reads the row as it is: no 196 KB copy per step.
    NS_CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_size_);
  }
  probs_valid_ = false;

  if (p.greedy()) {
    // The first id holding the max: ties go to the lowest id.
    const float m = max_of(l, V);
    int32_t best = 0;
    while (best + 1 < V && !(l[best] == m)) ++best;
    order_[0] = best;
    weight_[best] = 1.0f;
    total_ = 1.0;
    num_candidates_ = 1;
    all_candidates_ = false;
    return best;
  }

  const float m = max_of(l, V);
  NS_CHECK(std::isfinite(m)) << "no finite logit to sample from";
  const int32_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  const bool use_top_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;

  if (k == V && !use_top_p && !use_min_p) {
    // No filter: the whole vocabulary in id order. Block sums let the draw
    // skip to its block instead of walking 49152 weights one by one.
    exp_shifted(l, m, V, weight_.data());
    const int32_t n_blocks = (V + kBlock - 1) / kBlock;
    total_ = 0.0;
    for (int32_t b = 0; b < n_blocks; ++b) {
      block_sums_[b] = lane_sum(weight_.data() + b * kBlock, std::min(kBlock, V - b * kBlock));
      total_ += block_sums_[b];
    }
    const double u = draw() * total_;
    double acc = 0.0;
    int32_t b = 0;
    while (b + 1 < n_blocks && u >= acc + block_sums_[b]) acc += block_sums_[b++];
    const int32_t end = std::min(V, (b + 1) * kBlock);
    int32_t chosen = -1;
    for (int32_t i = b * kBlock; i < end; ++i) {
      acc += weight_[i];
      if (u < acc) {
        chosen = i;
        break;
      }
    }
    if (chosen < 0) {  // rounding left u past the block's last step: its last token with weight
      // (a block of masked tokens has sum 0 and is never the one u lands in)
      chosen = end - 1;
      while (chosen > b * kBlock && weight_[chosen] == 0.0f) --chosen;
    }
    num_candidates_ = V;
    all_candidates_ = true;
    return chosen;
  }

  all_candidates_ = false;
  auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  double z = 0.0;  // mass of the top-k set, which top-p is relative to
  if (k == V) {
    std::iota(order_.begin(), order_.end(), 0);
    exp_shifted(l, m, V, weight_.data());
    z = block_total(weight_.data(), V);
  } else {
    if (k <= kHeapTopK) {
      // A heap of the k best seen so far, its worst on top: one comparison
      // for most of the vocabulary.
      int32_t filled = 0;
      for (int32_t i = 0; i < V; ++i) {
        if (filled < k) {
          order_[filled++] = i;
          std::push_heap(order_.begin(), order_.begin() + filled, better);
        } else if (better(i, order_[0])) {
          std::pop_heap(order_.begin(), order_.begin() + k, better);
          order_[k - 1] = i;
          std::push_heap(order_.begin(), order_.begin() + k, better);
        }
      }
    } else {
      std::iota(order_.begin(), order_.end(), 0);
      std::nth_element(order_.begin(), order_.begin() + k, order_.end(), better);
    }
    for (int32_t j = 0; j < k; ++j) {
      const int32_t t = order_[j];
      weight_[t] = exp_nonpos(l[t] - m);
    }
    // z in id order (block_total's), not in the order the selection left the
    // set in: a function of the set alone.
    if (k <= kHeapTopK) {
      std::copy(order_.begin(), order_.begin() + k, ids_.begin());
      std::sort(ids_.begin(), ids_.begin() + k);
      z = sparse_block_total(ids_.data(), k, weight_.data());
    } else {
      std::fill(masked_.begin(), masked_.end(), 0.0f);
      for (int32_t j = 0; j < k; ++j) masked_[order_[j]] = weight_[order_[j]];
      z = block_total(masked_.data(), V);
    }
  }

  int32_t n_keep = k;
  if (use_top_p || use_min_p) {
    // Weights are relative to the max (weight 1), so min-p keeps w >= min_p.
    const double target =
        use_top_p ? static_cast<double>(p.top_p) * z : std::numeric_limits<double>::infinity();
    double cum = 0.0;
    int32_t ranked = 0;
    int32_t upto = std::min(k, kFirstRankChunk);
    n_keep = -1;
    while (n_keep < 0) {
      rank(ranked, upto, k);
      for (int32_t j = ranked; j < upto; ++j) {
        const float w = weight_[order_[j]];
        // A token stays while the mass ranked above it is below top_p.
        if (j > 0 && (cum >= target || w < p.min_p)) {
          n_keep = j;
          break;
        }
        cum += w;
      }
      if (n_keep < 0 && upto == k) n_keep = k;
      ranked = upto;
      upto = static_cast<int32_t>(std::min<int64_t>(k, int64_t{upto} * 4));
    }
  } else {
    rank(0, k, k);  // the walk order must not depend on how the top-k set was found
  }

  total_ = 0.0;
  for (int32_t j = 0; j < n_keep; ++j) total_ += weight_[order_[j]];
  const double u = draw() * total_;
  double acc = 0.0;
  int32_t chosen = -1;
  for (int32_t j = 0; j < n_keep; ++j) {
    acc += weight_[order_[j]];
    if (u < acc) {
      chosen = order_[j];
      break;
    }
  }
  if (chosen < 0) {  // rounding left u past the end: the last kept token with weight (never a masked one)
    int32_t j = n_keep - 1;
    while (j > 0 && weight_[order_[j]] == 0.0f) --j;
    chosen = order_[j];
  }
  num_candidates_ = n_keep;
  return chosen;
}

std::span<const int32_t> Sampler::candidates() const {
  if (all_candidates_) std::iota(order_.begin(), order_.end(), 0);
  return {order_.data(), static_cast<size_t>(num_candidates_)};
}

std::span<const float> Sampler::candidate_probs() const {
  if (!probs_valid_) {
    const std::span<const int32_t> ids = candidates();
    for (int32_t j = 0; j < num_candidates_; ++j) probs_[j] = static_cast<float>(weight_[ids[j]] / total_);
    probs_valid_ = true;
  }
  return {probs_.data(), static_cast<size_t>(num_candidates_)};
}

float Sampler::logprobs(std::span<const float> logits, int32_t token, int32_t n,
                        std::vector<TokenLogprob>& top) {
  const int32_t V = vocab_size_;
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), V);
  NS_CHECK(token >= 0 && token < V) << "token " << token;
  const float* l = logits.data();
  const float m = max_of(l, V);
  exp_shifted(l, m, V, lp_.data());
  const double lse = m + std::log(block_total(lp_.data(), V));

  n = std::clamp(n, 0, V);
  top.resize(n);
  if (n > 0) {
    // Insertion into a sorted array of n: O(V) when n is small (<= 20).
    int32_t filled = 0;
    auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
    for (int32_t i = 0; i < V; ++i) {
      if (filled == n && !better(i, top[n - 1].token)) continue;
      int32_t pos = filled < n ? filled++ : n - 1;
      while (pos > 0 && better(i, top[pos - 1].token)) {
        top[pos] = top[pos - 1];
        --pos;
      }
      top[pos].token = i;
    }
    for (TokenLogprob& t : top) t.logprob = static_cast<float>(l[t.token] - lse);
  }
  return static_cast<float>(l[token] - lse);
}

}  // namespace nanoserve
