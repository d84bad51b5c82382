// RedisConnection and RedisSharedState against a real redis-server (Debian's), started per test
// on a Unix socket (or a loopback port) and stopped by its pid: AUTH, SELECT, pipelines, TLS with
// and without verification, deadlines against a silent server; two replicas sharing prefix
// updates and in-flight counts, expiry of a replica's counts, Redis killed and back, a replica
// that starts warm. Skips when redis-server is not installed.
#include "epp/runtime/redis_state.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <fstream>
#include <functional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "epp/config.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/runtime/extproc.h"
#include "epp/scheduler.h"
#include "flowcontrol/build.h"
#include "flowcontrol/policies.h"
#include "plugins/flowcontrol/flowcontrol.h"
#include "plugins/plugins.h"
#include "testing/epp_testing.h"
#include "testing/redis_server.h"

namespace epp {
namespace {

using testing::RedisServerProcess;

#define SKIP_WITHOUT_REDIS() \
  if (!RedisServerProcess::Available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"

RedisAddress UnixAddress(const RedisServerProcess& r) {
  RedisAddress a;
  a.transport = RedisAddress::Transport::kUnix;
  a.socket_path = r.socket_path();
  return a;
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

TEST(RedisConnection, PipelinesOverAUnixSocketAndKeepsGoingPastARefusedCommand) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  auto c = RedisConnection::Connect(UnixAddress(redis));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::vector<std::string>> cmds{{"SET", "k", "v1"}, {"INCR", "k"}, {"GET", "k"}, {"GET", "missing"},
                                             {"RPUSH", "l", "a", "b"}, {"LRANGE", "l", "0", "-1"}};
  auto answers = (*c)->Pipeline(cmds);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 6u);
  EXPECT_EQ((*answers)[0].text, "OK");
  EXPECT_EQ((*answers)[1].type, RespValue::Type::kError);  // not an integer: refused, the rest runs
  EXPECT_EQ((*answers)[2].text, "v1");
  EXPECT_EQ((*answers)[3].type, RespValue::Type::kNull);
  EXPECT_EQ((*answers)[4].integer, 2);
  ASSERT_EQ((*answers)[5].elements.size(), 2u);
  EXPECT_EQ((*answers)[5].elements[1].text, "b");
  EXPECT_TRUE((*c)->ok());
  // A binary value travels intact.
  std::string bin("\0\r\n\xff$*", 6);
  ASSERT_TRUE((*c)->Command({"SET", "bin", bin}).ok());
  auto got = (*c)->Command({"GET", "bin"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->text, bin);
}

TEST(RedisConnection, AuthAndSelectAsTheAddressSays) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis({"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.WaitReady("s3cret"));
  RedisAddress a = UnixAddress(redis);
  auto none = RedisConnection::Connect(a);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("NOAUTH"), std::string_view::npos) << none.status();
  a.password = "wrong";
  auto wrong = RedisConnection::Connect(a);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.status().message().find("AUTH refused"), std::string_view::npos) << wrong.status();
  EXPECT_EQ(wrong.status().message().find("wrong"), std::string_view::npos) << "the password is never shown";
  a.password = "s3cret";
  a.db = 3;
  auto right = RedisConnection::Connect(a);
  ASSERT_TRUE(right.ok()) << right.status();
  ASSERT_TRUE((*right)->Command({"SET", "in3", "x"}).ok());
  a.db = 0;
  auto zero = RedisConnection::Connect(a);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ((*zero)->Command({"GET", "in3"})->type, RespValue::Type::kNull);
  ASSERT_TRUE((*zero)->Command({"SELECT", "3"}).ok());
  EXPECT_EQ((*zero)->Command({"GET", "in3"})->text, "x");
}

TEST(RedisConnection, TcpOnLoopbackAndAClearErrorWhenNothingListens) {
  SKIP_WITHOUT_REDIS();
  const int port = FreePort();
  RedisServerProcess redis({"--port", std::to_string(port), "--bind", "127.0.0.1"});
  ASSERT_TRUE(redis.WaitReady());
  auto a = ParseRedisAddress("redis://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(a.ok());
  auto c = RedisConnection::Connect(*a);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Command({"PING"})->text, "PONG");
  redis.Kill(SIGKILL);
  auto after = (*c)->Command({"PING"});
  ASSERT_FALSE(after.ok());
  EXPECT_FALSE((*c)->ok());
  auto refused = RedisConnection::Connect(*a);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("Connection refused"), std::string_view::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("127.0.0.1:" + std::to_string(port)), std::string_view::npos);
}

TEST(RedisConnection, ASilentServerCostsAtMostTheTimeout) {
  // A listener that accepts (the kernel does) and never answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  RedisAddress a;
  a.host = "127.0.0.1";
  a.port = ntohs(sa.sin_port);
  RedisConnectOptions o;
  o.connect_timeout = std::chrono::milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  auto c = RedisConnection::Connect(a, o);
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_LT(took, std::chrono::seconds(3));  // bounded by the deadline, not a hang
}

// A self-signed certificate for 127.0.0.1 (subjectAltName IP), PEM.
std::pair<std::string, std::string> LoopbackCertificate() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("redis-test"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"}, std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  auto pem = [](auto write) {
    BIO* b = BIO_new(BIO_s_mem());
    write(b);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    std::string out(data, static_cast<size_t>(n));
    BIO_free(b);
    return out;
  };
  std::string cert = pem([&](BIO* b) { PEM_write_bio_X509(b, x); });
  std::string pkey = pem([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
  X509_free(x);
  EVP_PKEY_free(key);
  return {cert, pkey};
}

TEST(RedisConnection, TlsVerifiedWithTheCaOrSkippedWhenTheAddressSaysSo) {
  SKIP_WITHOUT_REDIS();
  const auto [cert, key] = LoopbackCertificate();
  char tmpl[] = "/tmp/epp-redis-tls-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/tls.crt") << cert;
  std::ofstream(dir + "/tls.key") << key;
  const int port = FreePort();
  RedisServerProcess redis({"--port", "0", "--tls-port", std::to_string(port), "--bind", "127.0.0.1", "--tls-cert-file",
                            dir + "/tls.crt", "--tls-key-file", dir + "/tls.key", "--tls-auth-clients", "no"});
  ASSERT_TRUE(redis.WaitReady());
  const std::string host = "127.0.0.1:" + std::to_string(port);

  auto verified = ParseRedisAddress("rediss://" + host);
  ASSERT_TRUE(verified.ok());
  RedisConnectOptions with_ca;
  with_ca.ca_file = dir + "/tls.crt";
  auto c = RedisConnection::Connect(*verified, with_ca);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Command({"PING"})->text, "PONG");

  auto untrusted = RedisConnection::Connect(*verified);  // the system's CAs do not know it
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("not trusted"), std::string_view::npos) << untrusted.status();

  auto skip = ParseRedisAddress("rediss://" + host + "?skip_verify=true");
  ASSERT_TRUE(skip.ok());
  auto s = RedisConnection::Connect(*skip);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Command({"PING"})->text, "PONG");

  auto plain = ParseRedisAddress("redis://" + host);  // plaintext to a TLS port: an error, in time
  RedisConnectOptions quick;
  quick.connect_timeout = std::chrono::milliseconds(300);
  EXPECT_FALSE(RedisConnection::Connect(*plain, quick).ok());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(SharedPrefixRecord, RoundTripsAndRejectsWhatDoesNotFit) {
  std::string b;
  const std::vector<uint64_t> h1{1, 2, UINT64_MAX}, h2{42};
  AppendSharedPrefixUpdate(b, "10.0.0.1:8000", h1, 0);
  AppendSharedPrefixUpdate(b, "10.0.0.2:8000", h2, 31250);
  auto d = DecodeSharedPrefixUpdates(b);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].endpoint, "10.0.0.1:8000");
  EXPECT_EQ((*d)[0].hashes, h1);
  EXPECT_EQ((*d)[1].capacity, 31250);
  EXPECT_EQ((*d)[1].hashes, h2);
  for (size_t cut = 1; cut < b.size(); ++cut) {
    auto t = DecodeSharedPrefixUpdates(std::string_view(b).substr(0, cut));
    if (cut == 4 + 13 + 12 + 24) continue;  // exactly the first record: valid
    EXPECT_FALSE(t.ok()) << "cut at " << cut;
  }
  std::string huge = b.substr(0, 4 + 13 + 8);
  huge += std::string("\xff\xff\xff\x0f", 4);  // 268M blocks declared, none there
  auto h = DecodeSharedPrefixUpdates(huge);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("byte 29"), std::string_view::npos) << h.status();
}

// A replica for the sharing tests: a scheduler on GIE's default profile whose prefix producer
// rides `state`, over four endpoints.
struct Replica {
  std::unique_ptr<RedisSharedState> state;
  std::shared_ptr<const Scheduler> scheduler;
  SeededRng rng;
  std::vector<Endpoint> endpoints;

  Replica(const std::string& url, const std::string& id, uint64_t seed,
          std::chrono::milliseconds ttl = std::chrono::milliseconds(0),
          const std::function<void(SharedStateOptions&)>& tweak = {})
      : rng(seed) {
    SharedStateOptions o;
    o.address = url;
    o.replica_id = id;
    o.key_prefix = "epp:test:";
    o.load_ttl = ttl;
    if (tweak) tweak(o);
    state = *RedisSharedState::Create(o);
    PluginContext ctx{&SteadyClock::Get(), &rng};
    ctx.shared_prefix = state.get();
    scheduler = std::shared_ptr<const Scheduler>(*BuildScheduler(DefaultConfig(), BuiltinRegistry(), ctx));
    for (int i = 0; i < 4; ++i) endpoints.push_back(testing::Ep("10.0.0." + std::to_string(i + 1) + ":8000", 0, 0.1, 0));
  }
  // Rounds run on the caller's thread: bind what the thread would read.
  void Bind() {
    // The thread reads this replica's members (it is stopped before they go).
    state->Start([this] { return scheduler; },
                 [this] {
                   std::vector<std::string> out;
                   for (const Endpoint& x : endpoints) out.push_back(x.address);
                   return out;
                 },
                 nullptr);
  }
  ~Replica() {
    state->Stop();
    scheduler.reset();  // the producers unsubscribe before the state goes
  }
};

InferenceRequest Conversation(int i) {
  InferenceRequest r;
  r.path = "/v1/completions";
  r.model = "m";
  r.prompt = absl::StrCat("system: you are conversation ", i, ". ", std::string(2000, static_cast<char>('a' + i % 26)));
  r.prompt_tokens = ApproxTokens(r.prompt.size());
  return r;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

TEST(RedisSharedState, FollowUpsThroughTheOtherReplicaLandWhereTheFirstTurnWent) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  Replica a(redis.url(), "a", 1), b(redis.url(), "b", 2);
  a.Bind();
  b.Bind();
  std::vector<std::string> first;
  for (int i = 0; i < 12; ++i) {
    PickResult r = a.scheduler->Pick(Conversation(i), a.endpoints);
    ASSERT_FALSE(r.endpoints.empty());
    first.push_back(r.endpoints.front());
    a.scheduler->Release(r);
  }
  ASSERT_TRUE(WaitFor([&] { return b.state->stats().applied >= 12; }))
      << "applied " << b.state->stats().applied << ", a published " << a.state->stats().published << ", a rounds "
      << a.state->stats().rounds << ", a errors " << a.state->stats().errors << ": " << a.state->stats().last_error
      << "; b: " << b.state->stats().last_error;
  EXPECT_GT(b.scheduler->PrefixIndexEntries(), 0u);
  int same = 0;
  for (int i = 0; i < 12; ++i) {
    InferenceRequest follow = Conversation(i);
    follow.prompt += " assistant: ... user: and then?";
    PickResult r = b.scheduler->Pick(follow, b.endpoints);
    ASSERT_FALSE(r.endpoints.empty());
    if (r.endpoints.front() == first[static_cast<size_t>(i)]) ++same;
    b.scheduler->Release(r);
  }
  EXPECT_EQ(same, 12);
  const SharedStateStats sa = a.state->stats();
  EXPECT_TRUE(sa.up);
  EXPECT_EQ(sa.errors, 0);
  EXPECT_GE(sa.published, 12);
  EXPECT_EQ(sa.applied, 0);  // a never applies its own updates
}

TEST(RedisSharedState, InflightCountsAddUpAcrossReplicasAndExpireWithAReplica) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  auto a = std::make_unique<Replica>(redis.url(), "a", 1, std::chrono::milliseconds(1000));
  Replica b(redis.url(), "b", 2, std::chrono::milliseconds(1000));
  a->Bind();
  b.Bind();
  PickResult r = a->scheduler->Pick(Conversation(1), a->endpoints);
  ASSERT_FALSE(r.endpoints.empty());
  const std::string where = r.endpoints.front();
  const auto own = a->scheduler->Inflight(where);
  ASSERT_EQ(own.first, 1);
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(where).first == 1; }));
  EXPECT_EQ(b.scheduler->RemoteInflight(where).second, own.second);
  EXPECT_EQ(b.scheduler->Inflight(where).first, 0);  // b's own stays its own
  EXPECT_EQ(b.state->stats().replicas, 2);
  a->scheduler->Release(r);
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(where).first == 0; }));

  // A replica that dies without a word stops refreshing its key: here one whose last write
  // expires in 300 ms. b counts it while the key lives, then drops it and its membership.
  auto conn = RedisConnection::Connect(UnixAddress(redis));
  ASSERT_TRUE(conn.ok());
  const std::string held = a->endpoints[2].address;
  std::vector<std::vector<std::string>> ghost{{"SET", "epp:test:load:ghost", held + " 3 300", "PX", "400"},
                                              {"SADD", "epp:test:replicas", "ghost"}};
  ASSERT_TRUE((*conn)->Pipeline(ghost).ok());
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(held).first == 3; }));
  EXPECT_EQ(b.state->stats().replicas, 3);
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(held).first == 0; }, std::chrono::milliseconds(3000)));
  ASSERT_TRUE(WaitFor([&] {
    auto m = (*conn)->Command({"SISMEMBER", "epp:test:replicas", "ghost"});
    return m.ok() && m->integer == 0;
  }));
  // A replica that stops cleanly leaves at once (no expiry to wait for).
  PickResult kept = a->scheduler->Pick(Conversation(3), a->endpoints);
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(kept.endpoints.front()).first == 1; }));
  a.reset();
  auto gone = (*conn)->Command({"EXISTS", "epp:test:load:a"});
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->integer, 0);
}

// A flow queue holding one request waiting since `enqueue_us`, for the fairness test.
class OneRequestQueue : public flowcontrol::FlowQueue {
 public:
  OneRequestQueue(std::string id, int64_t enqueue_us) : id_(std::move(id)) {
    item_.flow_id = id_;
    item_.enqueue_us = item_.received_us = enqueue_us;
  }
  std::string_view flow_id() const override { return id_; }
  size_t size() const override { return 1; }
  uint64_t bytes() const override { return 0; }
  const flowcontrol::QueuedItem& head() const override { return item_; }
  flowcontrol::OrderingKey head_key() const override { return {}; }

 private:
  std::string id_;
  flowcontrol::QueuedItem item_;
};

// program-aware-fairness picks the least attained service. Replica a served "heavy" 5,000
// weighted tokens; on replica b, which served neither, "heavy" and "light" wait equally long:
// alone, b sees a tie (the first flow id, "heavy", wins); sharing, it sees heavy's service and
// picks "light". When a goes, its service goes with it.
TEST(RedisSharedState, LeastAttainedServiceCountsWhatTheOtherReplicasServed) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  auto state = [&](const std::string& id) {
    SharedStateOptions o;
    o.address = redis.url();
    o.replica_id = id;
    o.key_prefix = "epp:test:";
    return *RedisSharedState::Create(o);
  };
  std::unique_ptr<RedisSharedState> a = state("a"), b = state("b");
  auto fairness = [](RedisSharedState* bus) {
    PluginContext ctx;
    ctx.shared_prefix = bus;
    auto p = BuiltinRegistry().Create("program-aware-fairness", "fair", Params(), ctx);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  };
  std::unique_ptr<Plugin> fa = fairness(a.get()), fb = fairness(b.get());
  const auto& stats_b = dynamic_cast<const plugins::ProgramAwareStats&>(*fb);
  ResponseUsage served;
  served.prompt_tokens = 5000;
  const int64_t now = SteadyClock::Get().NowMicros();
  plugins::FlowControlPoliciesOf(*fa).fairness->Completed("heavy", served, now);

  OneRequestQueue heavy("heavy", now - 1'000'000), light("light", now - 1'000'000);
  std::unique_ptr<flowcontrol::FairnessState> band = plugins::FlowControlPoliciesOf(*fb).fairness->NewBandState(0);
  band->HeadChanged(heavy);
  band->HeadChanged(light);
  ASSERT_EQ(band->Pick(now), &heavy);  // nothing shared yet: a tie

  ASSERT_TRUE(a->RunRoundForTest().ok());  // a writes its service (and joins the replicas)
  ASSERT_TRUE(b->RunRoundForTest().ok());  // b learns a is there
  ASSERT_TRUE(b->RunRoundForTest().ok());  // ... and reads a's service
  EXPECT_NEAR(stats_b.PoolAttainedService("heavy", now), 5000, 1);
  EXPECT_DOUBLE_EQ(stats_b.AttainedService("heavy", now), 0);  // b's own
  EXPECT_EQ(band->Pick(now), &light);

  // a stops cleanly: its keys go, and b's next round finds no service from it.
  a->Stop();
  ASSERT_TRUE(b->RunRoundForTest().ok());
  EXPECT_DOUBLE_EQ(stats_b.PoolAttainedService("heavy", now), 0);
  EXPECT_EQ(band->Pick(now), &heavy);

  // A flow id with a tab, or a service line that is not three fields, is skipped, not summed.
  auto conn = RedisConnection::Connect(UnixAddress(redis));
  ASSERT_TRUE(conn.ok());
  std::vector<std::vector<std::string>> ghost{
      {"SET", "epp:test:service:ghost", "fair\theavy\t70\nfair\tx\ty\tz\nfair\tlight\tnan\n", "PX", "5000"},
      {"SADD", "epp:test:replicas", "ghost"}};
  ASSERT_TRUE((*conn)->Pipeline(ghost).ok());
  ASSERT_TRUE(b->RunRoundForTest().ok());
  ASSERT_TRUE(b->RunRoundForTest().ok());
  EXPECT_NEAR(stats_b.PoolAttainedService("heavy", now), 70, 1e-9);
  EXPECT_DOUBLE_EQ(stats_b.PoolAttainedService("light", now), 0);
  EXPECT_NE(b->stats().last_error.find("malformed"), std::string::npos) << b->stats().last_error;
  fb.reset();  // unshares before its state goes
  fa.reset();
}

// What serve builds: a config's program-aware-fairness, built with the shared state in its
// PluginContext, writes the service its band's completions gave each program into this
// replica's service key.
TEST(RedisSharedState, AConfigsProgramAwareFairnessSharesThroughTheServeContext) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  SharedStateOptions o;
  o.address = redis.url();
  o.replica_id = "a";
  o.key_prefix = "epp:test:";
  std::unique_ptr<RedisSharedState> state = *RedisSharedState::Create(o);
  auto cfg = ParseConfig(R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: ["flowControl"]
plugins:
- type: queue-scorer
- type: program-aware-fairness
  name: las
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
flowControl:
  defaultPriorityBand:
    fairnessPolicyRef: las
)",
                         "fc.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  SeededRng rng(1);
  PluginContext ctx{&SteadyClock::Get(), &rng};
  ctx.shared_prefix = state.get();
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), ctx);
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto fc = flowcontrol::BuildControllerConfig(*cfg, **sched, BuiltinRegistry());
  ASSERT_TRUE(fc.ok()) << fc.status();
  ResponseUsage usage;
  usage.prompt_tokens = 300;
  usage.completion_tokens = 100;
  fc->default_band.fairness->Completed("tenant-1", usage, SteadyClock::Get().NowMicros());
  ASSERT_TRUE(state->RunRoundForTest().ok());
  auto conn = RedisConnection::Connect(UnixAddress(redis));
  ASSERT_TRUE(conn.ok());
  auto got = (*conn)->Command({"GET", "epp:test:service:a"});
  ASSERT_TRUE(got.ok()) << got.status();
  // 300 + 2 x 100, decayed by the microseconds since (half-life 60 s): "500" or "499.99...".
  EXPECT_EQ(got->text.rfind("las\ttenant-1\t", 0), 0u) << got->text;
  double value = 0;
  ASSERT_TRUE(absl::SimpleAtod(got->text.substr(std::string("las\ttenant-1\t").size()), &value)) << got->text;
  EXPECT_NEAR(value, 500, 0.5);
  fc = absl::InternalError("released");  // the controller config's plugins before the scheduler
  sched = absl::InternalError("released");
  state->Stop();
  auto after = (*conn)->Command({"EXISTS", "epp:test:service:a"});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->integer, 0);  // a clean stop deletes it
}

TEST(RedisSharedState, RedisKilledFallsBackToLocalStateAndRecovers) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  Replica a(redis.url(), "a", 1), b(redis.url(), "b", 2);
  a.Bind();
  b.Bind();
  PickResult held = a.scheduler->Pick(Conversation(1), a.endpoints);
  const std::string where = held.endpoints.front();
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(where).first == 1; }));

  redis.Kill(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return !b.state->stats().up; }));
  // Remote counts are dropped at once; picks go on from local state.
  EXPECT_EQ(b.scheduler->RemoteInflight(where).first, 0);
  EXPECT_GE(b.state->stats().errors, 1);
  for (int i = 0; i < 20; ++i) {
    PickResult r = b.scheduler->Pick(Conversation(100 + i), b.endpoints);
    EXPECT_FALSE(r.endpoints.empty());
    b.scheduler->Release(r);
  }
  // While Redis is away, a's updates wait in its queue.
  for (int i = 0; i < 3; ++i) a.scheduler->Release(a.scheduler->Pick(Conversation(200 + i), a.endpoints));

  redis.Start();
  ASSERT_TRUE(redis.WaitReady());
  ASSERT_TRUE(WaitFor([&] { return a.state->stats().up && b.state->stats().up; }, std::chrono::milliseconds(8000)));
  EXPECT_GE(a.state->stats().reconnects, 1);
  // The queued updates reach b (the new Redis is empty: only what was sent after it came back).
  ASSERT_TRUE(WaitFor([&] { return b.state->stats().applied >= 3; }));
  ASSERT_TRUE(WaitFor([&] { return b.scheduler->RemoteInflight(where).first == 1; }));
  a.scheduler->Release(held);
}

TEST(RedisSharedState, AReplicaThatStartsLaterStartsWarm) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  Replica a(redis.url(), "a", 1);
  a.Bind();
  std::vector<std::string> first;
  for (int i = 0; i < 6; ++i) {
    PickResult r = a.scheduler->Pick(Conversation(i), a.endpoints);
    first.push_back(r.endpoints.front());
    a.scheduler->Release(r);
  }
  ASSERT_TRUE(WaitFor([&] { return a.state->stats().published >= 6; }));
  Replica late(redis.url(), "late", 3);
  late.Bind();
  ASSERT_TRUE(WaitFor([&] { return late.state->stats().applied >= 6; }));
  for (int i = 0; i < 6; ++i) {
    PickResult r = late.scheduler->Pick(Conversation(i), late.endpoints);
    EXPECT_EQ(r.endpoints.front(), first[static_cast<size_t>(i)]) << i;
    late.scheduler->Release(r);
  }
}

// A round reads at most max_round_bytes in one answer. 24 stream entries of 1 MiB (another
// writer's: not records epp decodes) sit before a's updates; a replica with a 16 MiB budget asks
// for 512 entries, is refused, halves the count until the entries fit, reads the backlog a few at
// a time, then goes back to 512, and a's updates still reach it.
TEST(RedisSharedState, ARoundsAnswerIsBoundedAndABigBacklogIsReadFewEntriesAtATime) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  // Rounds may take seconds here (under TSan, reading MiBs of RESP): a timeout long enough that
  // only the byte budget shrinks the reads.
  const auto patient = [](SharedStateOptions& o) { o.timeout = std::chrono::milliseconds(5000 * testing::TimeScale()); };
  Replica a(redis.url(), "a", 1, std::chrono::milliseconds(0), patient);
  a.Bind();
  PickResult warm = a.scheduler->Pick(Conversation(100), a.endpoints);
  a.scheduler->Release(warm);
  ASSERT_TRUE(WaitFor([&] { return a.state->stats().published >= 1; }));
  auto conn = RedisConnection::Connect(UnixAddress(redis));
  ASSERT_TRUE(conn.ok());
  auto keys = (*conn)->Command({"KEYS", "epp:test:prefix:*"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 1u);
  const std::string stream = keys->elements[0].text;
  for (int i = 0; i < 24; ++i)
    ASSERT_TRUE((*conn)->Command({"XADD", stream, "*", "r", "other", "b", std::string(size_t{1} << 20, 'x')}).ok());
  std::vector<std::string> first;
  for (int i = 0; i < 6; ++i) {
    PickResult r = a.scheduler->Pick(Conversation(i), a.endpoints);
    first.push_back(r.endpoints.front());
    a.scheduler->Release(r);
  }
  // a reads those 24 MiB too.
  ASSERT_TRUE(WaitFor([&] { return a.state->stats().published >= 7; },
                      std::chrono::milliseconds(20000 * testing::TimeScale())));

  Replica late(redis.url(), "late", 3, std::chrono::milliseconds(0), [&](SharedStateOptions& o) {
    patient(o);
    o.max_round_bytes = size_t{16} << 20;
  });
  late.Bind();
  ASSERT_TRUE(WaitFor([&] { return late.state->stats().applied >= 7; },
                      std::chrono::milliseconds(20000 * testing::TimeScale())))
      << "applied " << late.state->stats().applied << ", errors " << late.state->stats().errors << ": "
      << late.state->stats().last_error;
  const SharedStateStats st = late.state->stats();
  // From 512 to 16 entries a read (a's first small one and 15 of 1 MiB fit in 16 MiB, 17 entries
  // do not): five halvings, each a refused answer.
  EXPECT_EQ(st.read_shrinks, 5);
  EXPECT_EQ(st.errors, 5);
  EXPECT_EQ(st.read_count, 512);  // back once the backlog was read
  EXPECT_TRUE(st.up);
  for (int i = 0; i < 6; ++i) {
    PickResult r = late.scheduler->Pick(Conversation(i), late.endpoints);
    EXPECT_EQ(r.endpoints.front(), first[static_cast<size_t>(i)]) << i;
    late.scheduler->Release(r);
  }
}

TEST(RedisSharedState, UpdatesForEndpointsOutsideThePoolAreIgnored) {
  SKIP_WITHOUT_REDIS();
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  Replica a(redis.url(), "a", 1), b(redis.url(), "b", 2);
  b.endpoints.resize(2);  // b routes to two of a's four
  a.Bind();
  b.Bind();
  for (int i = 0; i < 16; ++i) a.scheduler->Release(a.scheduler->Pick(Conversation(i), a.endpoints));
  ASSERT_TRUE(WaitFor([&] { return b.state->stats().applied + b.state->stats().ignored >= 16; }));
  const SharedStateStats s = b.state->stats();
  EXPECT_GT(s.ignored, 0);
  EXPECT_GT(s.applied, 0);
}

TEST(RedisSharedState, OptionsAreChecked) {
  SharedStateOptions o;
  o.address = "http://x";
  EXPECT_FALSE(RedisSharedState::Create(o).ok());
  o.address = "redis://127.0.0.1:1";
  o.interval = std::chrono::milliseconds(0);
  EXPECT_FALSE(RedisSharedState::Create(o).ok());
  o.interval = std::chrono::milliseconds(500);
  o.load_ttl = std::chrono::milliseconds(400);
  auto bad = RedisSharedState::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expiry"), std::string_view::npos);
  o.load_ttl = std::chrono::milliseconds(0);
  auto good = RedisSharedState::Create(o);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ((*good)->options().load_ttl, std::chrono::milliseconds(10000));
  EXPECT_EQ((*good)->options().key_prefix, "epp:default:");
  EXPECT_FALSE((*good)->options().replica_id.empty());
  EXPECT_EQ((*good)->options().max_round_bytes, size_t{64} << 20);
  o.max_round_bytes = size_t{8} << 20;  // one entry may be 8 MiB: a round could never read it
  auto small = RedisSharedState::Create(o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("max_round_bytes"), std::string_view::npos);
}

}  // namespace
}  // namespace epp
