// The Jinja lexer and parser (jinja.h). Whitespace rules are Jinja2's with trim_blocks and
// lstrip_blocks on and keep_trailing_newline off, newlines normalized to "\n"; precedence is
// Jinja2's (filters and tests bind tighter than arithmetic, `~` between + and *).
#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "jinja_ast.h"

namespace epp::jinja {
namespace {

// The lexer cuts each tag into tokens as Jinja2's lexer does (names, numbers, strings,
// operators); the parser reads them one tag at a time, so a token never spans two tags.
struct Token {
  enum Kind : uint8_t { kName, kInt, kFloat, kString, kOp, kEnd } kind = kEnd;
  std::string text;  // name, operator, or the decoded string
  int64_t i = 0;
  double f = 0;
  int line = 0;
};

// One tag: `{{ ... }}` (var) or `{% ... %}` (block), its tokens ending in kEnd.
struct Segment {
  bool is_text = true, is_var = false;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
};

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Source text -> segments: runs of template text and tags, with Jinja2's whitespace control
// applied here, once, so the evaluator only ever sees the text that will be output.
class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : name_(name) {
    // Newlines normalized, one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  // Whitespace control, as Jinja2 applies it before a tag and after it:
  // - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, newlines included; `-%}` etc. all
  //   whitespace after it.
  // - lstrip_blocks: a block or comment tag that is the first thing on its line takes the
  //   spaces and tabs before it on that line; `{%+` turns this off for the tag. `{{` is never
  //   lstripped.
  // - trim_blocks: the one newline right after a block or comment tag goes; `+%}` keeps it.
  // `line_starting` says whether the text before the next tag starts a line, so a tag after
  // another tag that ended a line still counts as first on its line.
  absl::StatusOr<std::vector<Segment>> Run() {
    std::vector<Segment> out;
    size_t pos = 0;
    bool line_starting = true;
    while (pos <= src_.size()) {
      size_t open = FindOpen(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      const int text_line = LineAt(pos);
      if (open == std::string::npos) {
        if (!text.empty()) out.push_back(TextSegment(std::move(text), text_line));
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: block and comment tags only
        size_t l = text.rfind('\n');
        size_t from = l == std::string::npos ? 0 : l + 1;
        if ((l != std::string::npos || line_starting) && from < text.size() &&
            text.find_first_not_of(" \t\v\f", from) == std::string::npos)
          text.resize(from);
      }
      int line = LineAt(open);
      if (!text.empty()) out.push_back(TextSegment(std::move(text), text_line));
      size_t p = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      bool strip_after = false, keep_newline = false;
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) return Error(line, "a comment `{#` is not closed");
        strip_after = end > p && src_[end - 1] == '-';
        keep_newline = end > p && src_[end - 1] == '+';
        pos = end + 2;
      } else {
        Segment seg;
        seg.is_text = false;
        seg.is_var = kind == '{';
        seg.line = line;
        EPP_RETURN_IF_ERROR(Tokenize(p, kind == '{' ? '}' : '%', seg.tokens, strip_after, keep_newline, pos));
        // {% raw %}...{% endraw %}: the text in between as it is.
        if (!seg.is_var && !seg.tokens.empty() && seg.tokens[0].kind == Token::kName && seg.tokens[0].text == "raw" &&
            seg.tokens.size() == 2) {
          EPP_RETURN_IF_ERROR(Raw(line, strip_after, pos, out));
          line_starting = pos > 0 && src_[pos - 1] == '\n';
          continue;
        }
        out.push_back(std::move(seg));
      }
      if (strip_after) {
        while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      } else if (kind != '{' && !keep_newline && pos < src_.size() && src_[pos] == '\n') {
        ++pos;  // trim_blocks
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    return out;
  }

 private:
  static bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

  Segment TextSegment(std::string text, int line) {
    Segment s;
    s.text = std::move(text);
    s.line = line;
    return s;
  }

  size_t FindOpen(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  int LineAt(size_t pos) {
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  absl::Status Error(int line, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(name_, " line ", line, ": ", what));
  }

  absl::Status Raw(int line, bool strip_after, size_t& pos, std::vector<Segment>& out) {
    if (strip_after)
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    for (size_t at = src_.find("{%", pos); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t p = at + 2;
      bool lead_strip = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      bool trail_strip = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, at - pos);
      if (lead_strip)
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      if (!text.empty()) out.push_back(TextSegment(std::move(text), LineAt(pos)));
      pos = p + 2;
      if (trail_strip) {
        while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      } else if (pos < src_.size() && src_[pos] == '\n') {
        ++pos;
      }
      return absl::OkStatus();
    }
    return Error(line, "`{% raw %}` without `{% endraw %}`");
  }

  // Tokens from `p` to the closing `}}` / `%}` (outside brackets), which sets `end`.
  absl::Status Tokenize(size_t p, char closer, std::vector<Token>& toks, bool& strip_after, bool& keep_newline, size_t& end) {
    int depth = 0;
    int line = LineAt(p);
    while (true) {
      while (p < src_.size() && IsSpace(src_[p])) {
        if (src_[p] == '\n') ++line;
        ++p;
      }
      if (p >= src_.size()) return Error(line, closer == '}' ? "`{{` is not closed by `}}`" : "`{%` is not closed by `%}`");
      const char c = src_[p];
      if (depth == 0) {
        // A closer only counts outside brackets, so `{{ {'a': 1} }}` reads the dict's own `}`
        // as an operator.
        auto closes = [&](size_t at) { return src_.compare(at, 2, std::string{closer, '}'}) == 0; };
        if ((c == '-' || c == '+') && p + 1 < src_.size() && closes(p + 1)) {
          strip_after = c == '-';
          keep_newline = c == '+';
          end = p + 3;
          break;
        }
        if (closes(p)) {
          end = p + 2;
          break;
        }
      }
      Token t;
      t.line = line;
      if (IsNameStart(c)) {
        size_t q = p;
        while (q < src_.size() && IsNameChar(src_[q])) ++q;
        t.kind = Token::kName;
        t.text = src_.substr(p, q - p);
        p = q;
      } else if (IsDigit(c)) {
        size_t q = p;
        std::string digits;
        bool is_float = false;
        // Number literals as Jinja2's lexer reads them: `_` between digits is a separator
        // (1_000), a fraction needs a digit after the dot, and an exponent makes a float.
        auto take_digits = [&] {
          while (q < src_.size() && (IsDigit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && IsDigit(src_[q + 1])))) {
            if (src_[q] != '_') digits += src_[q];
            ++q;
          }
        };
        take_digits();
        if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
          is_float = true;
          digits += src_[q++];
          take_digits();
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && IsDigit(src_[r])) {
            is_float = true;
            digits += 'e';
            digits.append(src_, q + 1, r - q - 1);
            q = r;
            take_digits();
          }
        }
        if (is_float) {
          t.kind = Token::kFloat;
          t.f = std::strtod(digits.c_str(), nullptr);
        } else {
          t.kind = Token::kInt;
          auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t.i);
          if (ec != std::errc()) return Error(line, Cat("integer literal ", digits, " is out of range"));
        }
        p = q;
      } else if (c == '\'' || c == '"') {
        EPP_RETURN_IF_ERROR(StringLiteral(p, line, t.text));
        t.kind = Token::kString;
      } else {
        // Two-character operators first, so `//` and `**` are not read as two `/` or `*`.
        static constexpr const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                               "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", ";"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (op == nullptr) return Error(line, Cat("unexpected character '", std::string(1, c), "'"));
        t.kind = Token::kOp;
        t.text = op;
        p += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      toks.push_back(std::move(t));
    }
    Token e;
    e.line = line;
    toks.push_back(std::move(e));
    return absl::OkStatus();
  }

  // A quoted literal at `p` with Python's escapes (Jinja decodes them with unicode-escape).
  absl::Status StringLiteral(size_t& p, int& line, std::string& out) {
    const char q = src_[p++];
    while (true) {
      if (p >= src_.size()) return Error(line, "a string literal is not closed");
      char c = src_[p];
      if (c == q) {
        ++p;
        return absl::OkStatus();
      }
      if (c == '\n') ++line;
      if (c != '\\' || p + 1 >= src_.size()) {
        out += c;
        ++p;
        continue;
      }
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': ++line; break;  // a line continuation
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          if (p + n > src_.size()) return Error(line, "a truncated \\x / \\u escape in a string literal");
          for (size_t k = 0; k < n; ++k) {
            char h = src_[p + k];
            int d = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) return Error(line, "a malformed \\x / \\u escape in a string literal");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Error(line, "a \\u escape that is not a Unicode scalar value");
          p += n;
          internal::AppendUtf8(cp, out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            internal::AppendUtf8(cp, out);
          } else if (e == 'N') {
            return Error(line, "\\N{...} escapes in string literals are not supported by epp");
          } else {  // Python keeps an unknown escape as written
            out += '\\';
            out += e;
          }
      }
    }
  }

  // The normalized source; LineAt advances line_pos_ / line_ monotonically, so computing the
  // line of each tag costs one pass over the text in all.
  std::string src_;
  std::string name_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

// Segments -> the statement tree (jinja_ast.h). A recursive-descent parser with one method per
// grammar rule, named and ordered after Jinja2's parser.py so the two can be read side by side.
// Only the statements chat templates use are accepted; anything else fails at load time with a
// message naming the tag, rather than rendering something different from Python.
class Parser {
 public:
  Parser(std::vector<Segment> segs, std::string_view name) : segs_(std::move(segs)), name_(name) {}

  absl::Status Run(Body& out) {
    std::string end;
    EPP_RETURN_IF_ERROR(ParseBody(out, {}, end));
    return absl::OkStatus();
  }

 private:
  absl::Status Error(int line, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(name_, " line ", line, ": ", what));
  }

  // Statements until one of `ends` (a block tag's first name), which it leaves in `end` with
  // the segment's tokens positioned after the name.
  absl::Status ParseBody(Body& out, std::initializer_list<std::string_view> ends, std::string& end) {
    while (seg_ < segs_.size()) {
      Segment& s = segs_[seg_];
      if (s.is_text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->line = s.line;
        n->text = std::move(s.text);
        out.push_back(std::move(n));
        ++seg_;
        continue;
      }
      toks_ = &s.tokens;
      tok_ = 0;
      if (s.is_var) {
        ++seg_;
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->line = s.line;
        EPP_ASSIGN_OR_RETURN(n->expr, ParseExpression());
        EPP_RETURN_IF_ERROR(ExpectEnd());
        out.push_back(std::move(n));
        continue;
      }
      const Token& head = Cur();
      if (head.kind != Token::kName) return Error(head.line, "a block tag must start with a statement name");
      for (std::string_view e : ends)
        if (head.text == e) {
          end = head.text;
          ++tok_;
          ++seg_;
          return absl::OkStatus();
        }
      ++seg_;
      ++tok_;
      const std::string word = head.text;
      const int line = head.line;
      if (word == "if") {
        EPP_RETURN_IF_ERROR(ParseIf(line, out));
      } else if (word == "for") {
        EPP_RETURN_IF_ERROR(ParseFor(line, out));
      } else if (word == "set") {
        EPP_RETURN_IF_ERROR(ParseSet(line, out));
      } else if (word == "macro") {
        EPP_RETURN_IF_ERROR(ParseMacro(line, out));
      } else if (word == "break" || word == "continue") {
        if (loop_depth_ == 0) return Error(line, Cat("`{% ", word, " %}` outside a loop"));
        EPP_RETURN_IF_ERROR(ExpectEnd());
        auto n = std::make_unique<Node>();
        n->kind = word == "break" ? Node::kBreak : Node::kContinue;
        n->line = line;
        out.push_back(std::move(n));
      } else if (word == "generation") {  // transformers' assistant-mask tag: renders its body
        EPP_RETURN_IF_ERROR(ExpectEnd());
        std::string e;
        EPP_RETURN_IF_ERROR(ParseBody(out, {"endgeneration"}, e));
        if (e.empty()) return Error(line, "`{% generation %}` without `{% endgeneration %}`");
        EPP_RETURN_IF_ERROR(ExpectEnd());
      } else if (word == "endif" || word == "endfor" || word == "endmacro" || word == "endset" || word == "else" ||
                 word == "elif" || word == "endgeneration") {
        return Error(line, Cat("`{% ", word, " %}` without its opening tag"));
      } else {
        return Error(line, Cat("`{% ", word, " %}` is not supported by epp (chat templates need: if, for, set, macro, "
                                        "break, continue, raw, generation)"));
      }
    }
    if (ends.size() != 0) {
      end.clear();
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // {% if %} / {% elif %} / {% else %}: one condition per branch; `bodies` has one body more
  // than `conds` when there is an else.
  absl::Status ParseIf(int line, Body& out) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kIf;
    n->line = line;
    EPP_ASSIGN_OR_RETURN(ExprPtr c, ParseExpression());
    EPP_RETURN_IF_ERROR(ExpectEnd());
    n->conds.push_back(std::move(c));
    while (true) {
      Body b;
      std::string end;
      EPP_RETURN_IF_ERROR(ParseBody(b, {"elif", "else", "endif"}, end));
      n->bodies.push_back(std::move(b));
      if (end.empty()) return Error(line, "`{% if %}` without `{% endif %}`");
      if (end == "endif") {
        EPP_RETURN_IF_ERROR(ExpectEnd());
        break;
      }
      if (end == "elif") {
        EPP_ASSIGN_OR_RETURN(ExprPtr c2, ParseExpression());
        EPP_RETURN_IF_ERROR(ExpectEnd());
        n->conds.push_back(std::move(c2));
        continue;
      }
      EPP_RETURN_IF_ERROR(ExpectEnd());  // else
      Body e;
      EPP_RETURN_IF_ERROR(ParseBody(e, {"endif"}, end));
      if (end.empty()) return Error(line, "`{% if %}` without `{% endif %}`");
      EPP_RETURN_IF_ERROR(ExpectEnd());
      n->bodies.push_back(std::move(e));
      break;
    }
    out.push_back(std::move(n));
    return absl::OkStatus();
  }

  // Assignment targets of `for` and `set`: `a`, `a, b` or `(a, b)`, unpacked by position when
  // evaluated.
  absl::Status ParseTargets(std::vector<std::string>& targets) {
    while (true) {
      bool paren = IsOp("(");
      if (paren) ++tok_;
      if (Cur().kind != Token::kName) return Error(Cur().line, "expected a variable name");
      targets.push_back(Cur().text);
      ++tok_;
      if (paren) {
        while (IsOp(",")) {
          ++tok_;
          if (Cur().kind != Token::kName) return Error(Cur().line, "expected a variable name");
          targets.push_back(Cur().text);
          ++tok_;
        }
        if (!IsOp(")")) return Error(Cur().line, "expected ')'");
        ++tok_;
      }
      if (!IsOp(",")) return absl::OkStatus();
      ++tok_;
    }
  }

  // {% for targets in iterable [if filter] %} ... [{% else %} ...] {% endfor %}. The iterable is
  // parsed without a conditional expression (Jinja2 does the same) because its `if` is the
  // loop filter. The else body runs when no item passed the filter.
  absl::Status ParseFor(int line, Body& out) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kFor;
    n->line = line;
    EPP_RETURN_IF_ERROR(ParseTargets(n->targets));
    if (!IsName("in")) return Error(Cur().line, "expected 'in' in `{% for %}`");
    ++tok_;
    EPP_ASSIGN_OR_RETURN(n->expr, ParseCondless());
    if (IsName("if")) {
      ++tok_;
      EPP_ASSIGN_OR_RETURN(n->cond, ParseCondless());
    }
    if (IsName("recursive")) return Error(Cur().line, "recursive loops are not supported by epp");
    EPP_RETURN_IF_ERROR(ExpectEnd());
    ++loop_depth_;
    std::string end;
    EPP_RETURN_IF_ERROR(ParseBody(n->body, {"else", "endfor"}, end));
    --loop_depth_;
    if (end.empty()) return Error(line, "`{% for %}` without `{% endfor %}`");
    EPP_RETURN_IF_ERROR(ExpectEnd());
    if (end == "else") {
      EPP_RETURN_IF_ERROR(ParseBody(n->else_body, {"endfor"}, end));
      if (end.empty()) return Error(line, "`{% for %}` without `{% endfor %}`");
      EPP_RETURN_IF_ERROR(ExpectEnd());
    }
    out.push_back(std::move(n));
    return absl::OkStatus();
  }

  // {% set a = expr %}, {% set a, b = expr %}, {% set ns.attr = expr %} (namespace attributes are
  // the only way a loop body can change state that outlives the iteration), and the block form.
  absl::Status ParseSet(int line, Body& out) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kSet;
    n->line = line;
    if (Cur().kind != Token::kName) return Error(Cur().line, "expected a variable name after `set`");
    if (Peek(1).kind == Token::kOp && Peek(1).text == ".") {
      n->targets.push_back(Cur().text);
      tok_ += 2;
      if (Cur().kind != Token::kName) return Error(Cur().line, "expected an attribute name");
      n->targets.push_back(Cur().text);
      ++tok_;
      n->attr_target = true;
    } else {
      EPP_RETURN_IF_ERROR(ParseTargets(n->targets));
    }
    if (IsOp("=")) {
      ++tok_;
      EPP_ASSIGN_OR_RETURN(n->expr, ParseTupleOrExpression());
      EPP_RETURN_IF_ERROR(ExpectEnd());
      out.push_back(std::move(n));
      return absl::OkStatus();
    }
    // {% set x %}...{% endset %}, optionally filtered: {% set x | trim %}
    if (n->targets.size() != 1 || n->attr_target) return Error(line, "a block `{% set %}` assigns one name");
    n->kind = Node::kSetBlock;
    ExprPtr filtered;
    if (IsOp("|")) {
      auto holder = Make(Expr::kName, line);
      holder->name = kSetBlockBody;
      EPP_ASSIGN_OR_RETURN(filtered, ParseFilterTail(std::move(holder)));
    }
    EPP_RETURN_IF_ERROR(ExpectEnd());
    std::string end;
    EPP_RETURN_IF_ERROR(ParseBody(n->body, {"endset"}, end));
    if (end.empty()) return Error(line, "`{% set %}` without `{% endset %}`");
    EPP_RETURN_IF_ERROR(ExpectEnd());
    n->expr = std::move(filtered);  // a filter chain over kSetBlockBody, the body's text
    out.push_back(std::move(n));
    return absl::OkStatus();
  }

  // {% macro name(params, with=defaults) %} ... {% endmacro %}. Defaults stay expressions; the
  // evaluator computes them at each call, in the macro's scope.
  absl::Status ParseMacro(int line, Body& out) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kMacro;
    n->line = line;
    if (Cur().kind != Token::kName) return Error(Cur().line, "expected the macro's name");
    n->targets.push_back(Cur().text);
    ++tok_;
    if (!IsOp("(")) return Error(Cur().line, "expected '(' after the macro's name");
    ++tok_;
    while (!IsOp(")")) {
      if (Cur().kind != Token::kName) return Error(Cur().line, "expected a parameter name");
      n->params.push_back(Cur().text);
      ++tok_;
      if (IsOp("=")) {
        ++tok_;
        EPP_ASSIGN_OR_RETURN(ExprPtr d, ParseExpression());
        n->defaults.push_back(std::move(d));
      } else {
        n->defaults.push_back(nullptr);
      }
      if (IsOp(",")) ++tok_;
      else if (!IsOp(")")) return Error(Cur().line, "expected ',' or ')' in the macro's parameters");
    }
    ++tok_;
    EPP_RETURN_IF_ERROR(ExpectEnd());
    std::string end;
    // A macro body runs where it is called, not inside the loop it is written in, so
    // break / continue there have no loop.
    const int saved = loop_depth_;
    loop_depth_ = 0;
    EPP_RETURN_IF_ERROR(ParseBody(n->body, {"endmacro"}, end));
    loop_depth_ = saved;
    if (end.empty()) return Error(line, "`{% macro %}` without `{% endmacro %}`");
    if (Cur().kind == Token::kName) ++tok_;  // {% endmacro name %}
    EPP_RETURN_IF_ERROR(ExpectEnd());
    out.push_back(std::move(n));
    return absl::OkStatus();
  }

  // ---- expressions ----
  const Token& Cur() const { return (*toks_)[tok_]; }
  const Token& Peek(size_t k) const { return (*toks_)[std::min(tok_ + k, toks_->size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == Token::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().kind == Token::kName && Cur().text == n; }
  absl::Status ExpectEnd() const {
    if (Cur().kind != Token::kEnd)
      return Error(Cur().line, Cat("unexpected '", Cur().kind == Token::kString ? "\"" + Cur().text + "\"" : Cur().text,
                                            "' where the tag should end"));
    return absl::OkStatus();
  }
  ExprPtr Make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  absl::Status Depth(int line) {
    if (++depth_ > 200) return Error(line, "expression nested too deeply");
    return absl::OkStatus();
  }

  // The right side of `set`: `a, b` is a tuple without parentheses, as in Python.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() {
    const int line = Cur().line;
    EPP_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    auto t = Make(Expr::kTuple, line);
    t->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++tok_;
      if (Cur().kind == Token::kEnd) break;
      EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      t->args.push_back(std::move(e));
    }
    return t;
  }

  // The grammar from the loosest binding to the tightest, as in Jinja2's parser:
  // conditional `x if c else y` > or > and > not > comparisons (chained, `in`, `not in`) >
  // + - > ~ > * / // % > ** > unary - + > primary with postfix . [] () and then filters and
  // tests. Depth() caps the nesting so a hostile template cannot exhaust the stack.
  absl::StatusOr<ExprPtr> ParseExpression() {
    const int line = Cur().line;
    EPP_RETURN_IF_ERROR(Depth(line));
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      ++tok_;
      auto c = Make(Expr::kCond, line);
      EPP_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      if (IsName("else")) {
        ++tok_;
        EPP_ASSIGN_OR_RETURN(ExprPtr other, ParseExpression());
        c->args.push_back(std::move(other));
      }
      e = std::move(c);
    }
    --depth_;
    return e;
  }
  // An expression without a trailing `if` (a for loop's iterable and filter).
  absl::StatusOr<ExprPtr> ParseCondless() { return ParseOr(); }

  absl::StatusOr<ExprPtr> ParseOr() {
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    while (IsName("or")) {
      auto o = Make(Expr::kOr, Cur().line);
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseAnd());
      o->args.push_back(std::move(e));
      o->args.push_back(std::move(r));
      e = std::move(o);
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseAnd() {
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    while (IsName("and")) {
      auto o = Make(Expr::kAnd, Cur().line);
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseNot());
      o->args.push_back(std::move(e));
      o->args.push_back(std::move(r));
      e = std::move(o);
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      auto n = Make(Expr::kNot, Cur().line);
      ++tok_;
      EPP_RETURN_IF_ERROR(Depth(n->line));
      EPP_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
      --depth_;
      n->args.push_back(std::move(inner));
      return n;
    }
    return ParseCompare();
  }
  // Comparisons chain as in Python: `a < b < c` is one kCompare with two ops, each operand
  // evaluated once.
  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == Token::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
                                       Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++tok_;
      } else if (IsName("in")) {
        op = "in";
        ++tok_;
      } else if (IsName("not") && Peek(1).kind == Token::kName && Peek(1).text == "in") {
        op = "notin";
        tok_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::kCompare, line);
        cmp->args.push_back(std::move(e));
      }
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseMath1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(r));
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  // `a + b + c` becomes one kAddChain rather than nested binaries, so the evaluator can join a
  // run of strings with one allocation (chat templates build each turn this way).
  absl::StatusOr<ExprPtr> ParseMath1() {
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const bool plus = Cur().text == "+";
      const int line = Cur().line;
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseConcat());
      if (plus) {
        if (e->kind != Expr::kAddChain) {
          auto chain = Make(Expr::kAddChain, line);
          chain->args.push_back(std::move(e));
          e = std::move(chain);
        }
        e->args.push_back(std::move(r));
      } else {
        auto b = Make(Expr::kBinary, line);
        b->name = "-";
        b->args.push_back(std::move(e));
        b->args.push_back(std::move(r));
        e = std::move(b);
      }
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    const int line = Cur().line;
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    if (!IsOp("~")) return e;
    auto c = Make(Expr::kConcat, line);
    c->args.push_back(std::move(e));
    while (IsOp("~")) {
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseMath2());
      c->args.push_back(std::move(r));
    }
    return c;
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      auto b = Make(Expr::kBinary, Cur().line);
      b->name = Cur().text;
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParsePow());
      b->args.push_back(std::move(e));
      b->args.push_back(std::move(r));
      e = std::move(b);
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseUnary(true));
    while (IsOp("**")) {
      auto b = Make(Expr::kBinary, Cur().line);
      b->name = "**";
      ++tok_;
      EPP_ASSIGN_OR_RETURN(ExprPtr r, ParseUnary(true));
      b->args.push_back(std::move(e));
      b->args.push_back(std::move(r));
      e = std::move(b);
    }
    return e;
  }
  // A unary sign applies to the operand before its filters (`-x|abs` filters -x); filters and
  // tests bind tighter than every binary operator (`a + b|upper` filters b only).
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    const int line = Cur().line;
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      auto u = Make(IsOp("-") ? Expr::kNeg : Expr::kPos, line);
      ++tok_;
      EPP_RETURN_IF_ERROR(Depth(line));
      EPP_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
      --depth_;
      u->args.push_back(std::move(inner));
      e = std::move(u);
    } else {
      EPP_ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    EPP_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (with_filter) return ParseFilterTail(std::move(e));
    return e;
  }

  // Literals (both spellings of true / false / none, as Jinja2 allows), names, parenthesized
  // expressions and tuples, list and dict displays.
  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    const int line = t.line;
    if (t.kind == Token::kName) {
      ++tok_;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto l = Make(Expr::kLiteral, line);
        l->value = Value::Bool(t.text[0] == 't' || t.text[0] == 'T');
        return l;
      }
      if (t.text == "none" || t.text == "None") {
        auto l = Make(Expr::kLiteral, line);
        l->value = Value::None();
        return l;
      }
      auto n = Make(Expr::kName, line);
      n->name = t.text;
      return n;
    }
    if (t.kind == Token::kString) {
      std::string s;
      while (Cur().kind == Token::kString) {  // adjacent literals join
        s += Cur().text;
        ++tok_;
      }
      auto l = Make(Expr::kLiteral, line);
      l->value = Value::Str(std::move(s));
      return l;
    }
    if (t.kind == Token::kInt || t.kind == Token::kFloat) {
      auto l = Make(Expr::kLiteral, line);
      l->value = t.kind == Token::kInt ? Value::Int(t.i) : Value::Float(t.f);
      ++tok_;
      return l;
    }
    if (IsOp("(")) {
      ++tok_;
      if (IsOp(")")) {
        ++tok_;
        return Make(Expr::kTuple, line);
      }
      EPP_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      if (IsOp(",")) {
        auto tup = Make(Expr::kTuple, line);
        tup->args.push_back(std::move(e));
        while (IsOp(",")) {
          ++tok_;
          if (IsOp(")")) break;
          EPP_ASSIGN_OR_RETURN(ExprPtr x, ParseExpression());
          tup->args.push_back(std::move(x));
        }
        e = std::move(tup);
      }
      if (!IsOp(")")) return Error(Cur().line, "expected ')'");
      ++tok_;
      return e;
    }
    if (IsOp("[")) {
      ++tok_;
      auto l = Make(Expr::kList, line);
      while (!IsOp("]")) {
        EPP_ASSIGN_OR_RETURN(ExprPtr x, ParseExpression());
        l->args.push_back(std::move(x));
        if (IsOp(",")) ++tok_;
        else if (!IsOp("]")) return Error(Cur().line, "expected ',' or ']' in a list");
      }
      ++tok_;
      return l;
    }
    if (IsOp("{")) {
      ++tok_;
      auto d = Make(Expr::kDict, line);
      while (!IsOp("}")) {
        EPP_ASSIGN_OR_RETURN(ExprPtr k, ParseExpression());
        if (!IsOp(":")) return Error(Cur().line, "expected ':' in a dict");
        ++tok_;
        EPP_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        d->args.push_back(std::move(k));
        d->args.push_back(std::move(v));
        if (IsOp(",")) ++tok_;
        else if (!IsOp("}")) return Error(Cur().line, "expected ',' or '}' in a dict");
      }
      ++tok_;
      return d;
    }
    if (t.kind == Token::kEnd) return Error(line, "an expression is missing");
    return Error(line, Cat("unexpected '", t.text, "'"));
  }

  // Call arguments: positional first, then keyword (`name=value`), as Python requires.
  absl::Status ParseArgs(Expr& call) {
    ++tok_;  // (
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Error(Cur().line, "*args / **kwargs in calls are not supported by epp");
      if (Cur().kind == Token::kName && Peek(1).kind == Token::kOp && Peek(1).text == "=") {
        std::string key = Cur().text;
        tok_ += 2;
        EPP_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!call.kwargs.empty()) return Error(Cur().line, "a positional argument after a keyword argument");
        EPP_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call.args.push_back(std::move(v));
      }
      if (IsOp(",")) ++tok_;
      else if (!IsOp(")")) return Error(Cur().line, "expected ',' or ')' in a call");
    }
    ++tok_;
    return absl::OkStatus();
  }

  // Attribute access, subscripts and slices (`x[a:b:c]`, any part omitted) and calls, applied
  // left to right.
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      const int line = Cur().line;
      if (IsOp(".")) {
        ++tok_;
        auto a = Make(Expr::kAttr, line);
        if (Cur().kind == Token::kName) {
          a->name = Cur().text;
        } else if (Cur().kind == Token::kInt) {  // x.0 is x[0]
          a->kind = Expr::kItem;
          auto idx = Make(Expr::kLiteral, line);
          idx->value = Value::Int(Cur().i);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
          ++tok_;
          e = std::move(a);
          continue;
        } else {
          return Error(line, "expected an attribute name after '.'");
        }
        ++tok_;
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        ++tok_;
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            EPP_ASSIGN_OR_RETURN(parts[k], ParseExpression());
          }
          if (IsOp(":") && k < 2) {
            slice = true;
            ++tok_;
            continue;
          }
          break;
        }
        if (!IsOp("]")) return Error(Cur().line, "expected ']'");
        ++tok_;
        auto s = Make(slice ? Expr::kSlice : Expr::kItem, line);
        s->args.push_back(std::move(e));
        if (!slice && !parts[0]) return Error(line, "an empty subscript []");
        for (int k = 0; k < (slice ? 3 : 1); ++k) s->args.push_back(std::move(parts[k]));
        e = std::move(s);
      } else if (IsOp("(")) {
        auto c = Make(Expr::kCall, line);
        c->args.push_back(std::move(e));
        EPP_RETURN_IF_ERROR(ParseArgs(*c));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // `| name(args)` and `is [not] name arg`. Names are checked against the evaluator's own tables
  // (IsJinjaFilter / IsJinjaTest), so a filter or test epp lacks fails when the template loads.
  absl::StatusOr<ExprPtr> ParseFilterTail(ExprPtr e) {
    while (true) {
      const int line = Cur().line;
      if (IsOp("|")) {
        ++tok_;
        if (Cur().kind != Token::kName) return Error(line, "expected a filter name after '|'");
        std::string name = Cur().text;
        ++tok_;
        while (IsOp(".") && Peek(1).kind == Token::kName) {  // dotted filter names
          name += "." + Peek(1).text;
          tok_ += 2;
        }
        if (!IsJinjaFilter(name)) return Error(line, Cat("the filter '", name, "' is not supported by epp"));
        auto f = Make(Expr::kFilter, line);
        f->name = name;
        f->args.push_back(std::move(e));
        if (IsOp("(")) EPP_RETURN_IF_ERROR(ParseArgs(*f));
        e = std::move(f);
        EPP_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
      } else if (IsName("is")) {
        ++tok_;
        auto t = Make(Expr::kTest, line);
        if (IsName("not")) {
          t->negate = true;
          ++tok_;
        }
        if (Cur().kind == Token::kName) {
          t->name = Cur().text;
        } else if (Cur().kind == Token::kOp && IsJinjaTest(Cur().text)) {
          t->name = Cur().text;
        } else {
          return Error(line, "expected a test name after 'is'");
        }
        ++tok_;
        // `is None` / `is True` / `is False` name the tests none / true / false.
        if (t->name == "None") t->name = "none";
        if (t->name == "True") t->name = "true";
        if (t->name == "False") t->name = "false";
        if (!IsJinjaTest(t->name)) return Error(line, Cat("the test '", t->name, "' is not supported by epp"));
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          EPP_RETURN_IF_ERROR(ParseArgs(*t));
        } else if ((Cur().kind == Token::kName || Cur().kind == Token::kString || Cur().kind == Token::kInt ||
                    Cur().kind == Token::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") && !IsName("in") && !IsName("not")) {
          EPP_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());  // `is sameas false`, `is divisibleby 3`
          EPP_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Segment> segs_;
  std::string name_;
  size_t seg_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Template>> Parse(std::string_view source, std::string_view name) {
  // Python reads templates as UTF-8 text.
  if (const size_t i = internal::FirstInvalidUtf8(source); i != std::string_view::npos) {
    const int line = 1 + static_cast<int>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(i), '\n'));
    return absl::InvalidArgumentError(Cat(name, " line ", line, ": not valid UTF-8 (byte ", i, ")"));
  }
  Lexer lexer(source, name);
  EPP_ASSIGN_OR_RETURN(std::vector<Segment> segs, lexer.Run());
  auto t = std::make_shared<Template>();
  t->name = std::string(name);
  Parser parser(std::move(segs), name);
  EPP_RETURN_IF_ERROR(parser.Run(t->body));
  return std::shared_ptr<const Template>(std::move(t));
}

}  // namespace epp::jinja
