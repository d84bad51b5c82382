// TokenizeRequestBody (epp/text/tokenizer.h).
#include "absl/strings/str_cat.h"
#include "epp/text/chat_template.h"
#include "epp/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace epp {
namespace {

using Json = nlohmann::json;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A prompt given as token ids: taken as they are (the server does not tokenize them either).
absl::Status IdsFrom(const Json& list, const std::string& path, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 0xFFFFFFFFLL)
      return absl::InvalidArgumentError(absl::StrCat(path, "[", i, "]: expected a token id (an integer >= 0)"));
    out.push_back(static_cast<uint32_t>(v.get<int64_t>()));
  }
  return absl::OkStatus();
}

// The body's add_special_tokens, or the API's default.
absl::StatusOr<bool> AddSpecial(const Json& j, bool dflt) {
  auto it = j.find("add_special_tokens");
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return absl::InvalidArgumentError("$.add_special_tokens: expected true or false");
  return it->get<bool>();
}

// The ids vLLM would compute for a request body, with the plain or the prefix-reusing tokenizer.
// The query string and trailing slashes do not change which API a path names.
template <typename T>
absl::StatusOr<TokenizedPrompt> Tokenize(const T& tokenizer, std::string_view path, std::string_view body, const ChatTemplate* chat) {
  std::string_view p = path.substr(0, path.find('?'));
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  if (EndsWith(p, "chat/completions")) {
    if (chat == nullptr)
      return absl::FailedPreconditionError("a chat request needs the model's chat template (chat_template.jinja or "
                                           "tokenizer_config.json beside tokenizer.json)");
    // Chat: the rendered template is the text; special tokens are not added unless the body asks
    // (vLLM's chat default), since the template writes its own.
    TokenizedPrompt out;
    bool special = false;
    EPP_ASSIGN_OR_RETURN(out.text, chat->RenderRequest(body, &special));
    auto ids = tokenizer.Encode(out.text, special);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("the rendered chat: ", ids.status().message()));
    out.ids = *std::move(ids);
    return out;
  }
  if (!EndsWith(p, "completions"))
    return absl::InvalidArgumentError(absl::StrCat("path '", std::string(path), "': only /v1/completions and /v1/chat/completions prompts are tokenized"));
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("$: the body is not a JSON object");
  if (!j.contains("prompt")) return absl::InvalidArgumentError("$.prompt: missing");
  const Json& prompt = j["prompt"];
  // Completions: the prompt shapes vLLM accepts for one prompt (a string, a one-string list, ids,
  // a one-list list of ids); special tokens added by default, as vLLM's completions API does.
  EPP_ASSIGN_OR_RETURN(const bool special, AddSpecial(j, true));
  TokenizedPrompt out;
  if (prompt.is_string()) {
    out.text = prompt.get<std::string>();
    auto ids = tokenizer.Encode(out.text, special);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("$.prompt: ", ids.status().message()));
    out.ids = *std::move(ids);
    return out;
  }
  if (prompt.is_array()) {
    if (prompt.size() == 1 && prompt[0].is_string()) {
      out.text = prompt[0].get<std::string>();
      auto ids = tokenizer.Encode(out.text, special);
      if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("$.prompt[0]: ", ids.status().message()));
      out.ids = *std::move(ids);
      return out;
    }
    out.ids_given = true;
    if (prompt.size() == 1 && prompt[0].is_array()) {
      EPP_RETURN_IF_ERROR(IdsFrom(prompt[0], "$.prompt[0]", out.ids));
      return out;
    }
    if (prompt.empty() || prompt[0].is_number()) {
      EPP_RETURN_IF_ERROR(IdsFrom(prompt, "$.prompt", out.ids));
      return out;
    }
    return absl::InvalidArgumentError("$.prompt: a batch of several prompts (one request goes to one server)");
  }
  return absl::InvalidArgumentError("$.prompt: expected a string or token ids");
}

}  // namespace

absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const Tokenizer& tokenizer, std::string_view path, std::string_view body,
                                                    const ChatTemplate* chat) {
  return Tokenize(tokenizer, path, body, chat);
}

absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const PrefixTokenizer& tokenizer, std::string_view path,
                                                    std::string_view body, const ChatTemplate* chat) {
  return Tokenize(tokenizer, path, body, chat);
}

}  // namespace epp
