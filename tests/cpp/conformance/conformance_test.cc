// epp/tools/conformance.h in process: the suite against libepp's own EppServer through the target form
// (the suite lends the endpoints file the server watches and gives it back), option errors, the
// transport probe (TLS vs plaintext) and the formats.
#include "epp/tools/conformance.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "conformance/conformance_impl.h"
#include "epp/runtime/serve.h"
#include "testing/epp_testing.h"

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

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory of its own, removed at the end.
struct TempDir {
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
  fs::path path;
};

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
  o.stream_timeout *= epp::testing::TimeScale();  // a 200 KB echo under TSan takes longer than 5 s
  o.only = {"health-services", "destination-header-and-metadata", "subset-empty-503", "request-body-echo",
            "response-path-streaming"};
  std::vector<std::string> seen;
  auto report = RunConformance(o, [&](const ConformanceResult& r) { seen.push_back(r.check.id); });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passed()) << FormatConformanceText(*report);
  EXPECT_EQ(report->count(ConformanceOutcome::kPass), 5) << FormatConformanceText(*report);
  EXPECT_EQ(seen.size(), ConformanceChecks().size());  // skipped ones are reported too
  EXPECT_EQ(report->pool.size(), 3u);
  // The server's file is given back as it was.
  EXPECT_EQ(Slurp(pool), "endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n");
  EXPECT_EQ(report->endpoints_file_after, "restored to what it held before (50 bytes)");
  EXPECT_NE(FormatConformanceText(*report).find("endpoints file: " + pool + " (after the run: restored"), std::string::npos);
  (*server)->Shutdown(std::chrono::milliseconds(0));
  fs::remove_all(dir);
}

// The user's --endpoints-out file: written in place and given back (the same inode and mode,
// its bytes), removed when the suite created it, left alone when something else changed it.
TEST(Conformance, LentFileIsGivenBack) {
  using internal::conformance::LentFile;
  TempDir d("epp-lent-file-test");
  const std::string user = d / "pool.yaml", backup = d / "backup";
  std::ofstream(user) << "endpoints: []\n";
  ASSERT_EQ(chmod(user.c_str(), 0600), 0);
  struct stat before {};
  ASSERT_EQ(stat(user.c_str(), &before), 0);
  {
    LentFile f;
    ASSERT_TRUE(f.Lend(user, "endpoints: [suite]\n", backup).ok());
    EXPECT_EQ(Slurp(user), "endpoints: [suite]\n");
    EXPECT_EQ(Slurp(backup), "endpoints: []\n");  // a copy while lent
    EXPECT_EQ(f.GiveBack(), "restored to what it held before (14 bytes)");
    EXPECT_EQ(f.GiveBack(), "restored to what it held before (14 bytes)");  // once
    EXPECT_FALSE(f.backup_kept());
  }
  struct stat after {};
  ASSERT_EQ(stat(user.c_str(), &after), 0);
  EXPECT_EQ(Slurp(user), "endpoints: []\n");
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(backup));

  const std::string fresh = d / "new.yaml";
  {
    LentFile f;
    ASSERT_TRUE(f.Lend(fresh, "endpoints: [suite]\n", backup).ok());
    EXPECT_TRUE(fs::exists(fresh));
  }  // given back by the destructor
  EXPECT_FALSE(fs::exists(fresh));

  {
    LentFile f;
    ASSERT_TRUE(f.Lend(user, "endpoints: [suite]\n", backup).ok());
    std::ofstream(user) << "endpoints: [someone else's]\n";
    EXPECT_NE(f.GiveBack().find("left as found"), std::string::npos);
    EXPECT_TRUE(f.backup_kept());
  }
  EXPECT_EQ(Slurp(user), "endpoints: [someone else's]\n");
  EXPECT_EQ(Slurp(backup), "endpoints: []\n");

  LentFile dir;
  auto st = dir.Lend(d.path.string(), "x", backup);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a regular file"), std::string_view::npos) << st;
  LentFile nowhere;
  EXPECT_FALSE(nowhere.Lend(d / "no-such-dir/pool.yaml", "x", backup).ok());
  EXPECT_FALSE(fs::exists(d / "no-such-dir"));
}

// What a signal handler calls: the lent file given back at once; a no-op afterwards.
TEST(Conformance, RestoreOnSignalGivesTheFileBack) {
  using internal::conformance::LentFile;
  TempDir d("epp-lent-signal-test");
  const std::string user = d / "pool.yaml", fresh = d / "new.yaml";
  std::ofstream(user) << "endpoints: []\n";
  LentFile f;
  ASSERT_TRUE(f.Lend(user, "endpoints: [suite]\n", d / "backup").ok());
  RestoreConformanceEndpointsFile();
  EXPECT_EQ(Slurp(user), "endpoints: []\n");
  RestoreConformanceEndpointsFile();
  EXPECT_EQ(Slurp(user), "endpoints: []\n");
  f.GiveBack();  // (the process would have ended; the next run takes the handler's slot)
  LentFile g;
  ASSERT_TRUE(g.Lend(fresh, "endpoints: [suite]\n", d / "backup2").ok());
  RestoreConformanceEndpointsFile();
  EXPECT_FALSE(fs::exists(fresh));
}

// The transport probe against epp's own server with and without TLS, and the suite's one-line
// error when --tls does not match, before its start-up timeout.
TEST(Conformance, TransportMismatchIsSaidAtOnce) {
  using internal::conformance::ProbeTransport;
  using internal::conformance::TransportProbe;
  TempDir d("epp-conformance-tls-test");
  for (bool tls : {true, false}) {
    const std::string pool = d / (tls ? "tls.yaml" : "plain.yaml");
    const std::string before = "endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n";
    std::ofstream(pool) << before;
    ServeConfig c;
    c.endpoints_file = pool;
    c.listen_address = "127.0.0.1";
    c.grpc_port = c.health_port = 0;
    c.metrics_port = -1;
    c.tls = tls;
    auto server = EppServer::Start(c);
    ASSERT_TRUE(server.ok()) << server.status();
    (*server)->SetReady(true);
    const std::string target = "127.0.0.1:" + std::to_string((*server)->grpc_port());
    for (bool tls_first : {true, false}) {
      TransportProbe p = ProbeTransport(target, tls_first, std::chrono::milliseconds(1000));
      EXPECT_EQ(p.kind, tls ? TransportProbe::kTls : TransportProbe::kPlaintext) << p.detail;
    }
    ConformanceOptions o;
    o.target = target;
    o.endpoints_out = pool;
    o.tls = !tls;
    o.startup_timeout = std::chrono::milliseconds(20000);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = RunConformance(o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string want = tls ? "the target speaks TLS; add --tls (" : "the target speaks plaintext; drop --tls (";
    EXPECT_EQ(std::string(r.status().message()).rfind(want, 0), 0u) << r.status();
    EXPECT_EQ(std::string(r.status().message()).find('\n'), std::string::npos) << r.status();
    EXPECT_LT(seconds, 5.0);
    EXPECT_EQ(Slurp(pool), before);  // given back on the error path too
    (*server)->Shutdown(std::chrono::milliseconds(0));
  }
  // Nothing listening: refused; not a HOST:PORT: not probed.
  EXPECT_EQ(ProbeTransport("127.0.0.1:1", false, std::chrono::milliseconds(500)).kind, TransportProbe::kRefused);
  EXPECT_EQ(ProbeTransport("unix:/tmp/x.sock", false, std::chrono::milliseconds(500)).kind, TransportProbe::kUnknown);
}

TEST(Conformance, BadOptionsAreInvalidArgument) {
  ConformanceOptions o;
  EXPECT_EQ(RunConformance(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.target = "127.0.0.1:1";
  EXPECT_EQ(RunConformance(o).status().code(), absl::StatusCode::kInvalidArgument);  // no endpoints_out
  o.launch = "true";
  o.target.clear();
  o.endpoints_out = "/tmp/x.yaml";
  auto launch_out = RunConformance(o);
  EXPECT_EQ(launch_out.status().code(), absl::StatusCode::kInvalidArgument);  // endpoints_out is for target
  EXPECT_NE(launch_out.status().message().find("--endpoints-out goes with --target"), std::string_view::npos) << launch_out.status();
  o.launch.clear();
  o.target = "127.0.0.1:1";
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
