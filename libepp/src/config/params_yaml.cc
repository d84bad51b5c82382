// ParamsYaml: see params_yaml.h.
#include "config/params_yaml.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace epp {
namespace {

// YAML for the effective configuration (block style; scalars quoted when plain style would
// change their meaning).
bool PlainSafe(const std::string& s) {
  if (s.empty()) return false;
  static const std::string kSpecialStart = "-?:,[]{}#&*!|>'\"%@` ";
  if (kSpecialStart.find(s.front()) != std::string::npos || s.back() == ' ') return false;
  for (char c : s)
    if (c == '\n' || c == '\t' || c == '#' || c == ':' || static_cast<unsigned char>(c) < 0x20) return false;
  static const std::set<std::string> kReserved = {"true", "false", "null", "~", "yes", "no", "on", "off", "True", "False", "Null"};
  return kReserved.count(s) == 0;
}

// True when plain style would not change the scalar's text (reserved words allowed).
bool PlainSyntaxSafe(const std::string& s) {
  if (s.empty()) return false;
  static const std::string kSpecialStart = "-?:,[]{}#&*!|>'\"%@` ";
  if (kSpecialStart.find(s.front()) != std::string::npos && !(s.front() == '-' && s.size() > 1 && std::isdigit(static_cast<unsigned char>(s[1]))))
    return false;
  if (s.back() == ' ') return false;
  for (char c : s)
    if (c == '\n' || c == '\t' || c == '#' || c == ':' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

// A plain scalar YAML would read as a number (so a string spelled so must be quoted).
bool LooksTyped(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty();
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Strings (quoted in the source, or built with Params::String) stay strings: quoted when plain
// style would read back as something else. Unquoted scalars (numbers, booleans, plain words)
// are written plain, so `autoTune: true` stays a boolean for every YAML reader.
std::string ScalarYaml(const Params& p) {
  if (p.is_null()) return "null";
  if (p.quoted()) return PlainSafe(p.text()) && !LooksTyped(p.text()) ? p.text() : Quote(p.text());
  return PlainSyntaxSafe(p.text()) ? p.text() : Quote(p.text());
}

void EmitYaml(const Params& p, int indent, std::string& out);

void EmitValueAfterKey(const Params& v, int indent, std::string& out) {
  if (v.kind() == Params::Kind::kMap && !v.entries().empty()) {
    out += "\n";
    EmitYaml(v, indent + 2, out);
  } else if (v.kind() == Params::Kind::kList && !v.items().empty()) {
    out += "\n";
    EmitYaml(v, indent, out);
  } else if (v.kind() == Params::Kind::kMap) {
    out += " {}\n";
  } else if (v.kind() == Params::Kind::kList) {
    out += " []\n";
  } else {
    // Appended piecewise: GCC 12 reports a false -Wrestrict for `" " + std::string&&`.
    out += ' ';
    out += ScalarYaml(v);
    out += '\n';
  }
}

void EmitYaml(const Params& p, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (p.kind() == Params::Kind::kMap) {
    for (const auto& [k, v] : p.entries()) {
      out += pad + (PlainSafe(k) ? k : Quote(k)) + ":";
      EmitValueAfterKey(v, indent, out);
    }
  } else if (p.kind() == Params::Kind::kList) {
    for (const Params& item : p.items()) {
      if (item.kind() == Params::Kind::kMap && !item.entries().empty()) {
        // "- first: x" then the rest of the map indented under it.
        std::string sub;
        EmitYaml(item, indent + 2, sub);
        sub.replace(static_cast<size_t>(indent), 2, "- ");
        out += sub;
      } else {
        out += pad + "-";
        EmitValueAfterKey(item, indent, out);
      }
    }
  } else {
    out += pad + ScalarYaml(p) + "\n";
  }
}

}  // namespace

std::string ParamsYaml(const Params& params) {
  std::string out;
  EmitYaml(params, 0, out);
  return out;
}

}  // namespace epp
