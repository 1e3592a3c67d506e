#include "engine/generate.h"

#include <chrono>
#include <cstdio>
#include <unordered_map>

namespace nanoserve {

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

void draw_progress(size_t done, size_t total, int64_t out_tokens, double elapsed, bool final) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[kWidth] = '\0';
  const double rate = elapsed > 0 ? static_cast<double>(out_tokens) / elapsed : 0.0;
  std::fprintf(stderr, "\r[%s] %zu/%zu requests | %.1f output tok/s | %.1f s%s", bar, done, total, rate,
               elapsed, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace

StatusOr<std::vector<Completion>> generate(Engine& engine, std::span<const std::vector<int32_t>> prompts,
                                           std::span<const SamplingParams> params,
                                           const GenerateOptions& options) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    return invalid_argument("generate: " + std::to_string(params.size()) + " sampling params for " +
                            std::to_string(prompts.size()) + " prompts (give 1 or one per prompt)");
  }
  std::vector<Completion> results(prompts.size());
  std::unordered_map<RequestId, size_t> index;
  std::vector<RequestOutput> outs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    StatusOr<RequestId> id = engine.add_request(prompts[i], params.size() == 1 ? params[0] : params[i]);
    if (!id.ok()) {
      for (const auto& [added, unused] : index) engine.abort(added);
      while (engine.has_unfinished()) NS_RETURN_IF_ERROR(engine.step(outs));
      return Status(id.status().code(), "prompt " + std::to_string(i) + ": " + id.status().message());
    }
    index.emplace(*id, i);
    results[i].num_prompt_tokens = static_cast<int32_t>(prompts[i].size());
  }

  const Clock::time_point start = Clock::now();
  Clock::time_point last_draw = start;
  size_t done = 0;
  int64_t out_tokens = 0;
  if (options.progress) draw_progress(0, prompts.size(), 0, 0.0, false);
  while (engine.has_unfinished()) {
    NS_RETURN_IF_ERROR(engine.step(outs));
    for (const RequestOutput& o : outs) {
      auto it = index.find(o.id);
      if (it == index.end()) continue;  // someone else's request on a shared engine
      Completion& c = results[it->second];
      c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      c.text += o.text;
      out_tokens += static_cast<int64_t>(o.new_tokens.size());
      if (o.finished()) {
        c.finish_reason = o.finish_reason;
        c.num_preemptions = o.num_preemptions;
        c.latency_s = seconds(o.finish_time - o.arrival_time);
        c.ttft_s = o.num_output_tokens > 0 ? seconds(o.first_token_time - o.arrival_time) : c.latency_s;
        ++done;
      }
    }
    const Clock::time_point now = Clock::now();
    if (options.progress && now - last_draw > std::chrono::milliseconds(200)) {
      draw_progress(done, prompts.size(), out_tokens, seconds(now - start), false);
      last_draw = now;
    }
    if (done == prompts.size()) break;
  }
  if (options.progress) draw_progress(done, prompts.size(), out_tokens, seconds(Clock::now() - start), true);
  return results;
}

}  // namespace nanoserve
