// OpenCL platforms and devices: what the ICD loader offers, read with clGet*Info and without
// creating a context, for `kiln doctor` (list_devices) and for the accelerator's choice of the
// device it drives (choose_device).
#pragma once

#include <string>
#include <vector>

#include "backends/opencl/opencl_api.h"
#include "support/status.h"

namespace kiln::backends::opencl {

// What `kiln doctor` lists: every platform and its devices, without creating a context.
struct DeviceListing {
  std::string platform;  // "Portable Computing Language (OpenCL 3.0 PoCL 3.1...)"
  std::vector<std::string> devices;  // "cpu pthread-skylake-avx512-AMD EPYC, driver 3.1, SVM fine-grained, IL none"
};
Result<std::vector<DeviceListing>> list_devices();

// The device the accelerator drives: $KILN_OPENCL_DEVICE ("platform:device" indexes, or a device
// index on the first platform), else the first GPU, else the first device, each with
// fine-grained SVM buffers (kiln hands out device memory as SVM pointers).
struct DeviceChoice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
};
Result<DeviceChoice> choose_device(const Api& cl);

// A string property through clGetPlatformInfo or clGetDeviceInfo ("" when the driver has none).
std::string platform_string(const Api& cl, cl_platform_id p, cl_platform_info what);
std::string device_string(const Api& cl, cl_device_id d, cl_device_info what);

// A fixed-size device property (T{} when the driver has none).
template <class T>
T device_value(const Api& cl, cl_device_id d, cl_device_info what) {
  T v{};
  if (cl.clGetDeviceInfo(d, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

}  // namespace kiln::backends::opencl
