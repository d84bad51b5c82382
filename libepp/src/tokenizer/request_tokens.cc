// TokenizeRequestBody (epp/tokenizer.h).
#include "absl/strings/str_cat.h"
#include "epp/tokenizer.h"
#include "nlohmann/json.hpp"

namespace epp {
namespace {

using Json = nlohmann::json;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

absl::Status IdsFrom(const Json& list, const std::string& path, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 0xFFFFFFFFLL)
      return absl::InvalidArgumentError(absl::StrCat(path, "[", i, "]: expected a token id (an integer >= 0)"));
    out.push_back(static_cast<uint32_t>(v.get<int64_t>()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<TokenizedPrompt> Tokenize(const T& tokenizer, std::string_view path, std::string_view body) {
  std::string_view p = path.substr(0, path.find('?'));
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  if (EndsWith(p, "chat/completions"))
    return absl::UnimplementedError("chat requests need the model's chat template, which epp does not render yet");
  if (!EndsWith(p, "completions"))
    return absl::InvalidArgumentError(absl::StrCat("path '", std::string(path), "': only /v1/completions prompts are tokenized"));
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("$: the body is not a JSON object");
  if (!j.contains("prompt")) return absl::InvalidArgumentError("$.prompt: missing");
  const Json& prompt = j["prompt"];
  TokenizedPrompt out;
  if (prompt.is_string()) {
    out.text = prompt.get<std::string>();
    auto ids = tokenizer.Encode(out.text, /*add_special_tokens=*/true);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("$.prompt: ", ids.status().message()));
    out.ids = *std::move(ids);
    return out;
  }
  if (prompt.is_array()) {
    if (prompt.size() == 1 && prompt[0].is_string()) {
      out.text = prompt[0].get<std::string>();
      auto ids = tokenizer.Encode(out.text, true);
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

absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const Tokenizer& tokenizer, std::string_view path, std::string_view body) {
  return Tokenize(tokenizer, path, body);
}

absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const PrefixTokenizer& tokenizer, std::string_view path,
                                                    std::string_view body) {
  return Tokenize(tokenizer, path, body);
}

}  // namespace epp
