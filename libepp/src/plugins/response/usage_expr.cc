// UsageExpression (usage_expr.h): a tokenizer, a recursive-descent parser bounded in depth, and
// a tree evaluator over ResponseUsage.
#include "plugins/response/usage_expr.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace epp {

struct UsageExpression::Node {
  enum class Kind { kNumber, kBool, kString, kField, kHas, kNeg, kNot, kBinary, kCond } kind;
  double number = 0;
  bool boolean = false;
  std::string text;                 // string literal, or the binary operator
  std::vector<std::string> path;    // field / has(): {"prompt_tokens"} or {"prompt_tokens_details", "cached_tokens"}
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

using Node = UsageExpression::Node;
using NodePtr = std::shared_ptr<const Node>;

constexpr int kMaxDepth = 256;  // parser calls deep (a parenthesis costs about 7)

struct Token {
  enum class Kind { kNumber, kString, kIdent, kOp, kEnd } kind;
  std::string text;
  double number = 0;
  size_t at = 0;
};

absl::Status ErrorAt(size_t at, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("at offset ", at, ": ", std::string(what)));
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    const size_t at = i;
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        ++j;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'u' || s[j] == 'U')) ++j;  // CEL's unsigned suffix
      const std::string lit(s.substr(i, j - i));
      const std::string digits = !lit.empty() && (lit.back() == 'u' || lit.back() == 'U') ? lit.substr(0, lit.size() - 1) : lit;
      double v = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(v))
        return ErrorAt(at, "a number that does not parse: '" + lit + "'");
      out.push_back(Token{Token::Kind::kNumber, lit, v, at});
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (;; ++j) {
        if (j >= s.size()) return ErrorAt(at, "a string that does not end");
        if (s[j] == c) break;
        if (s[j] == '\\') {
          if (j + 1 >= s.size()) return ErrorAt(j, "an escape at the end");
          const char e = s[++j];
          switch (e) {
            case 'n': text += '\n'; break;
            case 't': text += '\t'; break;
            case '\\': case '\'': case '"': text += e; break;
            default: return ErrorAt(j - 1, absl::StrCat("the escape \\", std::string(1, e), " (not supported)"));
          }
          continue;
        }
        text += s[j];
      }
      out.push_back(Token{Token::Kind::kString, std::move(text), 0, at});
      i = j + 1;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && ident_char(s[j])) ++j;
      out.push_back(Token{Token::Kind::kIdent, std::string(s.substr(i, j - i)), 0, at});
      i = j;
      continue;
    }
    static const char* kOps[] = {"&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", "(", ")", ".",
                                 "[", "]", "{", "}", ","};
    bool matched = false;
    for (const char* op : kOps) {
      const size_t n = std::char_traits<char>::length(op);
      if (s.substr(i, n) == op) {
        out.push_back(Token{Token::Kind::kOp, op, 0, at});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) return ErrorAt(at, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }
  out.push_back(Token{Token::Kind::kEnd, "", 0, s.size()});
  return out;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<NodePtr> Parse() {
    EPP_ASSIGN_OR_RETURN(NodePtr n, Cond(0));
    if (Peek().kind != Token::Kind::kEnd) return Unexpected(Peek());
    return n;
  }

 private:
  const Token& Peek() const { return t_[pos_]; }
  bool IsOp(std::string_view op) const { return Peek().kind == Token::Kind::kOp && Peek().text == op; }
  absl::Status Unexpected(const Token& t) const {
    if (t.kind == Token::Kind::kEnd) return ErrorAt(t.at, "the expression ends too early");
    if (t.text == "[" || t.text == "{") return ErrorAt(t.at, "lists, maps and indexing are not supported");
    return ErrorAt(t.at, absl::StrCat("unexpected '", t.text, "'"));
  }
  absl::Status Deep(int depth) const {
    return depth > kMaxDepth ? ErrorAt(Peek().at, "nested too deeply") : absl::OkStatus();
  }
  static NodePtr Make(Node::Kind k, std::vector<NodePtr> kids = {}, std::string text = {}) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->kids = std::move(kids);
    n->text = std::move(text);
    return n;
  }

  absl::StatusOr<NodePtr> Cond(int depth) {
    EPP_RETURN_IF_ERROR(Deep(depth));
    EPP_ASSIGN_OR_RETURN(NodePtr c, Binary(0, depth + 1));
    if (!IsOp("?")) return c;
    ++pos_;
    EPP_ASSIGN_OR_RETURN(NodePtr a, Cond(depth + 1));
    if (!IsOp(":")) return Unexpected(Peek());
    ++pos_;
    EPP_ASSIGN_OR_RETURN(NodePtr b, Cond(depth + 1));
    return Make(Node::Kind::kCond, {c, a, b});
  }

  // Precedence levels, loosest first.
  absl::StatusOr<NodePtr> Binary(int level, int depth) {
    static const std::vector<std::vector<std::string_view>> kLevels = {
        {"||"}, {"&&"}, {"==", "!=", "<", "<=", ">", ">="}, {"+", "-"}, {"*", "/", "%"}};
    if (level == static_cast<int>(kLevels.size())) return Unary(depth);
    EPP_RETURN_IF_ERROR(Deep(depth));
    EPP_ASSIGN_OR_RETURN(NodePtr left, Binary(level + 1, depth + 1));
    for (int rounds = 0;; ++rounds) {
      std::string op;
      for (std::string_view o : kLevels[static_cast<size_t>(level)])
        if (IsOp(o)) op = std::string(o);
      if (op.empty()) return left;
      if (rounds > 200) return ErrorAt(Peek().at, "more than 200 operators in a row");  // bounds Evaluate's depth
      ++pos_;
      EPP_ASSIGN_OR_RETURN(NodePtr right, Binary(level + 1, depth + 1));
      left = Make(Node::Kind::kBinary, {left, right}, op);
    }
  }

  absl::StatusOr<NodePtr> Unary(int depth) {
    EPP_RETURN_IF_ERROR(Deep(depth));
    if (IsOp("-") || IsOp("!")) {
      const bool neg = IsOp("-");
      ++pos_;
      EPP_ASSIGN_OR_RETURN(NodePtr k, Unary(depth + 1));
      return Make(neg ? Node::Kind::kNeg : Node::Kind::kNot, {k});
    }
    return Primary(depth + 1);
  }

  absl::StatusOr<std::vector<std::string>> Select() {
    const Token& root = Peek();
    if (root.kind != Token::Kind::kIdent) return Unexpected(root);
    if (root.text != "usage")
      return ErrorAt(root.at, absl::StrCat("unknown variable '", root.text, "' (the only one is usage)"));
    ++pos_;
    std::vector<std::string> path;
    while (IsOp(".")) {
      ++pos_;
      if (Peek().kind != Token::Kind::kIdent) return Unexpected(Peek());
      path.push_back(Peek().text);
      ++pos_;
      if (path.size() > 4) return ErrorAt(Peek().at, "a field path deeper than usage has");
    }
    if (IsOp("(")) return ErrorAt(Peek().at, "method calls are not supported");
    if (IsOp("[")) return Unexpected(Peek());
    return path;
  }

  absl::StatusOr<NodePtr> Primary(int depth) {
    EPP_RETURN_IF_ERROR(Deep(depth));
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kNumber: {
        ++pos_;
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kNumber;
        n->number = t.number;
        return NodePtr(n);
      }
      case Token::Kind::kString: {
        ++pos_;
        return Make(Node::Kind::kString, {}, t.text);
      }
      case Token::Kind::kIdent: {
        if (t.text == "true" || t.text == "false") {
          ++pos_;
          auto n = std::make_shared<Node>();
          n->kind = Node::Kind::kBool;
          n->boolean = t.text == "true";
          return NodePtr(n);
        }
        if (t.text == "has") {
          ++pos_;
          if (!IsOp("(")) return Unexpected(Peek());
          ++pos_;
          EPP_ASSIGN_OR_RETURN(std::vector<std::string> path, Select());
          if (path.empty()) return ErrorAt(t.at, "has() needs a field: has(usage.<field>)");
          if (!IsOp(")")) return Unexpected(Peek());
          ++pos_;
          auto n = std::make_shared<Node>();
          n->kind = Node::Kind::kHas;
          n->path = std::move(path);
          return NodePtr(n);
        }
        if (pos_ + 1 < t_.size() && t_[pos_ + 1].kind == Token::Kind::kOp && t_[pos_ + 1].text == "(")
          return ErrorAt(t.at, absl::StrCat("the function ", t.text, "() is not supported (only has())"));
        EPP_ASSIGN_OR_RETURN(std::vector<std::string> path, Select());
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kField;
        n->path = std::move(path);
        return NodePtr(n);
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          ++pos_;
          EPP_ASSIGN_OR_RETURN(NodePtr inner, Cond(depth + 1));
          if (!IsOp(")")) return Unexpected(Peek());
          ++pos_;
          return inner;
        }
        return Unexpected(t);
      case Token::Kind::kEnd:
        return Unexpected(t);
    }
    return Unexpected(t);
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
};

// The usage as a tree of fields: nullopt when the path names nothing; a number, or "an object"
// for prompt_tokens_details.
struct Lookup {
  bool found = false;
  bool object = false;
  double number = 0;
};

Lookup Find(const ResponseUsage& u, const std::vector<std::string>& path) {
  if (path.empty()) return Lookup{true, true, 0};
  const std::string& f = path[0];
  if (path.size() == 1) {
    if (f == "prompt_tokens") return Lookup{true, false, u.prompt_tokens};
    if (f == "completion_tokens") return Lookup{true, false, u.completion_tokens};
    if (f == "total_tokens") return Lookup{true, false, u.total_tokens};
    if (f == "prompt_tokens_details") return u.cached_tokens ? Lookup{true, true, 0} : Lookup{};
    return {};
  }
  if (path.size() == 2 && f == "prompt_tokens_details" && path[1] == "cached_tokens" && u.cached_tokens)
    return Lookup{true, false, *u.cached_tokens};
  return {};
}

std::string TypeName(const UsageValue& v) {
  return std::holds_alternative<double>(v) ? "number" : std::holds_alternative<bool>(v) ? "bool" : "string";
}

absl::StatusOr<UsageValue> Eval(const Node& n, const ResponseUsage& u) {
  switch (n.kind) {
    case Node::Kind::kNumber: return UsageValue(n.number);
    case Node::Kind::kBool: return UsageValue(n.boolean);
    case Node::Kind::kString: return UsageValue(n.text);
    case Node::Kind::kHas: return UsageValue(Find(u, n.path).found);
    case Node::Kind::kField: {
      const Lookup l = Find(u, n.path);
      const std::string name = absl::StrCat("usage", n.path.empty() ? "" : ".", absl::StrJoin(n.path, "."));
      if (!l.found) return absl::InvalidArgumentError(absl::StrCat("no such field: ", name));
      if (l.object) return absl::InvalidArgumentError(absl::StrCat(name, " is an object, not a value"));
      return UsageValue(l.number);
    }
    case Node::Kind::kNeg: {
      EPP_ASSIGN_OR_RETURN(UsageValue v, Eval(*n.kids[0], u));
      if (!std::holds_alternative<double>(v)) return absl::InvalidArgumentError("- needs a number, got a " + TypeName(v));
      return UsageValue(-std::get<double>(v));
    }
    case Node::Kind::kNot: {
      EPP_ASSIGN_OR_RETURN(UsageValue v, Eval(*n.kids[0], u));
      if (!std::holds_alternative<bool>(v)) return absl::InvalidArgumentError("! needs a bool, got a " + TypeName(v));
      return UsageValue(!std::get<bool>(v));
    }
    case Node::Kind::kCond: {
      EPP_ASSIGN_OR_RETURN(UsageValue c, Eval(*n.kids[0], u));
      if (!std::holds_alternative<bool>(c)) return absl::InvalidArgumentError("?: needs a bool condition, got a " + TypeName(c));
      return Eval(*n.kids[std::get<bool>(c) ? 1 : 2], u);
    }
    case Node::Kind::kBinary: {
      const std::string& op = n.text;
      EPP_ASSIGN_OR_RETURN(UsageValue a, Eval(*n.kids[0], u));
      if (op == "&&" || op == "||") {  // short-circuit, as CEL
        if (!std::holds_alternative<bool>(a)) return absl::InvalidArgumentError(op + " needs bools, got a " + TypeName(a));
        if (op == "&&" && !std::get<bool>(a)) return UsageValue(false);
        if (op == "||" && std::get<bool>(a)) return UsageValue(true);
        EPP_ASSIGN_OR_RETURN(UsageValue b, Eval(*n.kids[1], u));
        if (!std::holds_alternative<bool>(b)) return absl::InvalidArgumentError(op + " needs bools, got a " + TypeName(b));
        return b;
      }
      EPP_ASSIGN_OR_RETURN(UsageValue b, Eval(*n.kids[1], u));
      if (op == "==" || op == "!=") {
        if (a.index() != b.index())
          return absl::InvalidArgumentError(absl::StrCat(op, " compares a ", TypeName(a), " with a ", TypeName(b)));
        return UsageValue((a == b) == (op == "=="));
      }
      if (op == "+" && std::holds_alternative<std::string>(a) && std::holds_alternative<std::string>(b))
        return UsageValue(std::get<std::string>(a) + std::get<std::string>(b));
      if (!std::holds_alternative<double>(a) || !std::holds_alternative<double>(b))
        return absl::InvalidArgumentError(absl::StrCat(op, " needs numbers, got a ", TypeName(a), " and a ", TypeName(b)));
      const double x = std::get<double>(a), y = std::get<double>(b);
      if (op == "<") return UsageValue(x < y);
      if (op == "<=") return UsageValue(x <= y);
      if (op == ">") return UsageValue(x > y);
      if (op == ">=") return UsageValue(x >= y);
      if (op == "+") return UsageValue(x + y);
      if (op == "-") return UsageValue(x - y);
      if (op == "*") return UsageValue(x * y);
      if (op == "/") {
        if (y == 0) return absl::InvalidArgumentError("division by zero");
        return UsageValue(x / y);
      }
      if (op == "%") {
        if (y == 0) return absl::InvalidArgumentError("modulus by zero");
        return UsageValue(std::fmod(x, y));
      }
      return absl::InvalidArgumentError("unknown operator " + op);
    }
  }
  return absl::InvalidArgumentError("bad expression");
}

}  // namespace

UsageExpression::UsageExpression(std::string text, std::shared_ptr<const Node> root)
    : text_(std::move(text)), root_(std::move(root)) {}
UsageExpression::~UsageExpression() = default;

absl::StatusOr<UsageExpression> UsageExpression::Compile(std::string_view text) {
  if (text.size() > 4096) return absl::InvalidArgumentError("longer than 4096 characters");
  EPP_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text));
  ExprParser p(std::move(tokens));
  EPP_ASSIGN_OR_RETURN(NodePtr root, p.Parse());
  return UsageExpression(std::string(text), std::move(root));
}

absl::StatusOr<UsageValue> UsageExpression::Evaluate(const ResponseUsage& usage) const { return Eval(*root_, usage); }

}  // namespace epp
