// A model server's render / tokenize answers (token-producer's vllm backend) through
// ParseTokenizeResponse, the input read as each of the three answer shapes; and the words
// tokenizer over the same bytes.
// Invariants: a failure is kInvalidArgument with a message; an accepted answer is valid JSON to
// nlohmann too (an independent reader) and its ids are exactly the integers under the shape's
// key; WordTokenIds gives at most one id per byte and at least one for non-empty input, each in
// [256, 100256).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/text/tokenize.h"
#include "fuzz_util.h"

namespace {

void CheckShape(epp::TokenizeEndpoint ep, std::string_view text) {
  const absl::StatusOr<std::vector<uint32_t>> ids = epp::ParseTokenizeResponse(ep, text);
  if (!ids.ok()) {
    EPP_FUZZ_CHECK(ids.status().code() == absl::StatusCode::kInvalidArgument, ids.status().ToString());
    EPP_FUZZ_CHECK(!ids.status().message().empty(), "an error without a message");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  EPP_FUZZ_CHECK(!j.is_discarded(), "accepted, but not JSON to nlohmann");
  const nlohmann::json* list = nullptr;
  if (ep == epp::TokenizeEndpoint::kCompletionsRender) {
    EPP_FUZZ_CHECK(j.is_array() && !j.empty() && j[0].is_object(), "completions render shape");
    list = &j[0]["token_ids"];
  } else {
    EPP_FUZZ_CHECK(j.is_object(), "object shape");
    // simdjson and nlohmann keep different duplicate keys; only check a key that appears once.
    const char* key = ep == epp::TokenizeEndpoint::kTokenize ? "tokens" : "token_ids";
    if (text.find(key) != text.rfind(key)) return;
    list = &j[key];
  }
  if (ep == epp::TokenizeEndpoint::kCompletionsRender && text.find("token_ids") != text.rfind("token_ids")) return;
  EPP_FUZZ_CHECK(list->is_array() && list->size() == ids->size(), "id count");
  // An integer, not negative: nlohmann reads "-0" (the integer 0, which the parser takes as id
  // 0) as a signed integer, so the check is on the value, not on nlohmann's signedness.
  for (size_t i = 0; i < ids->size(); ++i)
    EPP_FUZZ_CHECK((*list)[i].is_number_integer() && (*list)[i].get<int64_t>() >= 0 &&
                       static_cast<uint64_t>((*list)[i].get<int64_t>()) == (*ids)[i],
                   "id " + std::to_string(i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  for (auto ep : {epp::TokenizeEndpoint::kChatRender, epp::TokenizeEndpoint::kCompletionsRender,
                  epp::TokenizeEndpoint::kTokenize})
    CheckShape(ep, text);
  const std::vector<uint32_t> words = epp::WordTokenIds(text);
  EPP_FUZZ_CHECK(words.size() <= text.size() && (text.empty() || !words.empty()), "word count");
  for (uint32_t w : words) EPP_FUZZ_CHECK(w >= 256 && w < 100256, "word id range");
  return 0;
}
