#include "backends/opencl/opencl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace kiln::backends::opencl {

namespace {

// $KILN_OPENCL_LIBRARY, else the ICD loader's soname.
std::string library_name() {
  const char* env = std::getenv("KILN_OPENCL_LIBRARY");
  return env && *env ? env : "libOpenCL.so.1";
}

}  // namespace

Status loader_present() {
  // RTLD_NOLOAD first: already mapped costs nothing. Otherwise the loader alone is opened (it
  // reads the ICD list only when a platform is asked for) and stays: api() will want it.
  std::string name = library_name();
  if (::dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD) || ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return {};
  const char* why = ::dlerror();
  return unavailable("no OpenCL ICD loader: cannot open " + name + " (" + (why ? why : "not found") +
                     "); install ocl-icd-libopencl1 and a driver such as pocl-opencl-icd, or set KILN_OPENCL_LIBRARY");
}

Result<const Api*> api() {
  static std::once_flag once;
  static Api table;
  static Status status;
  std::call_once(once, [] {
    std::string name = library_name();
    void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      status = loader_present();
      return;
    }
#define KILN_CL(sym)                                                                                         \
  table.sym = reinterpret_cast<decltype(table.sym)>(::dlsym(lib, #sym));                                     \
  if (!table.sym && status.ok())                                                                             \
    status = unavailable(name + " has no " #sym ": kiln's OpenCL backend needs an OpenCL 2.1 loader (SVM, IL)");
#include "backends/opencl/opencl_symbols.def"
#undef KILN_CL
  });
  if (!status.ok()) return status;
  return &table;
}

std::string error_name(cl_int code) {
  static const std::pair<cl_int, const char*> k_names[] = {
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_DEVICE_NOT_AVAILABLE, "CL_DEVICE_NOT_AVAILABLE"},
      {CL_COMPILER_NOT_AVAILABLE, "CL_COMPILER_NOT_AVAILABLE"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
      {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_INVALID_PLATFORM, "CL_INVALID_PLATFORM"},
      {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
      {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
      {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
      {CL_INVALID_BINARY, "CL_INVALID_BINARY"},
      {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
      {CL_INVALID_PROGRAM, "CL_INVALID_PROGRAM"},
      {CL_INVALID_PROGRAM_EXECUTABLE, "CL_INVALID_PROGRAM_EXECUTABLE"},
      {CL_INVALID_KERNEL_NAME, "CL_INVALID_KERNEL_NAME"},
      {CL_INVALID_KERNEL, "CL_INVALID_KERNEL"},
      {CL_INVALID_ARG_INDEX, "CL_INVALID_ARG_INDEX"},
      {CL_INVALID_ARG_VALUE, "CL_INVALID_ARG_VALUE"},
      {CL_INVALID_ARG_SIZE, "CL_INVALID_ARG_SIZE"},
      {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
      {CL_INVALID_WORK_DIMENSION, "CL_INVALID_WORK_DIMENSION"},
      {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
      {CL_INVALID_WORK_ITEM_SIZE, "CL_INVALID_WORK_ITEM_SIZE"},
      {CL_INVALID_EVENT, "CL_INVALID_EVENT"},
      {CL_INVALID_OPERATION, "CL_INVALID_OPERATION"},
      {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
      {CL_INVALID_GLOBAL_WORK_SIZE, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {CL_PROFILING_INFO_NOT_AVAILABLE, "CL_PROFILING_INFO_NOT_AVAILABLE"},
  };
  for (auto& [c, n] : k_names)
    if (c == code) return std::string(n) + " (" + std::to_string(code) + ")";
  return "OpenCL error " + std::to_string(code);
}

}  // namespace kiln::backends::opencl
