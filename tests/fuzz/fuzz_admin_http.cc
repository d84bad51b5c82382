// The metrics port's request reader (internal::AdminHeadScanner and ParseAdminRequestHead,
// serve/admin_http.h): bytes as a client sends them. The first byte picks the chunk size the
// scanner is fed with (1..256 bytes at a time, as reads may split them) and the limits (the
// defaults, or small ones so they are reached often).
// Invariants: the scanner's answer and head end do not depend on how the bytes are split; an
// error is 414 or 431 (with its reason); a complete head is within the head limit, ends with an
// empty line, has at most the header-line limit; the parser answers 0, 400, 405, 413 or 505 and
// 0 only for GET/HEAD with an origin-form target whose path is the target up to '?'; the query
// decoder and the answer serializer accept whatever the parser let through.
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "serve/admin_http.h"

namespace {

using epp::internal::AdminHeadScanner;
using epp::internal::AdminHttpOptions;
using epp::internal::AdminParseResult;
using epp::internal::AdminReject;
using epp::internal::AdminRequest;

struct Scan {
  AdminHeadScanner::Step step;
  size_t request_start = 0, head_end = 0;
  int status = 0;
};

Scan Run(std::string_view in, size_t chunk, const AdminHttpOptions& o) {
  AdminHeadScanner s;
  AdminHeadScanner::Step step = AdminHeadScanner::Step::kMore;
  for (size_t n = std::min(chunk, in.size()); step == AdminHeadScanner::Step::kMore; n = std::min(n + chunk, in.size())) {
    step = s.Feed(in.substr(0, n), o);
    if (n == in.size()) break;
  }
  return {step, s.request_start(), s.head_end(), s.status()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t chunk = 1 + data[0];
  AdminHttpOptions o;
  if (data[0] & 1) {
    o.max_head_bytes = 256;
    o.max_request_line_bytes = 64;
    o.max_header_lines = 4;
  }
  const std::string_view in = epp::fuzz::Text(data + 1, size - 1);

  const Scan whole = Run(in, in.size() + 1, o), split = Run(in, chunk, o);
  EPP_FUZZ_CHECK(whole.step == split.step && whole.head_end == split.head_end && whole.status == split.status &&
                     whole.request_start == split.request_start,
                 "the scanner's answer depends on how the bytes arrive");
  if (whole.step == AdminHeadScanner::Step::kError) {
    EPP_FUZZ_CHECK(whole.status == 414 || whole.status == 431, std::to_string(whole.status));
    return 0;
  }
  if (whole.step == AdminHeadScanner::Step::kMore) {
    EPP_FUZZ_CHECK(in.size() <= o.max_head_bytes, "more than the head limit without an error");
    return 0;
  }
  EPP_FUZZ_CHECK(whole.head_end <= o.max_head_bytes && whole.request_start < whole.head_end, "head bounds");
  const std::string_view head = in.substr(whole.request_start, whole.head_end - whole.request_start);
  EPP_FUZZ_CHECK(head.back() == '\n', "a head ends with its empty line");

  AdminRequest req;
  const AdminParseResult r = epp::internal::ParseAdminRequestHead(head, &req);
  EPP_FUZZ_CHECK(r.status == 0 || r.status == 400 || r.status == 405 || r.status == 413 || r.status == 505,
                 std::to_string(r.status));
  EPP_FUZZ_CHECK((r.status == 0) == (r.reject == AdminReject::kNone), "a refusal has a reason");
  if (r.status != 0) return 0;
  EPP_FUZZ_CHECK(req.method == "GET" || req.method == "HEAD", req.method);
  EPP_FUZZ_CHECK(!req.target.empty() && req.target[0] == '/', req.target);
  EPP_FUZZ_CHECK(req.path == req.target.substr(0, req.target.find('?')), req.path);
  EPP_FUZZ_CHECK(req.target.size() <= o.max_request_line_bytes, "the request line limit");

  epp::internal::AdminResponse res;
  res.body = req.path;
  res.may_compress = true;
  const std::string bytes = epp::internal::SerializeAdminResponse(res, req.method == "HEAD", req.keep_alive, req.accept_gzip);
  EPP_FUZZ_CHECK(bytes.rfind("HTTP/1.1 200 OK\r\n", 0) == 0, "status line");
  return 0;
}
