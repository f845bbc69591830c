#include "support/cuda_toolkit.h"

#include <algorithm>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "support/file_memo.h"
#include "support/file_util.h"

namespace kiln {

std::vector<std::string> cuda_toolkit_roots() {
  std::vector<std::string> out;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  if (std::find(out.begin(), out.end(), "/usr/local/cuda") == out.end()) out.push_back("/usr/local/cuda");
  return out;
}

std::string cuda_toolkit_root() { return cuda_toolkit_roots().front(); }

std::string cuda_ptxas_path() {
  std::string path = cuda_toolkit_root() + "/bin/ptxas";
  return ::access(path.c_str(), X_OK) == 0 ? path : std::string();
}

std::vector<int> cuda_archs_in(std::string_view target) {
  std::vector<int> out;
  for (size_t pos = 0; (pos = target.find("sm_", pos)) != std::string_view::npos; pos += 3)
    out.push_back(std::atoi(std::string(target.substr(pos + 3, 4)).c_str()));
  if (auto pos = target.find("compute_"); pos != std::string_view::npos)
    out.push_back(std::atoi(std::string(target.substr(pos + 8, 4)).c_str()));
  return out;
}

namespace {

std::optional<CudaHeaders> headers_in(const std::string& include_dir) {
  if (::access((include_dir + "/cuda_runtime.h").c_str(), R_OK) != 0) return std::nullopt;
  CudaHeaders h;
  h.include_dir = include_dir;
  h.dirs = {include_dir};
  if (::access((include_dir + "/cccl").c_str(), X_OK) == 0) h.dirs.push_back(include_dir + "/cccl");
  h.version = "unknown";
  if (auto text = read_file(include_dir + "/cuda.h"); text.ok()) {
    auto pos = text->find("#define CUDA_VERSION ");
    if (pos != std::string::npos) {
      int v = std::atoi(text->c_str() + pos + 21);
      if (v > 0) h.version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    }
  }
  return h;
}

}  // namespace

std::optional<CudaHeaders> cuda_headers_near(const std::string& library_path) {
  std::error_code ec;
  auto real = std::filesystem::canonical(library_path, ec);
  if (!ec) {
    // <toolkit>/lib64/libnvrtc.so -> <toolkit>/include; also targets/x86_64-linux/lib.
    std::string lib_dir = real.parent_path().string();
    if (auto h = headers_in(dirname_of(lib_dir) + "/include")) return h;
  }
  for (auto& root : cuda_toolkit_roots())
    if (auto h = headers_in(root + "/include")) return h;
  return std::nullopt;
}

std::optional<CudaHeaders> cuda_headers_at(const std::string& root) { return headers_in(root + "/include"); }

Result<std::string> cuda_headers_identity(const CudaHeaders& headers) {
  KILN_ASSIGN_OR_RETURN(Hash128 digest, memo_folder_digest(headers.include_dir));
  return "cuda-headers=" + headers.version + ":" + digest.hex();
}

bool cuda_ptx_only(std::string_view target) { return target.find("compute_") != std::string_view::npos; }

}  // namespace kiln
