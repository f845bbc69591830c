// kiln-hiprtc: compiles one HIP program with hiprtc and exits. kiln's hiprtc toolchain starts
// it per compile and reads its reply; whatever hiprtc does to this process (an abort for an
// architecture it does not know) stays in this process. Reads a request on stdin, writes a
// reply on stdout (jit/hiprtc/hiprtc_wire.h). Not meant to be run by hand.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "jit/hiprtc/hiprtc_wire.h"

namespace {

using Program = void*;
struct Hiprtc {
  int (*create)(Program*, const char*, const char*, int, const char**, const char**);
  int (*add_name)(Program, const char*);
  int (*compile)(Program, int, const char**);
  int (*lowered)(Program, const char*, const char**);
  int (*log_size)(Program, size_t*);
  int (*log)(Program, char*);
  int (*code_size)(Program, size_t*);
  int (*code)(Program, char*);
  int (*destroy)(Program*);
  int (*version)(int*, int*);
  const char* (*error_string)(int);
};

kiln::jit::HiprtcReply run(const kiln::jit::HiprtcRequest& q) {
  kiln::jit::HiprtcReply reply;
  void* lib = ::dlopen(q.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    reply.error = "cannot load " + q.library + " (" + (e ? e : "not found") + ")";
    return reply;
  }
  Hiprtc h{};
  bool missing = false;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (!fn && !missing) {
      reply.error = q.library + " has no " + name + " (no hiprtc in it)";
      missing = true;
    }
  };
  bind(h.create, "hiprtcCreateProgram");
  bind(h.add_name, "hiprtcAddNameExpression");
  bind(h.compile, "hiprtcCompileProgram");
  bind(h.lowered, "hiprtcGetLoweredName");
  bind(h.log_size, "hiprtcGetProgramLogSize");
  bind(h.log, "hiprtcGetProgramLog");
  bind(h.code_size, "hiprtcGetCodeSize");
  bind(h.code, "hiprtcGetCode");
  bind(h.destroy, "hiprtcDestroyProgram");
  bind(h.version, "hiprtcVersion");
  bind(h.error_string, "hiprtcGetErrorString");
  if (missing) return reply;
  int major = 0, minor = 0;
  h.version(&major, &minor);
  reply.version = "hiprtc " + std::to_string(major) + "." + std::to_string(minor);
  std::vector<const char*> names, texts;
  for (auto& [name, text] : q.headers) {
    names.push_back(name.c_str());
    texts.push_back(text.c_str());
  }
  Program program = nullptr;
  int rc = h.create(&program, q.source.c_str(), q.source_name.c_str(), static_cast<int>(names.size()), texts.data(), names.data());
  if (rc != 0) {
    reply.error = std::string("hiprtcCreateProgram failed: ") + h.error_string(rc);
    return reply;
  }
  for (auto& e : q.name_expressions) h.add_name(program, e.c_str());
  std::vector<std::string> storage = q.options;
  storage.push_back("--offload-arch=" + q.arch);
  std::vector<const char*> options;
  for (auto& o : storage) options.push_back(o.c_str());
  rc = h.compile(program, static_cast<int>(options.size()), options.data());
  size_t size = 0;
  if (h.log_size(program, &size) == 0 && size > 1) {
    reply.log.assign(size, '\0');
    h.log(program, reply.log.data());
    reply.log.resize(size - 1);
  }
  if (rc != 0) {
    reply.error = std::string("hiprtcCompileProgram failed: ") + h.error_string(rc);
    h.destroy(&program);
    return reply;
  }
  for (auto& e : q.name_expressions) {
    const char* lowered = nullptr;
    if (h.lowered(program, e.c_str(), &lowered) == 0 && lowered) reply.lowered_names.emplace_back(e, lowered);
  }
  if (h.code_size(program, &size) == 0 && size > 0) {
    reply.code.assign(size, '\0');
    h.code(program, reply.code.data());
  }
  h.destroy(&program);
  reply.success = !reply.code.empty();
  if (!reply.success) reply.error = "hiprtc returned no code object";
  return reply;
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1 || ::isatty(0)) {
    std::fprintf(stderr, "kiln-hiprtc: kiln's hiprtc helper; kiln starts it and writes a request on its stdin\n");
    return 2;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto request = kiln::jit::decode_hiprtc_request(input);
  kiln::jit::HiprtcReply reply;
  if (!request.ok()) reply.error = request.status().message();
  else reply = run(*request);
  std::string out = kiln::jit::encode_hiprtc_reply(reply);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}
