// Redis addresses and RESP2 framing (see epp/runtime/redis.h). The URL forms follow what go-redis
// accepts, since llm-d's `redisConfig.address` is handed to it; RESP2 as the Redis protocol
// specification defines it: '+' simple string, '-' error, ':' integer, '$' bulk string ($-1:
// null), '*' array (*-1: null), each header line ending in CRLF.
#include "epp/runtime/redis.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace epp {

namespace {

absl::StatusOr<std::string> PercentDecode(std::string_view s, std::string_view what) {
  std::optional<std::string> d = internal::PercentDecode(s);
  if (!d) return absl::InvalidArgumentError(absl::StrCat("redis address: bad percent escape in the ", std::string(what)));
  return *std::move(d);
}

absl::Status Bad(std::string_view url, std::string_view why) {
  // The password is never echoed: only the scheme and what follows the last '@'.
  std::string shown(url);
  if (const size_t at = shown.rfind('@'); at != std::string::npos) {
    const size_t scheme = shown.find("://");
    shown = (scheme != std::string::npos ? shown.substr(0, scheme + 3) : std::string()) + "***@" + shown.substr(at + 1);
  }
  return absl::InvalidArgumentError(absl::StrCat("redis address '", shown, "': ", std::string(why)));
}

absl::StatusOr<int> ParseDb(std::string_view url, std::string_view text) {
  int db = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &db) || db < 0)
    return Bad(url, absl::StrCat("database '", std::string(text), "' is not a non-negative number"));
  return db;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisAddress(std::string_view url) {
  RedisAddress a;
  std::string_view rest = url;
  const size_t scheme_end = rest.find("://");
  std::string scheme = "redis";
  if (scheme_end != std::string_view::npos) {
    scheme = std::string(rest.substr(0, scheme_end));
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rest.remove_prefix(scheme_end + 3);
  }
  if (scheme == "redis" || scheme == "valkey") {
    a.transport = RedisAddress::Transport::kTcp;
  } else if (scheme == "rediss" || scheme == "valkeys") {
    a.transport = RedisAddress::Transport::kTls;
  } else if (scheme == "unix") {
    a.transport = RedisAddress::Transport::kUnix;
  } else {
    return Bad(url, absl::StrCat("scheme '", scheme, "' is not redis, rediss, unix, valkey or valkeys"));
  }
  // Query options.
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // Credentials.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view creds = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = creds.find(':');
    absl::StatusOr<std::string> user = PercentDecode(creds.substr(0, colon), "user name");
    if (!user.ok()) return user.status();
    a.username = *std::move(user);
    if (colon != std::string_view::npos) {
      absl::StatusOr<std::string> pass = PercentDecode(creds.substr(colon + 1), "password");
      if (!pass.ok()) return pass.status();
      a.password = *std::move(pass);
    } else if (scheme_end != std::string_view::npos) {
      // go-redis: "redis://secret@host" carries a password and no user.
      a.password = std::move(a.username);
      a.username.clear();
    }
  }
  if (a.transport == RedisAddress::Transport::kUnix) {
    if (rest.empty() || rest.front() != '/') return Bad(url, "a unix socket needs an absolute path (unix:///run/redis.sock)");
    a.socket_path = std::string(rest);
    a.port = 0;
  } else {
    // HOST[:PORT][/DB]
    std::string_view hostport = rest;
    if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      const std::string_view db = rest.substr(slash + 1);
      if (!db.empty()) {
        absl::StatusOr<int> n = ParseDb(url, db);
        if (!n.ok()) return n.status();
        a.db = *n;
      }
    }
    std::string_view port;
    if (!hostport.empty() && hostport.front() == '[') {
      const size_t close = hostport.find(']');
      if (close == std::string_view::npos) return Bad(url, "an IPv6 host opens '[' and never closes it");
      a.host = std::string(hostport.substr(1, close - 1));
      const std::string_view after = hostport.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return Bad(url, "expected ':PORT' after the IPv6 host");
        port = after.substr(1);
      }
    } else {
      const size_t colon = hostport.rfind(':');
      if (colon != std::string_view::npos && hostport.find(':') != colon)
        return Bad(url, "an IPv6 host must be written in brackets ([::1]:6379)");
      a.host = std::string(hostport.substr(0, colon));
      if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
    }
    if (a.host.empty()) return Bad(url, "no host");
    if (port.data() != nullptr && (port.empty() || !absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &a.port) || a.port < 1 || a.port > 65535))
      return Bad(url, absl::StrCat("port '", std::string(port), "' is not a number in 1..65535"));
  }
  // Options: db, skip_verify (and the connection tuning go-redis knows, accepted and unused).
  size_t start = 0;
  while (start < query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (key == "db") {
      absl::StatusOr<int> n = ParseDb(url, value);
      if (!n.ok()) return n.status();
      a.db = *n;
    } else if (key == "skip_verify") {
      if (value != "true" && value != "false") return Bad(url, "skip_verify is true or false");
      a.skip_verify = value == "true";
    } else if (key == "protocol" || key == "client_name" || key == "dial_timeout" || key == "read_timeout" ||
               key == "write_timeout" || key == "pool_size" || key == "max_retries" || key == "pool_timeout") {
      // go-redis connection tuning: meaningful to its pool, not to ours.
    } else {
      return Bad(url, absl::StrCat("unknown option '", std::string(key), "' (known: db, skip_verify)"));
    }
  }
  if (a.skip_verify && a.transport != RedisAddress::Transport::kTls) return Bad(url, "skip_verify needs rediss://");
  return a;
}

std::string RedisAddress::Redacted() const {
  std::string s;
  switch (transport) {
    case Transport::kTcp:
      s = "redis://";
      break;
    case Transport::kTls:
      s = "rediss://";
      break;
    case Transport::kUnix:
      s = "unix://";
      break;
  }
  if (!username.empty() || !password.empty()) absl::StrAppend(&s, username, password.empty() ? "" : ":***", "@");
  if (transport == Transport::kUnix) {
    absl::StrAppend(&s, socket_path);
    if (db != 0) absl::StrAppend(&s, "?db=", db);
    return s;
  }
  const bool v6 = host.find(':') != std::string::npos;
  absl::StrAppend(&s, v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
  if (db != 0) absl::StrAppend(&s, "/", db);
  if (skip_verify) absl::StrAppend(&s, "?skip_verify=true");
  return s;
}

std::string EncodeRespCommand(std::span<const std::string_view> args) {
  std::string out = absl::StrCat("*", args.size(), "\r\n");
  for (std::string_view a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", std::string(a), "\r\n");
  return out;
}

void RespReader::Feed(std::string_view bytes) {
  if (!failed_.ok()) return;
  // Drop what complete values consumed before growing the buffer.
  if (pos_ > 0 && pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, pos_);
    offset_ += pos_;
    pos_ = 0;
  }
  buffer_.append(bytes);
}

absl::StatusOr<bool> RespReader::Parse(size_t& at, int depth, RespValue& out) const {
  auto error = [&](size_t where, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("RESP byte ", offset_ + where, ": ", std::string(what)));
  };
  if (at >= buffer_.size()) return false;
  const char type = buffer_[at];
  if (type != '+' && type != '-' && type != ':' && type != '$' && type != '*')
    return error(at, absl::StrCat("type byte 0x", absl::Hex(static_cast<unsigned char>(type)), " is not one of + - : $ *"));
  // The header line: type byte, text, CRLF.
  const size_t eol = buffer_.find("\r\n", at + 1);
  if (eol == std::string::npos) {
    // The line so far (without a CR that may start the CRLF): past the limit already?
    size_t partial = buffer_.size() - at - 1;
    if (partial > 0 && buffer_.back() == '\r') --partial;
    if (partial > limits_.max_line_bytes) return error(at, "a header line longer than the limit");
    return false;
  }
  const std::string_view line(buffer_.data() + at + 1, eol - at - 1);
  if (line.size() > limits_.max_line_bytes) return error(at, "a header line longer than the limit");
  size_t next = eol + 2;
  switch (type) {
    case '+':
    case '-':
      if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
        return error(at, "a line with a bare CR or LF");
      out.type = type == '+' ? RespValue::Type::kSimpleString : RespValue::Type::kError;
      out.text = std::string(line);
      at = next;
      return true;
    case ':': {
      int64_t v = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &v)) return error(at, "an integer that does not parse");
      out.type = RespValue::Type::kInteger;
      out.integer = v;
      at = next;
      return true;
    }
    case '$': {
      int64_t len = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &len) || len < -1) return error(at, "a bulk string length that is not -1 or more");
      if (len == -1) {
        out.type = RespValue::Type::kNull;
        at = next;
        return true;
      }
      if (static_cast<uint64_t>(len) > limits_.max_bulk_bytes) return error(at, "a bulk string longer than the limit");
      const size_t n = static_cast<size_t>(len);
      if (buffer_.size() - next < n + 2) return false;
      if (buffer_[next + n] != '\r' || buffer_[next + n + 1] != '\n') return error(next + n, "a bulk string not followed by CRLF");
      out.type = RespValue::Type::kBulkString;
      out.text.assign(buffer_, next, n);
      at = next + n + 2;
      return true;
    }
    case '*': {
      int64_t count = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &count) || count < -1) return error(at, "an array length that is not -1 or more");
      if (count == -1) {
        out.type = RespValue::Type::kNull;
        at = next;
        return true;
      }
      if (static_cast<uint64_t>(count) > limits_.max_array_elements) return error(at, "an array longer than the limit");
      if (depth + 1 > limits_.max_depth) return error(at, "arrays nested deeper than the limit");
      RespValue array;
      array.type = RespValue::Type::kArray;
      // Reserve no more than the bytes present can hold (4 bytes per element at least), so a
      // huge declared count cannot allocate before its elements arrive.
      array.elements.reserve(std::min<size_t>(static_cast<size_t>(count), (buffer_.size() - next) / 4 + 1));
      for (int64_t i = 0; i < count; ++i) {
        RespValue element;
        absl::StatusOr<bool> got = Parse(next, depth + 1, element);
        if (!got.ok() || !*got) return got;
        array.elements.push_back(std::move(element));
      }
      out = std::move(array);
      at = next;
      return true;
    }
    default:
      return error(at, absl::StrCat("type byte 0x", absl::Hex(static_cast<unsigned char>(type)),
                                    " is not one of + - : $ *"));
  }
}

absl::StatusOr<std::optional<RespValue>> RespReader::Next() {
  if (!failed_.ok()) return failed_;
  size_t at = pos_;
  RespValue v;
  absl::StatusOr<bool> got = Parse(at, 0, v);
  if (!got.ok()) {
    failed_ = got.status();
    return failed_;
  }
  if (!*got) return std::optional<RespValue>();
  pos_ = at;
  if (pos_ == buffer_.size()) {
    offset_ += pos_;
    buffer_.clear();
    pos_ = 0;
  }
  return std::optional<RespValue>(std::move(v));
}

}  // namespace epp
