// Redis addresses in go-redis's forms (what llm-d's redisConfig.address takes) and RESP2 framing:
// commands encoded as the protocol says, answers read whole or byte by byte, bounds and errors.
#include "epp/runtime/redis.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace epp {
namespace {

TEST(RedisAddress, ParsesGoRedisForms) {
  auto a = ParseRedisAddress("redis://127.0.0.1:6379");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->transport, RedisAddress::Transport::kTcp);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->db, 0);

  auto bare = ParseRedisAddress("redis-master.llm-d:7000");  // llm-d adds redis:// to a bare address
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->host, "redis-master.llm-d");
  EXPECT_EQ(bare->port, 7000);

  auto tls = ParseRedisAddress("rediss://app:p%40ss@cache.example:6380/3?skip_verify=true");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->transport, RedisAddress::Transport::kTls);
  EXPECT_EQ(tls->username, "app");
  EXPECT_EQ(tls->password, "p@ss");
  EXPECT_EQ(tls->db, 3);
  EXPECT_TRUE(tls->skip_verify);
  EXPECT_EQ(tls->Redacted(), "rediss://app:***@cache.example:6380/3?skip_verify=true");

  auto pw_only = ParseRedisAddress("redis://secret@localhost");  // a password without a user
  ASSERT_TRUE(pw_only.ok());
  EXPECT_EQ(pw_only->username, "");
  EXPECT_EQ(pw_only->password, "secret");
  EXPECT_EQ(pw_only->port, 6379);

  auto v6 = ParseRedisAddress("valkey://[::1]:6390?db=2");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->transport, RedisAddress::Transport::kTcp);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 6390);
  EXPECT_EQ(v6->db, 2);
  EXPECT_EQ(v6->Redacted(), "redis://[::1]:6390/2");

  auto sock = ParseRedisAddress("unix://:pw@/run/redis/redis.sock?db=1");
  ASSERT_TRUE(sock.ok()) << sock.status();
  EXPECT_EQ(sock->transport, RedisAddress::Transport::kUnix);
  EXPECT_EQ(sock->socket_path, "/run/redis/redis.sock");
  EXPECT_EQ(sock->password, "pw");
  EXPECT_EQ(sock->db, 1);
  EXPECT_EQ(ParseRedisAddress("valkeys://h")->transport, RedisAddress::Transport::kTls);
}

TEST(RedisAddress, ErrorsNameThePartAndHideThePassword) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://h:6379", "scheme 'http'"},
      {"redis://h:0", "port '0'"},
      {"redis://h:70000", "port '70000'"},
      {"redis://h:", "port ''"},
      {"redis://:6379", "no host"},
      {"redis://::1:6379", "brackets"},
      {"redis://[::1:6379", "never closes"},
      {"redis://h/abc", "database 'abc'"},
      {"redis://h?db=-1", "database '-1'"},
      {"redis://h?pool=3", "unknown option 'pool'"},
      {"redis://h?skip_verify=true", "needs rediss://"},
      {"unix://run/redis.sock", "absolute path"},
      {"redis://u:%zz@h", "percent escape in the password"},
  };
  for (const auto& [url, why] : cases) {
    auto a = ParseRedisAddress(url);
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_NE(std::string(a.status().message()).find(why), std::string::npos) << url << " -> " << a.status();
  }
  auto secret = ParseRedisAddress("redis://user:topsecret@h:notaport");
  ASSERT_FALSE(secret.ok());
  EXPECT_EQ(std::string(secret.status().message()).find("topsecret"), std::string::npos) << secret.status();
}

TEST(Resp, EncodesCommandsAsArraysOfBulkStrings) {
  const std::string_view args[] = {"HSET", "key", "a b\r\n", ""};
  EXPECT_EQ(EncodeRespCommand(args), "*4\r\n$4\r\nHSET\r\n$3\r\nkey\r\n$5\r\na b\r\n\r\n$0\r\n\r\n");
}

// Every kind of answer, in one stream.
constexpr std::string_view kStream =
    "+OK\r\n-ERR wrong type\r\n:-42\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n*0\r\n"
    "*3\r\n:1\r\n*2\r\n$1\r\na\r\n$0\r\n\r\n+x\r\n";

void ExpectStream(const std::vector<RespValue>& v) {
  ASSERT_EQ(v.size(), 8u);
  EXPECT_EQ(v[0].type, RespValue::Type::kSimpleString);
  EXPECT_EQ(v[0].text, "OK");
  EXPECT_EQ(v[1].type, RespValue::Type::kError);
  EXPECT_EQ(v[1].text, "ERR wrong type");
  EXPECT_EQ(v[2].type, RespValue::Type::kInteger);
  EXPECT_EQ(v[2].integer, -42);
  EXPECT_EQ(v[3].type, RespValue::Type::kBulkString);
  EXPECT_EQ(v[3].text, "he\r\no");  // binary-safe
  EXPECT_EQ(v[4].type, RespValue::Type::kNull);
  EXPECT_EQ(v[5].type, RespValue::Type::kNull);
  EXPECT_EQ(v[6].type, RespValue::Type::kArray);
  EXPECT_TRUE(v[6].elements.empty());
  ASSERT_EQ(v[7].elements.size(), 3u);
  EXPECT_EQ(v[7].elements[0].integer, 1);
  ASSERT_EQ(v[7].elements[1].elements.size(), 2u);
  EXPECT_EQ(v[7].elements[1].elements[0].text, "a");
  EXPECT_EQ(v[7].elements[1].elements[1].text, "");
  EXPECT_EQ(v[7].elements[2].text, "x");
}

TEST(Resp, ReadsAStreamWholeAndByteByByte) {
  RespReader whole;
  whole.Feed(kStream);
  std::vector<RespValue> got;
  while (true) {
    auto v = whole.Next();
    ASSERT_TRUE(v.ok()) << v.status();
    if (!v->has_value()) break;
    got.push_back(**v);
  }
  ExpectStream(got);
  EXPECT_EQ(whole.buffered(), 0u);

  RespReader slow;
  std::vector<RespValue> got2;
  for (char c : kStream) {
    slow.Feed(std::string_view(&c, 1));
    while (true) {
      auto v = slow.Next();
      ASSERT_TRUE(v.ok()) << v.status();
      if (!v->has_value()) break;
      got2.push_back(**v);
    }
  }
  ExpectStream(got2);
}

TEST(Resp, ProtocolErrorsNameTheOffsetAndStick) {
  const std::pair<const char*, const char*> cases[] = {
      {"+OK\r\n?what\r\n", "RESP byte 5: type byte 0x3f"},
      {":12x\r\n", "integer that does not parse"},
      {"$-2\r\n", "bulk string length"},
      {"$3\r\nabcd\r\n", "not followed by CRLF"},
      {"*-5\r\n", "array length"},
      {"$999999999999\r\n", "longer than the limit"},
  };
  for (const auto& [bytes, why] : cases) {
    RespReader r;
    r.Feed(bytes);
    absl::StatusOr<std::optional<RespValue>> v = r.Next();
    if (v.ok() && v->has_value()) v = r.Next();  // the first value may be good
    ASSERT_FALSE(v.ok()) << bytes;
    EXPECT_NE(std::string(v.status().message()).find(why), std::string::npos) << v.status();
    r.Feed("+OK\r\n");
    EXPECT_FALSE(r.Next().ok()) << "a failed reader stays failed";
  }
}

TEST(Resp, LimitsBoundDepthArraysAndLines) {
  RespReader::Limits l;
  l.max_depth = 2;
  l.max_array_elements = 3;
  l.max_line_bytes = 16;
  RespReader deep(l);
  deep.Feed("*1\r\n*1\r\n*1\r\n:1\r\n");
  EXPECT_FALSE(deep.Next().ok());
  RespReader wide(l);
  wide.Feed("*4\r\n");
  auto w = wide.Next();
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("array longer"), std::string::npos);
  RespReader line(l);
  line.Feed(std::string(40, '+'));  // no CRLF yet, already past the limit
  EXPECT_FALSE(line.Next().ok());
  // One answer's bytes: each element under the other limits, the whole past max_value_bytes,
  // refused as soon as that much is buffered, whole or still arriving.
  RespReader::Limits v;
  v.max_value_bytes = 64;
  RespReader small(v);
  small.Feed("*2\r\n$20\r\n" + std::string(20, 'a') + "\r\n$20\r\n" + std::string(20, 'b') + "\r\n");
  auto fits = small.Next();
  ASSERT_TRUE(fits.ok()) << fits.status();
  ASSERT_TRUE(fits->has_value());
  EXPECT_EQ((*fits)->elements.size(), 2u);
  RespReader whole_big(v);
  whole_big.Feed("*3\r\n$20\r\n" + std::string(20, 'a') + "\r\n$20\r\n" + std::string(20, 'b') + "\r\n$20\r\n" +
                 std::string(20, 'c') + "\r\n");
  auto too_big = whole_big.Next();
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(std::string(too_big.status().message()).find("an answer longer than the limit (64 bytes)"), std::string::npos)
      << too_big.status();
  RespReader arriving(v);
  arriving.Feed("*1000\r\n");
  for (int i = 0; i < 7; ++i) {
    auto partial = arriving.Next();
    ASSERT_TRUE(partial.ok()) << i;
    EXPECT_FALSE(partial->has_value());
    arriving.Feed(":1\r\n:2\r\n");
  }
  auto refused = arriving.Next();  // 7 + 7 x 8 = 63 bytes buffered: still in
  ASSERT_TRUE(refused.ok());
  arriving.Feed(":3\r\n");
  refused = arriving.Next();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("RESP byte 0: an answer longer"), std::string::npos)
      << refused.status();
  // A huge declared array allocates nothing before its elements arrive.
  RespReader big;
  big.Feed("*1000000\r\n:1\r\n");
  auto b = big.Next();
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());
}

}  // namespace
}  // namespace epp
