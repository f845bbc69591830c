#include "cache/remote_s3_credentials.h"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "support/file_util.h"

namespace kiln::cache {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trim(std::string s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The text of the first <tag>...</tag> in `xml`, or "".
std::string xml_value(const std::string& xml, const std::string& tag) {
  size_t a = xml.find("<" + tag + ">");
  if (a == std::string::npos) return "";
  a += tag.size() + 2;
  size_t b = xml.find("</" + tag + ">", a);
  return b == std::string::npos ? "" : xml.substr(a, b - a);
}

// "2026-11-28T23:59:00Z" (STS's Expiration), or nullopt.
std::optional<std::chrono::system_clock::time_point> parse_time(const std::string& s) {
  std::tm tm{};
  if (!strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// Renewed this long before they expire (the SDKs' margin).
constexpr auto k_refresh_margin = std::chrono::minutes(5);

}  // namespace

std::string s3_default_region() {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
    if (std::string v = env(name); !v.empty()) return v;
  return "us-east-1";
}

Result<S3Credentials> read_shared_credentials(const std::string& path, const std::string& profile) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  S3Credentials out;
  out.source = path + " [" + profile + "]";
  std::istringstream in(text);
  std::string line, section;
  bool found = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      if (line.back() != ']') return invalid_argument(path + ":" + std::to_string(number) + ": an unclosed '[' section");
      section = trim(line.substr(1, line.size() - 2));
      found = found || section == profile;
      continue;
    }
    if (section != profile) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) return invalid_argument(path + ":" + std::to_string(number) + ": expected key = value");
    std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") out.access_key = value;
    if (key == "aws_secret_access_key") out.secret_key = value;
    if (key == "aws_session_token") out.session_token = value;
  }
  if (!found) return not_found(path + " has no profile [" + profile + "]");
  if (out.access_key.empty() || out.secret_key.empty())
    return invalid_argument(path + " [" + profile + "] lacks aws_access_key_id or aws_secret_access_key");
  return out;
}

Result<S3Credentials> S3CredentialSource::from_web_identity(const std::string& token_file, const std::string& role) {
  KILN_ASSIGN_OR_RETURN(std::string token, read_file(token_file));
  token = trim(token);
  if (token.empty()) return invalid_argument("the web-identity token file " + token_file + " is empty");
  std::string sts = env("AWS_ENDPOINT_URL_STS");
  if (sts.empty()) sts = env("AWS_ENDPOINT_URL");
  if (sts.empty()) sts = "https://sts." + m_region + ".amazonaws.com";
  while (!sts.empty() && sts.back() == '/') sts.pop_back();
  std::string session = env("AWS_ROLE_SESSION_NAME");
  if (session.empty()) session = "kiln";
  // Unsigned, as the SDKs send it: the token is the proof.
  std::string form = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + url_encode(role) +
                     "&RoleSessionName=" + url_encode(session) + "&WebIdentityToken=" + url_encode(token);
  KILN_ASSIGN_OR_RETURN(auto answer, m_fetch(sts + "/", form));
  auto& [status, body] = answer;
  if (status != 200)
    return unavailable("STS at " + sts + " refused AssumeRoleWithWebIdentity for role " + role + " (HTTP " + std::to_string(status) +
                       (xml_value(body, "Code").empty() ? "" : ", " + xml_value(body, "Code") + ": " + xml_value(body, "Message")) +
                       "): check AWS_ROLE_ARN and the token in " + token_file);
  S3Credentials out;
  out.access_key = xml_value(body, "AccessKeyId");
  out.secret_key = xml_value(body, "SecretAccessKey");
  out.session_token = xml_value(body, "SessionToken");
  out.source = "web identity (role " + role + ", token " + token_file + ")";
  if (auto t = parse_time(xml_value(body, "Expiration"))) out.expires = *t;
  if (out.access_key.empty() || out.secret_key.empty())
    return unavailable("STS at " + sts + " answered AssumeRoleWithWebIdentity without credentials");
  return out;
}

Result<S3Credentials> S3CredentialSource::get() {
  // The environment first, read every time (cheap, and a test or a wrapper may change it).
  std::string id = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
  if (!id.empty() || !secret.empty()) {
    if (id.empty() || secret.empty())
      return invalid_argument("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: one of them is set, the other not");
    return S3Credentials{id, secret, env("AWS_SESSION_TOKEN"), "the environment (AWS_ACCESS_KEY_ID)", {}};
  }
  std::lock_guard lock(m_mutex);
  if (m_have && std::chrono::system_clock::now() + k_refresh_margin < m_cached.expires) return m_cached;
  std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE"), role = env("AWS_ROLE_ARN");
  if (!token_file.empty()) {
    if (role.empty()) return invalid_argument("AWS_WEB_IDENTITY_TOKEN_FILE is set without AWS_ROLE_ARN: set the role to assume");
    KILN_ASSIGN_OR_RETURN(m_cached, from_web_identity(token_file, role));
    m_have = true;
    return m_cached;
  }
  std::string file = env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    std::string home = env("HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  if (!file.empty()) {
    auto shared = read_shared_credentials(file, profile);
    if (shared.ok()) {
      m_cached = std::move(shared).value();
      m_have = true;
      return m_cached;
    }
    if (shared.status().code() != StatusCode::kIoError && shared.status().code() != StatusCode::kNotFound) return shared.status();
  }
  return unavailable("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE with "
                     "AWS_ROLE_ARN, or a profile in " +
                     (file.empty() ? std::string("~/.aws/credentials") : file) + " (AWS_PROFILE, else [default])");
}

}  // namespace kiln::cache
