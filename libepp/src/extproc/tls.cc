// serve's TLS material: a self-signed certificate, as GIE's EPP generates one when no --cert-path
// is given (gie-epp.md section 6.1); the checks made on certificates and keys before a server
// takes them; and the ext_proc port's reloadable server credentials (tls_credentials.h). OpenSSL 3
// (already linked by gRPC and libcurl).
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/runtime/extproc.h"
#include "extproc/tls_credentials.h"

namespace epp {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

std::string BioString(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

BioPtr ReadBio(std::string_view pem) {
  if (pem.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return nullptr;
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's reason for the last failure, and the error queue emptied.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : "unknown error";
}

// True when the last failure was only "no more PEM blocks" (the end of the input).
bool AtPemEnd() {
  const unsigned long e = ERR_peek_last_error();
  return ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
}

// Never asks for a passphrase: OpenSSL's default callback would read one from the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Every certificate in `pem`, in order; an empty list when there is none.
absl::StatusOr<std::vector<X509Ptr>> ReadCertificates(std::string_view pem, std::string_view what) {
  ERR_clear_error();
  BioPtr bio = ReadBio(pem);
  if (!bio) return absl::InvalidArgumentError(absl::StrCat(std::string(what), " is too large"));
  std::vector<X509Ptr> out;
  for (;;) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (!cert) {
      if (AtPemEnd()) break;
      return absl::InvalidArgumentError(
          absl::StrCat("certificate ", out.size() + 1, " of ", std::string(what), " does not parse: ", OpenSslReason()));
    }
    out.push_back(std::move(cert));
  }
  ERR_clear_error();
  return out;
}

}  // namespace

absl::Status CheckCertificateAndKey(std::string_view cert_pem, std::string_view key_pem) {
  EPP_ASSIGN_OR_RETURN(std::vector<X509Ptr> chain, ReadCertificates(cert_pem, "the certificate chain"));
  if (chain.empty())
    return absl::InvalidArgumentError("no PEM certificate in the certificate file (-----BEGIN CERTIFICATE-----)");
  // OpenSSL 3's decoders report a missing key as "unsupported": look for the PEM label first.
  if (key_pem.find("PRIVATE KEY-----") == std::string_view::npos)
    return absl::InvalidArgumentError("no PEM private key in the key file (-----BEGIN PRIVATE KEY-----)");
  BioPtr bio = ReadBio(key_pem);
  if (!bio) return absl::InvalidArgumentError("the private key is too large");
  ERR_clear_error();
  PKeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    const bool encrypted = key_pem.find("ENCRYPTED") != std::string_view::npos;
    const std::string reason = OpenSslReason();
    if (encrypted) return absl::InvalidArgumentError("the private key is encrypted: give it unencrypted");
    return absl::InvalidArgumentError("the private key does not parse: " + reason);
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the private key does not match the certificate (the first one in its file)");
  }
  return absl::OkStatus();
}

absl::Status CheckCertificateBundle(std::string_view pem) {
  EPP_ASSIGN_OR_RETURN(std::vector<X509Ptr> certs, ReadCertificates(pem, "the bundle"));
  if (certs.empty()) return absl::InvalidArgumentError("no PEM certificate in it (-----BEGIN CERTIFICATE-----)");
  return absl::OkStatus();
}

absl::StatusOr<PemKeyPair> GenerateSelfSignedCertificate() {
  PKeyPtr key(EVP_RSA_gen(2048));
  if (!key) return absl::InternalError("cannot generate an RSA key");
  X509Ptr cert(X509_new());
  if (!cert) return absl::InternalError("cannot allocate a certificate");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("epp"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("epp"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  if (X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1")) {
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return absl::InternalError("cannot sign the certificate");
  BioPtr cert_bio(BIO_new(BIO_s_mem())), key_bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(cert_bio.get(), cert.get()) ||
      !PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr))
    return absl::InternalError("cannot encode the certificate as PEM");
  return PemKeyPair{BioString(cert_bio.get()), BioString(key_bio.get())};
}

namespace internal {
namespace {

// grpc::ServerCredentials for a grpc_server_credentials made through gRPC's C API. gRPC 1.51's
// ServerCredentials is an interface whose AddPortToServer each kind of credentials implements;
// the SSL kind only hands its C credentials to grpc_server_add_http2_port, as this does. (Later
// gRPC releases let the class wrap the C credentials itself: an upgrade changes this class.)
class CCredentials final : public grpc::ServerCredentials {
 public:
  explicit CCredentials(grpc_server_credentials* creds) : creds_(creds) {}
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* creds_;  // owned by the ReloadableTls
};

absl::Status Check(const TlsMaterial& m) {
  if (absl::Status st = CheckCertificateAndKey(m.cert_pem, m.key_pem); !st.ok()) return st;
  if (!m.client_ca_pem.empty()) {
    if (absl::Status st = CheckCertificateBundle(m.client_ca_pem); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat("the client CA bundle: ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReloadableTls>> ReloadableTls::Create(TlsMaterial initial) {
  EPP_RETURN_IF_ERROR(Check(initial));
  return std::unique_ptr<ReloadableTls>(new ReloadableTls(std::move(initial)));
}

ReloadableTls::ReloadableTls(TlsMaterial initial) : current_(std::move(initial)) {
  const grpc_ssl_client_certificate_request_type request = current_.client_ca_pem.empty()
                                                               ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                               : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  // gRPC fetches the first configuration when the port is added, then once per handshake.
  creds_ = grpc_ssl_server_credentials_create_with_options(
      grpc_ssl_server_credentials_create_options_using_config_fetcher(request, &ReloadableTls::Fetch, this));
}

ReloadableTls::~ReloadableTls() { grpc_server_credentials_release(creds_); }

std::shared_ptr<grpc::ServerCredentials> ReloadableTls::Credentials() { return std::make_shared<CCredentials>(creds_); }

absl::Status ReloadableTls::Update(TlsMaterial next) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (next.client_ca_pem.empty() != current_.client_ca_pem.empty())
      return absl::FailedPreconditionError(
          current_.client_ca_pem.empty()
              ? "the server started without a client CA: client certificates cannot be required while it runs"
              : "the server started with a client CA: client certificates stay required while it runs");
  }
  EPP_RETURN_IF_ERROR(Check(next));
  std::lock_guard<std::mutex> lock(mu_);
  if (next == current_) return absl::OkStatus();
  current_ = std::move(next);
  ++generation_;
  return absl::OkStatus();
}

TlsMaterial ReloadableTls::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

grpc_ssl_certificate_config_reload_status ReloadableTls::Fetch(void* self, grpc_ssl_server_certificate_config** config) {
  ReloadableTls& t = *static_cast<ReloadableTls*>(self);
  std::lock_guard<std::mutex> lock(t.mu_);
  if (t.fetched_ == t.generation_) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  const TlsMaterial& m = t.current_;
  grpc_ssl_pem_key_cert_pair pair{m.key_pem.c_str(), m.cert_pem.c_str()};
  // gRPC 1.51's fetcher path needs root certificates even when no client certificate is asked for
  // (it asserts on none and refuses an empty bundle), then never uses them: the server's own
  // certificate stands in.
  const std::string& roots = m.client_ca_pem.empty() ? m.cert_pem : m.client_ca_pem;
  *config = grpc_ssl_server_certificate_config_create(roots.c_str(), &pair, 1);  // copies the strings
  t.fetched_ = t.generation_;
  return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

}  // namespace internal
}  // namespace epp
