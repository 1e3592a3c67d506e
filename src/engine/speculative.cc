#include "engine/speculative.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace nanoserve {

namespace {

constexpr int32_t kMaxSpeculativeTokens = 16;
constexpr int32_t kDefaultLookup = 5;  // vLLM's, when neither lookup bound is given
constexpr double kDecay = 0.97;        // per proposed token: a request's counts span ~30 recent proposals
constexpr double kFade = 0.95;         // per step without proposals
// StepCostModel: decay per observed step, and what a fit needs: this much
// weight and a variance of the rows of at least this much (rows that differ
// by one in a fifth of the steps give ~0.16).
constexpr double kCostDecay = 0.98;
constexpr double kCostMinWeight = 8.0;
constexpr double kCostMinVariance = 0.1;
// A fit is believed within this factor of the prior: on a loaded machine a
// window of steps can say almost anything (batch 8 once fitted 0.05 rows, which
// proposes nothing, and nothing proposed never corrects it).
constexpr double kCostTrust = 4.0;

}  // namespace

Status SpeculativeConfig::validate() const {
  if (method == SpecMethod::kNone) return Status();
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens) {
    return invalid_argument(
        "speculative_config.num_speculative_tokens: " + std::to_string(num_speculative_tokens) +
        " is outside [1, " + std::to_string(kMaxSpeculativeTokens) + "]");
  }
  if (method == SpecMethod::kNgram) {
    if (prompt_lookup_min < 1)
      return invalid_argument("speculative_config.prompt_lookup_min: must be >= 1, got " +
                              std::to_string(prompt_lookup_min));
    if (prompt_lookup_max < prompt_lookup_min)
      return invalid_argument("speculative_config.prompt_lookup_max (" + std::to_string(prompt_lookup_max) +
                              ") must be >= prompt_lookup_min (" + std::to_string(prompt_lookup_min) + ")");
  }
  if (method == SpecMethod::kDraftModel && model.empty())
    return invalid_argument("speculative_config.model: a draft model needs a path");
  if (disable_by_batch_size < 0)
    return invalid_argument("speculative_config.disable_by_batch_size: must be >= 0");
  return Status();
}

StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& text) {
  SpeculativeConfig c;
  if (text.empty()) return c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("speculative_config: not JSON: ") + e.what());
  }
  if (j.is_null()) return c;
  if (!j.is_object()) return invalid_argument("speculative_config: expected a JSON object");
  auto int_field = [&](const char* key, int32_t& out) -> Status {
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > 1'000'000)
      return invalid_argument(std::string("speculative_config.") + key + ": expected an integer, got " +
                              v.dump());
    out = v.get<int32_t>();
    return Status();
  };
  std::string method;
  bool has_lookup_max = false, has_lookup_min = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "method") {
      if (!v.is_string()) return invalid_argument("speculative_config.method: expected a string");
      method = v.get<std::string>();
    } else if (key == "model") {
      if (!v.is_string() && !v.is_null())
        return invalid_argument("speculative_config.model: expected a string");
      if (v.is_string()) c.model = v.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      NS_RETURN_IF_ERROR(int_field("num_speculative_tokens", c.num_speculative_tokens));
    } else if (key == "prompt_lookup_max") {
      NS_RETURN_IF_ERROR(int_field("prompt_lookup_max", c.prompt_lookup_max));
      has_lookup_max = true;
    } else if (key == "prompt_lookup_min") {
      NS_RETURN_IF_ERROR(int_field("prompt_lookup_min", c.prompt_lookup_min));
      has_lookup_min = true;
    } else if (key == "disable_by_batch_size") {
      NS_RETURN_IF_ERROR(int_field("disable_by_batch_size", c.disable_by_batch_size));
    } else if (key == "adaptive") {
      if (!v.is_boolean()) return invalid_argument("speculative_config.adaptive: expected true or false");
      c.adaptive = v.get<bool>();
    } else if (key == "step_overhead_tokens") {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return invalid_argument("speculative_config.step_overhead_tokens: expected a number >= 0");
      c.step_overhead_tokens = v.get<double>();
    } else {
      return invalid_argument(
          "speculative_config." + key +
          ": unknown key (known: method, model, num_speculative_tokens, prompt_lookup_max, "
          "prompt_lookup_min, disable_by_batch_size, adaptive, step_overhead_tokens)");
    }
  }
  // vLLM also spells n-gram as model "[ngram]".
  if (method.empty()) method = c.model == "[ngram]" ? "ngram" : !c.model.empty() ? "draft_model" : "";
  if (method == "ngram") {
    c.method = SpecMethod::kNgram;
    if (c.model == "[ngram]") c.model.clear();
    if (!c.model.empty())
      return invalid_argument("speculative_config.model: the ngram method takes no model");
    if (!has_lookup_max && !has_lookup_min) c.prompt_lookup_max = c.prompt_lookup_min = kDefaultLookup;
    if (!has_lookup_min) c.prompt_lookup_min = c.prompt_lookup_max;
    if (!has_lookup_max) c.prompt_lookup_max = c.prompt_lookup_min;
  } else if (method == "draft_model") {
    c.method = SpecMethod::kDraftModel;
  } else if (method.empty()) {
    return invalid_argument("speculative_config: give \"method\": \"ngram\", or a draft \"model\"");
  } else {
    return invalid_argument("speculative_config.method: \"" + method +
                            "\" is not supported here (ngram or draft_model)");
  }
  NS_RETURN_IF_ERROR(c.validate());
  return c;
}

void ngram_propose(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t n_max,
                   int32_t n_min, int32_t k, std::vector<int32_t>& out) {
  out.clear();
  const int64_t np = static_cast<int64_t>(prompt.size());
  const int64_t len = np + static_cast<int64_t>(output.size());
  auto at = [&](int64_t i) { return i < np ? prompt[i] : output[i - np]; };
  if (k <= 0) return;
  for (int64_t n = std::min<int64_t>(n_max, len - 1); n >= n_min && n >= 1; --n) {
    const int64_t suffix = len - n;
    // Most recent first: in an edit of a quoted text, the latest copy is the one being followed.
    for (int64_t s = suffix - 1; s >= 0; --s) {
      if (at(s + n - 1) != at(len - 1)) continue;  // the cheap reject first
      int64_t i = 0;
      while (i < n && at(s + i) == at(suffix + i)) ++i;
      if (i < n) continue;
      for (int64_t p = s + n; p < len && static_cast<int32_t>(out.size()) < k; ++p) out.push_back(at(p));
      return;
    }
  }
}

void size_proposals(std::span<const double> alpha, std::span<const int32_t> cap, double overhead,
                    int32_t base_rows, std::span<int32_t> k) {
  const size_t n = alpha.size();
  NS_CHECK(cap.size() == n && k.size() == n) << "size_proposals: spans of different lengths";
  std::fill(k.begin(), k.end(), 0);
  double expected = std::max(1, base_rows);  // tokens the step yields
  double rows = std::max(1, base_rows);
  for (;;) {
    // The next slot with the best chance: request i's next token is kept
    // with probability alpha^(k+1).
    size_t best = n;
    double gain = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (k[i] >= cap[i]) continue;
      const double g = std::pow(std::clamp(alpha[i], 0.0, 1.0), k[i] + 1);
      if (g > gain) {
        gain = g;
        best = i;
      }
    }
    // One more row pays when (expected + g) / (cost + 1) > expected / cost.
    if (best == n || gain * (overhead + rows) <= expected) return;
    ++k[best];
    expected += gain;
    rows += 1.0;
  }
}

void StepCostModel::observe(int64_t rows, double seconds) {
  if (rows < 1 || !(seconds > 0.0) || !std::isfinite(seconds)) return;
  const double x = static_cast<double>(rows);
  s0_ = s0_ * kCostDecay + 1.0;
  s1_ = s1_ * kCostDecay + x;
  s2_ = s2_ * kCostDecay + x * x;
  sy_ = sy_ * kCostDecay + seconds;
  sxy_ = sxy_ * kCostDecay + x * seconds;
  if (s0_ < kCostMinWeight) return;
  const double mx = s1_ / s0_, my = sy_ / s0_;
  const double var = s2_ / s0_ - mx * mx;
  if (var < kCostMinVariance * std::max(1.0, mx)) return;  // relative: at batch 64, rows 64 +- 1 says little
  const double b = (sxy_ / s0_ - mx * my) / var;
  const double a = my - b * mx;
  const double lo = prior_ / kCostTrust, hi = prior_ * kCostTrust;
  if (b <= 0.0) {
    overhead_ = a > 0.0 ? hi : overhead_;  // rows came for free
    return;
  }
  if (a <= 0.0) return;  // noise: a step cannot cost less than its rows
  overhead_ = std::clamp(a / b, lo, hi);
}

void spec_observe(Request& r, int32_t k, int32_t a) {
  const double keep = std::pow(kDecay, k);
  r.spec_accepted = r.spec_accepted * keep + a;
  r.spec_rejected = r.spec_rejected * keep + (a < k ? 1.0 : 0.0);
}

bool spec_fade(Request& r) {
  r.spec_accepted *= kFade;
  r.spec_rejected *= kFade;
  if (++r.spec_idle < kSpecProbeEvery) return false;
  r.spec_idle = 0;
  return true;
}

void spec_note_unsent(Request& r, int32_t proposed) {
  r.spec_unsent = proposed;
  r.spec_unsent_at = r.num_tokens();
}

void spec_observe_unsent(Request& r) {
  if (r.spec_unsent < 0 || r.num_tokens() <= r.spec_unsent_at) return;
  spec_observe(r, 1, r.token_at(r.spec_unsent_at) == r.spec_unsent ? 1 : 0);
  r.spec_unsent = -1;
  r.spec_unsent_at = -1;
}

Status NgramProposer::propose(std::span<Request* const> reqs, std::span<const int32_t> k) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    ngram_propose(r->prompt, r->output, n_max_, n_min_, k[i], r->draft);
  }
  return Status();
}

}  // namespace nanoserve
