// Locating syntax errors: the byte offset and reason of the first error in a JSON text, for the
// "invalid JSON at byte N: ..." message of a body simdjson rejects. simdjson reports *what* went
// wrong but not *where*, and a client with a 200 KB body needs the where. An iterative RFC 8259
// scanner (no recursion, so any nesting depth is safe) plus a UTF-8 check (simdjson refuses
// ill-formed UTF-8 too); the earlier of the two findings is reported. It runs only on input
// simdjson already rejected, so it is written for clarity, not speed.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "request/request_impl.h"

namespace epp::internal::openai {
namespace {

// RFC 8259's grammar as a state machine over one explicit stack of open containers: in kValue a
// value must come, in kKey a member name, in kAfterValue a separator or the container's end. The
// first byte that fits no rule is the error's offset.
class SyntaxScanner {
 public:
  explicit SyntaxScanner(std::string_view s) : s_(s) {}

  std::optional<SyntaxError> Scan() {
    SkipSpace();
    if (i_ == s_.size()) return SyntaxError{i_, "empty document"};
    enum class State { kValue, kKey, kAfterValue } state = State::kValue;
    std::vector<char> stack;  // '{' or '[' per open container
    while (true) {
      SkipSpace();
      switch (state) {
        case State::kValue: {
          if (i_ == s_.size()) return SyntaxError{i_, "unexpected end of input, expected a value"};
          const char c = s_[i_];
          if (c == '{' || c == '[') {
            stack.push_back(c);
            ++i_;
            SkipSpace();
            if (i_ < s_.size() && s_[i_] == (c == '{' ? '}' : ']')) {
              ++i_;
              stack.pop_back();
              state = State::kAfterValue;
            } else {
              state = c == '{' ? State::kKey : State::kValue;
            }
            continue;
          }
          std::optional<SyntaxError> err;
          if (c == '"') {
            err = ScanString();
          } else if (c == '-' || (c >= '0' && c <= '9')) {
            err = ScanNumber();
          } else if (c == 't' || c == 'f' || c == 'n') {
            err = ScanLiteral();
          } else {
            return SyntaxError{i_, "unexpected character, expected a value"};
          }
          if (err.has_value()) return err;
          state = State::kAfterValue;
          continue;
        }
        case State::kKey: {
          if (i_ == s_.size()) return SyntaxError{i_, "unexpected end of input, expected a string key"};
          if (s_[i_] != '"') return SyntaxError{i_, "expected a string key"};
          if (std::optional<SyntaxError> err = ScanString()) return err;
          SkipSpace();
          if (i_ == s_.size() || s_[i_] != ':') return SyntaxError{i_, "expected ':' after an object key"};
          ++i_;
          state = State::kValue;
          continue;
        }
        case State::kAfterValue: {
          if (stack.empty()) {
            if (i_ != s_.size()) return SyntaxError{i_, "unexpected characters after the JSON value"};
            return std::nullopt;
          }
          const bool in_object = stack.back() == '{';
          if (i_ == s_.size()) {
            return SyntaxError{i_, in_object ? "unexpected end of input, expected ',' or '}'"
                                             : "unexpected end of input, expected ',' or ']'"};
          }
          if (s_[i_] == ',') {
            ++i_;
            state = in_object ? State::kKey : State::kValue;
          } else if (s_[i_] == (in_object ? '}' : ']')) {
            ++i_;
            stack.pop_back();
          } else {
            return SyntaxError{i_, in_object ? "expected ',' or '}' after an object member"
                                             : "expected ',' or ']' after an array element"};
          }
          continue;
        }
      }
    }
  }

 private:
  // JSON's four whitespace characters only (no vertical tab, form feed or Unicode spaces).
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  static int HexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads "\uXXXX" at i_; nullopt if malformed.
  std::optional<int> ReadUnicodeEscape() {
    if (i_ + 6 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return std::nullopt;
    int v = 0;
    for (size_t k = 2; k < 6; ++k) {
      const int h = HexValue(s_[i_ + k]);
      if (h < 0) return std::nullopt;
      v = v * 16 + h;
    }
    i_ += 6;
    return v;
  }

  // A string from its opening quote: raw control characters, unknown escapes, malformed \u
  // escapes and unpaired surrogates are errors. An unterminated string is reported at its
  // opening quote, where a reader can see it begin.
  std::optional<SyntaxError> ScanString() {
    const size_t start = i_;
    ++i_;  // opening quote
    while (true) {
      if (i_ >= s_.size()) return SyntaxError{start, "unterminated string"};
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return std::nullopt;
      }
      if (c < 0x20) return SyntaxError{i_, "unescaped control character in a string"};
      if (c != '\\') {
        ++i_;
        continue;
      }
      const size_t esc = i_;
      if (i_ + 1 >= s_.size()) return SyntaxError{start, "unterminated string"};
      const char e = s_[i_ + 1];
      if (e == 'u') {
        std::optional<int> cp = ReadUnicodeEscape();
        if (!cp.has_value()) return SyntaxError{esc, "invalid \\u escape"};
        if (*cp >= 0xD800 && *cp <= 0xDBFF) {
          std::optional<int> low = ReadUnicodeEscape();
          if (!low.has_value() || *low < 0xDC00 || *low > 0xDFFF) {
            return SyntaxError{esc, "unpaired UTF-16 surrogate in a \\u escape"};
          }
        } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
          return SyntaxError{esc, "unpaired UTF-16 surrogate in a \\u escape"};
        }
        continue;
      }
      if (e == '\0' || std::strchr("\"\\/bfnrt", e) == nullptr) return SyntaxError{esc, "invalid escape sequence"};
      i_ += 2;
    }
  }

  // RFC 8259's number: no leading zeros, a digit on both sides of the dot, an optional exponent.
  std::optional<SyntaxError> ScanNumber() {
    const size_t start = i_;
    auto digit = [&](size_t k) { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; };
    if (s_[i_] == '-') ++i_;
    if (!digit(i_)) return SyntaxError{start, "invalid number"};
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (digit(i_)) ++i_;
    }
    bool integer = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      integer = false;
      ++i_;
      if (!digit(i_)) return SyntaxError{start, "invalid number"};
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit(i_)) return SyntaxError{start, "invalid number"};
      while (digit(i_)) ++i_;
    }
    // simdjson rejects integers outside int64/uint64 and numbers beyond the double range.
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    bool in_range = true;
    if (integer && *first == '-') {
      int64_t v = 0;
      in_range = std::from_chars(first, last, v).ec == std::errc();
    } else if (integer) {
      uint64_t v = 0;
      in_range = std::from_chars(first, last, v).ec == std::errc();
    } else {
      in_range = std::isfinite(std::strtod(std::string(first, last).c_str(), nullptr));
    }
    if (!in_range) return SyntaxError{start, "number out of range"};
    return std::nullopt;
  }

  std::optional<SyntaxError> ScanLiteral() {
    for (std::string_view lit : {std::string_view("true"), std::string_view("false"), std::string_view("null")}) {
      if (s_.substr(i_, lit.size()) == lit) {
        i_ += lit.size();
        return std::nullopt;
      }
    }
    return SyntaxError{i_, "invalid literal (expected true, false or null)"};
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

// Grammar and encoding are checked separately; whichever error comes first in the text is the one
// a client should fix first.
std::optional<SyntaxError> FindSyntaxError(std::string_view text) {
  std::optional<SyntaxError> syntax = SyntaxScanner(text).Scan();
  const size_t utf8 = FirstInvalidUtf8(text);
  if (utf8 != std::string_view::npos && (!syntax.has_value() || utf8 < syntax->offset)) {
    return SyntaxError{utf8, "invalid UTF-8"};
  }
  return syntax;
}

}  // namespace epp::internal::openai
