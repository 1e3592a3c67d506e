// _nanoserve: the compiled half of the Python package (python/nanoserve). The
// Python half (llm.py) turns vLLM's argument shapes into the server's request
// bodies and the results into vLLM's RequestOutput; this half owns the engine.
//
// run() hands every request to the engine at once and waits with the GIL
// released, taking it back every 50 ms to report progress and to notice
// Ctrl-C: then it aborts the batch, waits for the engine to let go of it
// (one step), and raises KeyboardInterrupt.

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "python/offline_llm.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace nanoserve::python {
namespace {

constexpr std::chrono::milliseconds kPollInterval{50};

[[noreturn]] void raise_status(const Status& st) {
  const StatusCode code = st.code();
  if (code == StatusCode::kInvalidArgument) throw nb::value_error(st.message().c_str());
  if (code == StatusCode::kNotFound) {
    PyErr_SetString(PyExc_FileNotFoundError, st.message().c_str());
    throw nb::python_error();
  }
  throw std::runtime_error(st.to_string());
}

std::unique_ptr<OfflineLlm> make_llm(const std::string& model, const std::string& device,
                                     int64_t max_model_len, int32_t max_num_seqs, int64_t kv_cache_memory,
                                     uint64_t seed, int32_t threads, const std::string& chat_template) {
  LlmOptions options{model,           device, max_model_len, max_num_seqs,
                     kv_cache_memory, seed,   threads,       chat_template};
  std::optional<StatusOr<std::unique_ptr<OfflineLlm>>> llm;
  {
    nb::gil_scoped_release release;  // loading takes seconds; other Python threads go on
    llm.emplace(OfflineLlm::create(options));
  }
  if (!llm->ok()) raise_status(llm->status());
  return std::move(**llm);
}

nb::dict choice_dict(const OfflineLlm& llm, const CompletionChoice& c) {
  nb::dict d;
  d["token_ids"] = c.token_ids;
  d["text"] = c.text;
  d["finish_reason"] = std::string(finish_reason_name(c.finish));
  d["stop_reason"] = c.stop_string;
  d["error"] = c.error;
  if (c.logprobs.size() == c.token_ids.size() && !c.token_ids.empty()) {
    d["cumulative_logprob"] = c.cumulative_logprob;
    nb::list steps;
    for (size_t i = 0; i < c.token_ids.size(); ++i) {
      // (token, logprob, piece bytes) for the chosen token, then its alternatives.
      nb::list step;
      const std::string chosen = llm.codec().token_text(c.token_ids[i]);
      step.append(nb::make_tuple(c.token_ids[i], c.logprobs[i], nb::bytes(chosen.data(), chosen.size())));
      for (const TokenLogprob& t : c.top_logprobs[i]) {
        const std::string piece = llm.codec().token_text(t.token);
        step.append(nb::make_tuple(t.token, t.logprob, nb::bytes(piece.data(), piece.size())));
      }
      steps.append(step);
    }
    d["logprobs"] = steps;
  }
  return d;
}

// endpoint: "completion" or "chat"; bodies: one request body (JSON) per prompt. Returns
// ("error", index, param, message) when a body is refused, else ("ok", [(prompt_ids, [choice])]).
nb::tuple run(OfflineLlm& llm, const std::string& endpoint, const std::vector<std::string>& bodies,
              nb::object progress, bool add_generation_prompt) {
  const server::Endpoint ep = endpoint == "chat" ? server::Endpoint::kChat : server::Endpoint::kCompletion;
  std::vector<PreparedRequest> prepared;
  prepared.reserve(bodies.size());
  {
    nb::gil_scoped_release release;  // encoding and schema compiling run outside the GIL
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto p = llm.prepare(ep, bodies[i], add_generation_prompt);
      if (auto* e = std::get_if<server::ApiError>(&p)) {
        nb::gil_scoped_acquire acquire;
        return nb::make_tuple("error", i, e->param, e->message);
      }
      prepared.push_back(std::move(std::get<PreparedRequest>(p)));
    }
  }
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(prepared.size());
  for (const PreparedRequest& p : prepared) prompts.push_back(p.prompt);
  StatusOr<std::unique_ptr<OfflineBatch>> submitted = llm.submit(std::move(prepared));
  if (!submitted.ok()) raise_status(submitted.status());
  OfflineBatch& batch = **submitted;

  size_t reported = static_cast<size_t>(-1);
  while (!batch.done()) {
    {
      nb::gil_scoped_release release;
      batch.poll(kPollInterval);
    }
    if (PyErr_CheckSignals() != 0) {
      nb::python_error interrupted;  // takes the pending KeyboardInterrupt
      batch.abort();
      {
        nb::gil_scoped_release release;
        while (!batch.done()) batch.poll(kPollInterval);
      }
      throw interrupted;
    }
    if (!progress.is_none() && batch.num_finished() != reported) {
      reported = batch.num_finished();
      progress(batch.num_finished(), batch.num_requests(), batch.num_output_tokens());
    }
  }
  nb::list results;
  for (size_t i = 0; i < batch.num_requests(); ++i) {
    nb::list choices;
    for (size_t c = batch.first_choice(i); c < batch.first_choice(i + 1); ++c)
      choices.append(choice_dict(llm, batch.outputs()[c]));
    results.append(nb::make_tuple(prompts[i], choices));
  }
  return nb::make_tuple("ok", results);
}

// SamplingParams' checks that need no model: the fields of a completions body (without its
// prompt) read by the server's parser. None, or (param, message) of the first refused field.
nb::object check_request(const std::string& fields) {
  nlohmann::json body = nlohmann::json::parse(fields, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return nb::make_tuple("", "not a JSON object");
  body["prompt"] = nlohmann::json::array({0});
  server::ProtocolLimits limits;
  limits.max_model_len = std::numeric_limits<int32_t>::max();
  limits.max_num_seqs = std::numeric_limits<int32_t>::max();
  limits.vocab_size = std::numeric_limits<int32_t>::max();
  auto parsed = server::parse_completion_request(body.dump(), limits);
  if (auto* e = std::get_if<server::ApiError>(&parsed)) return nb::make_tuple(e->param, e->message);
  const auto& r = std::get<server::GenerateRequest>(parsed);
  if (!r.unknown_fields.empty()) return nb::make_tuple(r.unknown_fields.front(), "not a sampling field");
  return nb::none();
}

// What Python holds: the engine behind a pointer (OfflineLlm itself cannot move).
struct PyEngine {
  std::unique_ptr<OfflineLlm> llm;
};

}  // namespace
}  // namespace nanoserve::python

NB_MODULE(_nanoserve, m) {
  using nanoserve::python::PyEngine;
  m.doc() = "nanoserve's engine, for the nanoserve package (use nanoserve.LLM)";
  nb::class_<PyEngine>(m, "Engine")
      .def(
          "__init__",
          [](PyEngine* self, const std::string& model, const std::string& device, int64_t max_model_len,
             int32_t max_num_seqs, int64_t kv_cache_memory, uint64_t seed, int32_t threads,
             const std::string& chat_template) {
            new (self) PyEngine{nanoserve::python::make_llm(model, device, max_model_len, max_num_seqs,
                                                            kv_cache_memory, seed, threads, chat_template)};
          },
          "model"_a, "device"_a, "max_model_len"_a, "max_num_seqs"_a, "kv_cache_memory"_a, "seed"_a,
          "threads"_a, "chat_template"_a)
      .def_prop_ro("model_name", [](const PyEngine& e) { return e.llm->model_name(); })
      .def_prop_ro("max_model_len", [](const PyEngine& e) { return e.llm->max_model_len(); })
      .def_prop_ro("device", [](const PyEngine& e) { return e.llm->device_name(); })
      .def_prop_ro("capacity_line", [](const PyEngine& e) { return e.llm->capacity_line(); })
      .def_prop_ro("chat_template", [](const PyEngine& e) { return e.llm->codec().chat_template_source(); })
      .def(
          "encode",
          [](const PyEngine& e, const std::string& text, bool add_special_tokens) {
            auto ids = e.llm->codec().encode(text, add_special_tokens);
            if (!ids.ok()) nanoserve::python::raise_status(ids.status());
            return *ids;
          },
          "text"_a, "add_special_tokens"_a = true)
      .def("decode",
           [](const PyEngine& e, const std::vector<int32_t>& ids) { return e.llm->codec().decode(ids); })
      .def(
          "run",
          [](PyEngine& e, const std::string& endpoint, const std::vector<std::string>& bodies,
             nb::object progress, bool add_generation_prompt) {
            return nanoserve::python::run(*e.llm, endpoint, bodies, progress, add_generation_prompt);
          },
          "endpoint"_a, "bodies"_a, "progress"_a.none(), "add_generation_prompt"_a = true);
  m.def("check_request", &nanoserve::python::check_request, "fields"_a);
}
