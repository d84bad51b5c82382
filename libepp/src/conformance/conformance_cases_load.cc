// Checks: load and failure. A gateway opens one ext_proc stream per HTTP request, concurrently;
// under saturation the Protocol's error codes ask for 429 for sheddable requests (GIE's reference
// EPP: an objective with priority < 0 when every server is saturated) while standard ones are
// still picked; and a model server that dies must not turn into stream errors (which fail the
// HTTP request at the gateway): every request gets a pick or a 503/429.
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "conformance/conformance_impl.h"
#include "epp/runtime/http.h"

namespace epp::internal::conformance {

std::vector<ConformanceCase> Suite::LoadCases() {
  return {
      {{"concurrent-streams", "64 streams opened at once all get a pick within the pool",
        "ext_proc: one gRPC stream per HTTP request; a gateway opens them concurrently"},
       [](Suite& s) { return s.Concurrent(); }},
      {{"shedding-429", "with every model server saturated, a sheddable request gets 429 and a standard one a pick",
        "Protocol, Error codes: 429 when the request should be dropped (sheddable under load); reference EPP: "
        "priority < 0 and saturation"},
       [](Suite& s) { return s.Shedding(); }},
      {{"model-server-down", "after a model server stops, every request is still answered (a pick in the pool or 503)",
        "Protocol, Error codes (503 when no endpoint is ready); ext_proc: a stream closed with an error fails the "
        "request"},
       [](Suite& s) { return s.ServerDown(); }},
  };
}

Outcome Suite::Concurrent() {
  constexpr int kStreams = 64;
  std::vector<std::string> errors(kStreams);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      Stream s(*stub_, o_.stream_timeout);
      ready++;
      while (ready.load() < kStreams) std::this_thread::yield();
      RequestAnswer a = SendRequest(s, BuildProcessingRequests(Basic(absl::StrCat("concurrent ", i))), true);
      errors[i] = CheckPick(a, pool_set_);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i)
    if (!errors[i].empty()) return Fail(absl::StrCat("stream ", i + 1, " of ", kStreams, ": ", errors[i]));
  return Pass(absl::StrCat(kStreams, " concurrent streams, all picked within the pool"));
}

Outcome Suite::Shedding() {
  if (o_.sheddable_objective.empty())
    return Skip("no --sheddable-objective: name an InferenceObjective the EPP under test gives a negative priority");
  // Fill every server: two running and eight waiting long requests each (GIE's utilization
  // detector calls a server saturated from 5 waiting requests).
  std::vector<HttpRequest> load;
  for (const std::string& a : pool_)
    for (int i = 0; i < 10; ++i) {
      HttpRequest h;
      h.url = absl::StrCat("http://", a, "/v1/completions");
      h.method = "POST";
      h.headers = {"Content-Type: application/json"};
      h.body = nlohmann::json({{"model", kModel}, {"prompt", "keep busy"}, {"max_tokens", 20000}}).dump();
      h.timeout = std::chrono::milliseconds(600000);
      load.push_back(std::move(h));
    }
  load_thread_ = std::thread([load = std::move(load)] { (void)HttpFetchAll(load); });
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  RequestAnswer last;
  int tries = 0;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    HttpRequestCapture c = Basic("sheddable");
    c.headers.emplace_back(std::string(kObjectiveHeader), o_.sheddable_objective);
    last = Request(c);
    ++tries;
    if (last.immediate && last.immediate_status == 429) break;
  }
  if (!(last.immediate && last.immediate_status == 429)) {
    std::string seen = last.immediate ? absl::StrCat("ImmediateResponse ", last.immediate_status, " (", last.immediate_body, ")")
                                      : (last.Destination() ? "a pick of " + *last.Destination() : last.problem);
    return Fail(absl::StrCat("no 429 within 15 s (", tries, " tries) with every server 2 running + 8 waiting; last answer: ", seen));
  }
  RequestAnswer std_req = Request(Basic("standard priority under saturation"));
  std::string why = CheckPick(std_req, pool_set_);
  if (!why.empty()) return Fail("the sheddable request got 429, but a request without an objective: " + why);
  return Pass(absl::StrCat("429 after ", tries, " tries; a standard request still picked ", *std_req.Destination()));
}

Outcome Suite::ServerDown() {
  const std::string dead = pool_[0];
  sims_[0]->Stop();
  int picks = 0, to_dead = 0, unavailable = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    RequestAnswer a = Request(Basic(absl::StrCat("after a server died ", i)));
    if (!a.problem.empty() && !a.immediate) return Fail(absl::StrCat("request ", i + 1, " after ", dead, " stopped: ", a.problem));
    if (a.immediate) {
      if (a.immediate_status != 503 && a.immediate_status != 429)
        return Fail(absl::StrCat("request ", i + 1, ": ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")"));
      ++unavailable;
      continue;
    }
    std::string why = CheckPick(a, pool_set_);
    if (!why.empty()) return Fail(absl::StrCat("request ", i + 1, ": ", why));
    ++picks;
    if (Primary(*a.Destination()) == dead) ++to_dead;
  }
  return Pass(absl::StrCat("20 answers over 2 s after ", dead, " stopped: ", picks, " picks (", to_dead,
                           " of them to the stopped server), ", unavailable, " 503/429"));
}

}  // namespace epp::internal::conformance
