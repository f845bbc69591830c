#include "builders/self_check.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "builders/expr.h"
#include "builders/launch_shape.h"
#include "runtime/host_cpu.h"
#include "support/half.h"
#include "support/units.h"

namespace kiln::builders {
namespace {

// A buffer both runs start from, as host bytes.
struct HostBuffer {
  const CheckBuffer* spec;
  uint64_t count;
  std::vector<unsigned char> bytes;
};

// One initial value: "zero", "ones", "positive" (uniform in [0, 1)), or "random": uniform in
// [-1, 1] for floating-point types, integers in [-100, 100] (signed) or [0, 100] (unsigned).
double initial_value(const std::string& init, ScalarType t, std::mt19937_64& rng) {
  if (init == "zero") return 0;
  if (init == "ones") return 1;
  bool floating = t == ScalarType::kFloat || t == ScalarType::kDouble || t == ScalarType::kFloat16 || t == ScalarType::kBFloat16;
  if (init == "positive") return floating ? std::uniform_real_distribution<double>(0.0, 1.0)(rng)
                                          : std::uniform_int_distribution<int>(0, 100)(rng);
  if (floating) return std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
  bool is_signed = t == ScalarType::kInt8 || t == ScalarType::kInt16 || t == ScalarType::kInt32 || t == ScalarType::kInt64;
  return std::uniform_int_distribution<int>(is_signed ? -100 : 0, 100)(rng);
}

void put_scalar(ScalarType t, double value, unsigned char* out);

void fill_buffer(HostBuffer& b, std::mt19937_64& rng) {
  size_t size = scalar_size(b.spec->type);
  b.bytes.resize(b.count * size);
  for (uint64_t i = 0; i < b.count; ++i) put_scalar(b.spec->type, initial_value(b.spec->init, b.spec->type, rng), b.bytes.data() + i * size);
}

double element(const std::vector<unsigned char>& bytes, ScalarType t, uint64_t i) {
  auto at = [&](auto type_tag) {
    decltype(type_tag) v;
    std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
    return static_cast<double>(v);
  };
  auto half_at = [&](float (*from_bits)(uint16_t)) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + i * 2, 2);
    return static_cast<double>(from_bits(bits));
  };
  switch (t) {
    case ScalarType::kFloat16: return half_at(half_bits_to_float);
    case ScalarType::kBFloat16: return half_at(bfloat16_bits_to_float);
    case ScalarType::kFloat: return at(float{});
    case ScalarType::kDouble: return at(double{});
    case ScalarType::kInt8: return at(int8_t{});
    case ScalarType::kUInt8: return at(uint8_t{});
    case ScalarType::kInt16: return at(int16_t{});
    case ScalarType::kUInt16: return at(uint16_t{});
    case ScalarType::kInt32: return at(int32_t{});
    case ScalarType::kUInt32: return at(uint32_t{});
    case ScalarType::kInt64: return at(int64_t{});
    case ScalarType::kUInt64: return at(uint64_t{});
    default: return 0;
  }
}

// `value` converted to `t`, its bytes at `out` (scalar_size(t) of them).
void put_scalar(ScalarType t, double value, unsigned char* out) {
  auto put = [&](auto v) { std::memcpy(out, &v, sizeof v); };
  switch (t) {
    case ScalarType::kBool: put(static_cast<bool>(value)); break;
    case ScalarType::kFloat16: put(float_to_half_bits(static_cast<float>(value))); break;
    case ScalarType::kBFloat16: put(float_to_bfloat16_bits(static_cast<float>(value))); break;
    case ScalarType::kFloat: put(static_cast<float>(value)); break;
    case ScalarType::kDouble: put(value); break;
    case ScalarType::kInt8: put(static_cast<int8_t>(value)); break;
    case ScalarType::kUInt8: put(static_cast<uint8_t>(value)); break;
    case ScalarType::kInt16: put(static_cast<int16_t>(value)); break;
    case ScalarType::kUInt16: put(static_cast<uint16_t>(value)); break;
    case ScalarType::kInt32: put(static_cast<int32_t>(value)); break;
    case ScalarType::kUInt32: put(static_cast<uint32_t>(value)); break;
    case ScalarType::kInt64: put(static_cast<int64_t>(value)); break;
    case ScalarType::kUInt64: put(static_cast<uint64_t>(value)); break;
    default: break;
  }
}

// A scalar argument's bytes, converted to the parameter's type.
std::vector<unsigned char> scalar_bytes(ScalarType t, double value) {
  std::vector<unsigned char> out(scalar_size(t));
  put_scalar(t, value, out.data());
  return out;
}

// A check's problem at the sizes asked: the names its expressions see, the launch, the
// buffers (host copies, filled as the check fills them).
struct Problem {
  std::map<std::string, int64_t> names;
  runtime::LaunchConfig config;
  std::vector<HostBuffer> buffers;
  uint64_t bytes = 0;  // all buffers together
  std::string sizes;   // "x 4.0 MiB, y 4.0 MiB", for messages
};

Result<Problem> make_problem(const LoadedOp& op, const CheckOptions& options, bool fill) {
  const OpSpec& spec = op.spec();
  if (!spec.check) return invalid_argument("op " + spec.name + " has no [check] section");
  const CheckSpec& check = *spec.check;
  Problem p;
  for (auto& [k, v] : options.dims)
    if (!check.dims.count(k)) return invalid_argument("op " + spec.name + " has no dim named '" + k + "'");
  // The launch the spec gives this backend ([cuda] block and grid, sized to the device).
  KILN_ASSIGN_OR_RETURN(LaunchShape shape, spec_launch(spec, op.accelerator().name(), op.accelerator().multiprocessor_count(), options.dims));
  p.names = std::move(shape.names);
  p.config = shape.config;
  for (auto& b : check.buffers) {
    KILN_ASSIGN_OR_RETURN(int64_t count, eval_expr(b.count, p.names));
    if (count < 1) return invalid_argument("op " + spec.name + ": buffer " + b.name + " has " + std::to_string(count) + " elements");
    uint64_t size = scalar_size(b.type);
    if (static_cast<uint64_t>(count) > (uint64_t{1} << 60) / size)
      return invalid_argument("op " + spec.name + ": buffer " + b.name + " would hold " + std::to_string(count) +
                              " elements; give smaller sizes with --dim NAME=VALUE");
    p.bytes += static_cast<uint64_t>(count) * size;
    p.sizes += (p.sizes.empty() ? "" : ", ") + b.name + " " + human_size(static_cast<uint64_t>(count) * size);
    p.buffers.push_back({&b, static_cast<uint64_t>(count), {}});
  }
  // Refused at once rather than found out by the allocator (or the OOM killer) a minute in. A
  // check holds four copies of every buffer on the host: the inputs, the kernel's result, and
  // the reference's working copies and result; a device that is not the host, one more.
  uint64_t host_needed = (fill ? 4 : 1) * p.bytes, host_available = runtime::host_available_memory();
  if (host_available && host_needed > host_available)
    return invalid_argument("op " + spec.name + ": the check's buffers take " + human_size(p.bytes) + " (" + p.sizes +
                            "), and the check keeps 4 copies on the host (inputs, the kernel's result, the reference's "
                            "copies and result): " + human_size(host_needed) + ", but this machine has " +
                            human_size(host_available) + " available; give smaller sizes with --dim NAME=VALUE");
  if (op.accelerator().name() != "cpu") {
    uint64_t device_available = op.accelerator().memory_stats().available;
    if (device_available && p.bytes > device_available)
      return invalid_argument("op " + spec.name + ": the check's buffers take " + human_size(p.bytes) + " (" + p.sizes +
                              ") on " + op.accelerator().device_name(0) + ", which has " + human_size(device_available) +
                              " available; give smaller sizes with --dim NAME=VALUE");
  }
  if (fill) {
    std::mt19937_64 rng(options.seed);
    for (auto& hb : p.buffers) fill_buffer(hb, rng);
  }
  return p;
}

}  // namespace

// Device copies of a problem's buffers and the argument values of a launch of `entry`.
struct DeviceLaunch {
  runtime::Accelerator& acc;
  std::vector<void*> ptrs;
  std::vector<std::vector<unsigned char>> values;
  std::vector<const void*> args;

  explicit DeviceLaunch(runtime::Accelerator& a) : acc(a) {}
  ~DeviceLaunch() {
    for (void* p : ptrs) acc.deallocate(p);
  }
  DeviceLaunch(const DeviceLaunch&) = delete;
  DeviceLaunch& operator=(const DeviceLaunch&) = delete;

  // Allocates the buffers (copying in their host bytes when there are any) and packs the args.
  Status prepare(const CheckSpec& check, const EntryPoint& entry, const std::vector<HostBuffer>& buffers,
                 const std::map<std::string, int64_t>& names) {
    for (auto& b : buffers) {
      size_t size = b.count * scalar_size(b.spec->type);
      KILN_ASSIGN_OR_RETURN(void* p, acc.allocate(size));
      ptrs.push_back(p);
      if (!b.bytes.empty()) KILN_RETURN_IF_ERROR(acc.copy(p, b.bytes.data(), size));
      else KILN_RETURN_IF_ERROR(acc.memset(p, 0, size));
    }
    values.assign(check.args.size(), {});
    args.assign(check.args.size(), nullptr);
    for (size_t i = 0; i < check.args.size(); ++i) {
      const std::string& a = check.args[i];
      const ParamSpec& p = entry.params[i];
      if (p.is_pointer) {
        for (size_t j = 0; j < buffers.size(); ++j)
          if (buffers[j].spec->name == a) {
            values[i].resize(sizeof(void*));
            std::memcpy(values[i].data(), &ptrs[j], sizeof(void*));
          }
      } else {
        double v;
        char* end = nullptr;
        double literal = std::strtod(a.c_str(), &end);
        if (end && *end == '\0' && a.find_first_of(".eE") != std::string::npos) {
          v = literal;
        } else {
          KILN_ASSIGN_OR_RETURN(int64_t iv, eval_expr(a, names));
          v = static_cast<double>(iv);
        }
        values[i] = scalar_bytes(p.scalar, v);
      }
      args[i] = values[i].data();
    }
    return {};
  }

  // The buffers' bytes back on the host.
  Result<std::vector<std::vector<unsigned char>>> read(const std::vector<HostBuffer>& buffers) {
    std::vector<std::vector<unsigned char>> out(buffers.size());
    for (size_t j = 0; j < buffers.size(); ++j) {
      out[j].resize(buffers[j].count * scalar_size(buffers[j].spec->type));
      KILN_RETURN_IF_ERROR(acc.copy(out[j].data(), ptrs[j], out[j].size()));
    }
    return out;
  }
};

namespace {

// One run (kernel or reference) from the problem's buffers; returns the final buffers.
Result<std::vector<std::vector<unsigned char>>> run_once(const LoadedOp& op, runtime::Kernel& kernel, const EntryPoint& entry,
                                                         const Problem& problem, const runtime::LaunchConfig& config,
                                                         double* elapsed_ms) {
  DeviceLaunch launch(op.accelerator());
  KILN_RETURN_IF_ERROR(launch.prepare(*op.spec().check, entry, problem.buffers, problem.names));
  auto start = std::chrono::steady_clock::now();
  runtime::Stream& stream = op.accelerator().default_stream();
  KILN_RETURN_IF_ERROR(kernel.launch(stream, config, launch.args.data(), launch.args.size()));
  KILN_RETURN_IF_ERROR(stream.synchronize());
  if (elapsed_ms) *elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return launch.read(problem.buffers);
}

}  // namespace

Result<CheckReport> run_self_check(Ops& ops, const LoadedOp& op, const CheckOptions& options) {
  KILN_ASSIGN_OR_RETURN(Problem problem, make_problem(op, options, /*fill=*/true));
  const OpSpec& spec = op.spec();
  const CheckSpec& check = *spec.check;
  const EntryPoint& entry = *spec.find_entry(check.entry);
  KILN_ASSIGN_OR_RETURN(runtime::Kernel * kernel, op.kernel(check.entry));
  std::shared_ptr<LoadedOp> host_op;
  const LoadedOp* reference_op = &op;
  if (op.accelerator().name() != "cpu") {
    KILN_ASSIGN_OR_RETURN(host_op, ops.get(spec.name, "cpu"));
    reference_op = host_op.get();
  }
  KILN_ASSIGN_OR_RETURN(runtime::Kernel * reference, reference_op->kernel(check.reference));

  CheckReport report;
  report.grid = problem.config.grid.x;
  KILN_ASSIGN_OR_RETURN(auto got, run_once(op, *kernel, entry, problem, problem.config, &report.kernel_ms));
  KILN_ASSIGN_OR_RETURN(auto want, run_once(*reference_op, *reference, entry, problem, runtime::LaunchConfig{}, nullptr));

  const std::vector<HostBuffer>& buffers = problem.buffers;
  for (size_t j = 0; j < buffers.size(); ++j) {
    if (!buffers[j].spec->output) continue;
    for (uint64_t i = 0; i < buffers[j].count; ++i) {
      double g = element(got[j], buffers[j].spec->type, i), w = element(want[j], buffers[j].spec->type, i);
      double err = std::fabs(g - w);
      if (!(err <= check.atol + check.rtol * std::fabs(w))) {  // also catches NaN
        report.message = buffers[j].spec->name + "[" + std::to_string(i) + "] = " + std::to_string(g) + ", reference " +
                         std::to_string(w) + " (tolerance atol " + std::to_string(check.atol) + " + rtol " +
                         std::to_string(check.rtol) + ")";
        report.max_abs_error = err;
        return report;
      }
      report.max_abs_error = std::max(report.max_abs_error, err);
      ++report.elements_compared;
    }
  }
  report.passed = true;
  report.message = std::to_string(report.elements_compared) + " elements within tolerance";
  return report;
}

CheckLaunch::CheckLaunch() = default;
CheckLaunch::~CheckLaunch() = default;

Result<std::unique_ptr<CheckLaunch>> CheckLaunch::prepare(const LoadedOp& op, const CheckOptions& options) {
  std::unique_ptr<CheckLaunch> out(new CheckLaunch);
  // Inputs filled on the host first: zeros would run faster than real data does.
  KILN_ASSIGN_OR_RETURN(Problem problem, make_problem(op, options, /*fill=*/true));
  const CheckSpec& check = *op.spec().check;
  KILN_ASSIGN_OR_RETURN(out->m_kernel, op.kernel(check.entry));
  out->m_device = std::make_unique<DeviceLaunch>(op.accelerator());
  KILN_RETURN_IF_ERROR(out->m_device->prepare(check, *op.spec().find_entry(check.entry), problem.buffers, problem.names));
  out->m_config = problem.config;
  out->m_bytes = problem.bytes;
  return out;
}

Status CheckLaunch::launch(runtime::Stream& stream) {
  return m_kernel->launch(stream, m_config, m_device->args.data(), m_device->args.size());
}

}  // namespace kiln::builders
