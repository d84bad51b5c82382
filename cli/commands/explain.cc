#include "commands/explain.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include "epp/request.h"
#include "epp/scheduler.h"
#include "output.h"

namespace eppctl {

void SetupExplainCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ExplainCommandOptions>();
  CLI::App* cmd = app.add_subcommand("explain", "Explain why a request is routed where it is: filters, scores, outcome");
  cmd->add_option("--request,-r", opts->request, "Request file: a capture envelope {path, headers, body} or a bare body ('-' = stdin)")
      ->required();
  cmd->add_option("--path", opts->path, "Request path (overrides the capture's), e.g. /v1/chat/completions");
  cmd->add_option("--history", opts->history, "JSONL of requests routed first, to warm the prefix index");
  auto* subset = cmd->add_option("--subset", opts->subset, "The gateway's subset hint: ip:port or ip, comma-separated or repeated");
  subset->allow_extra_args(false);
  cmd->add_option("--priority", opts->priority, "Request priority (negative = sheddable)")->capture_default_str();
  cmd->add_option("--output,-o", opts->output, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  AddPoolFlags(cmd, opts->pool);
  cmd->callback([opts, subset, &exit_code] {
    opts->subset_given = subset->count() > 0;
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
  if (!in) return absl::NotFoundError("cannot read history file '" + file + "'");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto req = epp::ParseCaptureEnvelope(line);
    if (!req.ok()) return absl::InvalidArgumentError(file + ":" + std::to_string(n) + ": " + std::string(req.status().message()));
    epp::PickResult r = pool.scheduler->Pick(*req, pool.endpoints);
    pool.scheduler->Release(r);
  }
  return absl::OkStatus();
}

}  // namespace

int RunExplain(const ExplainCommandOptions& o) {
  auto pool = BuildPool(o.pool);
  if (!pool.ok()) return PrintError(pool.status());
  if (!o.history.empty()) {
    if (absl::Status s = RouteHistory(o.history, **pool); !s.ok()) return PrintError(s);
  }
  auto text = ReadInput(o.request);
  if (!text.ok()) return PrintError(text.status());

  epp::PickResult result;
  absl::StatusOr<epp::InferenceRequest> req = epp::ParseCaptureEnvelope(*text, o.path);
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
    result = (*pool)->scheduler->Pick(*req, (*pool)->endpoints, po);
  }
  const epp::InferenceRequest* rp = req.ok() ? &*req : nullptr;
  if (o.output == "json") {
    std::cout << epp::PickResultToJson(rp, result) << "\n";
  } else {
    std::cout << epp::PickResultToText(rp, result, UseColor());
  }
  return result.status == 200 ? kExitOk : kExitFailure;
}

}  // namespace eppctl
