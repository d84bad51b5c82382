// epp/tools/conformance.h in process: the suite against libepp's own EppServer through the target form
// (the suite rewrites the endpoints file the server watches), option errors, and the formats.
#include "epp/tools/conformance.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "epp/runtime/serve.h"

namespace epp {
namespace {

namespace fs = std::filesystem;

TEST(Conformance, ChecksAreUniqueAndCited) {
  std::set<std::string> ids;
  for (const auto& c : ConformanceChecks()) {
    EXPECT_TRUE(ids.insert(c.id).second) << c.id;
    EXPECT_FALSE(c.title.empty()) << c.id;
    EXPECT_FALSE(c.cites.empty()) << c.id;
  }
  EXPECT_GE(ids.size(), 18u);
}

TEST(Conformance, SelectedChecksPassAgainstEppServer) {
  const fs::path dir = fs::temp_directory_path() / ("epp-conformance-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string pool = (dir / "pool.yaml").string();
  std::ofstream(pool) << "endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n";
  ServeConfig c;
  c.endpoints_file = pool;
  c.listen_address = "127.0.0.1";
  c.grpc_port = c.health_port = 0;
  c.metrics_port = -1;
  c.tls = false;
  auto server = EppServer::Start(c);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetReady(true);

  ConformanceOptions o;
  o.target = "127.0.0.1:" + std::to_string((*server)->grpc_port());
  o.health_target = "127.0.0.1:" + std::to_string((*server)->health_port());
  o.endpoints_out = pool;
  o.only = {"health-services", "destination-header-and-metadata", "subset-empty-503", "request-body-echo",
            "response-path-streaming"};
  std::vector<std::string> seen;
  auto report = RunConformance(o, [&](const ConformanceResult& r) { seen.push_back(r.check.id); });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passed()) << FormatConformanceText(*report);
  EXPECT_EQ(report->count(ConformanceOutcome::kPass), 5) << FormatConformanceText(*report);
  EXPECT_EQ(seen.size(), ConformanceChecks().size());  // skipped ones are reported too
  EXPECT_EQ(report->pool.size(), 3u);
  (*server)->Shutdown(std::chrono::milliseconds(0));
  fs::remove_all(dir);
}

TEST(Conformance, BadOptionsAreInvalidArgument) {
  ConformanceOptions o;
  EXPECT_EQ(RunConformance(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.target = "127.0.0.1:1";
  EXPECT_EQ(RunConformance(o).status().code(), absl::StatusCode::kInvalidArgument);  // no endpoints_out
  o.endpoints_out = "/nonexistent-dir/x.yaml";
  o.simulators = 1;
  auto r = RunConformance(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--simulators"), std::string_view::npos) << r.status();
  o.simulators = 3;
  o.skip = {"nope"};
  r = RunConformance(o);
  EXPECT_NE(r.status().message().find("unknown check 'nope'"), std::string_view::npos) << r.status();
}

TEST(Conformance, FormatsEscapeAndCount) {
  ConformanceReport r;
  r.target = "127.0.0.1:1";
  ConformanceResult fail;
  fail.check = ConformanceChecks()[1];
  fail.outcome = ConformanceOutcome::kFail;
  fail.detail = "header '<a&b>' \"quoted\"";
  ConformanceResult skip;
  skip.check = ConformanceChecks()[0];
  skip.outcome = ConformanceOutcome::kSkip;
  skip.detail = "no health address";
  r.results = {skip, fail};
  EXPECT_FALSE(r.passed());
  const std::string junit = FormatConformanceJUnit(r);
  EXPECT_NE(junit.find("tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("header &apos;&lt;a&amp;b&gt;&apos; &quot;quoted&quot;"), std::string::npos) << junit;
  EXPECT_EQ(junit.find("<a&b>"), std::string::npos);
  const std::string json = FormatConformanceJson(r);
  EXPECT_NE(json.find("\"passed\": false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"fail\": 1"), std::string::npos) << json;
  const std::string text = FormatConformanceText(r);
  EXPECT_NE(text.find("FAIL  " + fail.check.id), std::string::npos) << text;
  EXPECT_NE(text.find("cites: " + fail.check.cites), std::string::npos) << text;
}

}  // namespace
}  // namespace epp
