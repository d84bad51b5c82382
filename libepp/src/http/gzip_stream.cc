#include "http/gzip_stream.h"

#include <zlib.h>

#include <new>

namespace epp::internal {

GzipStream::GzipStream() {
  auto* z = new (std::nothrow) z_stream{};
  if (z == nullptr) return;
  // 15 + 16: a gzip wrapper (Content-Encoding: gzip), nothing else.
  if (inflateInit2(z, 15 + 16) != Z_OK) {
    delete z;
    return;
  }
  z_ = z;
}

GzipStream::~GzipStream() {
  if (z_ == nullptr) return;
  inflateEnd(z_);
  delete z_;
}

bool GzipStream::Reset() {
  last_ = Result::kMore;
  return z_ != nullptr && inflateReset(z_) == Z_OK;
}

GzipStream::Result GzipStream::Feed(std::string_view in, std::string& out, size_t cap) {
  if (z_ == nullptr) return Result::kBad;
  if (last_ != Result::kMore) return last_;
  if (in.empty()) return last_;
  z_->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z_->avail_in = static_cast<uInt>(in.size());
  char buf[16384];
  // Until the input is consumed and zlib has no output left over (a full buffer may mean more).
  for (;;) {
    z_->next_out = reinterpret_cast<Bytef*>(buf);
    z_->avail_out = sizeof buf;
    const int rc = inflate(z_, Z_NO_FLUSH);
    const size_t got = sizeof buf - z_->avail_out;
    // The cap is on the decoded size: a small gzip answer may expand a thousandfold.
    const size_t room = out.size() < cap ? cap - out.size() : 0;
    if (got > room) {
      out.append(buf, room);
      return last_ = Result::kTooBig;
    }
    out.append(buf, got);
    if (rc == Z_STREAM_END) return last_ = Result::kDone;
    if (rc == Z_BUF_ERROR && got == 0 && z_->avail_in == 0) break;  // needs more input
    if (rc != Z_OK && rc != Z_BUF_ERROR) return last_ = Result::kBad;
    if (rc == Z_BUF_ERROR && got == 0) return last_ = Result::kBad;  // no progress with input left
    if (z_->avail_in == 0 && z_->avail_out != 0) break;
  }
  return Result::kMore;
}

std::string GzipCompress(std::string_view in) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, static_cast<uLong>(in.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? z.total_out : 0);
  deflateEnd(&z);
  return out;
}

}  // namespace epp::internal
