// One step of the Engine (docs/engine.md): launch (take in, schedule, build
// the batch, start the forward), complete (wait, sample, commit), and the
// text of the step's tokens. One at a time, or with asynchronous scheduling
// the next step's launch before the last step's text, so that the text, the
// outputs and whatever the caller does with them overlap the device's step.

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "engine/engine.h"

namespace nanoserve {

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
    r->launched_tokens = c.num_tokens;
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
  ++step_serial_;
  Status st;
  if (async_) {
    // Step n (launched by the last call) completes; n + 1 is launched from its committed tokens;
    // then n's text and outputs are made while the device runs n + 1.
    if (in_flight_) st = complete_step(outputs);
    take_in(outputs);
    Status launched = launch_step(outputs);
    if (st.ok()) st = launched;
  } else {
    take_in(outputs);
    st = launch_step(outputs);
    if (st.ok() && in_flight_) st = complete_step(outputs);
  }
  finish_text(outputs);
  publish_stats();
  outputs.resize(n_outputs_);  // shrinks only: the step's entries are the first n_outputs_
  return st;
}

Status Engine::launch_step(std::vector<RequestOutput>& outputs) {
  step_start_ = Clock::now();
  if (proposer_ != nullptr) propose();
  const SchedulerStep& plan = scheduler_->schedule();
  // Before the forward (and before an empty plan returns: a request may have swapped itself out).
  NS_RETURN_IF_ERROR(run_swaps(plan, outputs));
  if (plan.empty()) return Status();
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.request->first_scheduled_time == Clock::time_point{}) c.request->first_scheduled_time = step_start_;
  }
  build_batch(plan);
  // The step's one check: the runner, its pools and its kernels read what passes unchecked.
  Status st = batch_.validate(step_limits_);
  if (st.ok()) st = model_->launch(batch_);
  in_flight_ = true;  // complete_step ends the step's requests on an error
  if (!st.ok()) launch_error_ = st;
  return Status();
}

Status Engine::complete_step(std::vector<RequestOutput>& outputs) {
  in_flight_ = false;
  const SchedulerStep& plan = scheduler_->last_step();
  for (const ScheduledChunk& c : plan.chunks) c.request->launched_tokens = 0;
  StatusOr<Tensor> logits = launch_error_.ok() ? model_->wait() : StatusOr<Tensor>(launch_error_);
  launch_error_ = Status();
  if (!logits.ok()) {
    // Nothing of this step can be trusted: end every request in it, loudly.
    for (const ScheduledChunk& c : plan.chunks) {
      Request* r = c.request;
      if (r->finish_reason != FinishReason::kNone) {  // stopped: its finish is already out
        release(r);
        continue;
      }
      RequestOutput& out = output_for(r, outputs);
      out.error = logits.status().to_string();
      out.num_output_tokens = static_cast<int32_t>(r->output.size());
      finish(r, FinishReason::kError, out);
      forget(r);
    }
    retire_stopped();
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
    const size_t first_row = row;
    row += 1 + static_cast<size_t>(c.num_draft);
    // Stopped by a stop string after this step was launched: its row is dropped.
    if (r->finish_reason != FinishReason::kNone) continue;
    RequestOutput& out = output_for(r, outputs);
    const FinishReason reason =
        sample_chunk(c, first_row, out, *logits, src, prompt_tokens, generation_tokens, rejected_[ci]);
    if (reason != FinishReason::kNone) finishing_.emplace_back(r, reason);
    // Asynchronous: one token (no proposals), its text made by finish_text.
    if (r->text_pending) {
      pending_text_.push_back({r, static_cast<size_t>(&out - outputs.data()), r->output.back(),
                               static_cast<int32_t>(r->output.size())});
    }
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
    forget(r);
  }
  for (auto& [r, reason] : finishing_) {
    if (r->text_pending) {
      // Ended by its token (an end token, max_tokens): its blocks go back before the next step is
      // planned; the reason and the text come with finish_text.
      release(r);
      continue;
    }
    RequestOutput& out = output_for(r, outputs);
    if (r->text != nullptr && r->stop.matched_stop().empty()) r->text->finish(out.text);
    finish(r, reason, out);
    forget(r);
  }
  retire_stopped();
  if (proposer_ != nullptr) record_spec_stats(plan);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start_).count();
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
  return Status();
}

void Engine::retire_stopped() {
  for (Request* r : stopped_) {
    if (!r->is_finished()) release(r);
    requests_.erase(r->id);
  }
  stopped_.clear();
}

void Engine::finish_text(std::vector<RequestOutput>& outputs) {
  for (const PendingText& p : pending_text_) {
    Request* r = p.request;
    r->text_pending = false;
    // Aborted, or failed with a swap, since its token: that finish is out already.
    if (r->finish_reason != FinishReason::kNone) {
      requests_.erase(r->id);
      continue;
    }
    RequestOutput& out = outputs[p.output];
    new_text_.clear();
    if (r->text != nullptr) r->text->push(p.token, new_text_);
    const FinishReason reason = r->stop.on_token(p.token, p.num_generated, new_text_, out.text);
    if (reason == FinishReason::kNone) continue;
    if (r->text != nullptr && r->stop.matched_stop().empty()) r->text->finish(out.text);
    if (r->is_finished()) {
      // complete_step released it (ends_on_token).
      report_finish(r, reason, out);
      requests_.erase(r->id);
    } else if (r->launched_tokens > 0) {
      // A stop string, found after the request went into the launched step: its finish goes out
      // now; its blocks, which that step writes, go back when it completes (retire_stopped).
      report_finish(r, reason, out);
      stopped_.push_back(r);
    } else {
      finish(r, reason, out);
      requests_.erase(r->id);
    }
  }
  pending_text_.clear();
}

}  // namespace nanoserve
