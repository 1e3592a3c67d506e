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
  e->init_speculative(std::move(proposer));
  e->taken_.reserve(64);
  e->taken_aborts_.reserve(64);
  e->publish_stats();
  return e;
}

Engine::~Engine() = default;

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
  // A request appears at most once per step, and usually last.
  for (size_t i = n_outputs_; i-- > 0;) {
    if (outputs[i].id == r->id) return outputs[i];
  }
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
  scheduler_->remove(r);
  r->status = RequestStatus::kFinished;
  r->finish_reason = reason;
  r->finish_time = Clock::now();
  out.finish_reason = reason;
  out.finish_time = r->finish_time;
  out.stop_string = r->stop.matched_stop();
  if (proposer_ != nullptr) proposer_->release(r->id);
  num_unfinished_.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == FinishReason::kAbort || reason == FinishReason::kError) {
    ++stats_.num_aborted;
  } else {
    ++stats_.num_finished;
  }
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
    RequestOutput& out = output_for(r, outputs);
    out.num_output_tokens = static_cast<int32_t>(r->output.size());
    out.num_preemptions = r->num_preemptions;
    out.first_token_time = r->first_token_time;
    finish(r, FinishReason::kAbort, out);
    requests_.erase(it);
  }
}

void Engine::build_batch(const SchedulerStep& plan) {
  ForwardBatch& b = batch_;
  b.tokens.clear();
  b.positions.clear();
  b.seq_starts.clear();
  b.seq_ids.clear();
  b.context_lens.clear();
  b.logits_rows.clear();
  b.block_tables.clear();
  b.slot_mapping.clear();
  row_owner_.clear();
  row_prompt_pos_.clear();
  b.seq_starts.push_back(0);
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = c.request;
    const int64_t start = scheduler_->num_computed(r);
    const int64_t known = r->num_tokens();  // past it: the proposed tokens
    for (int64_t p = start; p < start + c.num_tokens; ++p) {
      b.tokens.push_back(p < known ? r->token_at(p) : r->draft[p - known]);
      b.positions.push_back(static_cast<int32_t>(p));
    }
    b.seq_starts.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seq_ids.push_back(r->seq);
    b.context_lens.push_back(static_cast<int32_t>(start + c.num_tokens));
    // Prompt rows first (they come before the chunk's last token), in position order.
    const auto [lo, hi] = r->prompt_rows(start, c.num_tokens);
    const int32_t first_row = b.seq_starts[b.seq_starts.size() - 2];
    for (int64_t p = lo; p < hi; ++p) {
      b.logits_rows.push_back(first_row + static_cast<int32_t>(p - start));
      row_owner_.push_back(r);
      row_prompt_pos_.push_back(p);
    }
    // A max_tokens 0 request ends with its prefill: it samples nothing.
    if (c.samples && r->params.max_tokens > 0) {
      // The last known token and each proposed one: every row the check reads.
      for (int32_t j = c.num_draft; j >= 0; --j) {
        b.logits_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1 - j);
        row_owner_.push_back(r);
        row_prompt_pos_.push_back(-1);
      }
    }
  }
  b.need_logits = false;
  bool prompt_rows = false;
  for (size_t i = 0; i < row_owner_.size(); ++i) {
    prompt_rows |= row_prompt_pos_[i] >= 0;
    b.need_logits |= row_prompt_pos_[i] >= 0 || !row_owner_[i]->params.plain_greedy();
  }
  // The device samples the step when it can take every row: then only ids
  // (and logprobs) come back. Each sampled row's uniform comes from its own
  // Rng, one draw, as the CPU Sampler would make it.
  b.sample_rows.clear();
  bool device = b.need_logits && !prompt_rows && model_->samples_on_device();
  for (const Request* r : row_owner_) device = device && r->params.device_sampleable(r->output.size());
  if (device) {
    row_rng_.resize(row_owner_.size());
    for (size_t i = 0; i < row_owner_.size(); ++i) {
      Request* r = row_owner_[i];
      const SamplingParams& p = r->params;
      SampleRowParams& s = b.sample_rows.emplace_back();
      row_rng_[i] = r->rng;
      s.temperature = p.greedy() ? 0.0f : p.temperature;  // below SamplingParams::kGreedyBelow: greedy
      s.top_k = p.top_k;
      s.top_p = p.top_p;
      s.min_p = p.min_p;
      s.u = p.greedy() ? 0.0 : r->rng.next_double();
      s.num_logprobs = p.logprobs ? p.top_logprobs : -1;
    }
    b.need_logits = false;
  }
  block_manager().fill_batch(b);
}

Status Engine::step(std::vector<RequestOutput>& outputs) {
  n_outputs_ = 0;
  const Status st = run_step(outputs);
  outputs.resize(n_outputs_);  // shrinks only: the step's entries are the first n_outputs_
  return st;
}

Status Engine::run_step(std::vector<RequestOutput>& outputs) {
  take_in(outputs);
  const Clock::time_point step_start = Clock::now();
  if (proposer_ != nullptr) propose();
  const SchedulerStep& plan = scheduler_->schedule();
  // Before the forward (and before an empty plan returns: a request may have swapped itself out).
  if (Status st = run_swaps(plan, outputs); !st.ok()) {
    publish_stats();
    return st;
  }
  if (plan.empty()) {
    publish_stats();
    return Status();
  }
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.request->first_scheduled_time == Clock::time_point{}) c.request->first_scheduled_time = step_start;
  }
  build_batch(plan);
  // The step's one check: the runner, its pools and its kernels read what passes unchecked.
  Status valid = batch_.validate(step_limits_);
  StatusOr<Tensor> logits = valid.ok() ? model_->forward(batch_) : StatusOr<Tensor>(valid);
  if (!logits.ok()) {
    // Nothing of this step can be trusted: end every request in it, loudly.
    for (const ScheduledChunk& c : plan.chunks) {
      Request* r = c.request;
      RequestOutput& out = output_for(r, outputs);
      out.error = logits.status().to_string();
      out.num_output_tokens = static_cast<int32_t>(r->output.size());
      finish(r, FinishReason::kError, out);
      requests_.erase(r->id);
    }
    publish_stats();
    return logits.status();
  }
  NS_CHECK(logits->ndim() == 2 && logits->dim(0) == static_cast<int64_t>(row_owner_.size()) &&
           logits->dim(1) == vocab_size_)
      << "logits " << logits->shape_string() << " for " << row_owner_.size() << " rows";
  record_prompt_logprobs(*logits);

  int64_t prompt_tokens = 0, generation_tokens = 0;
  // A decode-only step: every sequence past its prompt, one known token each (with or without proposals).
  bool decode_only = true;
  for (const ScheduledChunk& c : plan.chunks)
    decode_only = decode_only && !c.request->output.empty() && c.num_tokens == 1 + c.num_draft;
  RowSources src;
  // Rows that sample plain greedy take the runner's own argmax where it has one.
  src.greedy = model_->greedy_tokens();
  src.use_greedy = src.greedy.size() == row_owner_.size();
  // Rows the device drew (batch_.sample_rows set): their ids, and logprobs, came back alone.
  src.sampled = model_->sampled_tokens();
  src.sampled_lp = model_->sampled_logprobs();
  src.use_sampled = !batch_.sample_rows.empty() && src.sampled.size() == row_owner_.size();
  NS_CHECK(batch_.sample_rows.empty() || src.use_sampled)
      << "the runner sampled " << src.sampled.size() << " of " << row_owner_.size() << " rows";
  // Each sampling chunk's rows in order (sample_chunk: with its proposals verified).
  rejected_.assign(plan.chunks.size(), 0);
  finishing_.clear();
  size_t row = 0;
  for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
    const ScheduledChunk& c = plan.chunks[ci];
    // The chunk's prompt rows come first; record_prompt_logprobs scored them.
    while (row < row_owner_.size() && row_prompt_pos_[row] >= 0) ++row;
    // A max_tokens 0 request samples nothing (finished below).
    if (!c.samples || c.request->params.max_tokens == 0) continue;
    Request* r = c.request;
    const FinishReason reason = sample_chunk(c, row, output_for(r, outputs), *logits, src, prompt_tokens,
                                             generation_tokens, rejected_[ci]);
    row += 1 + static_cast<size_t>(c.num_draft);
    if (reason != FinishReason::kNone) finishing_.emplace_back(r, reason);
  }
  NS_CHECK_EQ(row, row_owner_.size());
  // Only now is each sequence's length known: what was computed, less the
  // rejected proposals, whose K/V and blocks go back here.
  scheduler_->commit(plan, rejected_);
  // A max_tokens 0 request is done once its prompt is: its output is the
  // prompt's logprobs. (Before the finishing requests are freed: the plan
  // still points at them.)
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = c.request;
    if (!c.samples || r->params.max_tokens > 0) continue;
    RequestOutput& out = output_for(r, outputs);
    prompt_tokens += static_cast<int64_t>(r->prompt.size());
    take_prompt_logprobs(*r, out);
    out.num_preemptions = r->num_preemptions;
    finish(r, FinishReason::kLength, out);
    requests_.erase(r->id);
  }
  for (auto& [r, reason] : finishing_) {
    RequestOutput& out = output_for(r, outputs);
    if (r->text != nullptr && r->stop.matched_stop().empty()) r->text->finish(out.text);
    finish(r, reason, out);
    requests_.erase(r->id);
  }
  if (proposer_ != nullptr) record_spec_stats(plan);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.prompt_tokens += prompt_tokens;
    stats_.generation_tokens += generation_tokens;
    stats_.num_computed_tokens += batch_.num_tokens();
    ++stats_.num_steps;
    if (decode_only) {
      ++stats_.decode_steps;
      stats_.decode_step_rows += static_cast<int64_t>(plan.chunks.size());
      stats_.decode_step_seconds += step_seconds;
    }
  }
  if (decode_only) step_cost_[spec_cost_class(plan.chunks.size())].observe(batch_.num_tokens(), step_seconds);
  publish_stats();
  return Status();
}

}  // namespace nanoserve
