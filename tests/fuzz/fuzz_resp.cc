// RESP2 answers from a Redis server (RespReader), Redis addresses (ParseRedisAddress) and the
// shared prefix records other replicas write (DecodeSharedPrefixUpdates). The first byte picks
// the chunk size the bytes are fed in. Invariants: no crash, no unbounded growth; feeding in
// chunks gives the same values and the same error as feeding in one piece; a decoded record
// encodes back to the same bytes.
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/redis.h"
#include "epp/runtime/redis_state.h"
#include "fuzz_util.h"

namespace {

// Values (as a flattened description) and the final status.
std::string Drain(epp::RespReader& r, std::string_view in, size_t chunk) {
  std::string out;
  auto describe = [&](const epp::RespValue& v, auto&& self) -> void {
    out += std::to_string(static_cast<int>(v.type)) + ":" + v.text + ":" + std::to_string(v.integer) + "[";
    for (const epp::RespValue& e : v.elements) self(e, self);
    out += "]";
  };
  for (size_t i = 0; i <= in.size(); i += chunk) {
    r.Feed(in.substr(i, chunk));
    while (true) {
      auto v = r.Next();
      if (!v.ok()) return out + "|error:" + std::string(v.status().message());
      if (!v->has_value()) break;
      describe(**v, describe);
    }
    if (i >= in.size()) break;
  }
  return out + "|more:" + std::to_string(r.buffered());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t chunk = 1 + (data[0] & 63);
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  epp::RespReader::Limits limits;
  limits.max_bulk_bytes = 1 << 16;
  limits.max_array_elements = 1 << 12;
  epp::RespReader whole(limits), chunked(limits);
  const std::string a = Drain(whole, in, in.size() + 1);
  const std::string b = Drain(chunked, in, chunk);
  EPP_FUZZ_CHECK(a == b, "whole: " + a + " chunked: " + b);
  (void)epp::ParseRedisAddress(in);
  auto updates = epp::DecodeSharedPrefixUpdates(in);
  if (updates.ok()) {
    std::string again;
    for (const epp::SharedPrefixUpdate& u : *updates) epp::AppendSharedPrefixUpdate(again, u.endpoint, u.hashes, u.capacity);
    EPP_FUZZ_CHECK(again == in, "a shared prefix record does not encode back to its bytes");
  }
  return 0;
}
