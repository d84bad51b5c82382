// The suite's ext_proc client: credentials, and SendRequest, which plays Envoy's side of the request
// path and records what the EPP answered. It reads the answers as Envoy acts on them in
// FULL_DUPLEX_STREAMED (ext_proc's external_processor.proto): headers first, body chunks only as
// body_mutation.streamed_response (Envoy rejects a whole-body mutation in that mode), nothing
// after the chunk with end_of_stream. A deviation is recorded in RequestAnswer::problem, which
// the checks report, rather than ending the read, so a check sees everything that came back.
//
// And ProbeTransport, which tells before any gRPC call whether the EPP speaks plaintext HTTP/2 or
// TLS, from the first bytes it answers to a connection's opening.
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return out;
}

void CollectHeaders(const pb::CommonResponse& c, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& h : c.header_mutation().set_headers())
    out.emplace_back(Lower(h.header().key()), h.header().raw_value().empty() ? h.header().value() : h.header().raw_value());
}

void CollectMetadata(const pb::ProcessingResponse& m, RequestAnswer& a) {
  if (!m.has_dynamic_metadata()) return;
  auto ns = m.dynamic_metadata().fields().find(std::string(kDestinationEndpointNamespace));
  if (ns == m.dynamic_metadata().fields().end() || !ns->second.has_struct_value()) return;
  auto k = ns->second.struct_value().fields().find(std::string(kDestinationEndpointKey));
  if (k != ns->second.struct_value().fields().end() && k->second.has_string_value())
    a.metadata_destination = k->second.string_value();
}

// ---- The transport probe -------------------------------------------------------------------------
// A gRPC channel with the wrong transport never says so: a plaintext client at a TLS server sees
// the connection close (and the server logs a handshake error per attempt), a TLS client at a
// plaintext server sees "wrong version number". Each side's first bytes do say it: a TLS server
// answers a ClientHello with a TLS record (a ServerHello, or an alert) and a plaintext HTTP/2
// server answers the connection preface with its SETTINGS frame. Either server may instead close
// the connection on the other protocol's opening, so when the first opening gets no answer the
// other one is tried.

using Millis = std::chrono::milliseconds;

// HOST:PORT, [V6]:PORT or dns:///HOST:PORT; nullopt for the other gRPC target forms (unix:,
// ipv4: lists, a name without a port), which are not probed.
std::optional<std::pair<std::string, std::string>> HostPort(std::string_view t) {
  if (t.rfind("dns:///", 0) == 0) t.remove_prefix(7);
  std::string host, port;
  if (!t.empty() && t.front() == '[') {
    const size_t close = t.find(']');
    if (close == std::string_view::npos || t.substr(close + 1, 1) != ":") return std::nullopt;
    host = std::string(t.substr(1, close - 1));
    port = std::string(t.substr(close + 2));
  } else {
    const size_t colon = t.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = std::string(t.substr(0, colon));
    port = std::string(t.substr(colon + 1));
    if (host.find(':') != std::string::npos || host.find('/') != std::string::npos) return std::nullopt;
  }
  if (host.empty() || port.empty() || port.size() > 5) return std::nullopt;
  for (char c : port)
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  return std::make_pair(host, port);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A TCP connection within `timeout`, non-blocking; -1 with `error` set when none was made.
int Dial(const std::string& host, const std::string& port, Millis timeout, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, freeaddrinfo);
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      *error = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        errno = ETIMEDOUT;
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) return fd;
    *error = std::strerror(errno);
    close(fd);
  }
  return -1;
}

// What came back for an opening: up to 64 bytes, read until 9 arrived (a frame header), the server
// closed the connection, or the timeout passed.
struct Answer {
  std::string bytes;
  bool closed = false;
};

Answer Exchange(int fd, const std::string& opening, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  auto left = [&] { return static_cast<int>(std::max<int64_t>(0, std::chrono::duration_cast<Millis>(deadline - Clock::now()).count())); };
  Answer a;
  size_t sent = 0;
  while (sent < opening.size()) {
    ssize_t n = send(fd, opening.data() + sent, opening.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      a.closed = true;  // reset before the opening was out
      return a;
    }
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, left()) <= 0) return a;
  }
  while (a.bytes.size() < 9) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left()) <= 0) break;
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) {  // closed or reset
      a.closed = true;
      break;
    }
    a.bytes.append(buf, static_cast<size_t>(n));
  }
  return a;
}

// A real ClientHello (OpenSSL's, offering h2 by ALPN), as gRPC's TLS client would open.
std::string ClientHello() {
  std::string out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return out;
  SSL* ssl = SSL_new(ctx);
  if (ssl != nullptr) {
    BIO* in = BIO_new(BIO_s_mem());
    BIO* wire = BIO_new(BIO_s_mem());
    if (in != nullptr && wire != nullptr) {
      SSL_set_bio(ssl, in, wire);  // the SSL owns both from here
      static const unsigned char kAlpn[] = {2, 'h', '2'};
      SSL_set_alpn_protos(ssl, kAlpn, sizeof kAlpn);
      SSL_set_connect_state(ssl);
      SSL_do_handshake(ssl);  // writes the ClientHello, then wants the server's answer
      char* data = nullptr;
      long n = BIO_get_mem_data(wire, &data);
      if (n > 0 && data != nullptr) out.assign(data, static_cast<size_t>(n));
    } else {
      BIO_free(in);
      BIO_free(wire);
    }
    SSL_free(ssl);
  }
  SSL_CTX_free(ctx);
  return out;
}

// The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4).
std::string H2Preface() {
  std::string s = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  s.append("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  return s;
}

// What an answer says about the server; `what` describes it after "... <opening>".
TransportProbe::Kind Classify(const Answer& a, const char* opening, Millis timeout, std::string* what) {
  const std::string& b = a.bytes;
  auto u = [&](size_t i) { return static_cast<unsigned char>(b[i]); };
  if (b.size() >= 3 && (u(0) == 0x15 || u(0) == 0x16) && u(1) == 0x03) {
    *what = absl::StrCat("answered ", opening, " with ", u(0) == 0x15 ? "a TLS alert" : "a TLS handshake record");
    return TransportProbe::kTls;
  }
  if (b.size() >= 9 && u(3) == 0x04 && u(5) == 0 && u(6) == 0 && u(7) == 0 && u(8) == 0) {
    *what = absl::StrCat("answered ", opening, " with an HTTP/2 SETTINGS frame");
    return TransportProbe::kPlaintext;
  }
  if (b.rfind("HTTP/", 0) == 0) {
    *what = absl::StrCat("answered ", opening, " with a plaintext HTTP/1 response");
    return TransportProbe::kPlaintext;
  }
  if (!b.empty()) *what = absl::StrCat("answered ", opening, " with ", b.size(), " bytes of no known protocol");
  else if (a.closed) *what = absl::StrCat("closed the connection on ", opening);
  else *what = absl::StrCat("did not answer ", opening, " within ", timeout.count(), " ms");
  return TransportProbe::kUnknown;
}

}  // namespace

TransportProbe ProbeTransport(const std::string& target, bool tls_first, std::chrono::milliseconds timeout) {
  TransportProbe out;
  auto hp = HostPort(target);
  if (!hp) {
    out.detail = "not a HOST:PORT target: not probed";
    return out;
  }
  struct Opening {
    std::string bytes;
    const char* name;
  };
  static const std::string hello = ClientHello();  // any ClientHello will do: the same for every probe
  std::vector<Opening> openings = {{H2Preface(), "a plaintext HTTP/2 preface"}, {hello, "a TLS ClientHello"}};
  if (tls_first) std::swap(openings[0], openings[1]);
  std::string said;
  for (const Opening& o : openings) {
    if (o.bytes.empty()) continue;
    std::string error;
    Fd fd(Dial(hp->first, hp->second, timeout, &error));
    if (fd.get() < 0) {
      if (said.empty()) {
        out.kind = TransportProbe::kRefused;
        out.detail = absl::StrCat("cannot connect to ", target, ": ", error);
      }
      return out;
    }
    std::string what;
    out.kind = Classify(Exchange(fd.get(), o.bytes, timeout), o.name, timeout, &what);
    absl::StrAppend(&said, said.empty() ? "" : ", then ", what);
    out.detail = absl::StrCat(target, " ", said);
    if (out.kind != TransportProbe::kUnknown) return out;
  }
  return out;
}

std::shared_ptr<grpc::ChannelCredentials> Credentials(bool tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions o;
  o.set_verify_server_certs(false);  // as Envoy Gateway dials the EPP: TLS without verification
  o.set_check_call_host(false);
  o.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  return grpc::experimental::TlsCredentials(o);
}

RequestAnswer SendRequest(Stream& s, const std::vector<std::string>& messages, bool has_body) {
  RequestAnswer a;
  for (const std::string& m : messages) {
    if (!s.Write([&] {
          pb::ProcessingRequest r;
          r.ParseFromString(m);
          return r;
        }()))
      break;  // the server ended the stream; Read reports it
  }
  pb::ProcessingResponse r;
  while (true) {
    if (!s.Read(&r)) {
      a.status = s.Finish();
      if (a.problem.empty())
        a.problem = a.status.ok() ? "the EPP ended the stream before answering the request"
                                  : absl::StrCat("the stream ended with gRPC status ", a.status.error_code(), ": ",
                                                 a.status.error_message());
      return a;
    }
    a.messages.push_back(r);
    CollectMetadata(r, a);
    if (r.has_immediate_response()) {
      a.immediate = true;
      a.immediate_status = static_cast<int>(r.immediate_response().status().code());
      a.immediate_body = r.immediate_response().body();
      return a;
    }
    if (r.has_request_headers()) {
      if (a.headers_seen && a.problem.empty()) a.problem = "two request_headers responses";
      a.headers_seen = true;
      CollectHeaders(r.request_headers().response(), a.set_headers);
      if (!has_body) return a;
      continue;
    }
    if (r.has_request_body()) {
      if (!a.headers_seen && a.problem.empty()) a.problem = "a request_body response came before the request_headers response";
      const auto& c = r.request_body().response();
      if (c.has_header_mutation()) CollectHeaders(c, a.set_headers);
      if (!c.has_body_mutation() || !c.body_mutation().has_streamed_response()) {
        if (a.problem.empty())
          a.problem = c.has_body_mutation() && c.body_mutation().has_body()
                          ? "a request_body response with body_mutation.body, not streamed_response (Envoy rejects it "
                            "in FULL_DUPLEX_STREAMED)"
                          : "a request_body response without body_mutation.streamed_response (Envoy rejects it in "
                            "FULL_DUPLEX_STREAMED)";
        continue;
      }
      const auto& sr = c.body_mutation().streamed_response();
      if (a.body_eos && a.problem.empty()) a.problem = "a body chunk after the chunk with end_of_stream";
      a.body += sr.body();
      a.chunk_sizes.push_back(sr.body().size());
      if (sr.end_of_stream()) {
        a.body_eos = true;
        return a;
      }
      continue;
    }
    if (a.problem.empty()) a.problem = absl::StrCat("an unexpected response message (field ", r.response_case(), ")");
  }
}

}  // namespace epp::internal::conformance
