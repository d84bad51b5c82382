// The simulator's P/D roles over loopback HTTP: a decode server given x-prefiller-host-port runs
// the prefill on that server first (as llm-d's sidecar does), counts the hop and the KV transfer,
// and returns a failed prefill's answer to the client; a prefill server ignores the header.
#include <httplib.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "epp/tools/sim.h"

namespace epp {
namespace {

std::unique_ptr<SimHttpServer> Start(const std::string& role, double fail_rate = 0) {
  SimHttpOptions o;
  o.role = role;
  o.time_scale = 0.01;
  o.threads = 4;
  o.fail_rate = fail_rate;
  auto s = SimHttpServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// The value of an unlabelled sample in the server's /metrics, or -1.
double Counter(SimHttpServer& s, const std::string& name) {
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
}

httplib::Result Chat(SimHttpServer& s, const std::string& prefiller) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  httplib::Headers h;
  if (!prefiller.empty()) h.emplace("x-prefiller-host-port", prefiller);
  const std::string body = R"({"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":3,"messages":[{"role":"user","content":")" +
                           std::string(3000, 'k') + R"("}]})";
  return c.Post("/v1/chat/completions", h, body, "application/json");
}

TEST(SimRolesTest, DecodeServerRunsThePrefillHopAndCountsTheTransfer) {
  auto prefill = Start("prefill");
  auto decode = Start("decode");
  ASSERT_TRUE(prefill && decode);
  auto r = Chat(*decode, "127.0.0.1:" + std::to_string(prefill->port()));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Counter(*decode, "epp_sim_prefill_hops_total"), 1);
  EXPECT_EQ(Counter(*prefill, "epp_sim_remote_prefills_total"), 1);
  // 3000 chars -> ~754 prompt tokens, none cached here, at 131072 bytes each.
  EXPECT_GT(Counter(*decode, "epp_sim_kv_transfer_bytes_total"), 700.0 * 131072);
  EXPECT_GT(Counter(*decode, "epp_sim_kv_transfer_seconds_total"), 0);

  // Without the header the decode server does everything itself.
  auto local = Chat(*decode, "");
  ASSERT_TRUE(local);
  EXPECT_EQ(local->status, 200);
  EXPECT_EQ(Counter(*decode, "epp_sim_prefill_hops_total"), 1);
}

TEST(SimRolesTest, APrefillFailureReachesTheClientAndPrefillServersIgnoreTheHeader) {
  auto broken = Start("prefill", /*fail_rate=*/1.0);
  auto decode = Start("decode");
  ASSERT_TRUE(broken && decode);
  auto r = Chat(*decode, "127.0.0.1:" + std::to_string(broken->port()));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << "the prefill's own answer";
  EXPECT_NE(r->body.find("simulated server failure"), std::string::npos) << r->body;
  EXPECT_EQ(Counter(*decode, "epp_sim_prefill_hop_errors_total"), 1);

  auto bad = Chat(*decode, "not-an-address");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("x-prefiller-host-port: expected ip:port"), std::string::npos) << bad->body;

  auto prefill = Start("prefill");
  ASSERT_TRUE(prefill);
  auto ignored = Chat(*prefill, "127.0.0.1:" + std::to_string(decode->port()));
  ASSERT_TRUE(ignored);
  EXPECT_EQ(ignored->status, 200);
  EXPECT_EQ(Counter(*prefill, "epp_sim_prefill_hops_total"), 0);
}

TEST(SimRolesTest, BadRoleOptionsAreRefused) {
  SimHttpOptions o;
  o.role = "router";
  EXPECT_EQ(SimHttpServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.role = "decode";
  o.kv_link_gbytes_per_s = 0;
  EXPECT_EQ(SimHttpServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace epp
