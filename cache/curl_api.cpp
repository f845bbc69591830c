// Only in a build that found libcurl's headers (cache/CMakeLists.txt).
#if KILN_WITH_CURL
#include "cache/curl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace kiln::cache {

Result<const CurlApi*> curl_api() {
  static std::once_flag once;
  static CurlApi table;
  static Status status;
  std::call_once(once, [] {
    const char* env = std::getenv("KILN_CURL_LIBRARY");
    std::string name = env && *env ? env : "libcurl.so.4";
    // RTLD_LOCAL: libcurl's OpenSSL and nghttp2 stay out of the global namespace, where they
    // could resolve symbols for a kernel library loaded later.
    void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = ::dlerror();
      status =
          unavailable("cannot load libcurl (" + std::string(why ? why : name + ": not found") +
                      "): HTTP tiers need it; install libcurl4 (apt-get install libcurl4), or set KILN_CURL_LIBRARY");
      return;
    }
#define KILN_CURL(sym)                                                   \
  table.sym = reinterpret_cast<decltype(table.sym)>(::dlsym(lib, #sym)); \
  if (!table.sym && status.ok()) status = unavailable(name + " has no " #sym ": kiln needs libcurl 7.85 or newer");
#include "cache/curl_symbols.def"
#undef KILN_CURL
    if (!status.ok()) return;
    const curl_version_info_data* v = table.curl_version_info(CURLVERSION_NOW);
    table.version = std::string("libcurl/") + (v && v->version ? v->version : "?") +
                    (v && v->ssl_version ? std::string(" ") + v->ssl_version : "");
    if (!v || v->version_num < 0x075500) {
      status = unavailable(name + " is " + table.version + ": kiln needs libcurl 7.85 or newer");
      return;
    }
    // Once, before any thread makes a handle (not thread-safe in libcurl before 7.84).
    if (CURLcode rc = table.curl_global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK)
      status = unavailable(name + ": curl_global_init failed: " + table.curl_easy_strerror(rc));
  });
  if (!status.ok()) return status;
  return &table;
}

}  // namespace kiln::cache

#endif  // KILN_WITH_CURL
