// A chat template (semi-trusted: from a model's files) and a chat request body (untrusted)
// through the Jinja interpreter and vLLM's request rules.
// Input: TEMPLATE, then optionally "\n@@body\n" and a request body.
// Invariants: loading either succeeds or fails with kInvalidArgument naming "line N"; a loaded
// template renders the body (or a fixed one) to text or to an error (kInvalidArgument or
// kNotFound) without crashing, and the output stays under the limit; a fixed, known-good
// template renders every body that passes vLLM's rules.
#include <string>
#include <string_view>

#include "epp/text/chat_template.h"
#include "fuzz_util.h"

namespace {

constexpr std::string_view kFixed =
    "{%- for m in messages %}{{- '<|' + m.role + '|>\\n' }}{%- if m.content is string %}{{- m.content | trim }}"
    "{%- else %}{%- for p in m.content %}{{- p.text }}{%- endfor %}{%- endif %}"
    "{%- if m.tool_calls %}{%- for c in m.tool_calls %}{{- c.function.name ~ (c.function.arguments | tojson) }}{%- endfor %}"
    "{%- endif %}{{- '\\n' }}{%- endfor %}{%- if tools %}{{- tools | tojson(indent=2) }}{%- endif %}"
    "{%- if add_generation_prompt %}<|assistant|>{%- endif %}";

bool HasLine(const absl::Status& s) { return s.message().find(" line ") != absl::string_view::npos; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto fixed = *epp::ChatTemplate::FromSource(kFixed, "fixed");
  const auto [source, body_part] = epp::fuzz::SplitOnce(epp::fuzz::Text(data, size), "\n@@body\n");
  const std::string body = body_part ? std::string(*body_part) : R"({"messages": [{"role": "user", "content": "hi"}]})";
  absl::StatusOr<std::shared_ptr<const epp::ChatTemplate>> t = epp::ChatTemplate::FromSource(source, "fuzz");
  if (!t.ok()) {
    EPP_FUZZ_CHECK(t.status().code() == absl::StatusCode::kInvalidArgument && HasLine(t.status()), t.status().ToString());
  } else {
    absl::StatusOr<std::string> out = (*t)->RenderRequest(body);
    if (out.ok()) EPP_FUZZ_CHECK(out->size() <= (size_t{64} << 20) + (size_t{1} << 20), "output within the limit");
    else EPP_FUZZ_CHECK(out.status().code() == absl::StatusCode::kInvalidArgument, out.status().ToString());
  }
  absl::StatusOr<std::string> vars = fixed->RequestVariables(body);
  absl::StatusOr<std::string> text = fixed->RenderRequest(body);
  EPP_FUZZ_CHECK(vars.ok() == text.ok() || (!text.ok() && HasLine(text.status())), text.status().ToString());
  return 0;
}
