#include "engine/request.h"

#include <utility>

namespace nanoserve {

Request::Request(RequestId id_, std::vector<int32_t> prompt_, SamplingParams params_, uint64_t seed,
                 std::span<const int32_t> eos_ids, std::unique_ptr<TextStream> text_)
    : id(id_),
      prompt(std::move(prompt_)),
      params(std::move(params_)),
      rng(seed),
      stop(params, eos_ids),
      text(std::move(text_)),
      arrival_time(Clock::now()) {
  output.reserve(params.max_tokens);
  if (params.constraint != nullptr) constraint = params.constraint->start();
}

}  // namespace nanoserve
