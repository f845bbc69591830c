#include "cache/remote_endpoint.h"

#include <cctype>
#include <charconv>
#include <optional>

namespace kiln::cache {

Result<std::unique_ptr<RemoteEndpoint>> make_http_endpoint(const EndpointUrl& url, const EndpointOptions& options);
Result<std::unique_ptr<RemoteEndpoint>> make_redis_endpoint(const EndpointUrl& url, const EndpointOptions& options);

namespace {

// `text` with its %XX escapes decoded, or nullopt for a bad escape.
std::optional<std::string> percent_decoded(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2])))
      return std::nullopt;
    out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

}  // namespace

Result<EndpointUrl> parse_endpoint_url(std::string_view text) {
  EndpointUrl url;
  url.text = std::string(text);
  // What messages show: a password written in the URL is never repeated.
  std::string shown(text);
  if (size_t start = shown.find("://"); start != std::string::npos) {
    size_t at = shown.rfind('@', shown.find('/', start + 3)), c = shown.find(':', start + 3);
    if (at != std::string::npos && at > start + 3 && c < at) shown.replace(c + 1, at - c - 1, "***");
  }
  auto bad = [&](const std::string& why) { return invalid_argument("remote '" + shown + "': " + why); };
  size_t colon = text.find("://");
  if (colon == std::string_view::npos) return bad("not a URL (expected redis://host:port or http://host:port/path)");
  url.scheme = std::string(text.substr(0, colon));
  for (char& c : url.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (url.scheme == "rediss")
    return unavailable("remote '" + shown +
                       "': rediss:// needs TLS in the Redis client, and Debian 12's hiredis (0.14) has none; reach the server "
                       "through a local TLS tunnel (stunnel, a service mesh sidecar) as redis://127.0.0.1:PORT "
                       "(docs/CACHE.md: \"The shared cluster cache\")");
  if (url.scheme != "redis" && url.scheme != "http" && url.scheme != "https" && url.scheme != "s3")
    return bad("unknown scheme '" + url.scheme + "' (kiln speaks redis://, http://, https:// and s3://)");
  std::string_view rest = text.substr(colon + 3);
  if (url.scheme == "s3") {  // s3://bucket[/prefix]: where the server is comes from |endpoint= and |region=
    size_t slash = rest.find('/');
    std::string_view bucket = rest.substr(0, slash), prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
    if (bucket.empty()) return bad("no bucket (s3://BUCKET/PREFIX)");
    if (bucket.find_first_of("@:") != std::string_view::npos)
      return bad("s3://BUCKET/PREFIX names a bucket, not a server: give the server as |endpoint=URL, credentials in the "
                 "environment or ~/.aws/credentials");
    for (char c : bucket)
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.'))
        return bad("'" + std::string(bucket) + "' is not a bucket name (lower-case letters, digits, '-' and '.')");
    if (prefix.find_first_of("?#") != std::string_view::npos) return bad("a query or fragment has no meaning here");
    url.host = std::string(bucket);
    url.path = "/" + std::string(prefix);
    if (url.path.back() != '/') url.path += '/';
    return url;
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    if (url.scheme != "redis")
      return bad("credentials in a URL show in process lists and logs; put them in a file (token-file=, basic-auth-file=) "
                 "that only you can read");
    // redis://user[:password]@host: a Redis 6+ ACL user. The label keeps no credentials.
    std::string_view userinfo = authority.substr(0, at);
    size_t c = userinfo.find(':');
    auto user = percent_decoded(userinfo.substr(0, c));
    auto password = c == std::string_view::npos ? std::optional<std::string>("") : percent_decoded(userinfo.substr(c + 1));
    if (!user || !password) return bad("a bad %-escape in the user or password (write %XX, two hex digits)");
    if (user->empty())
      return bad("credentials in a URL show in process lists and logs: the default user's password goes in "
                 "|password-file=F (an ACL user is named as redis://USER@HOST:PORT)");
    if (c != std::string_view::npos && password->empty()) return bad("an empty password after 'user:'");
    url.username = std::move(*user);
    url.password = std::move(*password);
    authority.remove_prefix(at + 1);
    url.text = std::string(text.substr(0, colon + 3)) + std::string(rest.substr(at + 1));
  }
  std::string_view host = authority, port;
  if (!authority.empty() && authority[0] == '[') {  // [::1]:6379
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return bad("expected ':' after the IPv6 address");
      port = authority.substr(close + 2);
    }
  } else if (size_t c = authority.rfind(':'); c != std::string_view::npos) {
    host = authority.substr(0, c);
    port = authority.substr(c + 1);
  }
  if (host.empty()) return bad("no host");
  url.host = std::string(host);
  url.port = url.scheme == "redis" ? 6379 : url.scheme == "https" ? 443 : 80;
  if (!port.empty()) {
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p <= 0 || p > 65535) return bad("bad port '" + std::string(port) + "'");
    url.port = p;
  }
  if (url.scheme == "redis") {
    std::string_view db = path.substr(1);
    if (!db.empty()) {
      auto [end, ec] = std::from_chars(db.data(), db.data() + db.size(), url.db);
      if (ec != std::errc() || end != db.data() + db.size() || url.db < 0) return bad("the path of a redis URL is a database number");
    }
    url.path = "/";
  } else {
    if (path.find_first_of("?#") != std::string_view::npos) return bad("a query or fragment has no meaning here");
    url.path = std::string(path);
    if (url.path.back() != '/') url.path += '/';
  }
  return url;
}

Result<bool> RemoteEndpoint::take_lease(const std::string&, const std::string&, std::chrono::milliseconds) {
  return unavailable(label() + " has no leases");
}
Result<bool> RemoteEndpoint::renew_lease(const std::string&, const std::string&, std::chrono::milliseconds) {
  return unavailable(label() + " has no leases");
}
Status RemoteEndpoint::release_lease(const std::string&, const std::string&) { return unavailable(label() + " has no leases"); }
Result<bool> RemoteEndpoint::lease_held(const std::string&) { return unavailable(label() + " has no leases"); }
Result<std::unique_ptr<RemoteEndpoint::LeaseWatch>> RemoteEndpoint::watch_lease(const std::string&) {
  return unavailable(label() + " cannot wake waiters (they poll)");
}
Result<int64_t> RemoteEndpoint::lease_watchers(const std::string&) { return unavailable(label() + " cannot count waiters"); }

Result<std::unique_ptr<RemoteEndpoint>> make_endpoint(const EndpointUrl& url, const EndpointOptions& options) {
  if (url.scheme == "http" || url.scheme == "https" || url.scheme == "s3") return make_http_endpoint(url, options);
  return make_redis_endpoint(url, options);
}

}  // namespace kiln::cache
