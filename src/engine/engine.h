#pragma once
// The Engine: requests in, tokens out, one step at a time (docs/architecture.md).
//
// Each step(): take in new requests and aborts, let the Scheduler plan the
// step, build one ForwardBatch (decodes and prefill chunks together, logits
// only for the rows that sample; block tables and slots from the block
// manager), run the model (which owns the KV storage),
// sample one token per sampling row with the request's own RNG, detokenize,
// check stops, and report what each request produced.
//
// Threads: add_request(), abort(), has_unfinished(), wait_for_work() and
// stats() may be called from any thread (the HTTP threads); step() from one
// thread only (the engine loop). New requests and aborts take effect at the
// next step boundary.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "engine/text_stream.h"
#include "kvcache/block_manager.h"
#include "model/model_runner.h"
#include "step/forward_batch.h"

namespace nanoserve {

inline constexpr int64_t kDefaultKvCacheBytes = int64_t{1} << 30;

struct EngineConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;
  int32_t block_size = 16;
  // The KV pool (kv_cache_num_blocks): num_blocks if > 0, else kv_cache_bytes
  // if > 0 (K+V of all layers), else the runner's budget, else 1 GiB.
  int32_t num_blocks = 0;
  int64_t kv_cache_bytes = 0;
  int64_t max_model_len = 0;          // prompt + generated; 0 = the model's context length
  uint64_t seed = 0;                  // seeds the requests that bring no seed of their own
  bool enable_prefix_caching = true;  // reuse cached full blocks of a shared prefix
  // A model whose every layer slides (kv_window_to_release): release each
  // sequence's blocks behind the window (docs/kvcache.md). Off: keep them all.
  bool release_window_blocks = true;
  // Preemption (docs/engine.md, "Preemption: swap or recompute"): the host
  // swap area in bytes (vLLM's --swap-space; nullopt: the runner's default,
  // 4 GiB on CUDA and none on the CPU; 0: none), and how a preempted request
  // gives its blocks back.
  std::optional<int64_t> swap_space_bytes;
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  // For the runner (load_engine), not the engine:
  std::optional<DType> kv_cache_dtype;  // nullopt: auto (the runner's choice; f32 on the CPU)
  bool naive_kv_cache = false;          // CPU: one contiguous slot per sequence, no sharing (a reference)
  bool fused_read = true;               // paged attention straight from the blocks (false: gather)
  std::optional<Device> device;         // nullopt: auto (CUDA when built with it and a GPU is present)
  double gpu_memory_utilization = 0.9;  // CUDA: fraction of device memory for weights, KV and buffers
  bool cublas_prefill = false;          // CUDA: steps of > 64 tokens through cuBLASLt (not batch-invariant)
  bool fp8_weights = false;             // CUDA: the linears as FP8 E4M3 rows (--quantization fp8)
  bool enforce_eager = false;           // CUDA: launch every step (no CUDA graphs)
  // Speculative decoding (engine/speculative.h); off by default. A draft
  // model is loaded by load_engine and handed to Engine::create.
  SpeculativeConfig speculative;
  // Asynchronous scheduling (docs/engine.md): step() launches the next step
  // before it makes the last one's text and outputs, which then overlap the
  // device's work. nullopt: on where the runner overlaps steps (CUDA) and
  // speculative decoding is off; true elsewhere runs the same way with
  // nothing to overlap; with speculative decoding it is refused.
  std::optional<bool> async_scheduling;
};

// The one place the KV pool is sized, in blocks: config.num_blocks if set,
// else config.kv_cache_bytes, else the runner's kv_cache_budget_bytes(), else
// kDefaultKvCacheBytes; bytes are divided by runner.kv_bytes_per_block and
// rounded down. INVALID_ARGUMENT naming the setting when that is no block.
StatusOr<int32_t> kv_cache_num_blocks(const EngineConfig& config, const ModelRunner& runner);

// The window behind which the block manager may release a sequence's blocks:
// the largest layer window when every layer slides; 0 when any layer attends
// its whole history (a global layer needs every block) or none slides.
int64_t kv_window_to_release(const ModelConfig& config);

// What one request produced in one step.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens;  // usually one; empty on a bare abort
  std::string text;                 // new text that is safe to show (stop-string prefixes held back)
  // When the request asked for logprobs: one entry per new token.
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // When the request asked for prompt_logprobs, on the output that ends its
  // prefill (its first token's, or the finish of a max_tokens 0 request):
  // [prompt - 1] the logprob of prompt token p + 1 at position p, and its top.
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::vector<int32_t> prompt_ranks;                 // 1 + the tokens with a higher logit (vLLM's rank)
  FinishReason finish_reason = FinishReason::kNone;  // set on the request's last output
  std::string stop_string;                           // the stop string that finished it, if any
  std::string error;                                 // set, with kError, when the step failed under it
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;  // so far, including new_tokens
  int32_t num_preemptions = 0;
  Clock::time_point arrival_time;
  Clock::time_point first_scheduled_time;  // the start of the first step that ran it; {} if none did
  Clock::time_point first_token_time;      // valid when num_output_tokens > 0
  Clock::time_point finish_time;           // valid when finished

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

// Counters for /metrics. Gauges are as of the end of the last step.
struct EngineStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;  // includes requests not yet taken in by a step
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;       // free or evictable: what a reserve can take
  int32_t num_cached_blocks = 0;     // in the prefix cache, in use or evictable
  double kv_usage = 0.0;             // in use / total blocks
  int64_t prefix_cache_queries = 0;  // tokens looked up at admission
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  int64_t num_preemptions = 0;       // swapped out or recomputed
  int64_t num_swap_preemptions = 0;  // of those, swapped out (the rest were recomputed)
  int64_t num_swap_ins = 0;
  int64_t swapped_out_blocks = 0;  // blocks copied to the swap area
  int64_t swapped_in_blocks = 0;   // and back
  int64_t recomputed_tokens = 0;   // computed tokens that preemption by recompute dropped
  int32_t num_swapped = 0;         // requests swapped out now
  int32_t num_swap_slots = 0;      // the swap area, in blocks
  int32_t num_used_swap_slots = 0;
  int64_t prompt_tokens = 0;        // prompt tokens prefilled (recompute not counted)
  int64_t generation_tokens = 0;    // tokens sampled
  int64_t num_computed_tokens = 0;  // tokens run through the model (prefill chunks and decodes)
  int64_t num_finished = 0;         // stop or length
  int64_t num_aborted = 0;          // abort or error
  int64_t num_steps = 0;
  // Steps in which every row is a decode (one new token of a sequence that
  // has its prompt): their count, rows and wall time from schedule to sampled
  // tokens. decode_step_seconds / decode_steps is the pure decode step time.
  int64_t decode_steps = 0;
  int64_t decode_step_rows = 0;
  double decode_step_seconds = 0.0;
  // Speculative decoding, as vLLM's spec_decode counters: decodes that
  // carried proposed tokens, those tokens, the accepted ones, and accepted
  // per position ([num_speculative_tokens]; position j counts decodes whose
  // first j + 1 proposals were all accepted).
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  // The fixed part of a decode step in token rows that sizes the proposals
  // (StepCostModel's measurement, or the configured value's); 0 before any.
  double spec_step_overhead_rows = 0.0;
};

class Engine {
 public:
  // `text` may be null (token ids only, no stop strings) and must outlive the
  // engine; its open() is called from add_request's thread. Sizes the pool
  // (kv_cache_num_blocks) and has the runner create its KV storage.
  // Speculative decoding: config.speculative picks the method; the n-gram
  // proposer is made here, a draft model's comes as `proposer`
  // (DraftProposer, made by load_engine). The runner must take
  // max_num_seqs * (1 + num_speculative_tokens) logits rows (or fewer: the
  // spare rows, step_limits().max_logits_rows - max_num_seqs, bound the
  // proposed tokens of a step).
  static StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config,
                                                  std::unique_ptr<ModelRunner> model,
                                                  const TextStreamFactory* text,
                                                  std::unique_ptr<Proposer> proposer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. INVALID_ARGUMENT, naming the problem, for
  // a bad field or a request that could never fit (prompt + max_tokens over
  // max_model_len or over the whole KV pool).
  StatusOr<RequestId> add_request(std::vector<int32_t> prompt, SamplingParams params);
  // Aborts a request wherever it is; its blocks are freed at the next step,
  // which reports it finished with kAbort. Unknown or finished ids are ignored.
  void abort(RequestId id);

  // Runs one step; `outputs` then holds one entry per request that produced
  // a token, finished or was aborted (its old entries are reused, so pass
  // the same vector every step and a steady step allocates nothing).
  // With asynchronous scheduling a call completes the step the last call
  // launched, launches the next, and returns the completed step's outputs
  // while the next one runs: the same outputs, one call later.
  Status step(std::vector<RequestOutput>& outputs);
  bool async_scheduling() const { return async_; }

  bool has_unfinished() const { return num_unfinished_.load() > 0; }
  // Blocks until there is work (a request or an abort) or the timeout passes.
  bool wait_for_work(std::chrono::milliseconds timeout);
  EngineStats stats() const;

  const ModelConfig& model_config() const { return model_->config(); }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t kv_capacity_tokens() const;
  // "KV cache: 1234 blocks x 16 tokens = 19744 tokens (866.2 MiB); up to 2.41 sequences of max_model_len
  // 8192"
  std::string capacity_line() const;
  // How preemption gives blocks back (the end of capacity_line): "preemption recomputes (no swap
  // space)", or the swap area and, in auto mode, the cost model's two rates per token.
  std::string preemption_line() const;

  // Internal consistency of queues, requests and blocks; for tests.
  Status check_invariants() const;
  const BlockManager& block_manager() const { return scheduler_->block_manager(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  ModelRunner& runner() { return *model_; }
  Proposer* proposer() { return proposer_.get(); }  // null without speculative decoding
  const Proposer* proposer() const { return proposer_.get(); }

 private:
  Engine() = default;
  // The step in three parts (engine_step.cc). launch_step: plan, swaps, build, launch
  // (in_flight_). complete_step: wait, sample, commit, free what ended by its token.
  // finish_text: the text and stop strings of the completed step's tokens, when deferred.
  Status launch_step(std::vector<RequestOutput>& outputs);
  Status complete_step(std::vector<RequestOutput>& outputs);
  void finish_text(std::vector<RequestOutput>& outputs);
  // Frees the requests stopped while in the launched step, now that it is done.
  void retire_stopped();
  void take_in(std::vector<RequestOutput>& outputs);
  // The swap area's slots and the cost model's rates into sc, and the runner's area created
  // (engine_swap.cc). INVALID_ARGUMENT for swap mode without an area.
  static Status configure_swap(const EngineConfig& config, ModelRunner& runner, int64_t per_block,
                               SchedulerConfig& sc);
  // Runs the plan's swap copies; a failed copy ends the requests whose K/V it moved, with its error.
  Status run_swaps(const SchedulerStep& plan, std::vector<RequestOutput>& outputs);
  // finish = release (out of the scheduler, its blocks freed, no longer unfinished) and
  // report_finish (the reason into r and out, the counters). forget: drops the request unless
  // finish_text still holds it (which then drops it).
  void finish(Request* r, FinishReason reason, RequestOutput& out);
  void release(Request* r);
  void report_finish(Request* r, FinishReason reason, RequestOutput& out);
  void forget(Request* r);
  RequestOutput& output_for(Request* r, std::vector<RequestOutput>& outputs);
  void build_batch(const SchedulerStep& plan);
  // Speculative decoding (engine_speculative.cc). The proposer and the buffers, at create.
  void init_speculative(std::unique_ptr<Proposer> proposer);
  // Fills Request::draft of the running requests that decode this step.
  void propose();
  // Where the step's tokens come from besides the logits (the runner's argmax or device draws).
  struct RowSources {
    std::span<const int32_t> greedy, sampled;
    std::span<const SampleRowLogprobs> sampled_lp;
    bool use_greedy = false, use_sampled = false;
  };
  // The token of logits row `row` for r, with its logprobs into out.
  int32_t sample_row(size_t row, Request* r, RequestOutput& out, const Tensor& logits, const RowSources& src);
  // The chunk's sampled rows from first_row (1 + c.num_draft of them): each row's token emitted
  // until one differs from its proposal or the request finishes (the reason returned); its
  // rejected proposals into `rejected`, its acceptance into r and the step's counters.
  FinishReason sample_chunk(const ScheduledChunk& c, size_t first_row, RequestOutput& out,
                            const Tensor& logits, const RowSources& src, int64_t& prompt_tokens,
                            int64_t& generation_tokens, int32_t& rejected);
  // The step's drafts, proposed and accepted tokens into stats_.
  void record_spec_stats(const SchedulerStep& plan);
  // Appends a sampled token to r and out; its finish reason (kNone: it goes on).
  FinishReason emit(Request* r, int32_t token, RequestOutput& out, int64_t& prompt_tokens);
  // A constrained request's token: the row masked by its constraint, then sampled as usual.
  int32_t sample_constrained(Request& r, std::span<const float> logits);
  void publish_stats();
  // The step's prompt rows (row_prompt_pos_ >= 0): each prompt token's logprob, into its request.
  void record_prompt_logprobs(const Tensor& logits);
  // Moves a finished prefill's prompt logprobs into its output.
  static void take_prompt_logprobs(Request& r, RequestOutput& out);

  EngineConfig config_;
  std::unique_ptr<ModelRunner> model_;
  StepLimits step_limits_;  // the runner's, read once: every batch is validated against them
  const TextStreamFactory* text_ = nullptr;
  std::vector<int32_t> eos_ids_;
  int64_t kv_pool_bytes_ = 0;
  int64_t swap_space_bytes_ = 0;  // the swap area's slots times a block's bytes
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Sampler> sampler_;
  int32_t vocab_size_ = 0;
  int64_t max_model_len_ = 0;

  // Step thread only.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  ForwardBatch batch_;                   // reused every step
  std::vector<Request*> row_owner_;      // [R] the request each logits row samples (or scores) for
  std::vector<int64_t> row_prompt_pos_;  // [R] -1: the row samples; else the prompt position it scores
  std::unique_ptr<Proposer> proposer_;   // null: no speculative decoding
  std::vector<Request*> spec_reqs_;      // this step's requests that may propose
  std::vector<int32_t> spec_cap_, spec_k_;
  std::vector<double> spec_alpha_;
  // Decode steps' cost by rows (step_overhead_tokens < 0), one fit per batch size class
  // (spec_cost_class: 1, 2-3, 4-7, ..., 128+ sequences): a row's cost relative to the step
  // depends on how many rows the step has already, and a fit across sizes (a batch of 64
  // shrinking to 1 as it finishes) would mix them.
  std::array<StepCostModel, 8> step_cost_{StepCostModel(1.0), StepCostModel(1.0), StepCostModel(1.0),
                                          StepCostModel(1.0), StepCostModel(1.0), StepCostModel(1.0),
                                          StepCostModel(1.0), StepCostModel(1.0)};
  static size_t spec_cost_class(size_t num_seqs);
  std::vector<int32_t> rejected_;                             // [chunks] proposed tokens rejected
  std::vector<std::pair<Request*, FinishReason>> finishing_;  // finished in this step, after commit
  std::vector<int64_t> step_accepted_per_pos_;                // [num_speculative_tokens]
  // Asynchronous scheduling (engine_step.cc): a launched step awaits complete_step (its error,
  // when the launch failed); each token whose text finish_text makes (the request, its output
  // entry, the token, the request's count of tokens with it); requests stopped by a stop string
  // while in the launched step, freed once it completes.
  bool async_ = false;
  bool in_flight_ = false;
  Status launch_error_;
  Clock::time_point step_start_;
  struct PendingText {
    Request* request;
    size_t output;
    int32_t token;
    int32_t num_generated;
  };
  std::vector<PendingText> pending_text_;
  std::vector<Request*> stopped_;
  std::vector<Rng> row_rng_;       // [R] each row's Rng before its device draw (a row handed back redraws)
  size_t n_outputs_ = 0;           // entries of the caller's outputs written this step
  uint64_t step_serial_ = 0;       // step() calls so far (Request::output_step)
  std::string new_text_;           // scratch
  std::vector<float> masked_row_;  // [vocab] a constrained request's logits
  std::vector<std::unique_ptr<Request>> taken_;
  std::vector<RequestId> taken_aborts_;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::vector<std::unique_ptr<Request>> incoming_;
  std::vector<RequestId> aborts_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> num_unfinished_{0};
  EngineStats stats_;  // under mu_
};

}  // namespace nanoserve
