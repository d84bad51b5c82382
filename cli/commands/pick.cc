#include "commands/pick.h"

#include <cerrno>
#include <cstring>
#include <chrono>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "epp/request.h"
#include "epp/scheduler.h"
#include "output.h"

namespace eppctl {

void SetupPickCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<PickCommandOptions>();
  CLI::App* cmd = app.add_subcommand("pick", "Dry-run a JSONL stream of requests: where each would go");
  cmd->add_option("--trace,-t", opts->trace, "JSONL: one capture envelope or bare body (with optional \"path\") per line; '-' = stdin")
      ->required();
  cmd->add_option("--path", opts->path, "Path for every line (overrides the lines' own; a line without one gets the path its body implies: messages: "
                  "chat, input: responses, prompt: completions)");
  cmd->add_option("--concurrency", opts->concurrency,
                  "Requests in flight at once: each stays in flight for the next N-1 picks (1 = one at a time)")
      ->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--output,-o", opts->output, "text (summary) or jsonl (one decision per line)")
      ->check(CLI::IsMember({"text", "jsonl", "json"}))->capture_default_str();
  AddPoolFlags(cmd, opts->pool);
  cmd->callback([opts, &exit_code] { exit_code = RunPick(*opts); });
}

int RunPick(const PickCommandOptions& o) {
  auto pool_or = BuildPool(o.pool);
  if (!pool_or.ok()) return PrintError(pool_or.status());
  const Pool& pool = **pool_or;
  std::ifstream file;
  std::istream* in = &std::cin;
  if (o.trace != "-") {
    file.open(o.trace);
    if (!file) return PrintError(absl::NotFoundError("cannot read trace file '" + o.trace + "': " + std::string(std::strerror(errno))));
    in = &file;
  }
  const bool jsonl = o.output != "text";
  std::map<std::string, int64_t> per_endpoint;
  std::map<int, int64_t> per_status;
  // With several profiles (P/D): picks per profile and endpoint, and the handler's decisions.
  std::map<std::string, std::map<std::string, int64_t>> per_profile;
  std::map<std::string, int64_t> per_decision;
  double ratio_sum = 0;
  int64_t ratio_n = 0, total = 0;
  double sched_s = 0;
  std::deque<epp::PickResult> in_flight;
  std::string line;
  int n = 0;
  while (std::getline(*in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++total;
    epp::PickResult r;
    const auto t0 = std::chrono::steady_clock::now();
    std::string body;  // for a token-producer that sends it on
    absl::StatusOr<epp::InferenceRequest> req = epp::ParseCaptureEnvelope(line, o.path, &body, &pool.scheduler->Parsers());
    if (!req.ok()) {
      r = epp::PickResult::BadRequest(req.status());
    } else {
      req->body = body;
      r = pool.scheduler->Pick(*req, pool.endpoints);
      req->body = {};
    }
    sched_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    per_status[r.status]++;
    if (r.status == 200) {
      per_endpoint[r.endpoints.front()]++;
      for (const epp::ProfilePick& pp : r.profile_picks)
        if (pp.ran && !pp.endpoints.empty()) per_profile[pp.profile][pp.endpoints.front()]++;
      if (!r.profiles_reason.empty()) per_decision[r.profiles_reason.substr(0, r.profiles_reason.find(' '))]++;
      if (r.prefix_blocks > 0) {
        ratio_sum += static_cast<double>(r.prefix_match_blocks) / r.prefix_blocks;
        ++ratio_n;
      }
    }
    if (jsonl) {
      nlohmann::ordered_json j;
      j["line"] = n;
      j["status"] = r.status;
      j["endpoint"] = r.endpoints.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.endpoints.front());
      j["fallbacks"] = r.endpoints.size() > 1 ? std::vector<std::string>(r.endpoints.begin() + 1, r.endpoints.end())
                                              : std::vector<std::string>{};
      if (req.ok()) j["model"] = req->model;
      j["prefix_blocks"] = r.prefix_blocks;
      j["prefix_match_blocks"] = r.prefix_match_blocks;
      j["reason"] = r.reason;
      if (pool.scheduler->ProfileNames().size() > 1) {
        nlohmann::ordered_json picks = nlohmann::ordered_json::array();
        for (const epp::ProfilePick& pp : r.profile_picks) {
          nlohmann::ordered_json jp = {{"profile", pp.profile}, {"ran", pp.ran}, {"endpoints", pp.endpoints}};
          if (!pp.reason.empty()) jp["reason"] = pp.reason;
          if (!pp.error.empty()) jp["error"] = pp.error;
          picks.push_back(std::move(jp));
        }
        j["profile_picks"] = std::move(picks);
        if (!r.profiles_reason.empty()) j["profiles_reason"] = r.profiles_reason;
      }
      if (!r.headers.empty()) {
        nlohmann::ordered_json h = nlohmann::ordered_json::object();
        for (const auto& [k, v] : r.headers) h[k] = v;
        j["headers"] = std::move(h);
      }
      std::cout << j.dump() << "\n";
    }
    in_flight.push_back(std::move(r));
    while (static_cast<int>(in_flight.size()) >= o.concurrency) {
      pool.scheduler->Release(in_flight.front());
      in_flight.pop_front();
    }
  }
  if (!jsonl) {
    std::cout << total << (total == 1 ? " request" : " requests");
    for (const auto& [status, count] : per_status) std::cout << "  " << status << ": " << count;
    std::cout << "\n\npicks per endpoint\n";
    for (const epp::Endpoint& e : pool.endpoints) {
      const int64_t c = per_endpoint.count(e.address) ? per_endpoint.at(e.address) : 0;
      char pct[32];
      std::snprintf(pct, sizeof pct, "%5.1f%%", total ? 100.0 * static_cast<double>(c) / static_cast<double>(total) : 0.0);
      std::cout << "  " << e.address << "  " << c << "  " << pct << "\n";
    }
    if (pool.scheduler->ProfileNames().size() > 1) {
      for (const auto& [profile, counts] : per_profile) {
        std::cout << "\npicks of profile " << profile << "\n";
        for (const auto& [endpoint, c] : counts) std::cout << "  " << endpoint << "  " << c << "\n";
      }
      if (!per_decision.empty()) {
        std::cout << "\nprofile handler decisions\n";
        for (const auto& [d, c] : per_decision) std::cout << "  " << d << "  " << c << "\n";
      }
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "\nmean prefix match ratio %.3f over %lld requests with at least one block\n",
                  ratio_n ? ratio_sum / static_cast<double>(ratio_n) : 0.0, static_cast<long long>(ratio_n));
    std::cout << buf;
    std::snprintf(buf, sizeof buf, "%.0f picks per second (parse + schedule, %.3f s)\n",
                  sched_s > 0 ? static_cast<double>(total) / sched_s : 0.0, sched_s);
    std::cout << buf;
  }
  // Exit 1 when any request was not routed (400, 429 or 503), as for a failed check.
  return per_status.size() > (per_status.count(200) ? 1u : 0u) ? kExitFailure : kExitOk;
}

}  // namespace eppctl
