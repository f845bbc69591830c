// The byte formats of the new device targets: an "opencl-program" artifact (what the OpenCL
// backend decodes from the cache, maybe from another node), the hiprtc helper's request and
// reply, and a CUDA fat binary (zstd-compressed entries included). Any bytes decode to a value
// or a refusal, never a crash; a value re-encodes to bytes that decode to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "jit/hiprtc/hiprtc_wire.h"
#include "support/cuda_fatbin.h"
#include "support/opencl_program_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto p = kiln::decode_opencl_program(bytes); p.ok()) {
    std::string again = kiln::encode_opencl_program(*p);
    auto q = kiln::decode_opencl_program(again);
    if (!q.ok() || q->source != p->source || q->spirv != p->spirv || q->kernels.size() != p->kernels.size()) std::abort();
    for (size_t i = 0; i < p->kernels.size(); ++i)
      if (q->kernels[i].params != p->kernels[i].params || q->kernels[i].value_sizes != p->kernels[i].value_sizes) std::abort();
  }
  if (auto r = kiln::jit::decode_hiprtc_reply(bytes); r.ok()) {
    auto again = kiln::jit::decode_hiprtc_reply(kiln::jit::encode_hiprtc_reply(*r));
    if (!again.ok() || again->code != r->code || again->log != r->log || again->success != r->success) std::abort();
  }
  if (auto q = kiln::jit::decode_hiprtc_request(bytes); q.ok()) {
    auto again = kiln::jit::decode_hiprtc_request(kiln::jit::encode_hiprtc_request(*q));
    if (!again.ok() || again->source != q->source || again->headers != q->headers || again->options != q->options) std::abort();
  }
  if (auto f = kiln::decode_fatbin(bytes); f.ok()) {
    // Re-encoded, as it is and compressed, where the images are what encode_fatbin takes.
    for (auto compression : {kiln::FatbinCompression::kNone, kiln::FatbinCompression::kZstd})
      if (auto again = kiln::encode_fatbin(*f, compression); again.ok()) {
        auto g = kiln::decode_fatbin(*again);
        if (!g.ok() || g->size() != f->size()) std::abort();
        for (size_t i = 0; i < f->size(); ++i)
          if ((*g)[i].sm != (*f)[i].sm || (*g)[i].kind != (*f)[i].kind ||
              (*g)[i].bytes.substr(0, (*f)[i].bytes.size()) != (*f)[i].bytes.substr(0, (*g)[i].bytes.size()))
            std::abort();
      }
  }
  return 0;
}
