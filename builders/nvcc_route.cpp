#include "builders/nvcc_route.h"

#include "builders/ops.h"
#include "support/hash.h"
#include "support/log.h"

namespace kiln::builders {

void use_nvcc_for(jit::CompileRequest& request, const std::vector<size_t>& nvcc_sources, const jit::Nvcc& nvcc,
                  const std::string& label) {
  for (size_t i : nvcc_sources)
    request.external_compiles[i] = [&request, i, nvcc, label] {
      const std::string& path = request.sources[i].path;
      KILN_LOG_AT(kInfo, "compile", label + ": " + path + " with nvcc " + nvcc.version + " (" + nvcc.path + ")");
      jit::CompileResult done = jit::compile_with_nvcc(nvcc, request, i);
      done.log = "kiln: nvcc " + nvcc.version + " compiled " + path + (done.success ? "\n" : ":\n") + done.log;
      KILN_LOG_AT(kDebug, "compile", path + ": nvcc " + (done.success ? "compiled it" : "refused it") + " in " +
                                         std::to_string(static_cast<long>(done.compile_ms)) + " ms");
      return done;
    };
}

Hash128 Ops::clang_unit_key(const Inputs& in, size_t index) {
  const jit::CompileRequest& r = in.request.compile;
  std::string text = "kiln: clang's CUDA path for one library source\n" + in.clang_identity + "\n" + in.request.target.str() + "\n";
  auto add = [&](const char* what, const std::string& value) { text += std::string(what) + "=" + value + "\n"; };
  for (auto& d : r.include_dirs) add("include-dir", d);
  for (auto& d : r.defines) add("define", d);
  for (auto& d : r.unit_defines) add("unit-define", d);
  for (auto& f : r.cuda_flags) add("cuda-flag", f);
  for (auto& a : r.cuda_archs) add("cuda-arch", a);
  add("source", r.sources[index].path);
  add("source-text", r.sources[index].text);
  return xxh3_128(text);
}

void Ops::route_through_nvcc(Inputs& in, std::vector<size_t> nvcc_sources, const jit::Nvcc& nvcc) {
  std::string which;
  for (size_t i : nvcc_sources) which += (which.empty() ? "" : ",") + label_for(in.request.compile.sources[i].path, *in.request.spec);
  in.identity = in.clang_identity + ";" + nvcc.identity + ";nvcc-sources=" + which;
  in.nvcc_sources = std::move(nvcc_sources);
  in.nvcc = nvcc;
  in.key = input_key(in.request, in.identity);
}

namespace {
std::string first_error_of(const BuildOutcome& out) {
  for (auto& d : out.diagnostics)
    if (d.severity == jit::Diagnostic::Severity::kError || d.severity == jit::Diagnostic::Severity::kFatal) return d.to_string();
  return out.diagnostics.empty() ? "no diagnostic" : out.diagnostics.front().to_string();
}
}  // namespace

Result<BuildOutcome> Ops::build_cuda_library(const OpSpec& spec, const Target& target, Inputs first) {
  first.clang_identity = first.identity;
  const auto& sources = first.request.compile.sources;
  std::vector<size_t> cuda;
  for (size_t i = 0; i < sources.size(); ++i)
    if (jit::is_cuda_source(sources[i].path)) cuda.push_back(i);
  std::vector<Hash128> unit_keys;
  for (size_t i : cuda) unit_keys.push_back(clang_unit_key(first, i));
  const std::string what = "library " + spec.name;

  // Sources Clang refused before go to nvcc at once (a hit then runs no compiler at all).
  std::vector<size_t> known;
  for (size_t k = 0; k < cuda.size(); ++k)
    if (route_failed_before(unit_keys[k])) known.push_back(cuda[k]);
  if (!known.empty()) {
    if (auto nvcc = jit::find_nvcc()) {
      KILN_LOG_AT(kDebug, "compile", what + ": Clang's CUDA path refused " + std::to_string(known.size()) +
                                         " of its sources before; they compile with nvcc " + nvcc->version);
      KILN_ASSIGN_OR_RETURN(Inputs in, inputs_for(spec, target));
      in.clang_identity = in.identity;
      route_through_nvcc(in, known, *nvcc);
      auto again = build_route(spec, target, std::move(in));
      if (!again.ok() || again->success) {
        if (again.ok()) again->fallback_from = "clang";
        return again;
      }
    }
  }

  KILN_ASSIGN_OR_RETURN(BuildOutcome out, build_route(spec, target, std::move(first)));
  if (out.success) return out;
  // The CUDA sources that failed (a failure found in the cache does not say: all of them).
  std::vector<size_t> failing;
  for (size_t i : cuda)
    if (out.failed_sources.empty() || std::find(out.failed_sources.begin(), out.failed_sources.end(), i) != out.failed_sources.end())
      failing.push_back(i);
  if (failing.empty()) return out;  // a C++ source failed: no other compiler for it
  auto nvcc = jit::find_nvcc();
  if (!nvcc) {
    out.diagnostics.push_back({jit::Diagnostic::Severity::kNote, "", 0, 0,
                               "nvcc was not found (" + jit::nvcc_search_text() +
                                   "): it is kiln's last resort for a .cu source that Clang's CUDA path refuses"});
    return out;
  }
  const std::string why = first_error_of(out);
  KILN_LOG_AT(kDebug, "compile", what + ": Clang's CUDA path failed (" + why + "); compiling " + std::to_string(failing.size()) +
                                     " CUDA source(s) with nvcc " + nvcc->version + " (" + nvcc->path + ")");
  KILN_ASSIGN_OR_RETURN(Inputs in, inputs_for(spec, target));
  in.clang_identity = in.identity;
  route_through_nvcc(in, failing, *nvcc);
  KILN_ASSIGN_OR_RETURN(BuildOutcome second, build_route(spec, target, std::move(in)));
  if (!second.success) {
    // Clang's diagnostics, and that nvcc refused it too.
    out.diagnostics.push_back({jit::Diagnostic::Severity::kNote, "", 0, 0,
                               "nvcc " + nvcc->version + " (" + nvcc->path + ") refused it too: " + first_error_of(second)});
    return out;
  }
  second.fallback_from = "clang";
  for (size_t k = 0; k < cuda.size(); ++k)
    if (std::find(failing.begin(), failing.end(), cuda[k]) != failing.end())
      remember_failed_route(unit_keys[k], "clang's CUDA path failed: " + why + "\n");
  return second;
}

}  // namespace kiln::builders
