#include "backends/opencl/opencl_module.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/opencl/opencl_accelerator.h"
#include "backends/opencl/opencl_stream.h"
#include "support/hash.h"
#include "support/log.h"

namespace kiln::backends::opencl {

namespace {

// The build log of `program` on `device`, for a failed build's message.
std::string build_log(const Api& cl, cl_program program, cl_device_id device) {
  size_t size = 0;
  if (cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  log.resize(std::strlen(log.c_str()));
  return log;
}

std::optional<std::string> program_binary(const Api& cl, cl_program program) {
  size_t size = 0;
  if (cl.clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) return std::nullopt;
  std::string bytes(size, '\0');
  unsigned char* out = reinterpret_cast<unsigned char*>(bytes.data());
  if (cl.clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof out, &out, nullptr) != CL_SUCCESS) return std::nullopt;
  return bytes;
}

}  // namespace

// ---- kernels

OpenClKernel::~OpenClKernel() { m_acc.cl().clReleaseKernel(m_kernel); }

Status OpenClKernel::launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args, size_t num_args) {
  auto* s = dynamic_cast<OpenClStream*>(&stream);
  if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
  if (num_args != m_sig.param_sizes.size())
    return invalid_argument("kernel " + m_sig.name + " takes " + std::to_string(m_sig.param_sizes.size()) +
                            " arguments, launch passed " + std::to_string(num_args));
  if (config.grid.count() == 0 || config.block.count() == 0) return invalid_argument("kernel " + m_sig.name + ": empty grid or block");
  // Now: clSetKernelArg copies the values, so nothing is allocated. Captured: the values are
  // copied into the graph, as Kernel::launch promises, and set when it runs.
  if (!s->capturing()) return enqueue(*s, args, config);
  std::vector<std::string> values(num_args);
  for (size_t i = 0; i < num_args; ++i) values[i].assign(static_cast<const char*>(args[i]), m_sig.param_sizes[i]);
  return s->submit([this, values = std::move(values), config](OpenClStream& on) {
    std::vector<const void*> pointers;
    for (auto& v : values) pointers.push_back(v.data());
    return enqueue(on, pointers.data(), config);
  });
}

Status OpenClKernel::enqueue(OpenClStream& s, const void* const* args, const runtime::LaunchConfig& config) {
  const Api& cl = m_acc.cl();
  // Arguments live in the kernel object until the enqueue: one launch at a time per kernel.
  std::lock_guard lock(m_mutex);
  for (size_t i = 0; i < m_kinds.size(); ++i) {
    cl_uint index = static_cast<cl_uint>(i);
    if (m_kinds[i] == k_opencl_local) {
      KILN_CL_CHECK(cl.clSetKernelArg(m_kernel, index, std::max<size_t>(config.shared_bytes, 4), nullptr),
                    "kernel " + m_sig.name + ": its local memory (" + std::to_string(config.shared_bytes) + " bytes)");
    } else if (m_kinds[i] == k_opencl_value) {
      KILN_CL_CHECK(cl.clSetKernelArg(m_kernel, index, m_sig.param_sizes[i], args[i]),
                    "kernel " + m_sig.name + ": argument " + std::to_string(i));
    } else {
      void* pointer = nullptr;
      std::memcpy(&pointer, args[i], sizeof pointer);
      KILN_CL_CHECK(cl.clSetKernelArgSVMPointer(m_kernel, index, pointer),
                    "kernel " + m_sig.name + ": argument " + std::to_string(i) + " (memory from this accelerator's allocate?)");
    }
  }
  size_t global[3] = {size_t{config.grid.x} * config.block.x, size_t{config.grid.y} * config.block.y,
                      size_t{config.grid.z} * config.block.z};
  size_t local[3] = {config.block.x, config.block.y, config.block.z};
  cl_event done = nullptr;
  KILN_CL_CHECK(cl.clEnqueueNDRangeKernel(s.queue(), m_kernel, 3, nullptr, global, local, 0, nullptr, &done),
                "launch of " + m_sig.name);
  s.track(done);
  return {};
}

// ---- modules

OpenClModule::~OpenClModule() {
  m_kernels.clear();
  m_acc.cl().clReleaseProgram(m_program);
}

Result<runtime::Kernel*> OpenClModule::kernel(std::string_view name) {
  auto it = m_kernels.find(name);
  if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
  return static_cast<runtime::Kernel*>(it->second.get());
}

Status OpenClModule::add(const runtime::KernelSignature& sig, const OpenClKernelInfo& info) {
  size_t n = sig.param_sizes.size();
  bool trailing_local = info.params.size() == n + 1 && info.params.back() == k_opencl_local;
  if (info.params.size() != n && !trailing_local)
    return invalid_argument(m_label + ": kernel " + sig.name + " has " + std::to_string(info.params.size()) +
                            " parameters; the spec's entry has " + std::to_string(n) +
                            " (a kernel may take one more: a last __local pointer for the launch's shared memory)");
  for (size_t i = 0; i < n; ++i) {
    if (info.params[i] == k_opencl_local)
      return invalid_argument(m_label + ": kernel " + sig.name + " parameter " + std::to_string(i) +
                              " is __local; only the last, extra parameter may be (the launch's shared memory)");
    if (info.value_sizes[i] != sig.param_sizes[i])
      return invalid_argument(m_label + ": kernel " + sig.name + " parameter " + std::to_string(i) + " is " +
                              std::to_string(info.value_sizes[i]) + " bytes; the spec's is " + std::to_string(sig.param_sizes[i]) +
                              " (OpenCL's long is int64_t, int is int32_t)");
  }
  const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
  cl_int rc = CL_SUCCESS;
  cl_kernel k = m_acc.cl().clCreateKernel(m_program, symbol.c_str(), &rc);
  if (rc != CL_SUCCESS) return Status(StatusCode::kNotFound, m_label + ": kernel " + sig.name + ": " + error_name(rc));
  m_kernels[sig.name] = std::make_unique<OpenClKernel>(m_acc, sig, k, info.params);
  return {};
}

// ---- programs

Result<std::shared_ptr<OpenClModule>> OpenClModule::load(const OpenClAccelerator& acc, const runtime::ModuleImage& image,
                                                         ProgramCounters& counters) {
  const Api& cl = acc.cl();
  cl_context context = acc.context();
  cl_device_id device = acc.device();
  const std::string device_name = acc.device_name(0);
  OpenClProgramImage program_image;
  if (image.kind == "spirv") {
    program_image.spirv = std::string(image.bytes);
  } else {
    auto decoded = decode_opencl_program(image.bytes);
    if (!decoded.ok()) return Status(StatusCode::kDataLoss, image.label + ": " + decoded.status().message());
    program_image = std::move(decoded).value();
  }
  // What this device built from these bytes before, in this process or another.
  std::string derived_key = "opencl-binary|" + acc.device_identity() + "|" + xxh3_128(image.bytes).hex();
  cl_int rc = CL_SUCCESS;
  cl_program program = nullptr;
  bool from_cache = false;
  double build_start = log_clock_ms();
  if (image.derived_cache)
    if (auto binary = image.derived_cache->get(derived_key)) {
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(binary->data());
      size_t size = binary->size();
      cl_int binary_status = CL_SUCCESS;
      program = cl.clCreateProgramWithBinary(context, 1, &device, &size, &bytes, &binary_status, &rc);
      if (rc == CL_SUCCESS && binary_status == CL_SUCCESS &&
          cl.clBuildProgram(program, 1, &device, program_image.build_options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
        from_cache = true;
        counters.reloaded_binaries.fetch_add(1);
      } else if (program) {
        cl.clReleaseProgram(program);  // a binary this driver no longer takes: build again
        program = nullptr;
      }
    }
  if (!program) {
    bool from_il = acc.takes_il() && !program_image.spirv.empty();
    (from_il ? counters.built_from_il : counters.built_from_source).fetch_add(1);
    if (from_il) {
      program = cl.clCreateProgramWithIL(context, program_image.spirv.data(), program_image.spirv.size(), &rc);
    } else if (!program_image.source.empty()) {
      const char* text = program_image.source.c_str();
      size_t length = program_image.source.size();
      program = cl.clCreateProgramWithSource(context, 1, &text, &length, &rc);
    } else {
      return unavailable(image.label + ": the artifact holds SPIR-V only, and OpenCL device " + device_name + " takes no IL");
    }
    if (rc != CL_SUCCESS) return Status(StatusCode::kInternal, image.label + ": creating an OpenCL program: " + error_name(rc));
    rc = cl.clBuildProgram(program, 1, &device, program_image.build_options.c_str(), nullptr, nullptr);
    if (rc != CL_SUCCESS) {
      std::string log = build_log(cl, program, device);
      cl.clReleaseProgram(program);
      return Status(StatusCode::kCompileError, image.label + ": OpenCL device " + device_name + " could not build it (" +
                                                   error_name(rc) + "):\n" + log);
    }
  }
  KILN_LOG_AT(kDebug, "load", image.label + ": OpenCL program " + (from_cache ? "reloaded from its device binary" : "built by the device") +
                                  " in " + std::to_string(log_clock_ms() - build_start) + " ms");
  auto module = std::make_shared<OpenClModule>(acc, program, image.label);
  for (auto& sig : image.kernels) {
    const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
    auto info = std::find_if(program_image.kernels.begin(), program_image.kernels.end(), [&](auto& k) { return k.name == symbol; });
    if (info == program_image.kernels.end()) {
      if (image.kind == "spirv") continue;  // bare SPIR-V says nothing of its kernels
      return not_found(image.label + " has no OpenCL kernel named '" + symbol + "' (__kernel void " + symbol + "(...))");
    }
    KILN_RETURN_IF_ERROR(module->add(sig, *info));
  }
  if (!from_cache && image.derived_cache)
    if (auto binary = program_binary(cl, program))
      image.derived_cache->put(derived_key, *binary, "opencl-binary", "opencl:" + device_name, image.label);
  return module;
}

}  // namespace kiln::backends::opencl
