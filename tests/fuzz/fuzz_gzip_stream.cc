// HttpClient's gzip decoding (internal::GzipStream: Content-Encoding: gzip answers of model
// servers, fed as libcurl hands the bytes over). The first byte picks the mode and the chunk size.
// Invariants: the output never passes the cap; feeding the same bytes in chunks or in one piece
// gives the same result and output; a decoder reused after Reset() behaves as a fresh one; and
// (mode 1) what GzipCompress (zlib) compressed decodes back to exactly the input.
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "http/gzip_stream.h"

namespace {

using epp::internal::GzipStream;

GzipStream::Result FeedChunked(GzipStream& g, std::string_view in, size_t chunk, std::string& out, size_t cap) {
  GzipStream::Result r = GzipStream::Result::kMore;
  for (size_t i = 0; i < in.size(); i += chunk) r = g.Feed(in.substr(i, chunk), out, cap);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool roundtrip = data[0] & 1;
  const size_t chunk = 1 + (data[0] >> 1);  // 1..128 bytes per Feed
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kCap = 1 << 20;
  static GzipStream reused;  // carries state from one input to the next, as the pool's do
  EPP_FUZZ_CHECK(reused.ok() && reused.Reset(), "reset");
  if (roundtrip) {
    const std::string packed = epp::internal::GzipCompress(rest);
    std::string out;
    const GzipStream::Result r = FeedChunked(reused, packed, chunk, out, kCap);
    if (rest.size() <= kCap) {
      EPP_FUZZ_CHECK(r == GzipStream::Result::kDone, "a whole member decodes");
      EPP_FUZZ_CHECK(out == rest, "what zlib compressed decodes back");
    } else {
      EPP_FUZZ_CHECK(r == GzipStream::Result::kTooBig && out.size() == kCap, "cut at the cap");
    }
    return 0;
  }
  std::string chunked, whole;
  GzipStream fresh;
  EPP_FUZZ_CHECK(fresh.ok(), "setup");
  const GzipStream::Result a = FeedChunked(reused, rest, chunk, chunked, kCap);
  const GzipStream::Result b = fresh.Feed(rest, whole, kCap);
  EPP_FUZZ_CHECK(chunked.size() <= kCap && whole.size() <= kCap, "the cap holds");
  EPP_FUZZ_CHECK(a == b, "chunking does not change the result");
  EPP_FUZZ_CHECK(a == GzipStream::Result::kBad || chunked == whole, "chunking does not change the output");
  EPP_FUZZ_CHECK(fresh.Feed("x", whole, kCap) == b || b == GzipStream::Result::kMore, "a final result sticks");
  return 0;
}
