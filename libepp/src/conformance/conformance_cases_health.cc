// Checks: the gRPC health services. Gateways and Kubernetes probe the EPP with grpc.health.v1
// (the Protocol's Health Checking section names liveness, readiness and the ext_proc service);
// an EPP that does not answer SERVING for all three is taken out of rotation or never becomes
// ready, however well it picks. The request is encoded by hand so the suite needs no health proto.
#include <grpcpp/generic/generic_stub.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

namespace {

int HealthCheck(const std::shared_ptr<grpc::Channel>& ch, const std::string& service, std::string* error) {
  grpc::GenericStub stub(ch);
  if (service.size() > 127) {
    *error = "service name too long";
    return -1;
  }
  std::string req;  // grpc.health.v1.HealthCheckRequest{service = 1}
  req.push_back(0x0a);
  req.push_back(static_cast<char>(service.size()));
  req += service;
  grpc::Slice slice(req);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out,
                 [&](grpc::Status st) { done.set_value(std::move(st)); });
  grpc::Status st = done.get_future().get();
  if (!st.ok()) {
    *error = absl::StrCat("gRPC status ", st.error_code(), ": ", st.error_message());
    return -1;
  }
  std::vector<grpc::Slice> slices;
  (void)out.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1 (enum)}; absent = UNKNOWN (0).
  if (bytes.size() >= 2 && bytes[0] == 0x08) return static_cast<unsigned char>(bytes[1]);
  return 0;
}

}  // namespace

std::vector<ConformanceCase> Suite::HealthCases() {
  return {
      {{"health-services", "grpc.health.v1 answers SERVING for liveness, readiness and the ext_proc service name",
        "Protocol, Health Checking: the EPP serves the gRPC health protocol with the services liveness, readiness and "
        "envoy.service.ext_proc.v3.ExternalProcessor"},
       [](Suite& s) { return s.HealthServices(); }},
  };
}

Outcome Suite::HealthServices() {
  if (health_target_.empty()) return Skip("no health address (--health HOST:PORT)");
  auto ch = grpc::CreateChannel(health_target_, grpc::InsecureChannelCredentials());
  std::vector<std::string> bad;
  for (const std::string& svc : std::vector<std::string>{"liveness", "readiness", std::string(kExtProcServiceName)}) {
    std::string err;
    int st = HealthCheck(ch, svc, &err);
    if (st != 1) {
      static const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
      bad.push_back(absl::StrCat("'", svc, "': ", st < 0 ? err : (st <= 3 ? names[st] : std::to_string(st))));
    }
  }
  if (!bad.empty()) return Fail(absl::StrCat("at ", health_target_, ": ", absl::StrJoin(bad, "; ")));
  return Pass(absl::StrCat("SERVING for all three at ", health_target_));
}

}  // namespace epp::internal::conformance
