#include "commands/tokenize.h"

#include <iostream>
#include <iterator>
#include <memory>
#include <vector>

#include "epp/text/chat_template.h"
#include "epp/request.h"
#include "epp/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "output.h"

namespace eppctl {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::vector<std::string> requests;
  std::string text;
  std::string path;
  std::string add_special = "auto";
  std::string output = "text";
  std::string chat_template;           // default: beside the tokenizer
  std::string content_format = "auto";
  bool variables = false;              // print the chat template's variables instead
  int64_t now = 0;
};

// The chat template: --chat-template, else the one beside the tokenizer (none is fine until a
// chat request needs it).
absl::StatusOr<std::shared_ptr<const epp::ChatTemplate>> LoadTemplate(const TokenizeOptions& o) {
  epp::ChatTemplateOptions co;
  if (o.content_format != "auto") {
    co.content_format_set = true;
    co.content_format = o.content_format == "openai" ? epp::ChatContentFormat::kOpenAI : epp::ChatContentFormat::kString;
  }
  co.now = static_cast<std::time_t>(o.now);
  auto t = epp::ChatTemplate::FromPath(o.chat_template.empty() ? o.tokenizer : o.chat_template, co);
  if (!t.ok() && t.status().code() == absl::StatusCode::kNotFound && o.chat_template.empty())
    return std::shared_ptr<const epp::ChatTemplate>();
  return t;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return ReadFile(path);
}

void Print(const TokenizeOptions& o, const epp::TokenizedPrompt& prompt) {
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
}

int Run(const TokenizeOptions& o) {
  auto tokenizer = epp::Tokenizer::FromPath(o.tokenizer);
  if (!tokenizer.ok()) return PrintError(tokenizer.status());
  if (!o.text.empty()) {
    epp::TokenizedPrompt prompt;
    auto text = ReadInput(o.text);
    if (!text.ok()) return PrintError(text.status());
    prompt.text = *std::move(text);
    const bool special = o.add_special == "true";  // auto: a bare text gets none, as encode() does
    auto ids = (*tokenizer)->Encode(prompt.text, special);
    if (!ids.ok()) return PrintError(absl::InvalidArgumentError(o.text + ": " + std::string(ids.status().message())));
    prompt.ids = *std::move(ids);
    Print(o, prompt);
    return kExitOk;
  }
  if (o.add_special != "auto")
    return PrintError(absl::InvalidArgumentError("--add-special-tokens applies to --text; a request follows the server's rule"));
  auto chat = LoadTemplate(o);
  if (!chat.ok()) return PrintError(chat.status());
  // Several requests share one load of the tokenizer and template: one output each, in order.
  for (const std::string& file : o.requests) {
    auto doc = ReadInput(file);
    if (!doc.ok()) return PrintError(doc.status());
    std::string body;
    auto request = epp::ParseCaptureEnvelope(*doc, o.path, &body);
    if (!request.ok()) return PrintError(absl::InvalidArgumentError(file + ": " + std::string(request.status().message())));
    if (o.variables) {
      if (!*chat) return PrintError(absl::NotFoundError("no chat template beside " + o.tokenizer + " (give --chat-template)"));
      auto vars = (*chat)->RequestVariables(body);
      if (!vars.ok()) return PrintError(absl::Status(vars.status().code(), file + ": " + std::string(vars.status().message())));
      std::cout << nlohmann::ordered_json::parse(*vars).dump(o.requests.size() > 1 ? -1 : 2, ' ', false,
                                                           nlohmann::ordered_json::error_handler_t::replace)
                << "\n";
      continue;
    }
    auto tokenized = epp::TokenizeRequestBody(**tokenizer, request->path, body, chat->get());
    if (!tokenized.ok())
      return PrintError(absl::Status(tokenized.status().code(), file + ": " + std::string(tokenized.status().message())));
    Print(o, *tokenized);
  }
  return kExitOk;
}

}  // namespace

void SetupTokenizeCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of a text or a request, computed in process from a tokenizer.json");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json, or a directory holding one")->required();
  auto* request = cmd->add_option("-r,--request", o->requests,
                                  "Request file: a capture envelope {path, headers, body} or a bare body ('-' = stdin); "
                                  "repeat for several (one output each: a JSON line with -o json)");
  auto* text = cmd->add_option("--text", o->text, "A text file to tokenize as it is ('-' = stdin)");
  request->excludes(text);
  text->excludes(request);
  cmd->add_option("--path", o->path,
                  "Request path (overrides the capture's), e.g. /v1/completions. Default: the capture's, else the one "
                  "the body implies (messages: chat, input: responses, prompt: completions)");
  cmd->add_option("--add-special-tokens", o->add_special,
                  "For --text only: true adds the post-processor's tokens (BOS); false, or auto, adds none (as "
                  "a tokenizer's encode() of a bare text). A request follows the server's own rule")
      ->check(CLI::IsMember({"auto", "true", "false"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "text or json (json adds the prompt text: for a chat, the rendered template)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--chat-template", o->chat_template,
                  "Chat template for chat requests: a .jinja file, a tokenizer_config.json or a model directory (default: "
                  "the one beside the tokenizer)");
  cmd->add_option("--content-format", o->content_format,
                  "How message content reaches the template (vLLM's --chat-template-content-format): auto, string, openai")
      ->check(CLI::IsMember({"auto", "string", "openai"}));
  cmd->add_flag("--variables", o->variables, "For a chat request: print the variables the template sees (vLLM's rules) and exit");
  cmd->add_option("--now", o->now, "The clock strftime_now reads, in seconds since the epoch (default: now)");
  cmd->callback([o, &exit_code, request, text] {
    if (request->count() == 0 && text->count() == 0) {
      exit_code = PrintError(absl::InvalidArgumentError("give -r REQUEST or --text FILE"));
      return;
    }
    exit_code = Run(*o);
  });
}

}  // namespace eppctl
