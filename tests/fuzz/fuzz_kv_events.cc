// KV-cache event payloads (the msgpack frame of a model server's ZeroMQ messages) through
// DecodeKvEventBatch; the input's first 8 bytes as a sequence frame (DecodeKvSequence) and its
// text up to the first NUL (at most 256 bytes) as a topic (ParseKvTopic).
// Invariants: a failure is kInvalidArgument with a message; an accepted payload is one complete
// msgpack value for msgpack-cxx too (an independent reader); a decoded batch re-encoded in either
// encoding decodes to an equal batch and encodes again to the same bytes; the sequence and topic
// helpers round-trip what they accept.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include "epp/kv/events.h"
#include "fuzz_util.h"

namespace {

void CheckSequence(std::string_view text) {
  const std::optional<uint64_t> whole = epp::DecodeKvSequence(text);
  EPP_FUZZ_CHECK(whole.has_value() == (text.size() == 8), "a frame of " + std::to_string(text.size()) + " bytes");
  const std::string_view head = text.substr(0, 8);
  const std::optional<uint64_t> seq = epp::DecodeKvSequence(head);
  EPP_FUZZ_CHECK(seq.has_value() == (head.size() == 8), "the first 8 bytes");
  if (seq) EPP_FUZZ_CHECK(epp::EncodeKvSequence(*seq) == head, "sequence round trip");
}

void CheckTopic(std::string_view text) {
  const std::string_view topic = text.substr(0, std::min(text.find('\0'), size_t{256}));
  const std::optional<epp::KvTopic> parsed = epp::ParseKvTopic(topic);
  const bool well_formed = topic.starts_with("kv@") && std::count(topic.begin(), topic.end(), '@') == 2 &&
                           topic.find('@', 3) != 3;
  EPP_FUZZ_CHECK(parsed.has_value() == well_formed, std::string(topic));
  if (!parsed) return;
  EPP_FUZZ_CHECK(!parsed->endpoint.empty(), "empty endpoint");
  EPP_FUZZ_CHECK(epp::FormatKvTopic(parsed->endpoint, parsed->model) == topic, "topic round trip");
}

void CheckMsgpackCxxAccepts(std::string_view payload) {
  try {
    size_t offset = 0;
    msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size(), offset);
    EPP_FUZZ_CHECK(offset == payload.size(), "msgpack-cxx stops early at byte " + std::to_string(offset));
  } catch (const std::exception& e) {
    EPP_FUZZ_CHECK(false, std::string("msgpack-cxx rejects an accepted payload: ") + e.what());
  }
}

void CheckRoundTrips(const epp::KvEventBatch& batch) {
  EPP_FUZZ_CHECK(std::isfinite(batch.ts), "ts not finite");
  for (const epp::KvEventEncoding encoding : {epp::KvEventEncoding::kArray, epp::KvEventEncoding::kMap}) {
    const char* name = encoding == epp::KvEventEncoding::kArray ? "array" : "map";
    const std::string bytes = epp::EncodeKvEventBatch(batch, encoding);
    const absl::StatusOr<epp::KvEventBatch> again = epp::DecodeKvEventBatch(bytes);
    EPP_FUZZ_CHECK(again.ok(), std::string(name) + ": " + std::string(again.status().message()));
    EPP_FUZZ_CHECK(*again == batch, std::string(name) + ": the re-encoded batch decodes differently");
    EPP_FUZZ_CHECK(epp::EncodeKvEventBatch(*again, encoding) == bytes, std::string(name) + ": not a fixed point");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  CheckSequence(text);
  CheckTopic(text);

  const absl::StatusOr<epp::KvEventBatch> batch = epp::DecodeKvEventBatch(text);
  if (!batch.ok()) {
    EPP_FUZZ_CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument, batch.status().ToString());
    EPP_FUZZ_CHECK(!batch.status().message().empty(), "an error without a message");
    return 0;
  }
  CheckMsgpackCxxAccepts(text);
  CheckRoundTrips(*batch);
  return 0;
}
