// nanoserve generate [-m MODEL] (-p PROMPT | --chat MESSAGE) [-n N] [--temperature T]
//   [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stop STR]... [--threads N] [--ignore-eos]
//   [--kv-cache paged|naive] [--block-size B]
//
// Runs one request on the CPU and streams its text to stdout as each token is
// produced. Stops on an end token (eos, <|im_end|>), a stop string, or after N
// tokens. Timings go to stderr: load time, prompt tokens, prefill and decode tok/s.

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/thread_pool.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "io/gguf.h"
#include "kvcache/naive_kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "model/llama.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string chat;
  int32_t n = 128;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int threads = 0;
  std::string kv_cache = "paged";
  int32_t block_size = 16;
  bool ignore_eos = false;
  int32_t prefill_chunk = 512;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int fail(const std::string& what) {
  std::fprintf(stderr, "nanoserve generate: %s\n", what.c_str());
  return 1;
}

int run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) {
    std::fprintf(stderr, "nanoserve generate: give exactly one of -p PROMPT or --chat MESSAGE\n");
    return 2;
  }
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  const auto t_load = Clock::now();
  auto file = GgufFile::open(path);
  if (!file.ok()) return fail(path + ": " + file.status().to_string());
  ThreadPool pool(a.threads);
  auto model = LlamaModel::load(*file, pool);
  if (!model.ok()) return fail(path + ": " + model.status().to_string());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) return fail(path + ": " + tok.status().to_string());
  const double load_s = seconds_since(t_load);
  const ModelConfig& cfg = (*model)->config();

  SamplingParams params;
  params.temperature = a.temperature;
  params.top_k = a.top_k;
  params.top_p = a.top_p;
  params.min_p = a.min_p;
  params.max_tokens = a.n;
  params.stop = a.stop;
  params.ignore_eos = a.ignore_eos;
  params.seed = a.seed ? *a.seed : std::random_device{}();
  if (Status st = params.validate(static_cast<int32_t>(cfg.vocab_size)); !st.ok()) return fail(st.to_string());

  std::string text = a.prompt;
  if (!a.chat.empty()) {
    auto tmpl = (*tok)->chat_template().empty() ? StatusOr<ChatTemplate>(ChatTemplate::chatml())
                                                : ChatTemplate::parse((*tok)->chat_template());
    if (!tmpl.ok()) return fail("chat template: " + tmpl.status().to_string());
    const ChatMessage msg{"user", a.chat};
    text = tmpl->render(std::span<const ChatMessage>(&msg, 1), true);
  }
  const std::vector<int32_t> prompt = (*tok)->encode(text, true, true);
  if (prompt.empty()) return fail("the prompt encodes to no tokens");
  const int64_t max_ctx = static_cast<int64_t>(prompt.size()) + a.n;
  if (max_ctx > cfg.context_length) {
    return fail("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(a.n) +
                " new tokens exceed the model's context of " + std::to_string(cfg.context_length));
  }

  const int64_t chunk = std::min<int64_t>(a.prefill_chunk, static_cast<int64_t>(prompt.size()));
  // The paged cache (blocks of --block-size, attention through the block table)
  // or the naive one (a contiguous slot); both give the same text.
  std::unique_ptr<KVCache> cache;
  int32_t seq = 0;
  if (a.kv_cache == "naive") {
    cache = std::make_unique<NaiveKVCache>(cfg, 1, max_ctx);
  } else {
    PagedKVCacheOptions ko;
    ko.block_size = a.block_size;
    ko.max_tokens = max_ctx;
    ko.max_num_seqs = 1;
    ko.max_num_batched_tokens = static_cast<int32_t>(chunk);
    ko.max_seq_len = max_ctx;
    auto paged = PagedKVCache::create(cfg, ko, &pool);
    if (!paged.ok()) return fail(paged.status().to_string());
    auto handle = (*paged)->add_sequence();
    if (!handle.ok()) return fail(handle.status().to_string());
    seq = *handle;
    cache = std::move(paged).value();
  }
  Workspace ws = (*model)->make_workspace(chunk, 1, max_ctx);
  Sampler sampler(static_cast<int32_t>(cfg.vocab_size));
  Rng rng(*params.seed);
  StopChecker stops(params, (*tok)->eos_ids());
  IncrementalDetokenizer detok(**tok);

  // Prefill in chunks; logits only for the prompt's last token.
  ForwardBatch batch;
  batch.seq_ids = {seq};
  batch.logits_rows = {0};
  const auto t_prefill = Clock::now();
  StatusOr<Tensor> logits = Status::ok_status();
  for (int64_t begin = 0; begin < static_cast<int64_t>(prompt.size()); begin += chunk) {
    const int64_t end = std::min<int64_t>(begin + chunk, static_cast<int64_t>(prompt.size()));
    batch.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
    batch.positions.clear();
    for (int64_t p = begin; p < end; ++p) batch.positions.push_back(static_cast<int32_t>(p));
    batch.seq_starts = {0, static_cast<int32_t>(end - begin)};
    batch.context_lens = {static_cast<int32_t>(end)};
    batch.logits_rows = {static_cast<int32_t>(end - begin - 1)};
    logits = (*model)->forward(batch, *cache, ws);
    if (!logits.ok()) return fail(logits.status().to_string());
  }
  const double prefill_s = seconds_since(t_prefill);

  std::vector<int32_t> output;
  std::string emit;
  FinishReason finish = FinishReason::kNone;
  const auto t_decode = Clock::now();
  int32_t decoded_steps = 0;
  while (true) {
    const std::span<const float> row(logits->data_as<const float>(), static_cast<size_t>(cfg.vocab_size));
    const int32_t next = sampler.sample(row, params, prompt, output, rng);
    output.push_back(next);
    emit.clear();
    finish = stops.on_token(next, static_cast<int32_t>(output.size()), detok.push(next), emit);
    if (finish == FinishReason::kLength) emit += detok.flush();
    std::fwrite(emit.data(), 1, emit.size(), stdout);
    std::fflush(stdout);
    if (finish != FinishReason::kNone) break;
    const int32_t pos = static_cast<int32_t>(prompt.size() + output.size() - 1);
    batch.tokens = {next};
    batch.positions = {pos};
    batch.seq_starts = {0, 1};
    batch.context_lens = {pos + 1};
    batch.logits_rows = {0};
    logits = (*model)->forward(batch, *cache, ws);
    if (!logits.ok()) return fail(logits.status().to_string());
    ++decoded_steps;
  }
  const double decode_s = seconds_since(t_decode);
  std::printf("\n");
  std::fprintf(stderr,
               "load %.3f s | prompt %zu tokens, prefill %.1f tok/s | generated %zu tokens (%s), decode %.1f tok/s "
               "| threads %d\n",
               load_s, prompt.size(), static_cast<double>(prompt.size()) / prefill_s, output.size(),
               finish_reason_name(finish), decoded_steps > 0 ? decoded_steps / decode_s : 0.0, pool.num_threads());
  return 0;
}

}  // namespace

CommandRun add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt on the CPU, streaming to stdout");
  cmd->add_option("-m,--model", args->model, "GGUF model file (default: the bundled SmolLM2-135M-Instruct)");
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text (special tokens like <|im_start|> are parsed)");
  cmd->add_option("--chat", args->chat, "A user message, rendered with the model's chat template");
  cmd->add_option("-n,--max-tokens", args->n, "Tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (-1 or 0: off)");
  cmd->add_option("--top-p", args->top_p, "Nucleus mass to keep (1: off)");
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min_p * the top probability (0: off)");
  cmd->add_option("--seed", args->seed, "Sampling seed (default: random)");
  cmd->add_option("--stop", args->stop, "Stop string (repeatable); not printed");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end tokens (benchmarks)");
  cmd->add_option("--threads", args->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--prefill-chunk", args->prefill_chunk, "Prompt tokens per forward step")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-cache", args->kv_cache, "KV cache: paged (default) or naive")
      ->check(CLI::IsMember({"paged", "naive"}));
  cmd->add_option("--block-size", args->block_size, "Tokens per KV block of the paged cache")
      ->check(CLI::Range(1, 4096));
  return [args] { return run_generate(*args); };
}

}  // namespace nanoserve::cli
