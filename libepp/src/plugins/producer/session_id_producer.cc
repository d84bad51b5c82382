// session-id-producer: reads a session identifier from one request header or one cookie and
// publishes it as the request attribute "SessionIDDataKey/<plugin name>", where the session
// affinity scorer and filter (strategy session_id) find it through a source
// {attribute: SessionIDDataKey, producer: <plugin name>}. Facts: llm-d-router's
// requestcontrol/dataproducer/sessionid and datalayer/attribute/session.
//
// Deviation: llm-d runs it as a DataProducer; epp runs it as a request-header processor (its
// input is the headers alone, and epp's data-producer slot is the prefix producer's), which
// publishes the same attribute before the same consumers run.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

using internal::TrimSpace;

struct SessionIdOptions {
  std::string header;  // lower case
  std::string cookie;
};

const ParamTable<SessionIdOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<SessionIdOptions>())
           .String("headerName", &SessionIdOptions::header,
                   "request header whose value is the session id (case-insensitive); exactly one of headerName and "
                   "cookieName")
           .OmitEmpty()
           .String("cookieName", &SessionIdOptions::cookie, "cookie (in the Cookie header) whose value is the session id")
           .OmitEmpty();
  return *t;
}

// The value of cookie `name` in a Cookie header ("a=1; b=2"), as RFC 6265 pairs; "" when absent.
std::string_view CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view pair = TrimSpace(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
  }
  return {};
}

class SessionIdProducer : public Plugin, public RequestHeaderProcessor {
 public:
  SessionIdProducer(TypedName tn, SessionIdOptions o)
      : Plugin(std::move(tn)), o_(std::move(o)), key_(std::string(kSessionIdAttributeType) + "/" + name()) {}
  const RequestHeaderProcessor* AsRequestHeaderProcessor() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void RequestHeader(const InferenceRequest& request, RequestAttributes& attributes) const override {
    std::string_view id;
    if (!o_.header.empty()) {
      id = request.header(o_.header).value_or(std::string_view());
    } else if (std::optional<std::string_view> cookies = request.header("cookie")) {
      id = CookieValue(*cookies, o_.cookie);
    }
    id = TrimSpace(id);
    if (!id.empty()) attributes.Set(key_, std::string(id));  // absent: no session preference
  }

 private:
  SessionIdOptions o_;
  std::string key_;
};

}  // namespace

PluginOr CreateSessionIdProducer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(SessionIdOptions o, Table().Read(params));
  o.header = absl::AsciiStrToLower(std::string(TrimSpace(o.header)));
  o.cookie = std::string(TrimSpace(o.cookie));
  if (o.header.empty() == o.cookie.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path().empty() ? "parameters" : params.path(), ": exactly one of ",
                                                   "headerName or cookieName must be set",
                                                   o.header.empty() ? "" : ", not both"));
  return std::make_unique<SessionIdProducer>(TN(kSessionIdProducerType, name), std::move(o));
}

PluginSchema SessionIdProducerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
