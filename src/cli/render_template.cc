// nanoserve render-template [--template FILE|TEXT] [-m MODEL] [CONTEXT.json]
//
// Renders a chat template with a JSON object of variables (messages, tools,
// add_generation_prompt, bos_token, ...; every key becomes a variable) and
// prints the text. The template is --template (a file, or the template text
// itself), else the model's. With --jsonl, reads one {"template": str,
// "context": object[, "now": seconds since the epoch]} per stdin line and
// answers each with {"text": str} or {"error": str} on one line: the
// conformance suites drive it this way ("now" fixes strftime_now's time, in
// UTC; a line without "template" renders the line before's, compiled once).

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/model_source.h"
#include "template/chat_template.h"
#include "template/jinja_render.h"

namespace nanoserve::cli {

namespace {

using ojson = nlohmann::ordered_json;

struct RenderArgs {
  std::string template_arg;
  std::string model;
  std::string context_path;
  bool jsonl = false;
};

StatusOr<std::string> render(const jinja::Template& t, const ojson& context,
                             std::optional<std::time_t> now = std::nullopt) {
  if (!context.is_object()) return invalid_argument("the context must be a JSON object");
  jinja::Variables vars;
  for (const auto& [k, v] : context.items()) {
    jinja::Value x;
    if (!jinja::from_json(v, /*caller=*/true, x)) return invalid_argument(k + ": nested too deeply");
    vars.emplace_back(k, std::move(x));
  }
  auto out = t.render(vars, {}, now);
  if (!out.ok()) return out.status();
  return out->text;
}

StatusOr<std::string> render(const std::string& source, const ojson& context) {
  auto t = jinja::Template::compile(source);
  if (!t.ok()) return t.status();
  return render(*t, context);
}

int run_jsonl() {
  std::string line;
  std::string last_source;
  std::optional<StatusOr<jinja::Template>> last;  // the compiled last_source
  while (std::getline(std::cin, line)) {
    ojson reply;
    try {
      ojson req = ojson::parse(line);
      if (req.contains("template") || !last) {
        std::string source = req.at("template").get<std::string>();
        if (!last || source != last_source) {
          last.emplace(jinja::Template::compile(source));
          last_source = std::move(source);
        }
      }
      std::optional<std::time_t> now;
      if (req.contains("now")) now = req.at("now").get<int64_t>();
      StatusOr<std::string> out = last->ok() ? render(**last, req.value("context", ojson::object()), now)
                                             : StatusOr<std::string>(last->status());
      if (out.ok()) {
        reply["text"] = *out;
      } else {
        reply["error"] = out.status().message();
      }
    } catch (const std::exception& e) {
      reply["error"] = std::string("bad request line: ") + e.what();
    }
    std::cout << reply.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}

int run_render(const RenderArgs& a) {
  if (a.jsonl) return run_jsonl();
  ojson context = ojson::object();
  if (!a.context_path.empty()) {
    std::ifstream f(a.context_path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "nanoserve render-template: cannot open %s\n", a.context_path.c_str());
      return 1;
    }
    context = ojson::parse(f, nullptr, /*allow_exceptions=*/false);
    if (context.is_discarded()) {
      std::fprintf(stderr, "nanoserve render-template: %s is not valid JSON\n", a.context_path.c_str());
      return 1;
    }
  }
  std::string source;
  if (!a.template_arg.empty()) {
    std::ifstream f(a.template_arg, std::ios::binary);
    if (f) {
      std::ostringstream ss;
      ss << f.rdbuf();
      source = ss.str();
    } else {
      source = a.template_arg;
    }
  } else {
    auto tok = open_model_tokenizer(a.model.empty() ? default_model_path() : a.model);
    if (!tok.ok()) {
      std::fprintf(stderr, "nanoserve render-template: %s\n", tok.status().to_string().c_str());
      return 1;
    }
    source = (*tok)->chat_template();
    ChatSpecialTokens sp = ChatSpecialTokens::of(**tok);
    if (!sp.bos_token.empty() && !context.contains("bos_token")) context["bos_token"] = sp.bos_token;
    if (!sp.eos_token.empty() && !context.contains("eos_token")) context["eos_token"] = sp.eos_token;
  }
  auto out = render(source, context);
  if (!out.ok()) {
    std::fprintf(stderr, "nanoserve render-template: %s\n", out.status().message().c_str());
    return 1;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace

CommandRun add_render_template_command(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  CLI::App* sub = app.add_subcommand("render-template", "Render a chat template with a JSON context");
  sub->add_option("context", args->context_path,
                  "JSON object of variables (messages, add_generation_prompt, ...)");
  sub->add_option("--template", args->template_arg, "Template file, or the template text itself");
  sub->add_option("-m,--model", args->model, "Model whose template to render (default: the bundled model)");
  sub->add_flag("--jsonl", args->jsonl, "Read {template, context} lines from stdin, answer each on one line");
  return [args] { return run_render(*args); };
}

}  // namespace nanoserve::cli
