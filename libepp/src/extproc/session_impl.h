// Private: the ext_proc session state machine over generated protobuf messages. The public
// ExtProcSession (serialized bytes) and the gRPC server both drive it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "epp/runtime/extproc.h"
#include "flowcontrol/controller.h"

namespace epp {

namespace extproc_pb = ::envoy::service::ext_proc::v3;

struct ExtProcSession::Impl {
  Impl(const Scheduler& s, const EndpointSource& e, const ExtProcOptions& o, ExtProcStats* st)
      : scheduler(s), source(e), options(o), stats(st) {}
  ~Impl();

  // Handles one inbound message, appending responses. kInvalidArgument on a protocol violation.
  // A request body chunk is taken out of `in` (its memory freed once copied).
  absl::Status Process(extproc_pb::ProcessingRequest& in, std::vector<extproc_pb::ProcessingResponse>& out);
  // The first message of a stream past ExtProcServerOptions::max_streams: answered 429
  // (rejected-stream-limit) whatever it is; the exchange ends.
  void RefuseStream(std::vector<extproc_pb::ProcessingResponse>& out);

  const Scheduler& scheduler;
  const EndpointSource& source;
  const ExtProcOptions& options;
  ExtProcStats* stats;

  bool headers_seen = false;
  bool body_done = false;
  bool finished = false;  // an ImmediateResponse was sent
  std::vector<std::pair<std::string, std::string>> headers;  // lower-cased names
  std::string body;
  void ReserveBody(size_t first_chunk);  // from content-length, at the first body chunk
  // options.buffer_budget: what this stream holds of it for `body` and for `response_body`.
  uint64_t body_held = 0, response_held = 0;
  // Holds `*held` at >= `want` bytes of the budget; false when they do not fit (nothing changes).
  bool Hold(uint64_t* held, uint64_t want);
  void Release(uint64_t* held);
  void FreeBody();  // the request body and its rewrite go, and their share of the budget
  bool response_keep_off = false;  // the budget refused the response's kept part: keep nothing
  std::optional<std::vector<std::string>> subset;
  std::optional<PickResult> result;
  std::optional<InferenceRequest> request;
  bool load_recorded = false;
  std::string served;
  // Response path.
  bool response_streaming = false;
  bool response_done = false;
  std::string response_body;       // bounded, for usage parsing
  bool response_body_truncated = false;
  int64_t response_chunks = 0;    // non-empty response body chunks (a stream's token count without usage)
  bool first_token_seen = false;  // the first body chunk of a streamed response went to the scheduler
  std::optional<ResponseUsage> usage;  // the response's token usage (ParseUsage), when it had one
  // GIE's request metrics: when the request arrived, the model asked for and the one sent (after
  // a rewrite), when the first response byte came, the response's size.
  std::chrono::steady_clock::time_point received{};
  std::chrono::steady_clock::time_point first_byte{};
  std::string incoming_model, target_model;
  bool model_counted = false;  // a parsed request was counted (its end or error is recorded once)
  int64_t response_bytes = 0;

  // Flow control (set by ExtProcServer's reactor; a bare session never queues). Decide hands a
  // parsed request to `flow` and returns without an answer; the layer then calls `flow_done`
  // exactly once (on its dispatcher thread, or on the caller's before Enqueue / Cancel returns),
  // which takes the stream's lock and calls Resume. `flow_hold` runs before Enqueue: the stream
  // stays alive until `flow_done` has run.
  std::shared_ptr<flowcontrol::FlowController> flow;
  std::function<void()> flow_hold;
  std::function<void(const flowcontrol::Completion&)> flow_done;
  flowcontrol::Handle flow_handle = flowcontrol::kNoHandle;
  bool flow_waiting = false;     // enqueued, no outcome yet
  bool flow_dispatched = false;  // dispatched and picked: its end frees capacity in the layer
  bool trailers_pending = false; // request trailers came while waiting: answered after the pick
  int64_t flow_wait_us = -1;     // time in the layer; -1: did not pass through it
  // The outcome of the wait: `alive` false when the stream has ended meanwhile (nothing is
  // picked then). Appends the pick (or the layer's answer) to `out`.
  void Resume(const flowcontrol::Completion& done, bool alive, std::vector<extproc_pb::ProcessingResponse>& out);
  // In-flight eviction (the layer's enableEviction): a dispatched request is tracked with
  // `flow_evict` (set by the reactor, safe to call after the stream ended) until its response ends.
  std::function<void(const flowcontrol::DropAnswer&)> flow_evict;
  flowcontrol::Handle inflight_handle = flowcontrol::kNoHandle;
  bool evicted = false;
  // The layer evicted this request: unless its response has ended, answers `a` (429 "evicted")
  // and ends the exchange; the load is released and the revocation confirmed at once.
  void Evict(const flowcontrol::DropAnswer& a, std::vector<extproc_pb::ProcessingResponse>& out);

  // Tracing (options.tracer): the stream's span context (sampled or not), the parent it
  // continues, and the child spans of a sampled request so far; exported once, at the end.
  std::optional<TraceContext> trace;
  SpanId trace_parent{};
  std::vector<Span> trace_spans;
  int64_t trace_offset_ns = 0;  // steady clock -> Unix epoch
  std::chrono::steady_clock::time_point response_start{}, response_end{};
  int answered_status = 0;  // the ImmediateResponse's status, when one was sent
  bool trace_done = false;
  void StartTrace();
  void FinishTrace();
  bool Sampled() const { return trace && trace->sampled; }
  int64_t UnixNs(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() + trace_offset_ns;
  }

 private:
  // Decide's state carried over a wait in the layer.
  std::string pending_body_;  // the rewritten body, when `pending_changed_`
  std::string pending_rule_;
  bool pending_changed_ = false;
  // Decide after the parse and rewrite: Pick and the answer.
  void Dispatch(std::chrono::steady_clock::time_point t0, std::vector<extproc_pb::ProcessingResponse>& out);
  void ReadMetadata(const extproc_pb::ProcessingRequest& in);
  std::string Path() const;
  void Decide(std::vector<extproc_pb::ProcessingResponse>& out, bool bodyless);
  // `dropped_reason`, when given, goes out as x-llm-d-request-dropped-reason.
  void Immediate(int status, const std::string& message, std::vector<extproc_pb::ProcessingResponse>& out,
                 std::string_view dropped_reason = {});
  void EmitPick(const std::string& new_body, bool body_changed, bool bodyless,
                std::vector<extproc_pb::ProcessingResponse>& out);
  void EndResponse();
  // Merges the usage the kept response body reports into `usage`; `final`: the response ended
  // (the totals go to the stats).
  void ParseUsage(bool final = true);
  // The model the request is sent as: the rewrite header's (llm-d's name or GIE's), else the
  // cluster's InferenceModelRewrite rule for it; records the rule in `result`'s trace. Returns
  // false after answering 400 (a body that cannot be rewritten).
  bool RewriteModel(bool unparsed, std::string& new_body, bool& changed, std::string& rule,
                    std::vector<extproc_pb::ProcessingResponse>& out);
  int ObjectivePriority() const;
};

}  // namespace epp
