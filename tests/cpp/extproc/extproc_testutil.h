// Shared helpers of the ext_proc suites: a scheduler over a fixed pool, request bodies, and a
// protobuf wire reader built on google::protobuf::UnknownFieldSet (it knows field numbers only,
// never our generated classes, so it checks what a gateway would see on the wire).
#pragma once

#include <gtest/gtest.h>

#include <google/protobuf/unknown_field_set.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "epp/config.h"
#include "epp/runtime/extproc.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp::extproc_test {

namespace pb = ::envoy::service::ext_proc::v3;

using testing::kNowUs;
// A fresh endpoint (metrics taken "now" by the fixture's clock).
using testing::Ep;

// A scheduler built from `yaml` (the default config when empty) over a replaceable pool.
struct SchedulerEnv {
  ManualClock clock{kNowUs};
  SeededRng rng{7};
  std::unique_ptr<Scheduler> scheduler;
  EndpointSnapshot pool;

  explicit SchedulerEnv(std::vector<Endpoint> endpoints, std::string_view yaml = "") : pool(std::move(endpoints)) {
    EppConfig cfg = DefaultConfig();
    if (!yaml.empty()) {
      auto parsed = ParseConfig(yaml, "test.yaml");
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      if (parsed.ok()) cfg = *parsed;
    }
    auto built = BuildScheduler(cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    EXPECT_TRUE(built.ok()) << built.status();
    if (built.ok()) scheduler = std::move(*built);
  }
};

// An OpenAI chat request body.
inline std::string ChatBody(const std::string& model, const std::string& content, bool stream = false) {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", content}}});
  if (stream) j["stream"] = true;
  return j.dump();
}

inline HttpRequestCapture ChatCapture(const std::string& body, size_t chunk_bytes = 0) {
  HttpRequestCapture c;
  c.path = "/v1/chat/completions";
  c.headers = {{"content-type", "application/json"}, {"x-request-id", "req-1"}};
  c.body = body;
  c.chunk_bytes = chunk_bytes;
  return c;
}

inline std::vector<pb::ProcessingResponse> Decode(const std::vector<std::string>& bytes) {
  std::vector<pb::ProcessingResponse> out;
  for (const std::string& b : bytes) {
    pb::ProcessingResponse r;
    EXPECT_TRUE(r.ParseFromString(b));
    out.push_back(std::move(r));
  }
  return out;
}

// The value of header `key` in a HeaderMutation (raw_value), or nullopt.
inline std::optional<std::string> SetHeader(const pb::HeaderMutation& m, std::string_view key) {
  for (const auto& o : m.set_headers())
    if (o.header().key() == key) return o.header().raw_value();
  return std::nullopt;
}

// dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"], or nullopt.
inline std::optional<std::string> MetadataDestination(const pb::ProcessingResponse& r) {
  if (!r.has_dynamic_metadata()) return std::nullopt;
  auto ns = r.dynamic_metadata().fields().find(std::string(kDestinationEndpointNamespace));
  if (ns == r.dynamic_metadata().fields().end() || !ns->second.has_struct_value()) return std::nullopt;
  const auto& f = ns->second.struct_value().fields();
  auto v = f.find(std::string(kDestinationEndpointKey));
  if (v == f.end() || !v->second.has_string_value()) return std::nullopt;
  return v->second.string_value();
}

// Splits "a,b,c".
inline std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// A protobuf message read by field number only.
class Wire {
 public:
  Wire() : set_(std::make_shared<google::protobuf::UnknownFieldSet>()) {}
  explicit Wire(std::string_view bytes) : Wire() {
    ok_ = set_->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }
  bool ok() const { return ok_; }

  std::vector<const google::protobuf::UnknownField*> All(int number) const {
    std::vector<const google::protobuf::UnknownField*> out;
    for (int i = 0; i < set_->field_count(); ++i)
      if (set_->field(i).number() == number) out.push_back(&set_->field(i));
    return out;
  }
  bool Has(int number) const { return !All(number).empty(); }
  std::vector<int> Numbers() const {
    std::vector<int> out;
    for (int i = 0; i < set_->field_count(); ++i) out.push_back(set_->field(i).number());
    return out;
  }
  // The single length-delimited field `number` (a test failure when absent or repeated).
  std::string Bytes(int number) const {
    auto all = All(number);
    EXPECT_EQ(all.size(), 1u) << "field " << number;
    if (all.size() != 1) return {};
    EXPECT_EQ(all[0]->type(), google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) << "field " << number;
    if (all[0]->type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) return {};
    return all[0]->length_delimited();
  }
  Wire Sub(int number) const { return Wire(Bytes(number)); }
  // Every length-delimited field `number`, parsed as messages (repeated fields, map entries).
  std::vector<Wire> Subs(int number) const {
    std::vector<Wire> out;
    for (const auto* f : All(number)) {
      EXPECT_EQ(f->type(), google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) << "field " << number;
      if (f->type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) out.emplace_back(f->length_delimited());
    }
    return out;
  }
  std::optional<uint64_t> Varint(int number) const {
    auto all = All(number);
    if (all.size() != 1 || all[0]->type() != google::protobuf::UnknownField::TYPE_VARINT) return std::nullopt;
    return all[0]->varint();
  }
  // Map entry {key=1, value=2} whose key is `key`, within repeated field `number`.
  std::optional<Wire> MapValue(int number, std::string_view key) const {
    for (const Wire& entry : Subs(number))
      if (entry.Has(1) && entry.Bytes(1) == key) return entry.Sub(2);
    return std::nullopt;
  }

 private:
  std::shared_ptr<google::protobuf::UnknownFieldSet> set_;  // shared: UnknownFieldSet is not copyable
  bool ok_ = false;
};

// Hand encoding of protobuf wire format.
namespace enc {
inline std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
inline std::string VarintField(int number, uint64_t v) { return Varint(static_cast<uint64_t>(number) << 3 | 0) + Varint(v); }
inline std::string LenField(int number, std::string_view bytes) {
  return Varint(static_cast<uint64_t>(number) << 3 | 2) + Varint(bytes.size()) + std::string(bytes);
}
}  // namespace enc

}  // namespace epp::extproc_test
