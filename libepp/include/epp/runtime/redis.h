// Redis (or Valkey) for state shared between EPP replicas (issue #39), first step: where the
// server is and the protocol's framing. The address takes the forms llm-d's
// `redisConfig.address` takes (go-redis URLs), so one value configures both; the protocol is
// RESP2, which every Redis since 2.0 and Valkey speak (Debian 12 ships Redis 7.0). Our own code
// rather than hiredis: Debian's hiredis 0.14 has no TLS, and `rediss://` is one of the forms.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

// A Redis server's address, parsed from
//   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?db=N&skip_verify=true]   plain TCP (default port 6379)
//   rediss://...                                                          TLS (server name: HOST)
//   unix://[[USER]:PASSWORD@]/PATH[?db=N]                                 a Unix socket
//   valkey://, valkeys://                                                  as redis://, rediss://
//   HOST:PORT                                                              as redis://HOST:PORT
// User and password are percent-decoded; an IPv6 host is written in brackets. Errors name the
// part that is wrong. Unknown query options are errors, as in go-redis.
struct RedisAddress {
  enum class Transport { kTcp, kTls, kUnix };
  Transport transport = Transport::kTcp;
  std::string host;         // kTcp, kTls (brackets removed from an IPv6 literal)
  int port = 6379;          // kTcp, kTls
  std::string socket_path;  // kUnix
  std::string username;     // empty: the default user (AUTH with the password alone)
  std::string password;     // empty: no AUTH
  int db = 0;               // SELECT after connecting when not 0
  bool skip_verify = false; // kTls: accept any certificate (?skip_verify=true)

  // The address as a URL without the password ("rediss://user:***@host:6380/2"), for logs.
  std::string Redacted() const;
};

absl::StatusOr<RedisAddress> ParseRedisAddress(std::string_view url);

// One RESP2 value as a server answers.
struct RespValue {
  enum class Type { kSimpleString, kError, kInteger, kBulkString, kNull, kArray };
  Type type = Type::kNull;
  std::string text;                // kSimpleString, kError, kBulkString
  int64_t integer = 0;             // kInteger
  std::vector<RespValue> elements; // kArray
};

// A command as the server reads it: an array of bulk strings.
std::string EncodeRespCommand(std::span<const std::string_view> args);

// Reads answers from a byte stream, incrementally: Feed() what arrived, then Next() until it
// says it needs more. Bounded: a bulk string or an array longer than the limits, or nesting
// deeper, is an error (a server that answers so is not one we talk to). A protocol error names
// the stream's byte offset and what was expected; after one the reader stays failed.
class RespReader {
 public:
  struct Limits {
    size_t max_bulk_bytes = size_t{64} << 20;
    size_t max_array_elements = size_t{1} << 20;
    int max_depth = 8;
    size_t max_line_bytes = 64 << 10;  // a simple string, error or integer line
    // One whole answer (a value with everything nested in it), as bytes on the wire: refused as
    // soon as that many are buffered without completing it, so many values each under the other
    // limits cannot add up past it either.
    size_t max_value_bytes = size_t{1} << 30;
  };
  RespReader() = default;
  explicit RespReader(Limits limits) : limits_(limits) {}

  void Feed(std::string_view bytes);
  // The next complete value; nullopt when the bytes so far end inside one.
  absl::StatusOr<std::optional<RespValue>> Next();
  // Bytes fed and not yet consumed by a complete value.
  size_t buffered() const { return buffer_.size() - pos_; }

 private:
  // Parses one value at `at`; returns false (with `at` unchanged) when the bytes end inside it.
  absl::StatusOr<bool> Parse(size_t& at, int depth, RespValue& out) const;
  Limits limits_;
  std::string buffer_;
  size_t pos_ = 0;       // the start of the next value in buffer_
  uint64_t offset_ = 0;  // stream offset of buffer_[0]
  absl::Status failed_;
};

// One connection to a Redis server: TCP, TLS (OpenSSL; the server's name and certificate are
// verified against the system's CAs or `ca_file`, unless the address says skip_verify) or a
// Unix socket; AUTH and SELECT as the address says, then PING. Blocking with deadlines: each
// call finishes within its timeout (a whole pipeline, not per byte), so a slow or silent server
// costs the caller at most that long. Not thread-safe: one user at a time (the shared-state
// thread owns its connection).
struct RedisConnectOptions {
  std::chrono::milliseconds connect_timeout{500};  // TCP connect, TLS handshake, AUTH/SELECT/PING
  std::chrono::milliseconds io_timeout{500};       // each Pipeline/Command call
  std::string ca_file;                             // rediss: a PEM bundle instead of the system's
  RespReader::Limits limits;
};

class RedisConnection {
 public:
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Errors name the address (redacted) and what failed: resolve, connect, TLS, AUTH (the
  // server's answer, e.g. WRONGPASS), SELECT, or a timeout.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Connect(const RedisAddress& address,
                                                                  const RedisConnectOptions& options = {});

  // Sends the commands in one write and reads one answer each, in order. A command the server
  // refuses comes back as a kError value (the others still run); a Status error is the
  // connection's (closed, timed out, a protocol error), after which it is unusable (ok() false).
  absl::StatusOr<std::vector<RespValue>> Pipeline(std::span<const std::vector<std::string>> commands);
  absl::StatusOr<RespValue> Command(std::vector<std::string> args);

  bool ok() const { return broken_.ok(); }
  const std::string& where() const { return where_; }  // the redacted address, for errors
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

  struct Io;

 private:
  RedisConnection() = default;
  std::unique_ptr<Io> io_;
  RedisConnectOptions options_;
  RespReader reader_;
  std::string where_;
  absl::Status broken_;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
};

}  // namespace epp
