#include "backends/opencl/opencl_devices.h"

#include <cstdlib>
#include <cstring>

namespace kiln::backends::opencl {

namespace {

// A string property through clGetPlatformInfo or clGetDeviceInfo (asked for its size first).
template <class Handle, class What>
std::string info_string(cl_int (*get)(Handle, What, size_t, void*, size_t*), Handle h, What what) {
  size_t size = 0;
  if (get(h, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string out(size, '\0');
  get(h, what, size, out.data(), nullptr);
  out.resize(std::strlen(out.c_str()));
  return out;
}

std::vector<cl_platform_id> platforms(const Api& cl) {
  cl_uint n = 0;
  if (cl.clGetPlatformIDs(0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::vector<cl_platform_id> out(n);
  cl.clGetPlatformIDs(n, out.data(), nullptr);
  return out;
}

std::vector<cl_device_id> devices_of(const Api& cl, cl_platform_id p) {
  cl_uint n = 0;
  if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::vector<cl_device_id> out(n);
  cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, out.data(), nullptr);
  return out;
}

bool fine_grained_svm(const Api& cl, cl_device_id d) {
  return (device_value<cl_device_svm_capabilities>(cl, d, CL_DEVICE_SVM_CAPABILITIES) & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
}

std::string type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "gpu";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (t & CL_DEVICE_TYPE_CPU) return "cpu";
  return "other";
}

}  // namespace

std::string platform_string(const Api& cl, cl_platform_id p, cl_platform_info what) { return info_string(cl.clGetPlatformInfo, p, what); }
std::string device_string(const Api& cl, cl_device_id d, cl_device_info what) { return info_string(cl.clGetDeviceInfo, d, what); }

Result<std::vector<DeviceListing>> list_devices() {
  KILN_ASSIGN_OR_RETURN(const Api* cl, api());
  std::vector<DeviceListing> out;
  for (cl_platform_id p : platforms(*cl)) {
    DeviceListing l;
    l.platform = platform_string(*cl, p, CL_PLATFORM_NAME) + " (" + platform_string(*cl, p, CL_PLATFORM_VERSION) + ")";
    for (cl_device_id d : devices_of(*cl, p)) {
      std::string il = device_string(*cl, d, CL_DEVICE_IL_VERSION);
      l.devices.push_back(type_name(device_value<cl_device_type>(*cl, d, CL_DEVICE_TYPE)) + " " +
                          device_string(*cl, d, CL_DEVICE_NAME) + ", driver " + device_string(*cl, d, CL_DRIVER_VERSION) +
                          ", SVM " + (fine_grained_svm(*cl, d) ? "fine-grained" : "none (kiln cannot use it)") + ", IL " +
                          (il.empty() ? "none (OpenCL C source)" : il));
    }
    out.push_back(std::move(l));
  }
  return out;
}

Result<DeviceChoice> choose_device(const Api& cl) {
  std::vector<cl_platform_id> all = platforms(cl);
  if (all.empty()) return unavailable("the OpenCL ICD loader finds no platform (install a driver such as pocl-opencl-icd)");
  DeviceChoice choice;
  if (const char* env = std::getenv("KILN_OPENCL_DEVICE"); env && *env) {
    std::string spec = env;
    size_t colon = spec.find(':');
    int p = colon == std::string::npos ? 0 : std::atoi(spec.substr(0, colon).c_str());
    int d = std::atoi(colon == std::string::npos ? spec.c_str() : spec.substr(colon + 1).c_str());
    if (p < 0 || p >= static_cast<int>(all.size())) return invalid_argument("KILN_OPENCL_DEVICE=" + spec + ": no platform " + std::to_string(p));
    auto devices = devices_of(cl, all[p]);
    if (d < 0 || d >= static_cast<int>(devices.size())) return invalid_argument("KILN_OPENCL_DEVICE=" + spec + ": no device " + std::to_string(d));
    choice.platform = all[p];
    choice.device = devices[d];
  } else {
    for (cl_device_type wanted : {cl_device_type{CL_DEVICE_TYPE_GPU}, cl_device_type{CL_DEVICE_TYPE_ALL}})
      for (cl_platform_id p : all)
        for (cl_device_id d : devices_of(cl, p))
          if (!choice.device && (device_value<cl_device_type>(cl, d, CL_DEVICE_TYPE) & wanted) && fine_grained_svm(cl, d)) {
            choice.platform = p;
            choice.device = d;
          }
    if (!choice.device) return unavailable("no OpenCL device with fine-grained SVM (kiln hands out device memory as SVM pointers)");
  }
  if (!fine_grained_svm(cl, choice.device))
    return unavailable("OpenCL device " + device_string(cl, choice.device, CL_DEVICE_NAME) +
                       " has no fine-grained SVM buffers, which kiln's OpenCL backend needs for device pointers");
  return choice;
}

}  // namespace kiln::backends::opencl
