// UTF-8 helpers shared by libepp's sources (private: not part of the public API).
//
// Well-formed means what Unicode's table 3-7 allows and what Python, Rust and utf8proc accept:
// no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated
// sequence. Decoding goes through utf8proc (the tokenizer's Unicode tables come from it too), so
// every reader of text agrees with the tokenizer on which bytes are a character.
#pragma once

#include <utf8proc.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace epp::internal {

// True for a continuation byte (10xxxxxx), one that does not start a character.
inline bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The length of the sequence a lead byte announces: 1 for ASCII, else 2, 3 or 4 from its high
// bits. For text known to be valid; a continuation byte gives 2 and bytes F8..FF give 4.
inline size_t Utf8SequenceLength(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The start of the character that byte `i` of `s` belongs to: `i` moved back over continuation
// bytes, stopping at 0.
inline size_t Utf8CharStart(std::string_view s, size_t i) {
  while (i > 0 && IsUtf8Continuation(s[i])) --i;
  return i;
}

// Decodes the character at the start of `s` into `cp` and returns its length in bytes; 0 (and
// cp = -1) when `s` is empty or does not start with a well-formed sequence.
inline size_t DecodeUtf8(std::string_view s, int32_t& cp) {
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &c);
  cp = c;
  return n > 0 ? static_cast<size_t>(n) : 0;
}

// Writes `cp` as UTF-8 to `dst` (room for 4 bytes) and returns the number of bytes written: 0 for
// a value above U+10FFFF (a negative int32 converts to one). Surrogates are encoded as they come,
// as utf8proc_encode_char does: callers that read \u escapes reject lone ones first.
inline size_t EncodeUtf8(uint32_t cp, char* dst) {
  if (cp < 0x80) {
    dst[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    dst[0] = static_cast<char>(0xC0 | (cp >> 6));
    dst[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = static_cast<char>(0xE0 | (cp >> 12));
    dst[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  if (cp > 0x10FFFF) return 0;
  dst[0] = static_cast<char>(0xF0 | (cp >> 18));
  dst[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  dst[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  dst[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

// Appends `cp` as UTF-8 (nothing for a value above U+10FFFF).
inline void AppendUtf8(uint32_t cp, std::string& out) {
  char buf[4];
  out.append(buf, EncodeUtf8(cp, buf));
}

// The offset of the first byte that does not start a well-formed sequence, or npos when all of
// `s` is well-formed UTF-8. ASCII is skipped eight bytes at a time (prompts are mostly ASCII).
inline size_t FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    int32_t cp;
    const size_t len = DecodeUtf8(s.substr(i), cp);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

// The number of characters in `s` (Python's len() of a str), counted as the bytes that are not
// continuation bytes: for valid text; a stray continuation byte is not counted.
inline size_t CountUtf8Chars(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += !IsUtf8Continuation(c);
  return n;
}

}  // namespace epp::internal
