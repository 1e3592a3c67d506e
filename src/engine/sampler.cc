#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace nanoserve {

namespace {

// The first partial sort of the top-p / min-p walk; grown 4x until the cut
// is found. Nuclei are usually far smaller than the vocabulary.
constexpr int32_t kFirstRankChunk = 64;

}  // namespace

Sampler::Sampler(int32_t vocab_size)
    : vocab_size_(vocab_size),
      work_(vocab_size),
      weight_(vocab_size),
      probs_(vocab_size),
      order_(vocab_size),
      counts_(vocab_size, 0),
      seen_(vocab_size, 0) {
  NS_CHECK(vocab_size > 0) << "vocab_size " << vocab_size;
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
  apply_penalties(p, prompt, output, out.data());
  if (!p.greedy() && p.temperature != 1.0f) {
    for (float& v : out) v /= p.temperature;
  }
}

void Sampler::rank(int32_t begin, int32_t mid, int32_t end) {
  const float* l = work_.data();
  auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::partial_sort(order_.begin() + begin, order_.begin() + mid, order_.begin() + end, better);
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, Rng& rng) {
  process_logits(logits, p, prompt, output, work_);
  const int32_t V = vocab_size_;
  const float* l = work_.data();

  if (p.greedy()) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i) {
      if (l[i] > l[best]) best = i;  // strict: ties keep the lowest id
    }
    order_[0] = best;
    probs_[0] = 1.0f;
    num_candidates_ = 1;
    return best;
  }

  const float m = *std::max_element(work_.begin(), work_.end());
  NS_CHECK(std::isfinite(m)) << "no finite logit to sample from";
  std::iota(order_.begin(), order_.end(), 0);

  const int32_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  const bool use_top_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  int32_t n_keep = V;

  if (k == V && !use_top_p && !use_min_p) {
    // No filter: walk the whole vocabulary in id order.
    for (int32_t i = 0; i < V; ++i) weight_[i] = std::exp(l[i] - m);
  } else {
    if (k < V) {
      auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
      std::nth_element(order_.begin(), order_.begin() + k, order_.end(), better);
    }
    double z = 0.0;  // mass of the top-k set, which top-p is relative to
    for (int32_t j = 0; j < k; ++j) {
      const int32_t t = order_[j];
      weight_[t] = std::exp(l[t] - m);
      z += weight_[t];
    }
    if (!use_top_p && !use_min_p) {
      n_keep = k;
    } else {
      // Weights are relative to the max (weight 1), so min-p keeps w >= min_p.
      const double target = use_top_p ? static_cast<double>(p.top_p) * z : std::numeric_limits<double>::infinity();
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
    }
  }

  double total = 0.0;
  for (int32_t j = 0; j < n_keep; ++j) total += weight_[order_[j]];
  const double u = rng.next_double() * total;
  double acc = 0.0;
  int32_t chosen = order_[n_keep - 1];
  for (int32_t j = 0; j < n_keep; ++j) {
    acc += weight_[order_[j]];
    if (u < acc) {
      chosen = order_[j];
      break;
    }
  }
  for (int32_t j = 0; j < n_keep; ++j) probs_[j] = static_cast<float>(weight_[order_[j]] / total);
  num_candidates_ = n_keep;
  return chosen;
}

float Sampler::logprobs(std::span<const float> logits, int32_t token, int32_t n, std::vector<TokenLogprob>& top) {
  const int32_t V = vocab_size_;
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), V);
  NS_CHECK(token >= 0 && token < V) << "token " << token;
  const float* l = logits.data();
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (int32_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(l[i]) - m);
  const double lse = m + std::log(sum);

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
