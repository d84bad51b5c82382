// Private: the parsed form of a Jinja template (jinja_parse.cc builds it, jinja_eval.cc runs it).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jinja.h"

namespace epp::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind : uint8_t {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // args: key, value, key, value...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts absent)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name(args[1..]); negate
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kNot,       // not args[0]
    kBinary,    // args[0] op args[1]: + - * / // % **
    kAddChain,  // args[0] + args[1] + ...: one allocation when every operand is a string
    kConcat,    // args[0] ~ args[1] ~ ...
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2]...
    kAnd,
    kOr,
    kCond,      // args[1] if args[0] else args[2] (args[2] may be absent)
  };
  Kind kind;
  int line = 0;
  bool negate = false;
  Value value;
  std::string name;                 // name, attribute, filter, test, binary operator
  std::vector<std::string> ops;     // kCompare: == != < > <= >= in notin
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

// The filters and tests epp implements. The parser rejects other names; the answer comes from
// the evaluator's own tables (kFilters in jinja_filters.cc, kTests in jinja_tests.cc), so what
// parses is what renders.
bool IsJinjaFilter(std::string_view name);
bool IsJinjaTest(std::string_view name);

// The name a block set's filter chain reads its body's text from (not a valid identifier).
inline constexpr std::string_view kSetBlockBody = " body";

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum Kind : uint8_t { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  // kIf: conds[i] guards bodies[i]; a trailing body without cond is the else.
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  // kFor: targets, iterable in expr, filter in cond, body, else_body. kSet / kSetBlock: targets
  // (one name, several names, or an attribute "ns.attr" as {ns, attr} with attr_target).
  std::vector<std::string> targets;
  bool attr_target = false;
  ExprPtr cond;
  Body body, else_body;
  // kMacro: name in targets[0], parameters, defaults (null when none).
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

class Template {
 public:
  std::string name;
  Body body;
};

}  // namespace epp::jinja
