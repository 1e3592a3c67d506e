// nanoserve tokenize [MODEL] TEXT
//
// Prints each token as `id -> 'piece'` (like llama-tokenize), or with
// --ids-only the ids separated by spaces. As in llama-tokenize, special tokens
// written in TEXT (<|im_start|> ...) are parsed by default (--no-special turns
// that off, so they are plain text) and BOS is added when the model asks for it
// (--no-bos turns that off).

#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "model/model_source.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::cli {

namespace {

struct TokenizeArgs {
  std::vector<std::string> positional;  // [MODEL] TEXT
  std::string model;
  bool ids_only = false;
  bool no_special = false;
  bool no_bos = false;
};

// Escapes control characters and quotes so that a piece prints on one line.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

int run_tokenize(const TokenizeArgs& a) {
  std::string model = a.model;
  std::string text;
  if (a.positional.size() == 2) {
    if (!model.empty()) {
      std::fprintf(stderr,
                   "nanoserve tokenize: give the model either with -m or as the first argument, not both\n");
      return 2;
    }
    model = a.positional[0];
    text = a.positional[1];
  } else if (a.positional.size() == 1) {
    text = a.positional[0];
  } else {
    std::fprintf(stderr, "nanoserve tokenize: expected [MODEL] TEXT\n");
    return 2;
  }
  if (model.empty()) model = default_model_path();
  auto tok = open_model_tokenizer(model);
  if (!tok.ok()) {
    std::fprintf(stderr, "nanoserve tokenize: %s: %s\n", model.c_str(), tok.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> ids = (*tok)->encode(text, /*add_special=*/!a.no_bos, /*parse_special=*/!a.no_special);
  if (a.ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  } else {
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, printable((*tok)->token_to_piece(id)).c_str());
    std::printf("%zu tokens\n", ids.size());
  }
  return 0;
}

}  // namespace

CommandRun add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids and pieces of TEXT");
  sub->add_option("args", args->positional, "[MODEL] TEXT")->expected(1, 2)->required();
  sub->add_option("-m,--model", args->model,
                  "GGUF file or Hugging Face folder (default: the bundled default model)");
  sub->add_flag("--ids-only", args->ids_only, "print only the ids, space-separated");
  sub->add_flag("--no-special", args->no_special, "treat special-token text (<|im_start|>) as plain text");
  sub->add_flag("--no-bos", args->no_bos, "never add BOS/EOS, even when the model asks for them");
  return [args] { return run_tokenize(*args); };
}

}  // namespace nanoserve::cli
