# Every dependency is a Debian package found on the system (scripts/setup installs them).
find_package(absl REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CURL REQUIRED)
find_package(ZLIB REQUIRED)  # gzip-encoded scrapes, decoded by HttpClient (libcurl links it too)
find_package(nlohmann_json REQUIRED)
find_package(simdjson REQUIRED)
find_package(Threads REQUIRED)
# ext_proc: our own .proto files compiled with Debian's protoc and grpc_cpp_plugin; OpenSSL
# (already under gRPC and libcurl) generates serve's self-signed certificate.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_program(EPP_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
if(EPP_BUILD_CLI)
  find_package(CLI11 REQUIRED)
endif()
if(EPP_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(EPP_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
if(EPP_BUILD_PYTHON)
  if(NOT Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    # Debian's interpreter carries pybind11 and pytest; pyenv's does not (see README).
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
  find_package(pybind11 CONFIG REQUIRED)
endif()
# Debian ships cpp-httplib as a compiled library (split header) with a pkg-config file only.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# KV-cache events: ZeroMQ (its C API) and msgpack-cxx (header-only; built without Boost).
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_package(msgpackc-cxx CONFIG REQUIRED NAMES msgpackc-cxx msgpack)
# In-process tokenization: PCRE2 for tokenizer.json's Split regexes (UTF + UCP, JIT), utf8proc for
# the Unicode normalizers (NFC ...) and character categories.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
