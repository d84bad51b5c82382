// TLS server credentials for the ext_proc port whose certificate, key and client CAs can be
// replaced while the server runs (private to libepp's ext_proc server).
//
// gRPC's SSL server credentials take a "certificate config fetcher": a callback gRPC calls as
// each connection's handshake starts, answering "unchanged" or a new configuration. Update()
// checks new material first (CheckCertificateAndKey, CheckCertificateBundle), so a half-rotated
// or broken pair never replaces the one being served: the reference (llm-d Router's cert
// reloader) also keeps its certificate when the new files do not load. gRPC's
// FileWatcherCertificateProvider does not: with gRPC 1.51 a mismatched key, an unparsable or a
// missing tls.crt makes every handshake fail until the files are right again.
#pragma once

#include <grpc/grpc_security.h>
#include <grpcpp/security/server_credentials.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace epp::internal {

struct TlsMaterial {
  std::string cert_pem;       // the server's certificate first, then its chain
  std::string key_pem;        // the first certificate's private key
  std::string client_ca_pem;  // non-empty: client certificates are required and verified against it
  bool operator==(const TlsMaterial&) const = default;
};

// Thread-safe. The credentials refer to this object: keep it alive as long as the server that
// listens with them (ExtProcServer::Impl declares it before its grpc::Server).
class ReloadableTls {
 public:
  // kInvalidArgument when `initial` does not pass the checks (the message says what is wrong).
  // Client certificates are required for the server's life exactly when initial.client_ca_pem
  // is non-empty.
  static absl::StatusOr<std::unique_ptr<ReloadableTls>> Create(TlsMaterial initial);
  ~ReloadableTls();
  ReloadableTls(const ReloadableTls&) = delete;
  ReloadableTls& operator=(const ReloadableTls&) = delete;

  // For ServerBuilder::AddListeningPort.
  std::shared_ptr<grpc::ServerCredentials> Credentials();

  // New handshakes use `next` from now on; connections already set up keep what they have.
  // kInvalidArgument (nothing changes) when it does not pass the checks; kFailedPrecondition when
  // it adds or drops the client CA (whether clients must present a certificate is fixed at start).
  absl::Status Update(TlsMaterial next);
  TlsMaterial current() const;

 private:
  explicit ReloadableTls(TlsMaterial initial);
  static grpc_ssl_certificate_config_reload_status Fetch(void* self, grpc_ssl_server_certificate_config** config);

  mutable std::mutex mu_;
  TlsMaterial current_;
  uint64_t generation_ = 1;  // bumped by each Update that changes the material
  uint64_t fetched_ = 0;     // the generation gRPC was last given
  grpc_server_credentials* creds_ = nullptr;
};

}  // namespace epp::internal
