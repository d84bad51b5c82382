// Private: one gzip member decoded as its bytes arrive (HttpClient's Content-Encoding: gzip),
// with a cap on the decoded size. Kept and reset between streams: a fresh zlib inflate state
// allocates and clears ~40 KB, more than decoding a small scrape costs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct z_stream_s;

namespace epp::internal {

class GzipStream {
 public:
  enum class Result {
    kMore,    // everything fed was consumed; the member has not ended yet
    kDone,    // the member ended (bytes fed after its trailer are ignored)
    kTooBig,  // the decoded size would pass the cap (`out` holds at most cap bytes)
    kBad,     // not gzip, or corrupt
  };

  GzipStream();
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // False when zlib could not set up (out of memory): the stream is unusable.
  bool ok() const { return z_ != nullptr; }
  // Ready for a new member; false when the state could not be reset.
  bool Reset();
  // Decodes `in`, appending to `out`; `out` never grows past `cap` bytes. After kDone, kTooBig
  // or kBad every further call returns the same result until Reset().
  Result Feed(std::string_view in, std::string& out, size_t cap);

 private:
  z_stream_s* z_ = nullptr;
  Result last_ = Result::kMore;
};

// `in` as one gzip member (zlib's default level): for tests and the benchmarks' static metrics
// server. Empty only when zlib fails (out of memory).
std::string GzipCompress(std::string_view in);

}  // namespace epp::internal
