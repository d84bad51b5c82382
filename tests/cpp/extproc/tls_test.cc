// The ext_proc port's TLS over real gRPC on 127.0.0.1: the checks made on certificates and keys,
// client certificates verified against a client CA, and UpdateTls (what certificate rotation
// uses). Keys and certificates are made here with OpenSSL (EC P-256), never read from files.
#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <memory>
#include <string>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "extproc/extproc_testutil.h"

namespace epp {
namespace {

using namespace extproc_test;  // NOLINT

struct Pem {
  std::string cert_pem, key_pem;
};

template <typename T, void (*F)(T*)>
struct Free {
  void operator()(T* p) const { F(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Free<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Free<BIO, BIO_free_all>>;

std::string Drain(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A CA when `issuer` is null; otherwise a certificate `issuer` signs, for 127.0.0.1 and localhost.
Pem MakeCert(const std::string& cn, const Pem* issuer = nullptr) {
  static long serial = 1;
  Key key(EVP_EC_gen("P-256"));
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), ++serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  Cert issuer_cert;
  Key issuer_key;
  if (issuer != nullptr) {
    Bio cb(BIO_new_mem_buf(issuer->cert_pem.data(), static_cast<int>(issuer->cert_pem.size())));
    Bio kb(BIO_new_mem_buf(issuer->key_pem.data(), static_cast<int>(issuer->key_pem.size())));
    issuer_cert.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    issuer_key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  }
  X509* signer = issuer != nullptr ? issuer_cert.get() : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (issuer == nullptr) {
    AddExt(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExt(cert.get(), signer, NID_basic_constraints, "CA:FALSE");
    AddExt(cert.get(), signer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  }
  EXPECT_NE(X509_sign(cert.get(), issuer != nullptr ? issuer_key.get() : key.get(), EVP_sha256()), 0);
  Bio cb(BIO_new(BIO_s_mem())), kb(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(cb.get(), cert.get());
  PEM_write_bio_PrivateKey(kb.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  return {Drain(cb.get()), Drain(kb.get())};
}

// The status of one whole request on a connection of its own that trusts `root` and presents
// `client` when given.
grpc::Status Request(int port, const std::string& root, const Pem* client = nullptr) {
  static int unique = 0;
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = root;
  if (client != nullptr) {
    ssl.pem_private_key = client->key_pem;
    ssl.pem_cert_chain = client->cert_pem;
  }
  grpc::ChannelArguments args;
  args.SetInt("epp.test.channel", ++unique);  // no connection shared with another channel
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(ssl), args);
  auto stub = pb::ExternalProcessor::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->Process(&ctx);
  for (const std::string& bytes : BuildProcessingRequests(ChatCapture(ChatBody("m", "hello")))) {
    pb::ProcessingRequest m;
    EXPECT_TRUE(m.ParseFromString(bytes));
    if (!stream->Write(m)) break;
  }
  pb::ProcessingResponse first;
  const bool answered = stream->Read(&first);
  stream->WritesDone();
  pb::ProcessingResponse rest;
  while (stream->Read(&rest)) {
  }
  grpc::Status status = stream->Finish();
  if (status.ok() && !answered) return grpc::Status(grpc::StatusCode::INTERNAL, "no answer");
  return status;
}

struct TlsServer {
  explicit TlsServer(const Pem& server, const std::string& client_ca = "") : env({Ep("10.0.0.1:8000")}) {
    ExtProcServerOptions o;
    o.listen = "127.0.0.1:0";
    o.tls = true;
    o.cert_pem = server.cert_pem;
    o.key_pem = server.key_pem;
    o.client_ca_pem = client_ca;
    auto started = ExtProcServer::Start(*env.scheduler, env.pool, o);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) this->server = std::move(*started);
  }
  int port() const { return server->port(); }
  SchedulerEnv env;
  std::unique_ptr<ExtProcServer> server;
};

TEST(TlsMaterialTest, ChecksSayWhatIsWrong) {
  const Pem ca = MakeCert("ca");
  const Pem a = MakeCert("a", &ca), b = MakeCert("b", &ca);
  EXPECT_TRUE(CheckCertificateAndKey(a.cert_pem, a.key_pem).ok());
  EXPECT_TRUE(CheckCertificateAndKey(a.cert_pem + ca.cert_pem, a.key_pem).ok()) << "with its chain";
  EXPECT_TRUE(CheckCertificateBundle(ca.cert_pem + b.cert_pem).ok());
  const std::string garbled = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  // An encrypted copy of a's key.
  std::string encrypted;
  {
    Bio in(BIO_new_mem_buf(a.key_pem.data(), static_cast<int>(a.key_pem.size())));
    Key key(PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr));
    Bio out(BIO_new(BIO_s_mem()));
    char pass[] = "secret";
    PEM_write_bio_PKCS8PrivateKey(out.get(), key.get(), EVP_aes_256_cbc(), pass, 6, nullptr, nullptr);
    encrypted = Drain(out.get());
  }
  struct Case {
    const char* name;
    std::string cert, key;
    const char* message;
  };
  const Case cases[] = {
      {"empty certificate", "", a.key_pem, "no PEM certificate in the certificate file"},
      {"a key where the certificate goes", a.key_pem, a.key_pem, "no PEM certificate in the certificate file"},
      {"garbled certificate", garbled, a.key_pem, "certificate 1 of the certificate chain does not parse"},
      {"no key", a.cert_pem, "", "no PEM private key in the key file"},
      {"another certificate's key", a.cert_pem, b.key_pem, "the private key does not match the certificate"},
      {"the chain's order reversed", ca.cert_pem + a.cert_pem, a.key_pem, "does not match the certificate"},
      {"encrypted key", a.cert_pem, encrypted, "the private key is encrypted"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status st = CheckCertificateAndKey(c.cert, c.key);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.message), absl::string_view::npos) << st;
  }
  EXPECT_NE(CheckCertificateBundle("").message().find("no PEM certificate in it"), absl::string_view::npos);
  EXPECT_NE(CheckCertificateBundle(ca.cert_pem + garbled).message().find("certificate 2 of the bundle does not parse"),
            absl::string_view::npos);
}

TEST(ExtProcTlsTest, OnlyClientsWithACertificateTheCaSignedAreServed) {
  const Pem ca = MakeCert("ca"), other_ca = MakeCert("other-ca");
  const Pem server = MakeCert("server", &ca), client = MakeCert("client", &ca), stranger = MakeCert("stranger", &other_ca);
  TlsServer s(server, ca.cert_pem);
  ASSERT_NE(s.server, nullptr);
  EXPECT_TRUE(Request(s.port(), ca.cert_pem, &client).ok());
  EXPECT_EQ(Request(s.port(), ca.cert_pem).error_code(), grpc::StatusCode::UNAVAILABLE) << "no client certificate";
  EXPECT_EQ(Request(s.port(), ca.cert_pem, &stranger).error_code(), grpc::StatusCode::UNAVAILABLE) << "another CA's";
  EXPECT_EQ(s.server->stats().outcome_200.load(), 1) << "refused clients never opened a stream";

  // The bundle may hold several CAs; a new bundle applies to new connections.
  ASSERT_TRUE(s.server->UpdateTls(server.cert_pem, server.key_pem, ca.cert_pem + other_ca.cert_pem).ok());
  EXPECT_TRUE(Request(s.port(), ca.cert_pem, &stranger).ok());
  ASSERT_TRUE(s.server->UpdateTls(server.cert_pem, server.key_pem, other_ca.cert_pem).ok());
  EXPECT_EQ(Request(s.port(), ca.cert_pem, &client).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(Request(s.port(), ca.cert_pem, &stranger).ok());
}

TEST(ExtProcTlsTest, UpdateTlsServesNewConnectionsTheNewCertificate) {
  const Pem ca_a = MakeCert("ca-a"), ca_b = MakeCert("ca-b");
  const Pem a = MakeCert("a", &ca_a), b = MakeCert("b", &ca_b);
  TlsServer s(a);
  ASSERT_NE(s.server, nullptr);
  EXPECT_TRUE(Request(s.port(), ca_a.cert_pem).ok());
  EXPECT_EQ(Request(s.port(), ca_b.cert_pem).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(s.server->UpdateTls(b.cert_pem, b.key_pem, "").ok());
  EXPECT_TRUE(Request(s.port(), ca_b.cert_pem).ok());
  EXPECT_EQ(Request(s.port(), ca_a.cert_pem).error_code(), grpc::StatusCode::UNAVAILABLE);

  // Refused material changes nothing.
  EXPECT_EQ(s.server->UpdateTls(a.cert_pem, b.key_pem, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.server->UpdateTls("", "", "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.server->UpdateTls(a.cert_pem, a.key_pem, ca_a.cert_pem).code(), absl::StatusCode::kFailedPrecondition)
      << "client certificates cannot start being required";
  EXPECT_TRUE(Request(s.port(), ca_b.cert_pem).ok());
}

TEST(ExtProcTlsTest, StartRefusesMaterialThatCannotServe) {
  const Pem ca = MakeCert("ca");
  const Pem a = MakeCert("a", &ca), b = MakeCert("b", &ca);
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcServerOptions o;
  o.listen = "127.0.0.1:0";
  o.tls = true;
  o.cert_pem = a.cert_pem;
  o.key_pem = b.key_pem;
  auto mismatched = ExtProcServer::Start(*env.scheduler, env.pool, o);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("ext_proc TLS: the private key does not match"), absl::string_view::npos)
      << mismatched.status();
  o.key_pem = a.key_pem;
  o.client_ca_pem = "not a certificate";
  auto bad_ca = ExtProcServer::Start(*env.scheduler, env.pool, o);
  EXPECT_NE(bad_ca.status().message().find("the client CA bundle: no PEM certificate"), absl::string_view::npos)
      << bad_ca.status();
  o.tls = false;
  o.client_ca_pem = ca.cert_pem;
  EXPECT_EQ(ExtProcServer::Start(*env.scheduler, env.pool, o).status().code(), absl::StatusCode::kInvalidArgument)
      << "a client CA without TLS";
  o.client_ca_pem.clear();
  auto plain = ExtProcServer::Start(*env.scheduler, env.pool, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->UpdateTls(a.cert_pem, a.key_pem, "").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace epp
