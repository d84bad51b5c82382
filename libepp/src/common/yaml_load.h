// Loading every document of a YAML stream (private to libepp).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace epp::internal {

// YAML::LoadAll, except that it terminates. yaml-cpp 0.7 loops forever, allocating as it goes,
// on a stream with a token no document can start with (",a: 1"; a stray ']' after a document):
// its parser yields an empty document without consuming the token, again and again. A first pass
// over the events stops when a document starts where the previous one did and throws
// YAML::ParserException at that place ("unexpected ','"); any other syntax error throws as
// LoadAll does. Every multi-document loader in libepp goes through here.
std::vector<YAML::Node> LoadAllDocuments(const std::string& text);

}  // namespace epp::internal
