// AWS credentials for s3:// tiers, found where the AWS SDKs look, in their order:
//   1. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment;
//   2. a web-identity token (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, as Kubernetes' IRSA
//      and EKS pod identity set them), traded for temporary credentials with STS's
//      AssumeRoleWithWebIdentity (at AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else
//      https://sts.REGION.amazonaws.com), renewed five minutes before they expire;
//   3. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials),
//      profile AWS_PROFILE, else "default".
// Requests are signed with them by libcurl (CURLOPT_AWS_SIGV4): nothing here signs.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "support/status.h"

namespace kiln::cache {

struct S3Credentials {
  std::string access_key, secret_key, session_token;
  std::string source;  // "the environment", "~/.aws/credentials [default]", "web identity (role ...)"
  std::chrono::system_clock::time_point expires = std::chrono::system_clock::time_point::max();
};

// The region when a tier names none: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1.
std::string s3_default_region();

// Reads an INI-style credentials file's profile (exposed for tests).
Result<S3Credentials> read_shared_credentials(const std::string& path, const std::string& profile);

// Finds and keeps credentials; thread-safe. `fetch` makes an HTTP request for STS (a POST of a
// form to a URL: its status and body), so this file needs no HTTP client of its own.
class S3CredentialSource {
 public:
  using Fetch = std::function<Result<std::pair<long, std::string>>(const std::string& url, const std::string& form)>;
  S3CredentialSource(std::string region, Fetch fetch) : m_region(std::move(region)), m_fetch(std::move(fetch)) {}
  // The credentials to sign the next request with; kUnavailable says where kiln looked.
  Result<S3Credentials> get();

 private:
  Result<S3Credentials> from_web_identity(const std::string& token_file, const std::string& role);
  std::string m_region;
  Fetch m_fetch;
  std::mutex m_mutex;
  S3Credentials m_cached;
  bool m_have = false;
};

}  // namespace kiln::cache
