#include "commands/tokenize.h"

#include <iostream>
#include <iterator>
#include <memory>

#include "epp/request.h"
#include "epp/tokenizer.h"
#include "nlohmann/json.hpp"
#include "output.h"

namespace eppctl {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string request;
  std::string text;
  std::string path;
  std::string add_special = "auto";
  std::string output = "text";
};

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return ReadFile(path);
}

int Run(const TokenizeOptions& o) {
  auto tokenizer = epp::Tokenizer::FromPath(o.tokenizer);
  if (!tokenizer.ok()) return PrintError(tokenizer.status());
  epp::TokenizedPrompt prompt;
  if (!o.text.empty()) {
    auto text = ReadInput(o.text);
    if (!text.ok()) return PrintError(text.status());
    prompt.text = *std::move(text);
    const bool special = o.add_special == "true";  // auto: a bare text gets none, as encode() does
    auto ids = (*tokenizer)->Encode(prompt.text, special);
    if (!ids.ok()) return PrintError(absl::InvalidArgumentError(o.text + ": " + std::string(ids.status().message())));
    prompt.ids = *std::move(ids);
  } else {
    auto doc = ReadInput(o.request);
    if (!doc.ok()) return PrintError(doc.status());
    std::string body;
    auto request = epp::ParseCaptureEnvelope(*doc, o.path, &body);
    if (!request.ok()) return PrintError(absl::InvalidArgumentError(o.request + ": " + std::string(request.status().message())));
    if (o.add_special != "auto")
      return PrintError(absl::InvalidArgumentError("--add-special-tokens applies to --text; a request follows the server's rule"));
    auto tokenized = epp::TokenizeRequestBody(**tokenizer, request->path, body);
    if (!tokenized.ok())
      return PrintError(absl::Status(tokenized.status().code(), o.request + ": " + std::string(tokenized.status().message())));
    prompt = *std::move(tokenized);
  }
  if (o.output == "json") {
    nlohmann::json j;
    j["text"] = prompt.text;
    j["ids"] = prompt.ids;
    j["tokens"] = prompt.ids.size();
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << prompt.ids.size() << " tokens\n";
    for (size_t i = 0; i < prompt.ids.size(); ++i) std::cout << (i ? " " : "") << prompt.ids[i];
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace

void SetupTokenizeCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of a text or a request, computed in process from a tokenizer.json");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json, or a directory holding one")->required();
  auto* request = cmd->add_option("-r,--request", o->request,
                                  "Request file: a capture envelope {path, headers, body} or a bare body ('-' = stdin)");
  auto* text = cmd->add_option("--text", o->text, "A text file to tokenize as it is ('-' = stdin)");
  request->excludes(text);
  text->excludes(request);
  cmd->add_option("--path", o->path, "Request path (overrides the capture's), e.g. /v1/completions");
  cmd->add_option("--add-special-tokens", o->add_special,
                  "For --text: true adds the post-processor's tokens (BOS); default false")
      ->check(CLI::IsMember({"auto", "true", "false"}));
  cmd->add_option("-o,--output", o->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->callback([o, &exit_code, request, text] {
    if (request->count() == 0 && text->count() == 0) {
      exit_code = PrintError(absl::InvalidArgumentError("give -r REQUEST or --text FILE"));
      return;
    }
    exit_code = Run(*o);
  });
}

}  // namespace eppctl
