#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_set>
#include <utility>

#include "core/check.h"
#include "core/logging.h"

namespace nanoserve {

namespace {

uint64_t mix_seed(uint64_t engine_seed, uint64_t id) {
  uint64_t z = engine_seed ^ (id * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

StatusOr<int32_t> kv_cache_num_blocks(const EngineConfig& config, const ModelRunner& runner) {
  if (config.num_blocks < 0) return invalid_argument("num_blocks must be >= 0");
  if (config.kv_cache_bytes < 0) return invalid_argument("kv_cache_bytes must be >= 0");
  if (config.block_size < 1) return invalid_argument("block_size must be >= 1");
  if (config.num_blocks > 0) return config.num_blocks;
  const char* source = "kv_cache_bytes";
  int64_t bytes = config.kv_cache_bytes;
  if (bytes == 0) {
    bytes = runner.kv_cache_budget_bytes();
    source = "the model runner's KV budget";
  }
  if (bytes == 0) {
    bytes = kDefaultKvCacheBytes;
    source = "the default KV cache size";
  }
  const int64_t per_block = runner.kv_bytes_per_block(config.block_size);
  NS_CHECK(per_block > 0) << "kv_bytes_per_block " << per_block;
  const int64_t n = std::min<int64_t>(bytes / per_block, std::numeric_limits<int32_t>::max());
  if (n < 1) {
    return invalid_argument(std::string(source) + ": " + std::to_string(bytes) +
                            " bytes is less than one block (" + std::to_string(per_block) + " bytes)");
  }
  return static_cast<int32_t>(n);
}

int64_t kv_window_to_release(const ModelConfig& config) {
  int64_t window = 0;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const int64_t w = config.layer_window(l);
    if (w <= 0) return 0;
    window = std::max(window, w);
  }
  return window;
}

StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config,
                                                 std::unique_ptr<ModelRunner> model,
                                                 const TextStreamFactory* text,
                                                 std::unique_ptr<Proposer> proposer) {
  NS_CHECK(model != nullptr) << "Engine::create without a model";
  SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  NS_RETURN_IF_ERROR(sc.validate());
  const SpeculativeConfig& spec = config.speculative;
  NS_RETURN_IF_ERROR(spec.validate());
  if (spec.method == SpecMethod::kDraftModel && proposer == nullptr)
    return invalid_argument("speculative_config.model: the draft model's runner was not given to the engine");
  if (spec.method == SpecMethod::kNgram) proposer = std::make_unique<NgramProposer>(spec);
  if (!spec.enabled()) proposer.reset();
  const ModelConfig& mc = model->config();
  if (config.max_model_len < 0) return invalid_argument("max_model_len must be >= 0");
  NS_ASSIGN_OR_RETURN(const int32_t num_blocks, kv_cache_num_blocks(config, *model));

  auto e = std::unique_ptr<Engine>(new Engine());
  e->config_ = config;
  e->max_model_len_ = config.max_model_len > 0 ? config.max_model_len : mc.context_length;
  if (e->max_model_len_ <= 0)
    return invalid_argument("max_model_len: the model has no context length; set one");

  BlockManagerConfig bc;
  bc.num_blocks = num_blocks;
  bc.block_size = config.block_size;
  bc.max_num_seqs = config.max_num_seqs;
  bc.max_seq_len = e->max_model_len_;
  bc.enable_prefix_caching = config.enable_prefix_caching && model->kv_blocks_shareable();
  bc.sliding_window = config.release_window_blocks ? kv_window_to_release(mc) : 0;
  bc.window_read_margin = model->window_read_margin();
  NS_RETURN_IF_ERROR(bc.validate());
  NS_RETURN_IF_ERROR(model->init_kv_cache(num_blocks, config.block_size));
  const int64_t per_block = model->kv_bytes_per_block(config.block_size);
  e->kv_pool_bytes_ = static_cast<int64_t>(num_blocks) * per_block;

  NS_RETURN_IF_ERROR(configure_swap(config, *model, per_block, sc));
  e->swap_space_bytes_ = static_cast<int64_t>(sc.num_swap_slots) * per_block;
  e->step_limits_ = model->step_limits();
  sc.max_logits_rows = e->step_limits_.max_logits_rows;  // the runner's R bounds each step's rows
  // Proposed tokens take the logits rows beyond one per sequence.
  sc.max_draft_rows =
      proposer == nullptr ? 0 : std::max(0, e->step_limits_.max_logits_rows - config.max_num_seqs);
  NS_RETURN_IF_ERROR(sc.validate());

  if (config.async_scheduling.value_or(false) && spec.enabled()) {
    return invalid_argument(
        "async_scheduling: not with speculative decoding (a step's several tokens a request need their stop "
        "strings checked before the next step is planned)");
  }
  e->async_ = config.async_scheduling.value_or(model->overlaps_steps() && !spec.enabled());
  e->model_ = std::move(model);
  e->text_ = text;
  if (text != nullptr) e->eos_ids_ = text->eos_ids();
  e->vocab_size_ = static_cast<int32_t>(mc.vocab_size);
  e->scheduler_ = std::make_unique<Scheduler>(sc, bc);
  e->sampler_ = std::make_unique<Sampler>(e->vocab_size_, e->eos_ids_);
  e->masked_row_.resize(e->vocab_size_);

  // Step buffers sized once: the step loop only clears and refills them.
  const size_t T = config.max_num_batched_tokens, B = config.max_num_seqs;
  e->batch_.tokens.reserve(T);
  e->batch_.positions.reserve(T);
  e->batch_.seq_starts.reserve(B + 1);
  e->batch_.seq_ids.reserve(B);
  e->batch_.context_lens.reserve(B);
  e->batch_.block_tables.reserve(B * e->block_manager().max_blocks_per_seq());
  e->batch_.slot_mapping.reserve(T);
  const size_t R = std::max<size_t>(B, static_cast<size_t>(std::max(0, e->step_limits_.max_logits_rows)));
  e->batch_.logits_rows.reserve(R);
  e->row_owner_.reserve(R);
  e->row_prompt_pos_.reserve(R);
  e->rejected_.reserve(B);
  e->finishing_.reserve(B);
  e->pending_text_.reserve(B);
  e->stopped_.reserve(B);
  e->init_speculative(std::move(proposer));
  e->taken_.reserve(64);
  e->taken_aborts_.reserve(64);
  e->publish_stats();
  return e;
}

Engine::~Engine() {
  // A launched step still writes into the runner's buffers: let it end first.
  if (in_flight_) (void)model_->wait();
}

int64_t Engine::kv_capacity_tokens() const {
  return static_cast<int64_t>(block_manager().num_blocks()) * block_manager().block_size();
}

std::string Engine::capacity_line() const {
  const double mib = static_cast<double>(kv_pool_bytes_) / (1024.0 * 1024.0);
  const double per_len = static_cast<double>(kv_capacity_tokens()) / static_cast<double>(max_model_len_);
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "KV cache: %d blocks x %d tokens = %lld tokens (%.1f MiB); up to %.2f sequences of max_model_len %lld; "
      "prefix caching %s",
      block_manager().num_blocks(), block_manager().block_size(),
      static_cast<long long>(kv_capacity_tokens()), mib, per_len, static_cast<long long>(max_model_len_),
      block_manager().prefix_caching() ? "on" : "off");
  std::string line = buf;
  const int64_t window = block_manager().sliding_window();
  if (window > 0) line += "; blocks behind the " + std::to_string(window) + "-token window released";
  return line + "; " + preemption_line();
}

StatusOr<RequestId> Engine::add_request(std::vector<int32_t> prompt, SamplingParams params) {
  if (prompt.empty()) return invalid_argument("prompt: at least one token is required");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size_) {
      return invalid_argument("prompt: token " + std::to_string(prompt[i]) + " at position " +
                              std::to_string(i) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size_) + ")");
    }
  }
  NS_RETURN_IF_ERROR(params.validate(vocab_size_));
  if (params.min_tokens > 0) {
    // The mask must leave something to draw.
    std::unordered_set<int32_t> masked(params.stop_token_ids.begin(), params.stop_token_ids.end());
    if (!params.ignore_eos) masked.insert(eos_ids_.begin(), eos_ids_.end());
    if (static_cast<int64_t>(masked.size()) >= vocab_size_)
      return invalid_argument("min_tokens: the end tokens it masks cover the whole vocabulary");
  }
  if (!params.stop.empty() && text_ == nullptr)
    return invalid_argument("stop: stop strings need a tokenizer, and this engine runs on token ids only");
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > max_model_len_) {
    return invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                            std::to_string(params.max_tokens) + ") = " + std::to_string(total) +
                            " exceeds max_model_len " + std::to_string(max_model_len_));
  }
  if (total > kv_capacity_tokens()) {
    return invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                            std::to_string(params.max_tokens) + ") = " + std::to_string(total) +
                            " exceeds the KV cache capacity of " + std::to_string(kv_capacity_tokens()) +
                            " tokens");
  }
  const RequestId id = next_id_.fetch_add(1);
  const uint64_t seed = params.seed.has_value() ? *params.seed : mix_seed(config_.seed, id);
  std::unique_ptr<TextStream> stream = text_ == nullptr             ? nullptr
                                       : params.skip_special_tokens ? text_->open(prompt)
                                                                    : text_->open_keeping_special(prompt);
  auto r =
      std::make_unique<Request>(id, std::move(prompt), std::move(params), seed, eos_ids_, std::move(stream));
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(std::move(r));
    ++stats_.num_waiting;
    num_unfinished_.fetch_add(1);
  }
  work_cv_.notify_all();
  return id;
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  work_cv_.notify_all();
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.wait_for(lock, timeout,
                    [&] { return !incoming_.empty() || !aborts_.empty() || has_unfinished(); });
  return has_unfinished() || !aborts_.empty();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::publish_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_running = static_cast<int32_t>(scheduler_->running().size());
  stats_.num_waiting = static_cast<int32_t>(scheduler_->waiting().size() + incoming_.size());
  const BlockManager& bm = block_manager();
  stats_.num_blocks = bm.num_blocks();
  stats_.num_free_blocks = bm.num_available_blocks();
  stats_.num_cached_blocks = bm.num_cached_blocks();
  stats_.kv_usage = static_cast<double>(bm.num_in_use_blocks()) / std::max(1, bm.num_blocks());
  stats_.num_preemptions = scheduler_->num_preemptions();
  stats_.num_swap_preemptions = scheduler_->num_swap_preemptions();
  stats_.num_swap_ins = scheduler_->num_swap_ins();
  stats_.swapped_out_blocks = scheduler_->num_swapped_out_blocks();
  stats_.swapped_in_blocks = scheduler_->num_swapped_in_blocks();
  stats_.recomputed_tokens = scheduler_->num_recomputed_tokens();
  stats_.num_swapped = static_cast<int32_t>(scheduler_->swapped().size());
  stats_.num_swap_slots = scheduler_->swap_space().num_slots();
  stats_.num_used_swap_slots = scheduler_->swap_space().num_used_slots();
  stats_.prefix_cache_queries = scheduler_->prefix_cache_queries();
  stats_.prefix_cache_hits = scheduler_->prefix_cache_hits();
}

RequestOutput& Engine::output_for(Request* r, std::vector<RequestOutput>& outputs) {
  // A request has one entry a step, found again through the request.
  if (r->output_step == step_serial_) return outputs[r->output_index];
  r->output_step = step_serial_;
  r->output_index = n_outputs_;
  // Entries left from the last step are reused: their vectors and strings
  // keep their capacity, so a steady step allocates nothing here.
  if (n_outputs_ == outputs.size()) outputs.emplace_back();
  RequestOutput& o = outputs[n_outputs_++];
  o.new_tokens.clear();
  o.text.clear();
  o.logprobs.clear();
  o.top_logprobs.clear();
  o.prompt_logprobs.clear();
  o.prompt_top_logprobs.clear();
  o.prompt_ranks.clear();
  o.finish_reason = FinishReason::kNone;
  o.stop_string.clear();
  o.error.clear();
  o.num_output_tokens = 0;
  o.num_preemptions = 0;
  o.first_token_time = {};
  o.finish_time = {};
  o.id = r->id;
  o.num_prompt_tokens = static_cast<int32_t>(r->prompt.size());
  o.arrival_time = r->arrival_time;
  o.first_scheduled_time = r->first_scheduled_time;
  return o;
}

void Engine::finish(Request* r, FinishReason reason, RequestOutput& out) {
  release(r);
  report_finish(r, reason, out);
}

void Engine::release(Request* r) {
  scheduler_->remove(r);
  r->status = RequestStatus::kFinished;
  if (proposer_ != nullptr) proposer_->release(r->id);
  num_unfinished_.fetch_sub(1);
}

void Engine::report_finish(Request* r, FinishReason reason, RequestOutput& out) {
  r->finish_reason = reason;
  r->finish_time = Clock::now();
  out.finish_reason = reason;
  out.finish_time = r->finish_time;
  out.stop_string = r->stop.matched_stop();
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == FinishReason::kAbort || reason == FinishReason::kError) {
    ++stats_.num_aborted;
  } else {
    ++stats_.num_finished;
  }
}

void Engine::forget(Request* r) {
  if (!r->text_pending) requests_.erase(r->id);  // else finish_text, which holds it, erases it
}

void Engine::take_in(std::vector<RequestOutput>& outputs) {
  taken_.clear();
  taken_aborts_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(taken_, incoming_);
    std::swap(taken_aborts_, aborts_);
  }
  for (std::unique_ptr<Request>& r : taken_) {
    scheduler_->add(r.get());
    const RequestId id = r->id;
    requests_.emplace(id, std::move(r));
  }
  for (RequestId id : taken_aborts_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // unknown or already finished
    Request* r = it->second.get();
    // Ended by its last token, its text still to come (finish_text), or stopped while in the
    // launched step: it finishes as it was going to.
    if (r->is_finished() || r->finish_reason != FinishReason::kNone) continue;
    RequestOutput& out = output_for(r, outputs);
    out.num_output_tokens = static_cast<int32_t>(r->output.size());
    out.num_preemptions = r->num_preemptions;
    out.first_token_time = r->first_token_time;
    finish(r, FinishReason::kAbort, out);
    forget(r);
  }
}

}  // namespace nanoserve
