#include "server/sampling_defaults.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "server/request_body.h"

namespace nanoserve::server {

namespace {

using nlohmann::json;

// The key's number, or nullopt when it is absent, null or Hugging Face's default (`hf_default`).
StatusOr<std::optional<double>> number(const json& j, const char* key, std::optional<double> hf_default) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number() || it->is_boolean()) {
    return invalid_argument(std::string("'") + key + "' must be a number, got " + it->dump());
  }
  const double v = it->get<double>();
  if (!std::isfinite(v)) return invalid_argument(std::string("'") + key + "' is not finite");
  if (hf_default && v == *hf_default) return std::optional<double>();
  return std::optional<double>(v);
}

Status out_of_range(const char* key, double v, const char* range) {
  std::ostringstream s;
  s << "'" << key << "' is " << v << ", outside " << range;
  return invalid_argument(s.str());
}

}  // namespace

std::string SamplingDefaults::describe() const {
  std::ostringstream s;
  const char* sep = "";
  auto put = [&](const char* k, auto v) {
    s << sep << k << "=" << v;
    sep = " ";
  };
  if (temperature) put("temperature", *temperature);
  if (top_p) put("top_p", *top_p);
  if (top_k) put("top_k", *top_k);
  if (min_p) put("min_p", *min_p);
  if (repetition_penalty) put("repetition_penalty", *repetition_penalty);
  if (max_tokens) put("max_tokens", *max_tokens);
  return s.str();
}

StatusOr<SamplingDefaults> sampling_defaults_from_generation_config(const json& j) {
  if (!j.is_object()) return invalid_argument("not a JSON object");
  SamplingDefaults d;
  NS_ASSIGN_OR_RETURN(auto temperature, number(j, "temperature", 1.0));
  if (temperature) {
    if (*temperature < 0 || *temperature > 100) return out_of_range("temperature", *temperature, "[0, 100]");
    d.temperature = static_cast<float>(*temperature);
  }
  NS_ASSIGN_OR_RETURN(auto top_p, number(j, "top_p", 1.0));
  if (top_p) {
    if (!(*top_p > 0) || *top_p > 1) return out_of_range("top_p", *top_p, "(0, 1]");
    d.top_p = static_cast<float>(*top_p);
  }
  NS_ASSIGN_OR_RETURN(auto top_k, number(j, "top_k", 50.0));
  if (top_k) {
    if (*top_k != std::floor(*top_k) || *top_k < -1 || *top_k > std::numeric_limits<int32_t>::max())
      return out_of_range("top_k", *top_k, "the integers from -1");
    d.top_k = *top_k == 0 ? -1 : static_cast<int32_t>(*top_k);  // 0 and -1 both mean off
  }
  NS_ASSIGN_OR_RETURN(auto min_p, number(j, "min_p", std::nullopt));
  if (min_p) {
    if (*min_p < 0 || *min_p > 1) return out_of_range("min_p", *min_p, "[0, 1]");
    d.min_p = static_cast<float>(*min_p);
  }
  NS_ASSIGN_OR_RETURN(auto rep, number(j, "repetition_penalty", 1.0));
  if (rep) {
    if (!(*rep > 0) || *rep > 100) return out_of_range("repetition_penalty", *rep, "(0, 100]");
    d.repetition_penalty = static_cast<float>(*rep);
  }
  NS_ASSIGN_OR_RETURN(auto max_new, number(j, "max_new_tokens", std::nullopt));
  if (max_new) {
    if (*max_new != std::floor(*max_new) || *max_new < 1 || *max_new > std::numeric_limits<int32_t>::max())
      return out_of_range("max_new_tokens", *max_new, "the integers from 1");
    d.max_tokens = static_cast<int64_t>(*max_new);
  }
  return d;
}

void apply_sampling_defaults(const SamplingDefaults& d, const Fields& f, SamplingParams* p) {
  if (d.temperature && f.get("temperature") == nullptr) p->temperature = *d.temperature;
  if (d.top_p && f.get("top_p") == nullptr) p->top_p = *d.top_p;
  if (d.top_k && f.get("top_k") == nullptr) p->top_k = *d.top_k;
  if (d.min_p && f.get("min_p") == nullptr) p->min_p = *d.min_p;
  if (d.repetition_penalty && f.get("repetition_penalty") == nullptr)
    p->repetition_penalty = *d.repetition_penalty;
}

}  // namespace nanoserve::server
