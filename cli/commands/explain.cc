#include "commands/explain.h"

#include <cerrno>
#include <cstring>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include <nlohmann/json.hpp>

#include "epp/runtime/extproc.h"
#include "epp/kv/subscriber.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "output.h"

namespace eppctl {

void SetupExplainCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ExplainCommandOptions>();
  CLI::App* cmd = app.add_subcommand("explain", "Explain why a request is routed where it is: filters, scores, outcome");
  auto* request = cmd->add_option("--request,-r", opts->request,
                                  "Request file: a capture envelope {path, headers, body} or a bare body ('-' = stdin)");
  auto* ext_proc = cmd->add_option("--ext-proc", opts->ext_proc,
                                   "An ext_proc stream captured by `eppctl serve --capture DIR` (one file): replay it and "
                                   "print what the EPP answered and why");
  request->excludes(ext_proc);
  cmd->add_option("--path", opts->path,
                  "Request path (overrides the capture's); it picks the parser as the gateway would, e.g. "
                  "/v1/chat/completions, /v1/messages, /inference/v1/generate. Default: the capture's, else the one "
                  "the body implies (messages: chat, input: responses, prompt: completions)");
  cmd->add_option("--history", opts->history, "JSONL of requests routed first, to warm the prefix index");
  auto* subset = cmd->add_option("--subset", opts->subset, "The gateway's subset hint: ip:port or ip, comma-separated or repeated");
  subset->allow_extra_args(false);
  cmd->add_option("--priority", opts->priority, "Request priority (negative = sheddable)")->capture_default_str();
  cmd->add_option("--output,-o", opts->output, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  AddPoolFlags(cmd, opts->pool);
  cmd->callback([opts, subset, &exit_code] {
    opts->subset_given = subset->count() > 0;
    if (opts->request.empty() && opts->ext_proc.empty()) {
      exit_code = PrintError(absl::InvalidArgumentError("explain needs --request FILE or --ext-proc FILE"));
      return;
    }
    exit_code = RunExplain(*opts);
  });
}

namespace {

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return ReadFile(path);
}

// Routes every request of a JSONL history through the scheduler (recorded, then released), as
// production would have before the request being explained.
absl::Status RouteHistory(const std::string& file, const Pool& pool) {
  std::ifstream in(file);
  if (!in) return absl::NotFoundError("cannot read history file '" + file + "': " + std::string(std::strerror(errno)));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto req = epp::ParseCaptureEnvelope(line, {}, nullptr, &pool.scheduler->Parsers());
    if (!req.ok()) return absl::InvalidArgumentError(file + ":" + std::to_string(n) + ": " + std::string(req.status().message()));
    epp::PickResult r = pool.scheduler->Pick(*req, pool.endpoints);
    pool.scheduler->Release(r);
  }
  return absl::OkStatus();
}

}  // namespace

// Replays the inbound messages of a captured ext_proc stream through a fresh session over the
// same pool and config, and prints every answer (protobuf JSON) and the decision's explanation.
int ExplainExtProc(const ExplainCommandOptions& o, Pool& pool) {
  std::ifstream in(o.ext_proc);
  if (!in) return PrintError(absl::NotFoundError("cannot read ext_proc capture '" + o.ext_proc + "': " + std::string(std::strerror(errno))));
  epp::EndpointSnapshot snapshot(pool.endpoints);
  epp::ExtProcOptions options;
  options.trace = true;
  epp::ExtProcSession session(*pool.scheduler, snapshot, options);
  std::string line;
  int n = 0, fed = 0;
  const bool json = o.output == "json";
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("message"))
      return PrintError(absl::InvalidArgumentError(o.ext_proc + ":" + std::to_string(n) + ": expected {\"direction\", \"message\"}"));
    if (j.value("direction", "") != "request") continue;  // the answers recorded then; we recompute them
    auto bytes = epp::ProcessingRequestFromJson(j["message"].dump());
    if (!bytes.ok()) return PrintError(absl::InvalidArgumentError(o.ext_proc + ":" + std::to_string(n) + ": " + std::string(bytes.status().message())));
    std::vector<std::string> responses;
    absl::Status st = session.OnMessage(*bytes, responses);
    ++fed;
    for (const std::string& r : responses) {
      auto rj = epp::ProcessingResponseToJson(r);
      if (!rj.ok()) continue;
      if (json) {
        out.push_back({{"after_request_line", n}, {"response", nlohmann::ordered_json::parse(*rj)}});
      } else {
        std::cout << "line " << n << " -> " << *rj << "\n";
      }
    }
    if (!st.ok()) {
      std::cerr << o.ext_proc << ":" << n << ": the EPP would close the stream: " << st.message() << "\n";
      break;
    }
    if (session.finished()) break;
  }
  const epp::PickResult* result = session.result();
  if (json) {
    nlohmann::ordered_json doc;
    doc["messages_replayed"] = fed;
    doc["responses"] = out;
    doc["explain"] = result ? nlohmann::ordered_json::parse(epp::PickResultToJson(session.request(), *result))
                            : nlohmann::ordered_json(nullptr);
    std::cout << doc.dump(2) << "\n";
  } else if (result) {
    std::cout << "\n" << epp::PickResultToText(session.request(), *result, UseColor());
  } else {
    std::cout << "\nno decision: the capture ends before the request body does (" << fed << " messages replayed)\n";
  }
  return result && result->status == 200 ? kExitOk : kExitFailure;
}

int RunExplain(const ExplainCommandOptions& o) {
  auto pool = BuildPool(o.pool);
  if (!pool.ok()) return PrintError(pool.status());
  if (!o.ext_proc.empty()) return ExplainExtProc(o, **pool);
  if (!o.history.empty()) {
    if (absl::Status s = RouteHistory(o.history, **pool); !s.ok()) return PrintError(s);
  }
  auto text = ReadInput(o.request);
  if (!text.ok()) return PrintError(text.status());

  epp::PickResult result;
  std::string body;  // the request body, for a token-producer that sends it on
  absl::StatusOr<epp::InferenceRequest> req =
      epp::ParseCaptureEnvelope(*text, o.path, &body, &(*pool)->scheduler->Parsers());  // the config's parsers
  if (!req.ok()) {
    std::cerr << o.request << ": request does not parse (the gateway would answer 400)\n";
    result = epp::PickResult::BadRequest(req.status());
  } else {
    req->priority = o.priority;
    epp::PickOptions po;
    po.trace = true;
    po.record = false;
    if (o.subset_given) {
      std::vector<std::string> entries;
      for (const std::string& s : o.subset)
        for (std::string& e : SplitList(s)) entries.push_back(std::move(e));
      po.subset = std::move(entries);
    }
    req->body = body;
    result = (*pool)->scheduler->Pick(*req, (*pool)->endpoints, po);
    req->body = {};
  }
  const epp::InferenceRequest* rp = req.ok() ? &*req : nullptr;
  const epp::KvEventsBinding* kv = (*pool)->scheduler->KvEvents();
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  if (o.output == "json") {
    std::string doc = epp::PickResultToJson(rp, result);
    if (kv) {  // the KV-event view next to the decision: {"kv_events": [...]} merged in
      auto j = nlohmann::ordered_json::parse(doc);
      j["kv_events"] = nlohmann::ordered_json::parse(epp::KvHoldingsJson(*kv->index, (*pool)->kv, now_us));
      doc = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    std::cout << doc << "\n";
  } else {
    std::cout << epp::PickResultToText(rp, result, UseColor());
    if (kv) std::cout << "\n" << epp::KvHoldingsText(*kv->index, (*pool)->kv, now_us);
  }
  return result.status == 200 ? kExitOk : kExitFailure;
}

}  // namespace eppctl
