#include "python/offline_llm.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "template/chat_template.h"

namespace nanoserve::python {

namespace {

using server::ApiError;
using server::bad_request;

StatusOr<std::optional<Device>> device_named(const std::string& name) {
  if (name == "auto") return std::optional<Device>();
  if (name == "cpu") return std::optional<Device>(Device::kCPU);
  if (name == "cuda") return std::optional<Device>(Device::kCUDA);
  return invalid_argument("device: '" + name + "' is not auto, cpu or cuda");
}

}  // namespace

// ---------------------------------------------------------------------------- OfflineBatch

OfflineBatch::OfflineBatch(server::EngineLoop& loop, server::EngineLoop::Handle handle,
                           std::vector<size_t> first_choice, std::vector<bool> with_logprobs)
    : loop_(loop),
      handle_(std::move(handle)),
      first_choice_(std::move(first_choice)),
      with_logprobs_(std::move(with_logprobs)) {
  const size_t n_choices = first_choice_.back();
  outputs_.resize(n_choices);
  request_of_.resize(n_choices);
  unfinished_.resize(num_requests());
  for (size_t i = 0; i < num_requests(); ++i) {
    unfinished_[i] = first_choice_[i + 1] - first_choice_[i];
    for (size_t c = first_choice_[i]; c < first_choice_[i + 1]; ++c) request_of_[c] = i;
  }
}

OfflineBatch::~OfflineBatch() {
  abort();
}

void OfflineBatch::abort() {
  loop_.abort(handle_);
}

size_t OfflineBatch::poll(std::chrono::milliseconds timeout) {
  events_.clear();
  handle_.stream->wait_take(&events_, timeout);
  size_t newly_finished = 0;
  for (server::TokenEvent& e : events_) {
    CompletionChoice& out = outputs_[static_cast<size_t>(e.choice)];
    if (e.token >= 0) {
      out.token_ids.push_back(e.token);
      out.text += e.text;
      ++output_tokens_;
      if (with_logprobs_[static_cast<size_t>(e.choice)]) {
        out.logprobs.push_back(e.logprob);
        out.cumulative_logprob += e.logprob;
        out.top_logprobs.push_back(std::move(e.top_logprobs));
      }
    } else if (!e.text.empty()) {
      out.text += e.text;  // text held back for a stop string, released at the end
    }
    if (e.finish != FinishReason::kNone) {
      out.finish = e.finish;
      out.stop_string = std::move(e.stop_string);
      out.error = std::move(e.error);
      if (--unfinished_[request_of_[static_cast<size_t>(e.choice)]] == 0) {
        ++finished_requests_;
        ++newly_finished;
      }
    }
  }
  return newly_finished;
}

// ---------------------------------------------------------------------------- OfflineLlm

StatusOr<std::unique_ptr<OfflineLlm>> OfflineLlm::create(const LlmOptions& options) {
  EngineConfig config;
  NS_ASSIGN_OR_RETURN(config.device, device_named(options.device));
  if (options.max_model_len < 0) return invalid_argument("max_model_len: must be >= 0 (0: the model's)");
  if (options.max_num_seqs < 0) return invalid_argument("max_num_seqs: must be >= 1");
  if (options.kv_cache_memory < 0) return invalid_argument("kv_cache_memory: must be > 0 bytes");
  if (options.threads < 0) return invalid_argument("threads: must be >= 0 (0: all cores)");
  config.max_model_len = options.max_model_len;
  NS_ASSIGN_OR_RETURN(const Device device, resolve_device(config.device));
  set_step_limits(device,
                  options.max_num_seqs > 0 ? std::optional<int32_t>(options.max_num_seqs) : std::nullopt,
                  std::nullopt, &config);
  config.kv_cache_bytes = options.kv_cache_memory;
  config.seed = options.seed;
  if (options.model.empty()) return invalid_argument("model: a GGUF file or a Hugging Face folder is needed");
  std::error_code ec;
  if (!std::filesystem::exists(options.model, ec))
    return not_found("model: '" + options.model + "' does not exist");

  std::unique_ptr<OfflineLlm> llm(new OfflineLlm());
  llm->pool_ = std::make_unique<ThreadPool>(options.threads);
  NS_ASSIGN_OR_RETURN(llm->loaded_, load_engine(options.model, config, *llm->pool_));
  StatusOr<ChatTemplate> chat_template =
      ChatTemplate::of_model_or_override(*llm->loaded_.tokenizer, options.chat_template);
  if (!options.chat_template.empty() && !chat_template.ok())
    return invalid_argument("chat_template: " + chat_template.status().message());
  llm->codec_ = std::make_unique<server::TokenizerCodec>(*llm->loaded_.tokenizer, std::move(chat_template));

  std::filesystem::path p(options.model);
  if (p.filename().empty()) p = p.parent_path();
  llm->limits_.served_model_name =
      std::filesystem::is_directory(p, ec) ? p.filename().string() : p.stem().string();
  Engine& engine = *llm->loaded_.engine;
  llm->limits_.max_model_len = std::min(engine.max_model_len(), engine.kv_capacity_tokens());
  llm->limits_.max_num_seqs = config.max_num_seqs;
  llm->limits_.vocab_size = llm->codec_->vocab_size();
  llm->metrics_ = std::make_unique<server::ServerMetrics>(llm->limits_.served_model_name);
  // Every prompt of a batch waits in the engine at once: no waiting limit.
  llm->loop_ = std::make_unique<server::EngineLoop>(
      engine, *llm->metrics_, server::EngineLoop::Options{std::numeric_limits<int32_t>::max()});
  llm->loop_->start();
  return llm;
}

OfflineLlm::~OfflineLlm() {
  if (loop_) loop_->stop();
}

std::string OfflineLlm::device_name() const {
  return loaded_.device == Device::kCUDA ? "cuda" : "cpu";
}

std::variant<PreparedRequest, ApiError> OfflineLlm::prepare(server::Endpoint endpoint, std::string_view body,
                                                            bool add_generation_prompt) {
  const bool chat = endpoint == server::Endpoint::kChat;
  auto parsed =
      chat ? server::parse_chat_request(body, limits_) : server::parse_completion_request(body, limits_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  server::GenerateRequest& r = std::get<server::GenerateRequest>(parsed);
  if (!r.unknown_fields.empty())
    return bad_request("'" + r.unknown_fields.front() + "' is not known", r.unknown_fields.front());
  if (r.tools.calls())
    return bad_request("tool calls are served by `nanoserve serve`, not by LLM.chat", "tools");
  if (r.best_of > r.n) return bad_request("best_of > n is not supported offline; use n", "best_of");
  if (!chat && r.prompts.size() != 1) return bad_request("one prompt per request", "prompt");

  auto constraint = structured_.constraint_for(r, *codec_);
  if (auto* e = std::get_if<ApiError>(&constraint)) return *e;
  r.params.constraint = std::get<std::shared_ptr<const TokenConstraintFactory>>(std::move(constraint));

  // The prompt, encoded as the server encodes it.
  PreparedRequest out;
  if (chat) {
    r.chat_template.add_generation_prompt = add_generation_prompt;
    auto ids = codec_->encode_chat(r.messages, r.chat_template);
    if (!ids.ok()) return bad_request(ids.status().message(), "messages");
    out.prompt = std::move(*ids);
    // The template's end of turn ends the reply where the model's eos ids lack it.
    if (auto eot = codec_->chat_end_of_turn_id(r.chat_template)) {
      const std::vector<int32_t> eos = codec_->eos_ids();
      std::vector<int32_t>& stops = r.params.stop_token_ids;
      if (stops.size() < static_cast<size_t>(SamplingParams::kMaxStops) &&
          std::find(eos.begin(), eos.end(), *eot) == eos.end() &&
          std::find(stops.begin(), stops.end(), *eot) == stops.end()) {
        stops.push_back(*eot);
      }
    }
  } else if (auto* text = std::get_if<std::string>(&r.prompts.front())) {
    auto ids = codec_->encode(*text, /*add_special_tokens=*/true);
    if (!ids.ok()) return bad_request(ids.status().message(), "prompt");
    out.prompt = std::move(*ids);
  } else {
    out.prompt = std::move(std::get<std::vector<int32_t>>(r.prompts.front()));
  }
  auto max_tokens = server::check_context_length(static_cast<int64_t>(out.prompt.size()), r.max_tokens,
                                                 limits_.max_model_len, endpoint);
  if (auto* e = std::get_if<ApiError>(&max_tokens)) return *e;
  const int64_t left = std::get<int64_t>(max_tokens);
  if (r.params.min_tokens > left)
    return bad_request("'min_tokens' (" + std::to_string(r.params.min_tokens) + ") is more than the " +
                           std::to_string(left) + " tokens left in the context after the prompt.",
                       "min_tokens");
  SamplingParams params = r.params;
  params.n = 1;
  params.max_tokens = static_cast<int32_t>(std::min<int64_t>(left, std::numeric_limits<int32_t>::max()));
  for (int j = 0; j < r.n; ++j) {
    server::EngineRequest er;
    er.prompt = out.prompt;
    er.params = params;
    // As the server does: choice j of a seeded request samples with seed + j.
    if (r.params.seed) er.params.seed = *r.params.seed + static_cast<uint64_t>(j);
    out.choices.push_back(std::move(er));
  }
  return out;
}

StatusOr<std::unique_ptr<OfflineBatch>> OfflineLlm::submit(std::vector<PreparedRequest> requests) {
  if (requests.empty()) return invalid_argument("prompts: nothing to generate");
  std::vector<size_t> first_choice{0};
  std::vector<server::EngineRequest> choices;
  std::vector<bool> with_logprobs;
  for (PreparedRequest& r : requests) {
    for (server::EngineRequest& c : r.choices) {
      with_logprobs.push_back(c.params.logprobs);
      choices.push_back(std::move(c));
    }
    first_choice.push_back(choices.size());
  }
  NS_ASSIGN_OR_RETURN(server::EngineLoop::Handle handle, loop_->submit(std::move(choices)));
  return std::make_unique<OfflineBatch>(*loop_, std::move(handle), std::move(first_choice),
                                        std::move(with_logprobs));
}

}  // namespace nanoserve::python
