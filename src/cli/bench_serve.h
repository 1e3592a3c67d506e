#pragma once
// nanoserve bench serve: a load generator for any OpenAI-compatible server
// (docs/bench_serve.md). Four parts, one file each:
//   bench_serve.cc         flags, the set-up calls, the run
//   bench_serve_prompts.cc the prompts: random ones of known token counts, or a dataset file
//   bench_serve_http.cc    HTTP over Boost.Beast: blocking set-up calls, and the load itself,
//                          every request an asynchronous stream on one I/O thread
//   bench_serve_report.cc  the metrics (vLLM's definitions), the printed table, --save-result

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_dataset.h"
#include "core/status.h"

namespace nanoserve::cli {

// Where the server is: http://HOST:PORT plus an optional path prefix ("/proxy").
struct ServerUrl {
  std::string host;
  std::string port;
  std::string prefix;  // no trailing '/'
};

StatusOr<ServerUrl> parse_base_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};

// One blocking request with a JSON body (empty: none), for the set-up calls
// (/v1/models, /tokenize). Transport errors and the timeout are a Status.
StatusOr<HttpReply> http_fetch(const ServerUrl& url, const std::string& method, const std::string& path,
                               const std::string& body, const std::string& api_key, double timeout_s);

// One request of the load: its JSON body, ready to send, and what it asks for.
struct BenchRequest {
  std::string body;
  int64_t input_len = 0;   // prompt tokens by construction (exact when the dataset says so)
  int64_t output_len = 0;  // max_tokens asked for
};

// What came back for one request. Times in seconds, from the moment the request
// was handed to the socket (connect included, as vLLM's client does).
struct RequestOutcome {
  bool ok = false;
  std::string error;   // the first error, when !ok
  double start_s = 0;  // send time, from the start of the run
  // From the send to the first chunk with content; none for a stream that
  // carried tokens (usage.completion_tokens > 0) but no text: ids that decode
  // to nothing (a dummy model's past the tokenizer's vocabulary). Its tokens
  // count; it has no TTFT, TPOT or ITL.
  std::optional<double> ttft_s;
  double latency_s = 0;                      // end to end, to the end of the stream
  std::vector<double> itl_s;                 // gaps between successive content chunks
  std::optional<int64_t> prompt_tokens;      // usage.prompt_tokens, when the server sent usage
  std::optional<int64_t> completion_tokens;  // usage.completion_tokens
  int64_t content_chunks = 0;                // chunks with non-empty text
  std::string text;                          // the generated text (kept only with --save-detailed)
};

// Token ids of a text by the server's /tokenize, without special tokens:
// {"prompt"} -> {"tokens"} (vLLM, nanoserve), else {"content"} -> {"tokens"}
// (llama.cpp; remembered once it answered).
class ServerTokenizer {
 public:
  ServerTokenizer(const ServerUrl& url, std::string model, std::string key)
      : url_(url), model_(std::move(model)), key_(std::move(key)) {}
  StatusOr<std::vector<int64_t>> tokenize(const std::string& text);

 private:
  const ServerUrl& url_;
  std::string model_, key_;
  bool llama_shape_ = false;
};

// What every request body of a run carries besides its prompt.
struct RequestShape {
  std::string model;
  bool chat = false;  // /v1/chat/completions (the prompt as one user message), else /v1/completions
  double temperature = 0;
  bool ignore_eos = false;
  nlohmann::json extra = nlohmann::json::object();  // --extra-body, merged last
  // A streamed request (usage included) of `prompt` (text, or token ids for completions).
  BenchRequest request(const nlohmann::json& prompt, int64_t prompt_len, int64_t max_tokens) const;
};

// The prompts of a run, and how their input lengths were made (for the header line).
struct PromptSet {
  std::vector<BenchRequest> requests;
  std::string how;
};

// The random dataset: input and output lengths drawn in len x [1 - ratio,
// 1 + ratio], a shared prefix of prefix_len words, as token ids (ids) or text.
struct RandomPrompts {
  int num_prompts = 0, input_len = 0, output_len = 0, prefix_len = 0;
  double range_ratio = 0;
  uint64_t seed = 0;
  bool ids = false;
};
StatusOr<PromptSet> random_prompts(const RandomPrompts& spec, const RequestShape& shape,
                                   ServerTokenizer& tok);
// The prompts of a sharegpt or custom file (cli/bench_dataset.h), counted by the server's /tokenize.
StatusOr<PromptSet> file_prompts(const std::string& dataset_name, const DatasetFlags& flags, int num_prompts,
                                 uint64_t seed, const RequestShape& shape, ServerTokenizer& tok);

struct LoadOptions {
  std::string endpoint;  // "/v1/completions" or "/v1/chat/completions"
  std::string api_key;
  double request_rate = 0;  // requests/s; <= 0 or inf: all at once
  double burstiness = 1.0;  // gamma shape of the arrival gaps (1: Poisson)
  int max_concurrency = 0;  // 0: unbounded
  double request_timeout_s = 600;
  uint64_t seed = 0;
  bool keep_text = false;
  bool progress_bar = false;  // true: one updating line on a terminal; false: plain lines
  bool quiet = false;         // neither
};

struct LoadResult {
  std::vector<RequestOutcome> outcomes;  // in request order
  double duration_s = 0;                 // first send to last completion
  int peak_concurrency = 0;
  int max_concurrency = 0;  // the limit it ran under (0: none)
};

// Send time of each request, from the start (vLLM's schedule: request 0 at 0,
// then gamma-distributed gaps with mean 1/rate; all at 0 when the rate is inf).
std::vector<double> arrival_offsets(int n, double request_rate, double burstiness, uint64_t seed);

// Runs every request, streamed, on one I/O thread; never throws, never hangs
// past the per-request timeout. A failed request is an outcome with !ok.
LoadResult run_load(const ServerUrl& url, const std::vector<BenchRequest>& requests, const LoadOptions& o);

// The figures, as vLLM's `bench serve` names and computes them.
struct ReportOptions {
  std::vector<std::string> percentile_metrics;  // of ttft, tpot, itl, e2el
  std::vector<double> percentiles;              // e.g. 50, 90, 99
};

// Prints the table to stdout and returns the figures as vLLM's result JSON
// (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ... and the per-request lists).
nlohmann::json report_load(const LoadResult& r, const std::vector<BenchRequest>& requests,
                           const ReportOptions& o, const nlohmann::json& run_info, bool detailed);

// The speculative decoding counters of a Prometheus /metrics text, under
// vLLM's names with any prefix (vllm:, nanoserve:): spec_decode_num_drafts,
// _num_draft_tokens, _num_accepted_tokens and _num_accepted_tokens_per_pos
// (by its position label), each summed over its series. nullopt when the
// server exports none (no speculative decoding).
struct SpecDecodeCounts {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<double> accepted_per_pos;
};
std::optional<SpecDecodeCounts> parse_spec_decode_metrics(const std::string& text);
// after - before, as JSON for report_load's run_info["spec_decode"].
nlohmann::json spec_decode_json(const SpecDecodeCounts& before, const SpecDecodeCounts& after);

// Linear interpolation between closest ranks (numpy's default); 0 for an empty set.
double percentile_of(std::vector<double> v, double p);

}  // namespace nanoserve::cli
