// The ext_proc per-stream state machine (behaviour in epp/runtime/extproc.h; GIE reference in
// gie-epp.md section 1.4). Deliberate differences from GIE's EPP:
//   - request headers are not echoed back (GIE re-sets every original header; it changes
//     nothing), and no debug header is added to responses;
//   - the body is forwarded byte for byte unless the model is rewritten (GIE re-marshals always);
//   - a body-less request with no candidate is a 503, not a 500.
#include <algorithm>
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/strings.h"
#include "epp/runtime/decision_log.h"
#include "extproc/session_impl.h"
#include "flowcontrol/policies.h"

namespace epp {
namespace {

namespace pb = extproc_pb;
namespace core = ::envoy::config::core::v3;

const char* ErrorCodeName(int status) {
  switch (status) {
    case 400: return "BadRequest";
    case 413: return "PayloadTooLarge";
    case 429: return "ResourceExhausted";
    case 503: return "ServiceUnavailable";
    default: return "Internal";
  }
}

void SetHeader(pb::HeaderMutation* m, std::string_view key, std::string_view value) {
  core::HeaderValueOption* o = m->add_set_headers();
  o->mutable_header()->set_key(std::string(key));
  o->mutable_header()->set_raw_value(std::string(value));
  o->set_append_action(core::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
}

void AppendChunks(std::string_view body, bool end_of_stream, bool request_path, std::vector<pb::ProcessingResponse>& out) {
  size_t off = 0;
  do {
    const size_t n = std::min(kBodyChunkBytes, body.size() - off);
    pb::ProcessingResponse r;
    pb::BodyResponse* br = request_path ? r.mutable_request_body() : r.mutable_response_body();
    pb::StreamedBodyResponse* s = br->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
    s->set_body(std::string(body.substr(off, n)));
    off += n;
    s->set_end_of_stream(end_of_stream && off >= body.size());
    out.push_back(std::move(r));
  } while (off < body.size());
}

// A thread-local generator for body-less picks (no scoring, like GIE's GetRandomEndpoint).
uint64_t RandomBelow(uint64_t n) {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return std::uniform_int_distribution<uint64_t>(0, n - 1)(gen);
}

}  // namespace

void ExtProcStats::RecordOutcome(int status) {
  switch (status) {
    case 200: outcome_200++; break;
    case 400: outcome_400++; break;
    case 413: outcome_413++; break;
    case 429: outcome_429++; break;
    case 503: outcome_503++; break;
    default: outcome_500++; break;
  }
}

void ExtProcStats::RecordPick(const std::string& endpoint, int prefix_blocks, int prefix_match_blocks) {
  std::lock_guard<std::mutex> lock(picks_mu_);
  auto it = picks_.find(endpoint);
  if (it == picks_.end()) it = picks_.emplace(endpoint, EndpointPicks{}).first;
  it->second.picks++;
  it->second.prefix_blocks += prefix_blocks;
  it->second.prefix_match_blocks += prefix_match_blocks;
}

void ExtProcStats::RecordUnreachableSkips(const std::vector<std::string>& endpoints) {
  if (endpoints.empty()) return;
  std::lock_guard<std::mutex> lock(picks_mu_);
  for (const std::string& e : endpoints) {
    auto it = picks_.find(e);
    if (it == picks_.end()) it = picks_.emplace(e, EndpointPicks{}).first;
    it->second.unreachable_skips++;
  }
}

std::map<std::string, ExtProcStats::EndpointPicks> ExtProcStats::PicksByEndpoint() const {
  std::lock_guard<std::mutex> lock(picks_mu_);
  return {picks_.begin(), picks_.end()};
}

void ExtProcStats::RecordLatencyMicros(int64_t us) {
  size_t i = 0;
  while (i < kLatencyBuckets && static_cast<double>(us) > kLatencyBucketsUs[i]) ++i;
  latency_count[i]++;
  latency_sum_us += us;
}

ExtProcSession::Impl::~Impl() {
  EndResponse();
  FinishTrace();
  Release(&body_held);
  Release(&response_held);
}

bool ExtProcSession::Impl::Hold(uint64_t* held, uint64_t want) {
  if (!options.buffer_budget || want <= *held) return true;
  if (!options.buffer_budget->TryTake(want - *held)) return false;
  *held = want;
  return true;
}

void ExtProcSession::Impl::Release(uint64_t* held) {
  if (options.buffer_budget && *held > 0) options.buffer_budget->Give(*held);
  *held = 0;
}

void ExtProcSession::Impl::RefuseStream(std::vector<pb::ProcessingResponse>& out) {
  if (stats) stats->streams_refused++;
  Immediate(429, "too many open ext_proc streams on this EPP", out, kDroppedStreamLimit);
}

void ExtProcSession::Impl::StartTrace() {
  if (!options.tracer) return;
  std::optional<TraceContext> parent;
  std::string state;
  for (const auto& [k, v] : headers) {
    if (k == "traceparent") {
      // A malformed traceparent starts a new trace, as the W3C spec asks.
      absl::StatusOr<TraceContext> p = ParseTraceparent(v);
      if (p.ok()) parent = *std::move(p);
    } else if (k == "tracestate") {
      state = v;
    }
  }
  if (parent) {
    parent->trace_state = std::move(state);
    trace_parent = parent->span_id;
  }
  trace = options.tracer->StartRequest(parent);
  if (trace->sampled) trace_offset_ns = Tracer::SteadyToUnixOffsetNs();
}

void ExtProcSession::Impl::FinishTrace() {
  if (trace_done || !Sampled()) return;
  trace_done = true;
  const auto now = std::chrono::steady_clock::now();
  auto child = [&](std::string name, std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end) {
    Span s;
    s.trace_id = trace->trace_id;
    s.span_id = Tracer::NewSpanId();
    s.parent_span_id = trace->span_id;
    s.trace_state = trace->trace_state;
    s.name = std::move(name);
    s.start_unix_ns = UnixNs(start);
    s.end_unix_ns = UnixNs(std::max(start, end));
    s.scope = "llm-d-router/pkg/epp/handlers";
    return s;
  };
  if (response_start != std::chrono::steady_clock::time_point{}) {
    Span r = child("gateway.response", response_start, response_end != std::chrono::steady_clock::time_point{} ? response_end : now);
    r.attributes.emplace_back("llm_d.epp.response.streaming", response_streaming);
    r.attributes.emplace_back("llm_d.epp.response.bytes", response_bytes);
    if (response_streaming && first_byte != std::chrono::steady_clock::time_point{})
      r.attributes.emplace_back("llm_d.epp.response.ttft_ms",
                                std::chrono::duration<double, std::milli>(first_byte - received).count());
    if (usage) {
      r.attributes.emplace_back("gen_ai.usage.input_tokens", static_cast<int64_t>(usage->prompt_tokens));
      r.attributes.emplace_back("gen_ai.usage.output_tokens", static_cast<int64_t>(usage->completion_tokens));
    }
    trace_spans.push_back(std::move(r));
  }
  Span root = child("gateway.request", received, now);
  root.span_id = trace->span_id;
  root.parent_span_id = trace_parent;
  root.kind = SpanKind::kServer;
  if (!incoming_model.empty()) root.attributes.emplace_back("gen_ai.request.model", incoming_model);
  if (!target_model.empty() && target_model != incoming_model)
    root.attributes.emplace_back("llm_d.epp.target_model", target_model);
  for (const auto& [k, v] : headers)
    if (k == "x-request-id" && !v.empty()) root.attributes.emplace_back("gen_ai.request.id", v);
  root.attributes.emplace_back("url.path", Path());
  if (request) root.attributes.emplace_back("llm_d.epp.request.priority", static_cast<int64_t>(request->priority));
  const int status = answered_status != 0 ? answered_status : (result ? result->status : 0);
  if (status != 0) root.attributes.emplace_back("http.response.status_code", static_cast<int64_t>(status));
  if (result && result->status == 200 && !result->endpoints.empty())
    root.attributes.emplace_back("llm_d.epp.destination_endpoint", result->DestinationValue());
  if (result && !result->dropped_reason.empty()) root.attributes.emplace_back("llm_d.epp.dropped_reason", result->dropped_reason);
  if (flow_wait_us >= 0) root.attributes.emplace_back("llm_d.epp.flow_control.wait_us", flow_wait_us);
  if (status >= 500) {
    root.error = true;
    root.status_message = result ? result->reason : std::string();
  } else if (status == 0) {
    root.attributes.emplace_back("llm_d.epp.request.state", std::string(finished ? "answered" : "ended before a decision"));
  }
  trace_spans.insert(trace_spans.begin(), std::move(root));
  options.tracer->Export(std::move(trace_spans));
  trace_spans.clear();
}

void ExtProcSession::Impl::ReadMetadata(const pb::ProcessingRequest& in) {
  if (!in.has_metadata_context()) return;
  const auto& fm = in.metadata_context().filter_metadata();
  if (!options.ignore_subset_hint) {
    auto ns = fm.find(std::string(kSubsetHintNamespace));
    if (ns != fm.end()) {
      auto key = ns->second.fields().find(std::string(kDestinationEndpointSubsetKey));
      if (key != ns->second.fields().end()) {
        // A list of "ip:port" (each may itself be a comma list) or one comma-separated string.
        std::vector<std::string> entries;
        auto add = [&](const std::string& s) {
          size_t start = 0;
          while (start <= s.size()) {
            size_t end = s.find(',', start);
            if (end == std::string::npos) end = s.size();
            std::string_view item = internal::TrimSpace(std::string_view(s).substr(start, end - start));
            if (!item.empty()) entries.emplace_back(item);
            start = end + 1;
          }
        };
        const auto& v = key->second;
        if (v.has_list_value()) {
          for (const auto& item : v.list_value().values())
            if (item.has_string_value()) add(item.string_value());
          subset = std::move(entries);
        } else if (v.has_string_value()) {
          add(v.string_value());
          subset = std::move(entries);
        }
      }
    }
  }
  auto lb = fm.find(std::string(kDestinationEndpointNamespace));
  if (lb != fm.end()) {
    auto key = lb->second.fields().find(std::string(kDestinationEndpointServedKey));
    if (key != lb->second.fields().end() && key->second.has_string_value()) served = key->second.string_value();
  }
}

std::string ExtProcSession::Impl::Path() const {
  for (std::string_view name : {":path", "x-original-path", "x-forwarded-path"})
    for (const auto& [k, v] : headers)
      if (k == name && !v.empty()) return v;
  return std::string(kDefaultRequestPath);
}

bool ExtProcSession::Impl::RewriteModel(bool unparsed, std::string& new_body, bool& changed, std::string& rule,
                                        std::vector<pb::ProcessingResponse>& out) {
  if (unparsed) return true;  // as in llm-d: no model to rewrite
  // The client's header first (llm-d's name, then GIE's), else the cluster's rule for the model.
  std::string target;
  std::string from;  // names the source in a 400
  for (std::string_view name : {kLlmdModelNameRewriteHeader, kModelNameRewriteHeader}) {
    for (const auto& [k, v] : headers)
      if (k == name && !v.empty()) {
        target = v;
        from = std::string(name);
        break;
      }
    if (!target.empty()) break;
  }
  if (!target.empty() && !options.trust_model_rewrite_header) {
    target.clear();  // not the client's to choose here: the cluster's rule (if any) decides
    if (stats) stats->untrusted_headers_ignored++;
  }
  if (target.empty() && options.policies) {
    const std::shared_ptr<const RequestPolicies> policies = options.policies->Get();
    if (const ModelRewriteRule* r = policies->RuleFor(request->model); r != nullptr) {
      // A weighted draw per request (the reference's rand.Intn); thread-local, so streams on
      // different threads never contend for it.
      thread_local std::mt19937_64 rng{std::random_device{}()};
      target = PickRewriteTarget(*r, std::uniform_real_distribution<double>(0.0, 1.0)(rng));
      rule = r->source;
      from = "InferenceModelRewrite " + r->source;
    }
  }
  if (target.empty() || target == request->model) return true;
  // Rewrite the body's model (key order kept); the target model also seeds the prefix hashes.
  // Header values arrive as raw bytes: one that is not UTF-8 cannot become a JSON string, and
  // the request is refused naming the header rather than sent on with the old model.
  absl::StatusOr<nlohmann::ordered_json> j = internal::ParseJson<nlohmann::ordered_json>(body);
  absl::StatusOr<std::string> dumped = absl::InternalError("request body is not a JSON object");
  if (j.ok() && j->is_object()) {
    (*j)["model"] = target;
    dumped = internal::DumpJson(*j);
  } else if (!j.ok()) {
    dumped = j.status();
  }
  if (!dumped.ok()) {
    result = PickResult::BadRequest(dumped.status());
    Immediate(400, from + ": cannot rewrite the model: " + std::string(dumped.status().message()), out);
    return false;
  }
  new_body = std::move(*dumped);
  changed = true;
  request->model = target;
  return true;
}

int ExtProcSession::Impl::ObjectivePriority() const {
  for (std::string_view name : {kLlmdObjectiveHeader, kObjectiveHeader}) {
    for (const auto& [k, v] : headers) {
      if (k != name) continue;
      if (!options.trust_objective_header) {
        if (stats) stats->untrusted_headers_ignored++;
        return 0;
      }
      // The cluster's InferenceObjectives first; the --objective flags are the offline form.
      if (options.policies) {
        const std::shared_ptr<const RequestPolicies> policies = options.policies->Get();
        if (auto it = policies->objective_priorities.find(v); it != policies->objective_priorities.end())
          return it->second;
      }
      auto it = options.objective_priorities.find(v);
      return it != options.objective_priorities.end() ? it->second : 0;
    }
  }
  return 0;
}

void ExtProcSession::Impl::Immediate(int status, const std::string& message, std::vector<pb::ProcessingResponse>& out,
                                     std::string_view dropped_reason) {
  pb::ProcessingResponse r;
  pb::ImmediateResponse* ir = r.mutable_immediate_response();
  ir->mutable_status()->set_code(static_cast<::envoy::type::v3::StatusCode>(status));
  ir->set_body(absl::StrCat("inference error: ", ErrorCodeName(status), " - ", message));
  ir->set_details(message);
  SetHeader(ir->mutable_headers(), "content-type", "text/plain; charset=utf-8");
  if (!dropped_reason.empty()) SetHeader(ir->mutable_headers(), kRequestDroppedReasonHeader, dropped_reason);
  out.push_back(std::move(r));
  finished = true;
  answered_status = status;
  if (stats) stats->RecordOutcome(status);
  if (stats && model_counted) {
    stats->RecordModelError(incoming_model, target_model, status);
    model_counted = false;  // an error ends the request's accounting: no response will come
  }
}

void ExtProcSession::Impl::EmitPick(const std::string& new_body, bool body_changed, bool bodyless,
                                    std::vector<pb::ProcessingResponse>& out) {
  const std::string dest = result->DestinationValue();
  pb::ProcessingResponse hr;
  pb::CommonResponse* common = hr.mutable_request_headers()->mutable_response();
  common->set_clear_route_cache(true);
  pb::HeaderMutation* m = common->mutable_header_mutation();
  SetHeader(m, kDestinationEndpointHeader, dest);
  if (body_changed) SetHeader(m, "content-length", std::to_string(new_body.size()));
  // The profile handler's headers (x-prefiller-host-port, ...): set what it produced, remove
  // the gateway's copies of the rest, so a client cannot choose its own prefill server.
  for (const auto& [key, value] : result->headers) SetHeader(m, key, value);
  // The model server's spans join the trace under gateway.request (as llm-d injects it).
  if (trace) SetHeader(m, "traceparent", FormatTraceparent(*trace));
  auto set_by_pick = [&](std::string_view name) {
    return std::any_of(result->headers.begin(), result->headers.end(),
                       [&](const std::pair<std::string, std::string>& h) { return h.first == name; });
  };
  const std::vector<std::string>& owned_headers = scheduler.OwnedHeaders();
  for (const std::string& owned : owned_headers)
    if (!set_by_pick(owned)) m->add_remove_headers(owned);
  // The sidecar's control headers never pass from the client, whatever the profile handler: a
  // client's x-prefiller-host-port would send the prefill (and the prompt) wherever it names.
  for (std::string_view control : kSidecarControlHeaders) {
    if (set_by_pick(control) || std::find(owned_headers.begin(), owned_headers.end(), control) != owned_headers.end())
      continue;
    const bool sent = std::any_of(headers.begin(), headers.end(),
                                  [&](const std::pair<std::string, std::string>& h) { return h.first == control; });
    if (sent) {
      m->add_remove_headers(std::string(control));
      if (stats) stats->stripped_control_headers++;
    }
  }
  auto& ns = (*hr.mutable_dynamic_metadata()->mutable_fields())[std::string(kDestinationEndpointNamespace)];
  (*ns.mutable_struct_value()->mutable_fields())[std::string(kDestinationEndpointKey)].set_string_value(dest);
  if (options.emit_endpoint_scores && !result->primary_scores.empty()) {
    auto& scores = *(*ns.mutable_struct_value()->mutable_fields())[std::string(kDestinationEndpointScoresKey)]
                        .mutable_struct_value()
                        ->mutable_fields();
    for (const auto& [address, score] : result->primary_scores) scores[address].set_number_value(score);
  }
  out.push_back(std::move(hr));
  if (!bodyless) AppendChunks(new_body, true, true, out);
}

void ExtProcSession::Impl::Decide(std::vector<pb::ProcessingResponse>& out, bool bodyless) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const std::vector<Endpoint>> pool = source.Snapshot();
  if (bodyless) {
    // No body to understand: a random candidate, no scoring (GIE PR #526).
    std::vector<const Endpoint*> candidates;
    for (const Endpoint& e : *pool) {
      bool in = !subset.has_value();
      if (subset)
        for (const std::string& s : *subset) in = in || SubsetEntryMatches(s, e.address);
      if (in) candidates.push_back(&e);
    }
    if (candidates.empty()) {
      Immediate(503, subset ? "no endpoint of the pool matches the subset hint" : "no endpoints in the pool", out,
                kDroppedNoEndpoints);
      return;
    }
    PickResult r;
    r.endpoints.push_back(candidates[RandomBelow(candidates.size())]->address);
    r.reason = "request without a body: random candidate";
    r.candidates = static_cast<int>(candidates.size());
    result = std::move(r);
    EmitPick({}, false, true, out);
    if (stats) stats->RecordOutcome(200);
    return;
  }
  // The parser the path resolves to reads the body (a path no parser claims is a 400, as in
  // llm-d). passthrough-parser (and paths a parser forwards unread, api kOther): the body is
  // routed unread (no model, no prompt) and sent on as it came.
  absl::StatusOr<InferenceRequest> parsed = ParseRequestInPlace(Path(), body, scheduler.Parsers());
  const bool unparsed = parsed.ok() && parsed->api == ApiKind::kOther;
  if (!parsed.ok()) {
    result = PickResult::BadRequest(parsed.status());
    Immediate(400, std::string(parsed.status().message()), out);
    FreeBody();
    return;
  }
  request = std::move(*parsed);
  request->headers = headers;
  incoming_model = request->model;
  std::string& new_body = pending_body_;
  std::string& rule = pending_rule_;
  bool& changed = pending_changed_;
  // Model rewrites apply to the JSON bodies that carry a model (llm-d's ModelNameRewriter parsers:
  // openai, anthropic, vllmhttp); gRPC frames and SGLang's body name none.
  const bool rewritable = !unparsed && (request->parser == RequestParser::kOpenAI ||
                                        request->parser == RequestParser::kAnthropic ||
                                        request->parser == RequestParser::kVllmHttp);
  if (!RewriteModel(!rewritable, new_body, changed, rule, out)) {
    FreeBody();
    return;
  }
  const size_t body_size = body.size();
  if (changed) {
    // The rewritten body (pending_body_) is what goes on: the received one is not needed any
    // more (nothing refers to it: the request's fields are copies), and the budget now holds the
    // new one instead.
    std::string().swap(body);
    Release(&body_held);
    (void)Hold(&body_held, new_body.capacity());
  }
  target_model = request->model;
  request->priority = ObjectivePriority();
  request->fairness_id = FairnessIdFromHeaders(*request);
  scheduler.PrepareRequest(*request);  // agent-identity fills the fairness id the headers left empty
  if (stats && !unparsed) {
    stats->RecordModelRequest(incoming_model, target_model, request->priority, body_size);
    model_counted = true;
    if (!rule.empty()) stats->RecordRewrite(rule, incoming_model, target_model);
  }
  if (flow && flow_done) {
    // Flow control: the request waits in its band and flow until the layer dispatches it; the
    // stream stays open and nothing goes upstream. The answer comes from Resume.
    flowcontrol::EnqueueRequest fr;
    for (const auto& [k, v] : headers)
      if (k == "x-request-id") fr.request_id = v;
    fr.fairness_id = request->fairness_id;
    fr.priority = request->priority;
    fr.bytes = body_size;
    fr.received_us = std::chrono::duration_cast<std::chrono::microseconds>(received.time_since_epoch()).count();
    fr.slo_ttft_ms = flowcontrol::SloTtftMs(*request);
    flow_waiting = true;
    if (flow_hold) flow_hold();
    // An immediate answer (capacity, shutdown) runs Resume before Enqueue returns.
    const flowcontrol::Handle h = flow->Enqueue(std::move(fr), flow_done);
    if (flow_waiting) flow_handle = h;
    return;
  }
  Dispatch(t0, out);
}

void ExtProcSession::Impl::Resume(const flowcontrol::Completion& done, bool alive, std::vector<pb::ProcessingResponse>& out) {
  if (!flow_waiting) return;
  flow_waiting = false;
  flow_handle = flowcontrol::kNoHandle;
  flow_wait_us = done.waited_us;
  if (Sampled()) {
    const auto now = std::chrono::steady_clock::now();
    Span w;
    w.trace_id = trace->trace_id;
    w.span_id = Tracer::NewSpanId();
    w.parent_span_id = trace->span_id;
    w.trace_state = trace->trace_state;
    w.name = "flow_control.wait";
    w.start_unix_ns = UnixNs(now - std::chrono::microseconds(std::max<int64_t>(0, done.waited_us)));
    w.end_unix_ns = UnixNs(now);
    w.attributes.emplace_back("llm_d.epp.flow_control.outcome", std::string(flowcontrol::OutcomeName(done.outcome)));
    if (request) w.attributes.emplace_back("llm_d.epp.fairness_id", request->fairness_id);
    w.scope = "llm-d-router/pkg/epp/flowcontrol";
    trace_spans.push_back(std::move(w));
  }
  if (!alive) {
    // The stream ended while the request waited (client gone, time limit): nothing is picked.
    finished = true;
    if (done.outcome == flowcontrol::Outcome::kDispatched && flow) flow->NotifyCapacity();
    return;
  }
  if (done.outcome == flowcontrol::Outcome::kDispatched) {
    Dispatch(std::chrono::steady_clock::now(), out);
    if (result && result->status == 200 && load_recorded) {
      flow_dispatched = true;
      if (flow && flow_evict && flow->eviction_enabled() && !result->endpoints.empty()) {
        std::string id;
        for (const auto& [k, v] : headers)
          if (k == "x-request-id") id = v;
        inflight_handle = flow->TrackInflight(std::move(id), request->priority, result->endpoints.front(), flow_evict);
      }
    } else if (flow) {
      flow->NotifyCapacity();  // the dispatch took no capacity: the next request may go
    }
  } else {
    const std::shared_ptr<const std::vector<Endpoint>> pool = source.Snapshot();
    const flowcontrol::DropAnswer a = flowcontrol::AnswerFor(done.outcome, pool->empty());
    PickResult r;
    r.status = a.status;
    r.reason = a.message;
    r.dropped_reason = std::string(a.reason);
    result = std::move(r);
    Immediate(a.status, a.message, out, a.reason);
  }
  if (trailers_pending && !finished) {
    trailers_pending = false;
    pb::ProcessingResponse r;
    r.mutable_request_trailers();
    out.push_back(std::move(r));
  }
}

void ExtProcSession::Impl::Evict(const flowcontrol::DropAnswer& a, std::vector<pb::ProcessingResponse>& out) {
  if (finished || response_done || !result || inflight_handle == flowcontrol::kNoHandle) return;
  evicted = true;
  result->dropped_reason = std::string(a.reason);
  Immediate(a.status, a.message, out, a.reason);
  model_counted = false;  // not a completed response
  EndResponse();
}

void ExtProcSession::Impl::Dispatch(std::chrono::steady_clock::time_point t0, std::vector<pb::ProcessingResponse>& out) {
  const std::string& new_body = pending_body_;
  const std::string& rule = pending_rule_;
  const bool changed = pending_changed_;
  std::shared_ptr<const std::vector<Endpoint>> pool = source.Snapshot();
  const bool logged = options.decision_log && options.decision_log->Admit();
  PickOptions po;
  po.subset = subset;
  po.trace = options.trace || logged;
  po.record = true;
  po.scores = options.emit_endpoint_scores;
  std::vector<CycleSpan> cycle_spans;
  if (Sampled()) po.spans = &cycle_spans;
  request->body = changed ? std::string_view(new_body) : std::string_view(body);  // for the pick only
  result = scheduler.Pick(*request, *pool, po);
  request->body = {};
  if (!cycle_spans.empty())
    Tracer::AppendCycleSpans(cycle_spans, trace->trace_id, trace->span_id, trace->trace_state, trace_offset_ns, trace_spans);
  if (!rule.empty()) result->model_rewrite = rule + ": " + incoming_model + " -> " + target_model;
  const int64_t pick_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  if (stats) stats->RecordLatencyMicros(pick_us);
  if (logged) {
    DecisionRecord record = MakeDecisionRecord(*request, *result, headers, pick_us, options.decision_log->options().include_prompt);
    record.queue_wait_us = flow_wait_us;
    options.decision_log->Add(std::move(record));
  }
  if (stats) stats->RecordUnreachableSkips(result->unreachable);
  if (result->status != 200) {
    Immediate(result->status, result->reason, out, result->dropped_reason);
    FreeBody();
    return;
  }
  load_recorded = result->load_tokens > 0;
  if (stats) {
    stats->RecordOutcome(200);
    stats->requests_in_flight++;
    stats->prefix_blocks += result->prefix_blocks;
    stats->prefix_match_blocks += result->prefix_match_blocks;
    stats->RecordPick(result->endpoints.front(), result->prefix_blocks, result->prefix_match_blocks);
  }
  if (changed) {
    EmitPick(new_body, true, false, out);
  } else {
    EmitPick(body, false, false, out);
  }
  FreeBody();
}

void ExtProcSession::Impl::FreeBody() {
  std::string().swap(body);
  std::string().swap(pending_body_);
  Release(&body_held);
}

void ExtProcSession::Impl::EndResponse() {
  // Before a decision there is nothing to release; a response-path message arriving that early
  // (not something Envoy does) must not hide the load of a later pick.
  if (response_done || !result) return;
  response_done = true;
  if (Sampled()) response_end = std::chrono::steady_clock::now();
  if (stats && result && !served.empty() && !result->endpoints.empty() && served != result->endpoints.front())
    stats->served_mismatch++;
  // predicted-latency-producer learns from the end of the response (before the load goes, as
  // llm-d's ResponseBody hook runs before the request leaves its counts).
  if (result->status == 200 && result->pick_id != 0 && response_chunks > 0 && !result->endpoints.empty() &&
      scheduler.Needs().completion)
    scheduler.ObserveCompletion(result->pick_id, result->endpoints.front(),
                                ResponseCompletion{0, usage.value_or(ResponseUsage{}), response_chunks, response_streaming});
  if (load_recorded && result) {
    scheduler.Release(*result);
    load_recorded = false;
    if (stats) stats->requests_in_flight--;
  }
  if (inflight_handle != flowcontrol::kNoHandle) {
    // Out of the eviction queue; for an evicted request this confirms the revocation.
    flow->UntrackInflight(inflight_handle);
    inflight_handle = flowcontrol::kNoHandle;
  }
  if (flow_dispatched) {
    // Capacity freed: the layer's next request may go; the band's fairness policy learns the
    // flow's usage.
    flow_dispatched = false;
    flow->Completed(request->priority, request->fairness_id, usage.value_or(ResponseUsage{}));
    flow->NotifyCapacity();
  }
  if (stats && model_counted && result->status == 200) {
    model_counted = false;
    ExtProcStats::ModelResponse r;
    const auto now = std::chrono::steady_clock::now();
    r.duration_s = std::chrono::duration<double>(now - received).count();
    r.response_bytes = response_bytes;
    if (response_streaming && first_byte != std::chrono::steady_clock::time_point{})
      r.ttft_s = std::chrono::duration<double>(first_byte - received).count();
    if (usage) {
      r.input_tokens = static_cast<int64_t>(usage->prompt_tokens);
      r.output_tokens = static_cast<int64_t>(usage->completion_tokens);
      if (usage->cached_tokens) r.cached_tokens = static_cast<int64_t>(*usage->cached_tokens);
    }
    stats->RecordModelResponse(incoming_model, target_model, r);
  }
}

void ExtProcSession::Impl::ParseUsage(bool final) {
  if ((!stats && !scheduler.WantsResponseMetadata() && !scheduler.Needs().completion) || !request) return;
  // Each API's usage shape (epp/request.h ParseResponseUsage), merged field by field into what
  // an earlier part of the stream reported (llm-d #2437: Anthropic's message_start and
  // message_delta come in different chunks; a part dropped from the kept body was read before).
  if (std::optional<ResponseUsage> got =
          ParseResponseUsage(request->parser, request->api, response_body, response_streaming)) {
    if (!usage) usage = ResponseUsage{};
    MergeUsage(*usage, *got);
  }
  if (final && usage && stats) {
    stats->prompt_tokens += static_cast<int64_t>(usage->prompt_tokens);
    stats->completion_tokens += static_cast<int64_t>(usage->completion_tokens);
    if (usage->cached_tokens) stats->cached_tokens += static_cast<int64_t>(*usage->cached_tokens);
  }
}

void ExtProcSession::Impl::ReserveBody(size_t first_chunk) {
  // The declared length, so that the chunks append without the string regrowing (each regrowth
  // copies what arrived so far: about one more copy of the body), plus the parser's padding. Only
  // once a body chunk has come (a stream that only claims a length reserves nothing) and never
  // past the body limit.
  // The reservation is taken from the buffer budget first: a client's content-length alone
  // cannot make the EPP hold memory the budget does not have (then the body grows as it comes).
  for (const auto& [k, v] : headers) {
    if (k != "content-length") continue;
    uint64_t declared = 0;
    if (!absl::SimpleAtoi(v, &declared) || declared <= first_chunk) return;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(declared, options.max_request_bytes)) + kRequestBodyPadding;
    if (Hold(&body_held, want)) body.reserve(want);
    return;
  }
}

absl::Status ExtProcSession::Impl::Process(pb::ProcessingRequest& in, std::vector<pb::ProcessingResponse>& out) {
  ReadMetadata(in);
  switch (in.request_case()) {
    case pb::ProcessingRequest::kRequestHeaders: {
      if (headers_seen) return absl::InvalidArgumentError("request_headers received twice");
      headers_seen = true;
      received = std::chrono::steady_clock::now();
      for (const auto& h : in.request_headers().headers().headers()) {
        std::string key = absl::AsciiStrToLower(h.key());
        headers.emplace_back(std::move(key), h.raw_value().empty() ? h.value() : h.raw_value());
      }
      StartTrace();
      if (in.request_headers().end_of_stream()) {
        body_done = true;
        Decide(out, /*bodyless=*/true);
      }
      // Otherwise the headers response waits for the body (FULL_DUPLEX_STREAMED).
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::kRequestBody: {
      if (!headers_seen) return absl::InvalidArgumentError("request_body before request_headers");
      std::string& chunk = *in.mutable_request_body()->mutable_body();
      if (stats) stats->request_body_bytes += static_cast<int64_t>(chunk.size());
      // The message's copy of the chunk goes as soon as it is read (or ignored).
      struct FreeChunk {
        std::string& c;
        ~FreeChunk() { std::string().swap(c); }
      } free_chunk{chunk};
      if (body_done || finished) return absl::OkStatus();  // after an immediate response: ignore
      if (body.size() + chunk.size() > options.max_request_bytes) {
        body_done = true;
        FreeBody();
        Immediate(413, absl::StrCat("request body larger than ", options.max_request_bytes, " bytes"), out);
        return absl::OkStatus();
      }
      if (body.empty()) ReserveBody(chunk.size());
      if (!Hold(&body_held, body.size() + chunk.size())) {
        body_done = true;
        FreeBody();
        if (stats) stats->budget_rejected++;
        Immediate(429,
                  absl::StrCat("the EPP holds ", options.buffer_budget->limit(),
                               " bytes of request bodies already (its buffer budget); retry later"),
                  out, kDroppedBufferBudget);
        return absl::OkStatus();
      }
      body.append(chunk);
      (void)Hold(&body_held, body.capacity());  // growth past the size: counted when it fits
      if (in.request_body().end_of_stream() || in.request_body().end_of_stream_without_message()) {
        body_done = true;
        Decide(out, /*bodyless=*/false);
      }
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::kRequestTrailers: {
      if (!body_done && !finished) {
        // Trailers end the body when it did not say end_of_stream itself.
        body_done = true;
        Decide(out, body.empty());
        if (finished) return absl::OkStatus();
      }
      if (flow_waiting) {  // answered in order, after the pick
        trailers_pending = true;
        return absl::OkStatus();
      }
      pb::ProcessingResponse r;
      r.mutable_request_trailers();
      out.push_back(std::move(r));
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::kResponseHeaders: {
      if (response_start == std::chrono::steady_clock::time_point{}) response_start = std::chrono::steady_clock::now();
      for (const auto& h : in.response_headers().headers().headers()) {
        const std::string key = absl::AsciiStrToLower(h.key());
        const std::string& v = h.raw_value().empty() ? h.value() : h.raw_value();
        if (key == "content-type" && v.find("text/event-stream") != std::string::npos) response_streaming = true;
      }
      if (request && request->stream) response_streaming = true;
      pb::ProcessingResponse r;
      pb::HeaderMutation* m = r.mutable_response_headers()->mutable_response()->mutable_header_mutation();
      if (result && result->status == 200)
        for (const auto& [key, value] : result->response_headers) SetHeader(m, key, value);
      out.push_back(std::move(r));
      if (in.response_headers().end_of_stream()) EndResponse();
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::kResponseBody: {
      const std::string& chunk = in.response_body().body();
      if (!chunk.empty() && first_byte == std::chrono::steady_clock::time_point{}) first_byte = std::chrono::steady_clock::now();
      response_bytes += static_cast<int64_t>(chunk.size());
      if (!chunk.empty()) response_chunks++;
      // A streamed response's first body chunk carries its first token: the response path's
      // timing for FirstTokenObserver plugins (the estimated-ttft-scorer's calibration). A
      // non-streamed body arrives whole at the end, so it times nothing.
      if (response_streaming && !first_token_seen && !chunk.empty() && result && result->status == 200 && result->pick_id != 0) {
        first_token_seen = true;
        scheduler.ObserveFirstToken(result->pick_id, result->endpoints.front());
      }
      // Keep at most 1 MiB for usage parsing; beyond that only the tail (where SSE usage is).
      // The kept part is held from the buffer budget: past it nothing more is kept (this
      // response's usage goes uncounted) rather than the EPP running out of memory.
      constexpr size_t kKeep = size_t{1} << 20, kTail = size_t{64} << 10;
      if (!response_keep_off && !chunk.empty()) {
        if (Hold(&response_held, std::min(response_body.size() + chunk.size(), kKeep + chunk.size()))) {
          response_body.append(chunk);
          if (response_body.size() > kKeep) {
            // Anthropic streams report the prompt side of usage at their start: read it before it goes.
            if (!response_body_truncated && request && request->parser == RequestParser::kAnthropic) ParseUsage(false);
            response_body.erase(0, response_body.size() - kTail);
            response_body_truncated = true;
          }
        } else {
          if (request && request->parser == RequestParser::kAnthropic) ParseUsage(false);
          std::string().swap(response_body);
          Release(&response_held);
          response_keep_off = true;
          if (stats) stats->budget_response_dropped++;
        }
      }
      const bool eos = in.response_body().end_of_stream() || in.response_body().end_of_stream_without_message();
      AppendChunks(chunk, eos, /*request_path=*/false, out);
      if (eos) {
        ParseUsage();
        // request-attribute-reporter: its numbers ride on the last body message, as in llm-d.
        if (!out.empty() && result && result->status == 200 && scheduler.WantsResponseMetadata()) {
          for (const ResponseMetadataEntry& e : scheduler.ResponseMetadata(usage.value_or(ResponseUsage{}))) {
            auto& ns = (*out.back().mutable_dynamic_metadata()->mutable_fields())[e.ns];
            (*ns.mutable_struct_value()->mutable_fields())[e.key].set_number_value(e.value);
          }
        }
        EndResponse();
        std::string().swap(response_body);
        Release(&response_held);
      }
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::kResponseTrailers: {
      pb::ProcessingResponse r;
      r.mutable_response_trailers();
      out.push_back(std::move(r));
      EndResponse();
      return absl::OkStatus();
    }
    case pb::ProcessingRequest::REQUEST_NOT_SET:
      return absl::InvalidArgumentError("ProcessingRequest without a request");
  }
  return absl::OkStatus();
}

ExtProcSession::ExtProcSession(const Scheduler& scheduler, const EndpointSource& endpoints, const ExtProcOptions& options,
                               ExtProcStats* stats)
    : impl_(std::make_unique<Impl>(scheduler, endpoints, options, stats)) {}
ExtProcSession::~ExtProcSession() = default;

absl::Status ExtProcSession::OnMessage(std::string_view request, std::vector<std::string>& responses) {
  pb::ProcessingRequest in;
  if (!in.ParseFromArray(request.data(), static_cast<int>(request.size())))
    return absl::InvalidArgumentError("not a serialized envoy.service.ext_proc.v3.ProcessingRequest");
  std::vector<pb::ProcessingResponse> out;
  absl::Status s = impl_->Process(in, out);
  for (const auto& r : out) responses.push_back(r.SerializeAsString());
  return s;
}

bool ExtProcSession::finished() const { return impl_->finished; }
const PickResult* ExtProcSession::result() const { return impl_->result ? &*impl_->result : nullptr; }
const InferenceRequest* ExtProcSession::request() const { return impl_->request ? &*impl_->request : nullptr; }
const std::string& ExtProcSession::served() const { return impl_->served; }

}  // namespace epp
