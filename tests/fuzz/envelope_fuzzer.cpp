// The remote envelope (cache/remote.h) on any bytes, as a node that trusts a publisher key, one
// with the older cluster secret and one that trusts nothing open it: the payload or kDataLoss,
// never a crash or a read past the bytes; and whatever bytes are sealed open again unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/remote.h"
#include "cache/trust.h"

namespace {

const kiln::cache::TrustConfig& keyed() {
  static const kiln::cache::TrustConfig t = [] {
    kiln::cache::TrustConfig c;
    c.signing_key = kiln::cache::generate_signing_key("fuzz-1").value();
    c.trusted.push_back(c.signing_key->public_key);
    return c;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::cache;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const kiln::Hash128 key{};  // the seeds are made under the zero key
  TrustConfig secret;
  secret.secret = "fuzz secret";
  const TrustConfig none;
  for (const TrustConfig* trust : {&keyed(), static_cast<const TrustConfig*>(&secret), &none}) {
    const TrustConfig& t = *trust;
    for (RemoteObject type : {RemoteObject::kArtifact, RemoteObject::kManifest}) {
      auto opened = open_object(type, key, bytes, t, "redis:kiln:");
      if (!opened.ok() && opened.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
      if (opened.ok() && (opened->data() < bytes.data() || opened->data() + opened->size() > bytes.data() + bytes.size())) __builtin_trap();
    }
  }
  // Sealed under the key, the bytes come back as they went in; under another namespace, never.
  auto sealed = seal_object(RemoteObject::kArtifact, key, bytes, keyed(), "redis:kiln:");
  if (!sealed.ok()) __builtin_trap();
  auto back = open_object(RemoteObject::kArtifact, key, *sealed, keyed(), "redis:kiln:");
  if (!back.ok() || *back != bytes) __builtin_trap();
  if (open_object(RemoteObject::kArtifact, key, *sealed, keyed(), "redis:other:").ok()) __builtin_trap();
  return 0;
}
