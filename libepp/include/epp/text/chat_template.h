// Chat templates: the prompt text a model server renders for an OpenAI chat request, from the
// model's `tokenizer_config.json` (`chat_template`) or `chat_template.jinja`, in process.
//
// Two layers:
//   - A Jinja interpreter for the subset chat templates use, with the environment transformers
//     renders them in (trim_blocks, lstrip_blocks, loop controls, tojson without ASCII escaping,
//     raise_exception, strftime_now): statements if / elif / else, for (with else, a filter
//     `if`, tuple targets, loop.*), set (names, tuples, namespace attributes, blocks), macro,
//     break, continue, raw, generation; Python's operators, string and dict methods, slices;
//     the common filters and tests. A construct outside the subset fails when the template is
//     loaded, naming it and its line.
//   - vLLM's OpenAI server rules for what the template sees (vllm/entrypoints/chat_utils.py and
//     vllm/renderers/hf.py): content parts joined with "\n" for templates that take string
//     content, kept as a list of parts for templates that loop over `message.content` (detected
//     as vLLM detects it), tool-call arguments parsed from their JSON strings, `tools` in the
//     shape vLLM's model_dump gives, developer messages turned into one leading system message
//     when the template does not mention the developer role, add_generation_prompt true unless
//     the request says otherwise, chat_template_kwargs passed only where the template reads them,
//     the tokenizer's special tokens as variables. Image, audio and video parts are an error: the
//     tokenizer is text-only, and vLLM refuses them for a text-only model too.
// A ChatTemplate is immutable after load and safe to share between threads.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

// How messages' content reaches the template (vLLM's --chat-template-content-format).
enum class ChatContentFormat { kString, kOpenAI };
std::string_view ChatContentFormatName(ChatContentFormat f);

struct ChatTemplateOptions {
  // Unset: detected from the template, as vLLM's "auto" does.
  bool content_format_set = false;
  ChatContentFormat content_format = ChatContentFormat::kString;
  // strftime_now's clock (seconds since the epoch; 0 = the current time), in local time as the
  // model server's Python does.
  std::time_t now = 0;
  // A render producing more is an error (a runaway template).
  size_t max_output_bytes = size_t{64} << 20;
};

class ChatTemplate {
 public:
  struct Impl;
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // A template's Jinja source; `special_tokens_json` is a JSON object of the tokenizer's
  // special tokens (bos_token, eos_token, ..., additional_special_tokens), "" for none.
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromSource(std::string_view source, std::string_view name,
                                                                        std::string_view special_tokens_json = "",
                                                                        const ChatTemplateOptions& options = {});
  // The text of a tokenizer_config.json: its chat_template (a string, or a list of named
  // templates: "default", and "tool_use" for requests with tools) and special tokens.
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromTokenizerConfig(std::string_view json, std::string_view source,
                                                                                const ChatTemplateOptions& options = {});
  // A directory (chat_template.jinja if present, else tokenizer_config.json's chat_template;
  // special tokens from tokenizer_config.json), a tokenizer.json (the same, beside it), a
  // tokenizer_config.json, or a .jinja file. kNotFound when there is no template.
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromPath(const std::string& path,
                                                                      const ChatTemplateOptions& options = {});

  // The template run with `variables_json` (a JSON object) as its top-level variables and
  // nothing else (no special tokens added): the plain Jinja render.
  absl::StatusOr<std::string> Render(std::string_view variables_json) const;
  // The variables vLLM gives the template for an OpenAI chat request body, as a JSON object
  // (messages normalised, tools, documents, add_generation_prompt, special tokens, the kwargs
  // the template reads). Errors name the body's JSON path.
  absl::StatusOr<std::string> RequestVariables(std::string_view body) const;
  // The prompt text of a chat request body: the variables above rendered (with
  // continue_final_message handled as transformers does). `add_special_tokens`, when given,
  // receives the body's add_special_tokens (vLLM's chat default: false), so the caller need not
  // parse the body again.
  absl::StatusOr<std::string> RenderRequest(std::string_view body, bool* add_special_tokens = nullptr) const;

  // The content format of the default template (a "tool_use" template may differ).
  ChatContentFormat content_format() const;
  const std::string& source() const;
  // Names the template reads that it does not set first (what chat_template_kwargs may set).
  const std::vector<std::string>& variables() const;

  explicit ChatTemplate(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
