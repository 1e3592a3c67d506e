#include "cli/bench_dataset.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "io/json_file.h"

namespace nanoserve::cli {

namespace {

using nlohmann::json;

// vLLM's ShareGPT filter (benchmark_dataset.py's is_valid_sequence).
constexpr int64_t kMinLen = 4, kMaxPromptLen = 1024, kMaxTotalLen = 2048;
constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;

StatusOr<std::vector<DatasetPrompt>> load_sharegpt(const DatasetFlags& f, int num_prompts, uint64_t seed,
                                                   const CountTokens& count) {
  NS_ASSIGN_OR_RETURN(json j, read_json_file(f.path, kMaxFileBytes));
  if (!j.is_array()) return invalid_argument(f.path + ": a ShareGPT file is a JSON list of conversations");
  std::vector<size_t> order(j.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  std::vector<DatasetPrompt> out;
  for (size_t i : order) {
    if (static_cast<int>(out.size()) == num_prompts) break;
    const json& e = j[i];
    const std::string where = f.path + ": entry " + std::to_string(i);
    if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) {
      return invalid_argument(where + ": no 'conversations' list");
    }
    const json& turns = e["conversations"];
    if (turns.size() < 2) continue;
    for (size_t t = 0; t < 2; ++t) {
      if (!turns[t].is_object() || !turns[t].contains("value") || !turns[t]["value"].is_string()) {
        return invalid_argument(where + ": turn " + std::to_string(t) + " has no string 'value'");
      }
    }
    DatasetPrompt p;
    p.prompt = turns[0]["value"].get<std::string>();
    NS_ASSIGN_OR_RETURN(int64_t prompt_len, count(p.prompt));
    int64_t output_len = 0;
    if (f.sharegpt_output_len.has_value()) {
      output_len = *f.sharegpt_output_len;
    } else {
      NS_ASSIGN_OR_RETURN(output_len, count(turns[1]["value"].get<std::string>()));
    }
    if (prompt_len < kMinLen || output_len < kMinLen || prompt_len > kMaxPromptLen ||
        prompt_len + output_len > kMaxTotalLen) {
      continue;
    }
    p.prompt_len = static_cast<int32_t>(prompt_len);
    p.output_len = static_cast<int32_t>(output_len);
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<std::vector<DatasetPrompt>> load_custom(const DatasetFlags& f, int num_prompts,
                                                 const CountTokens& count) {
  std::ifstream in(f.path, std::ios::binary);
  if (!in) return not_found(f.path + ": cannot open it");
  std::vector<DatasetPrompt> out;
  std::string line;
  for (int n = 1; static_cast<int>(out.size()) < num_prompts && std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = f.path + ": line " + std::to_string(n);
    if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      return invalid_argument(where + ": no string 'prompt'");
    }
    DatasetPrompt p;
    p.prompt = j["prompt"].get<std::string>();
    NS_ASSIGN_OR_RETURN(int64_t prompt_len, count(p.prompt));
    if (prompt_len < 1) return invalid_argument(where + ": the prompt has no tokens");
    p.prompt_len = static_cast<int32_t>(prompt_len);
    p.output_len = f.custom_output_len;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void add_dataset_flags(CLI::App* sub, DatasetFlags& f) {
  sub->add_option("--dataset-path", f.path, "The file of --dataset-name sharegpt or custom");
  sub->add_option("--sharegpt-output-len", f.sharegpt_output_len,
                  "sharegpt: every request's output length (default: the reference reply's token count)");
  sub->add_option("--custom-output-len", f.custom_output_len, "custom: every request's output length")
      ->capture_default_str();
}

StatusOr<std::vector<DatasetPrompt>> load_dataset(const std::string& name, const DatasetFlags& f,
                                                  int num_prompts, uint64_t seed, const CountTokens& count) {
  if (f.path.empty()) return invalid_argument("--dataset-name " + name + " needs --dataset-path FILE");
  if (f.sharegpt_output_len.has_value() && *f.sharegpt_output_len < 1) {
    return invalid_argument("--sharegpt-output-len must be >= 1");
  }
  if (f.custom_output_len < 1) return invalid_argument("--custom-output-len must be >= 1");
  StatusOr<std::vector<DatasetPrompt>> got =
      name == "sharegpt" ? load_sharegpt(f, num_prompts, seed, count)
      : name == "custom" ? load_custom(f, num_prompts, count)
                         : StatusOr<std::vector<DatasetPrompt>>(invalid_argument(
                               "--dataset-name: '" + name + "' is not random, sharegpt or custom"));
  if (got.ok() && static_cast<int>(got->size()) < num_prompts) {
    return invalid_argument(f.path + ": " + std::to_string(got->size()) +
                            " usable prompts for --num-prompts " + std::to_string(num_prompts) +
                            (name == "sharegpt"
                                 ? " (a pair needs two turns, 4 to 1024 prompt tokens, at least 4 "
                                   "reply tokens and at most 2048 together)"
                                 : ""));
  }
  return got;
}

}  // namespace nanoserve::cli
