// Token-in generate APIs: vLLM's /inference/v1/generate (vllmhttp-parser) and SGLang's native
// /generate (sglanghttp-parser). Token ids render as a completions token-id prompt does ("1 22
// 333", docs/scheduling.md), so the same ids reach the same prefix blocks whichever API carries
// them, and a single tokenized prompt's ids go to token-producer as they are.
//
// Where epp reads more than llm-d: llm-d's sglanghttp-parser accepts only one pre-tokenized
// prompt (input_ids as one array). SGLang itself also takes `text` and batches (arrays of
// strings, arrays of id arrays); epp reads those too, since refusing a body SGLang serves would
// turn a routing helper into an outage. A batch renders its prompts joined with newlines and
// hands token-producer no ids (its prompts are several).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epp/prefix_cache.h"
#include "request/request_apis.h"
#include "request/request_impl.h"

namespace epp::internal {

using namespace openai;  // NOLINT: the JSON readers of request_impl.h

absl::Status AppendTokenIds(const simdjson::dom::array& list, const JsonPath& at, std::string& out,
                            std::vector<uint32_t>* ids, int64_t& count) {
  size_t i = 0;
  for (element item : list) {
    uint64_t id = 0;
    bool ok = false;
    if (item.type() == element_type::UINT64) {
      ok = item.get_uint64().get(id) == simdjson::SUCCESS;
    } else if (item.type() == element_type::INT64) {
      int64_t v = 0;
      ok = item.get_int64().get(v) == simdjson::SUCCESS && v >= 0;
      id = static_cast<uint64_t>(v);
    }
    if (!ok || id > UINT32_MAX) return TypeError(at.Index(i), "a token id (an integer in [0, 2^32))", item);
    if (i > 0) out += ' ';
    AppendNumber(id, out);
    if (ids != nullptr) ids->push_back(static_cast<uint32_t>(id));
    ++i;
  }
  count += static_cast<int64_t>(i);
  return absl::OkStatus();
}

namespace {

// `stream` (a boolean) and a cache salt member (a string), null meaning absent.
absl::Status ReadStreamAndSalt(const simdjson::dom::object& obj, std::string_view salt_key, const JsonPath& at,
                               InferenceRequest& req) {
  if (std::optional<element> s = Member(obj, "stream"); s.has_value() && !IsNull(*s)) {
    bool b = false;
    if (s->get_bool().get(b) != simdjson::SUCCESS) return TypeError(at.Key("stream"), "a boolean", *s);
    req.stream = b;
  }
  absl::Status status;
  if (std::optional<std::string_view> salt = OptionalString(obj, salt_key, at, status)) req.cache_salt.assign(*salt);
  return status;
}

}  // namespace

absl::Status ParseVllmGenerateBody(const element& root, const JsonPath& at, InferenceRequest& req) {
  std::optional<simdjson::dom::object> obj = AsObject(root);
  if (!obj.has_value()) return TypeError(at, "a JSON object", root);
  absl::Status status;
  // vLLM's GenerateRequest has an optional model (the server's own when absent).
  if (std::optional<std::string_view> model = OptionalString(*obj, "model", at, status)) req.model.assign(*model);
  EPP_RETURN_IF_ERROR(status);
  EPP_RETURN_IF_ERROR(ReadStreamAndSalt(*obj, "cache_salt", at, req));
  const JsonPath ids_path = at.Key("token_ids");
  std::optional<element> ids = Member(*obj, "token_ids");
  if (!ids.has_value() || IsNull(*ids)) return Missing(ids_path);
  std::optional<simdjson::dom::array> list = AsArray(*ids);
  if (!list.has_value()) return TypeError(ids_path, "an array of token ids", *ids);
  if (list->begin() == list->end()) return Empty(ids_path);
  int64_t count = 0;
  EPP_RETURN_IF_ERROR(AppendTokenIds(*list, ids_path, req.prompt, &req.token_ids, count));
  req.prompt_tokens = count;
  // Multimodal features (hashes per modality): one media part per hash.
  if (std::optional<element> f = Member(*obj, "features"); f.has_value()) {
    if (std::optional<simdjson::dom::object> features = AsObject(*f)) {
      if (std::optional<element> h = Member(*features, "mm_hashes")) {
        if (std::optional<simdjson::dom::object> by_modality = AsObject(*h)) {
          for (simdjson::dom::key_value_pair kv : *by_modality)
            if (std::optional<simdjson::dom::array> a = AsArray(kv.value)) req.media_parts += static_cast<int>(a->size());
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSglangGenerateBody(const element& root, const JsonPath& at, InferenceRequest& req) {
  std::optional<simdjson::dom::object> obj = AsObject(root);
  if (!obj.has_value()) return TypeError(at, "a JSON object", root);
  EPP_RETURN_IF_ERROR(ReadStreamAndSalt(*obj, "extra_key", at, req));
  absl::Status status;
  // SGLang's body names no model; some front ends add one, and it is kept when they do.
  if (std::optional<std::string_view> model = OptionalString(*obj, "model", at, status)) req.model.assign(*model);
  EPP_RETURN_IF_ERROR(status);
  std::optional<element> text = Member(*obj, "text");
  std::optional<element> input_ids = Member(*obj, "input_ids");
  if (text.has_value() && IsNull(*text)) text.reset();
  if (input_ids.has_value() && IsNull(*input_ids)) input_ids.reset();
  if (text.has_value() && input_ids.has_value()) return ErrorAt(at.Key("text"), "give either text or input_ids, not both");
  if (!text.has_value() && !input_ids.has_value()) return ErrorAt(at.Key("input_ids"), "missing (give input_ids or text)");
  std::string& out = req.prompt;
  if (text.has_value()) {
    const JsonPath text_path = at.Key("text");
    if (std::optional<std::string_view> s = AsString(*text)) {
      if (s->empty()) return Empty(text_path);
      out.append(*s);
    } else {
      std::optional<simdjson::dom::array> list = AsArray(*text);
      if (!list.has_value()) return TypeError(text_path, "a string or an array of strings", *text);
      if (list->begin() == list->end()) return Empty(text_path);
      size_t i = 0;
      for (element item : *list) {
        std::optional<std::string_view> s = AsString(item);
        if (!s.has_value()) return TypeError(text_path.Index(i), "a string", item);
        if (i > 0) out += '\n';
        out.append(*s);
        ++i;
      }
    }
    req.prompt_tokens = ApproxTokens(out.size());
  } else {
    const JsonPath ids_path = at.Key("input_ids");
    std::optional<simdjson::dom::array> list = AsArray(*input_ids);
    if (!list.has_value()) return TypeError(ids_path, "an array of token ids or of token-id arrays", *input_ids);
    if (list->begin() == list->end()) return Empty(ids_path);
    int64_t count = 0;
    if ((*list->begin()).type() == element_type::ARRAY) {  // a batch
      size_t i = 0;
      for (element item : *list) {
        const JsonPath item_path = ids_path.Index(i);
        std::optional<simdjson::dom::array> ids = AsArray(item);
        if (!ids.has_value()) return TypeError(item_path, "an array of token ids", item);
        if (ids->begin() == ids->end()) return Empty(item_path);
        if (i > 0) out += '\n';
        EPP_RETURN_IF_ERROR(AppendTokenIds(*ids, item_path, out, nullptr, count));
        ++i;
      }
    } else {
      EPP_RETURN_IF_ERROR(AppendTokenIds(*list, ids_path, out, &req.token_ids, count));
    }
    req.prompt_tokens = count;
  }
  // image_data: one image (a string) or a list of them (per prompt of a batch, possibly nested).
  if (std::optional<element> images = Member(*obj, "image_data"); images.has_value() && !IsNull(*images)) {
    if (AsString(*images).has_value()) {
      req.media_parts = 1;
    } else if (std::optional<simdjson::dom::array> list = AsArray(*images)) {
      for (element item : *list) {
        if (AsString(item).has_value()) ++req.media_parts;
        else if (std::optional<simdjson::dom::array> inner = AsArray(item)) req.media_parts += static_cast<int>(inner->size());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace epp::internal
