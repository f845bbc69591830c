// libcurl, loaded with dlopen from libcurl.so.4 on the first HTTP request: a process whose ops
// all hit the local store never maps it, nor the TLS, HTTP/2 and LDAP libraries it pulls in
// (tests/integration/hit_path_test.cpp checks /proc/self/maps). Its headers (Debian's
// libcurl4-openssl-dev) give the types and option numbers only; nothing links against it.
#pragma once

// The type-checking wrappers of curl.h are function-like macros named after the calls, which
// would rewrite `api->curl_easy_setopt(...)`; the calls are checked by the table's types.
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include <string>

#include "support/status.h"

namespace kiln::cache {

struct CurlApi {
#define KILN_CURL(name) decltype(&::name) name = nullptr;
#include "cache/curl_symbols.def"
#undef KILN_CURL
  std::string version;  // "libcurl/7.88.1 OpenSSL/3.0.19", for messages
};

// The table, loaded and initialised once per process ($KILN_CURL_LIBRARY, else
// libcurl.so.4); kUnavailable says why not (absent, too old, no TLS).
Result<const CurlApi*> curl_api();

}  // namespace kiln::cache
