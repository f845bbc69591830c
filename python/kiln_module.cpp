// kiln._kiln: the Python face of <kiln/kiln.h>. Nothing here links libtorch: tensors come in
// through what every array library offers (torch's data_ptr()/dtype/is_contiguous(), NumPy's
// __array_interface__), so one build serves torch 1.13 and 2.x, and NumPy arrays on the CPU.
//
// Launch arguments are converted by the parameter they meet (a Python float into a `float`
// parameter, a float32 tensor into `const float*`) and then checked by the C++ API as every
// launch is: a mismatch raises kiln.KilnError naming the op and the parameter.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/kiln.h"

namespace py = pybind11;

namespace {

py::object g_error_type;  // kiln.KilnError, set by the package's __init__ (a Python class)

// kiln::Error as kiln.KilnError(message) with .code and .diagnostics (a list of dicts).
void raise_kiln_error(const kiln::Error& e) {
  py::list diagnostics;
  for (auto& d : e.diagnostics()) {
    py::dict item;
    item["severity"] = d.severity;
    item["file"] = d.file;
    item["line"] = d.line;
    item["column"] = d.column;
    item["message"] = d.message;
    diagnostics.append(item);
  }
  py::object error = g_error_type ? g_error_type : py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  py::object instance = error(e.what());
  instance.attr("code") = e.code();
  instance.attr("diagnostics") = diagnostics;
  PyErr_SetObject(error.ptr(), instance.ptr());
}

py::dict file_group_dict(const kiln::FileGroup& g) {
  py::dict out;
  out["key"] = g.key;
  out["folder"] = g.folder;
  out["files"] = g.files;
  out["cache_source"] = g.cache_source;
  return out;
}

using Kind = kiln::Arg::Kind;

// A parameter's spelling in a spec ("const float*", "int64_t") as what a launch needs.
struct ParamInfo {
  std::string type, name;
  Kind scalar = Kind::kVoid;  // what it holds or points to
  bool pointer = false, is_const = false;
};

Kind kind_from_name(std::string name) {
  static const std::pair<const char*, Kind> k_names[] = {
      {"bool", Kind::kBool},         {"int8_t", Kind::kInt8},       {"uint8_t", Kind::kUInt8},     {"int16_t", Kind::kInt16},
      {"uint16_t", Kind::kUInt16},   {"int32_t", Kind::kInt32},     {"int", Kind::kInt32},         {"uint32_t", Kind::kUInt32},
      {"unsigned", Kind::kUInt32},   {"int64_t", Kind::kInt64},     {"uint64_t", Kind::kUInt64},   {"half", Kind::kFloat16},
      {"_Float16", Kind::kFloat16},  {"bfloat16", Kind::kBFloat16}, {"__bf16", Kind::kBFloat16},   {"float", Kind::kFloat},
      {"double", Kind::kDouble},     {"void", Kind::kVoid},         {"size_t", Kind::kUInt64},     {"char", Kind::kInt8}};
  for (auto& [n, k] : k_names)
    if (name == n) return k;
  return Kind::kVoid;
}

ParamInfo parse_param(const kiln::Param& p) {
  ParamInfo info{p.type, p.name};
  std::string t = p.type;
  if (t.rfind("const ", 0) == 0) {
    info.is_const = true;
    t = t.substr(6);
  }
  while (!t.empty() && (t.back() == '*' || t.back() == ' ')) {
    if (t.back() == '*') info.pointer = true;
    t.pop_back();
  }
  info.scalar = kind_from_name(t);
  return info;
}

// Element kinds of array libraries: torch dtypes by their str(), NumPy typestrs by kind+size.
Kind kind_from_torch_dtype(const std::string& s) {
  static const std::pair<const char*, Kind> k_names[] = {
      {"torch.float32", Kind::kFloat}, {"torch.float64", Kind::kDouble}, {"torch.float16", Kind::kFloat16},
      {"torch.bfloat16", Kind::kBFloat16}, {"torch.int8", Kind::kInt8}, {"torch.uint8", Kind::kUInt8},
      {"torch.int16", Kind::kInt16}, {"torch.int32", Kind::kInt32}, {"torch.int64", Kind::kInt64},
      {"torch.bool", Kind::kBool}, {"torch.uint16", Kind::kUInt16}, {"torch.uint32", Kind::kUInt32},
      {"torch.uint64", Kind::kUInt64}};
  for (auto& [n, k] : k_names)
    if (s == n) return k;
  return Kind::kVoid;
}

Kind kind_from_typestr(const std::string& s) {  // "<f4", "|u1", "|b1"
  if (s.size() < 3) return Kind::kVoid;
  char c = s[1];
  int size = std::atoi(s.c_str() + 2);
  if (c == 'f') return size == 4 ? Kind::kFloat : size == 8 ? Kind::kDouble : size == 2 ? Kind::kFloat16 : Kind::kVoid;
  if (c == 'b' && size == 1) return Kind::kBool;
  if (c == 'i') return size == 1 ? Kind::kInt8 : size == 2 ? Kind::kInt16 : size == 4 ? Kind::kInt32 : size == 8 ? Kind::kInt64 : Kind::kVoid;
  if (c == 'u') return size == 1 ? Kind::kUInt8 : size == 2 ? Kind::kUInt16 : size == 4 ? Kind::kUInt32 : size == 8 ? Kind::kUInt64 : Kind::kVoid;
  return Kind::kVoid;
}

const char* kind_spelling(Kind k) {
  switch (k) {
    case Kind::kBool: return "bool";
    case Kind::kInt8: return "int8";
    case Kind::kUInt8: return "uint8";
    case Kind::kInt16: return "int16";
    case Kind::kUInt16: return "uint16";
    case Kind::kInt32: return "int32";
    case Kind::kUInt32: return "uint32";
    case Kind::kInt64: return "int64";
    case Kind::kUInt64: return "uint64";
    case Kind::kFloat16: return "float16";
    case Kind::kBFloat16: return "bfloat16";
    case Kind::kFloat: return "float32";
    case Kind::kDouble: return "float64";
    default: return "an unknown type";
  }
}

// A typed pointer argument for the API's check: the pointee kind and constness it will see.
kiln::Arg pointer_arg(uintptr_t address, Kind kind, bool read_only) {
  void* p = reinterpret_cast<void*>(address);
#define KILN_POINTER_CASE(K, T)                                                       \
  case K:                                                                             \
    return read_only ? kiln::Arg(static_cast<const T*>(p)) : kiln::Arg(static_cast<T*>(p));
  switch (kind) {
    KILN_POINTER_CASE(Kind::kBool, bool)
    KILN_POINTER_CASE(Kind::kInt8, int8_t)
    KILN_POINTER_CASE(Kind::kUInt8, uint8_t)
    KILN_POINTER_CASE(Kind::kInt16, int16_t)
    KILN_POINTER_CASE(Kind::kUInt16, uint16_t)
    KILN_POINTER_CASE(Kind::kInt32, int32_t)
    KILN_POINTER_CASE(Kind::kUInt32, uint32_t)
    KILN_POINTER_CASE(Kind::kInt64, int64_t)
    KILN_POINTER_CASE(Kind::kUInt64, uint64_t)
    KILN_POINTER_CASE(Kind::kFloat16, kiln::float16)
    KILN_POINTER_CASE(Kind::kBFloat16, kiln::bfloat16)
    KILN_POINTER_CASE(Kind::kFloat, float)
    KILN_POINTER_CASE(Kind::kDouble, double)
    default: return read_only ? kiln::Arg(static_cast<const void*>(p)) : kiln::Arg(p);
  }
#undef KILN_POINTER_CASE
}

[[noreturn]] void bad_argument(const std::string& where, const std::string& what) {
  throw kiln::Error("invalid_argument", where + " " + what);
}

// A Python number for a by-value parameter: the parameter's own type, range-checked.
kiln::Arg scalar_arg(const py::handle& value, const ParamInfo& p, const std::string& where) {
  if (PyBool_Check(value.ptr())) {
    if (p.scalar == Kind::kBool) return kiln::Arg(value.ptr() == Py_True);
    bad_argument(where, "takes " + p.type + "; the argument is a bool");
  }
  if (PyLong_Check(value.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    auto in = [&](long long lo, long long hi) {
      if (overflow || v < lo || v > hi) bad_argument(where, "takes " + p.type + "; " + py::str(value).cast<std::string>() + " does not fit");
    };
    switch (p.scalar) {
      case Kind::kInt8: in(INT8_MIN, INT8_MAX); return kiln::Arg(static_cast<int8_t>(v));
      case Kind::kUInt8: in(0, UINT8_MAX); return kiln::Arg(static_cast<uint8_t>(v));
      case Kind::kInt16: in(INT16_MIN, INT16_MAX); return kiln::Arg(static_cast<int16_t>(v));
      case Kind::kUInt16: in(0, UINT16_MAX); return kiln::Arg(static_cast<uint16_t>(v));
      case Kind::kInt32: in(INT32_MIN, INT32_MAX); return kiln::Arg(static_cast<int32_t>(v));
      case Kind::kUInt32: in(0, UINT32_MAX); return kiln::Arg(static_cast<uint32_t>(v));
      case Kind::kInt64: in(INT64_MIN, INT64_MAX); return kiln::Arg(static_cast<int64_t>(v));
      case Kind::kUInt64: {
        unsigned long long u = PyLong_AsUnsignedLongLong(value.ptr());
        if (PyErr_Occurred()) {
          PyErr_Clear();
          bad_argument(where, "takes " + p.type + "; " + py::str(value).cast<std::string>() + " does not fit");
        }
        return kiln::Arg(static_cast<uint64_t>(u));
      }
      case Kind::kFloat: return kiln::Arg(static_cast<float>(v));
      case Kind::kDouble: return kiln::Arg(static_cast<double>(v));
      default: break;
    }
    bad_argument(where, "takes " + p.type + "; the argument is an int");
  }
  if (PyFloat_Check(value.ptr())) {
    double v = PyFloat_AsDouble(value.ptr());
    if (p.scalar == Kind::kFloat) return kiln::Arg(static_cast<float>(v));
    if (p.scalar == Kind::kDouble) return kiln::Arg(v);
    bad_argument(where, "takes " + p.type + "; the argument is a float (convert it explicitly)");
  }
  bad_argument(where, "takes " + p.type + "; the argument is a " + std::string(py::str(value.get_type().attr("__name__"))));
}

// Interned attribute names: looked up on every tensor argument of every launch.
struct Names {
  py::str data_ptr{"data_ptr"}, dtype{"dtype"}, is_contiguous{"is_contiguous"}, is_cuda{"is_cuda"},
      array_interface{"__array_interface__"}, cuda_array_interface{"__cuda_array_interface__"};
};
Names& names() {
  static Names* n = new Names;  // lives until exit, like the interpreter's strings
  return *n;
}

class PyOp {
 public:
  PyOp(kiln::Context& ctx, kiln::Op op) : m_ctx(&ctx), m_op(std::move(op)), m_accelerator(ctx.accelerator()) {
    for (auto& e : m_op.entries()) {
      std::vector<ParamInfo> params;
      for (auto& p : m_op.params(e)) params.push_back(parse_param(p));
      m_params.emplace_back(e, std::move(params));
    }
  }

  kiln::Op& op() { return m_op; }

  const std::vector<ParamInfo>& params_of(const std::string& entry) const {
    if (entry.empty()) return m_params.front().second;
    for (auto& [name, params] : m_params)
      if (name == entry) return params;
    std::string list;
    for (auto& [name, params] : m_params) list += (list.empty() ? "" : ", ") + name;
    throw kiln::Error("not_found", "op " + m_op.name() + " has no entry " + entry + " (it has " + list + ")");
  }

  void launch(const std::vector<uint32_t>& grid, const std::vector<uint32_t>& block, const py::args& args, uint32_t shared_bytes,
              const std::string& entry, bool sync, kiln::Stream* stream) {
    const std::vector<ParamInfo>& params = params_of(entry);
    const std::string entry_name = entry.empty() ? m_params.front().first : entry;
    auto where = [&](size_t i) {
      return "op " + m_op.name() + ", entry " + entry_name + ", parameter " + std::to_string(i + 1) + " '" + params[i].type + " " +
             params[i].name + "'";
    };
    if (args.size() != params.size()) {
      std::string list;
      for (auto& p : params) list += (list.empty() ? "" : ", ") + p.type + " " + p.name;
      throw kiln::Error("invalid_argument", "op " + m_op.name() + ", entry " + entry_name + " takes " + std::to_string(params.size()) +
                                                " arguments (" + list + "), not " + std::to_string(args.size()));
    }
    std::vector<kiln::Arg> converted;
    converted.reserve(args.size());
    Names& n = names();
    bool any_cuda_tensor = false;
    for (size_t i = 0; i < args.size(); ++i) {
      py::handle a = args[i];
      const ParamInfo& p = params[i];
      if (!p.pointer) {
        converted.push_back(scalar_arg(a, p, where(i)));
        continue;
      }
      if (PyLong_Check(a.ptr())) {  // a raw address: the caller vouches for it
        converted.push_back(kiln::Arg(reinterpret_cast<void*>(a.cast<uintptr_t>())));
        continue;
      }
      if (py::hasattr(a, n.data_ptr)) {  // a torch tensor
        Kind kind = kind_from_torch_dtype(py::str(a.attr(n.dtype)));
        bool cuda = a.attr(n.is_cuda).cast<bool>();
        if (cuda != (m_accelerator == "cuda"))
          bad_argument(where(i), std::string("gets a ") + (cuda ? "CUDA" : "CPU") + " tensor; op " + m_op.name() + " runs on " +
                                     m_accelerator + " here (move the tensor, or ask for the op on a Context of that accelerator)");
        if (!a.attr(n.is_contiguous)().cast<bool>())
          bad_argument(where(i), "needs a contiguous tensor; the argument is not (call .contiguous() first)");
        if (p.scalar != Kind::kVoid && kind != p.scalar)
          bad_argument(where(i), std::string("points to ") + kind_spelling(p.scalar) + "; the tensor is " + kind_spelling(kind));
        converted.push_back(pointer_arg(a.attr(n.data_ptr)().cast<uintptr_t>(), kind, false));
        any_cuda_tensor = any_cuda_tensor || cuda;
        continue;
      }
      if (py::hasattr(a, n.array_interface)) {  // NumPy and its kin
        py::dict iface = a.attr(n.array_interface);
        if (m_accelerator != "cpu")
          bad_argument(where(i), "gets a host array; op " + m_op.name() + " runs on " + m_accelerator);
        if (!iface["strides"].is_none()) bad_argument(where(i), "needs a contiguous array; the argument is not (use numpy.ascontiguousarray)");
        py::tuple data = iface["data"];
        Kind kind = kind_from_typestr(iface["typestr"].cast<std::string>());
        bool read_only = data[1].cast<bool>();
        if (p.scalar != Kind::kVoid && kind != p.scalar)
          bad_argument(where(i), std::string("points to ") + kind_spelling(p.scalar) + "; the array is " + kind_spelling(kind));
        if (read_only && !p.is_const) bad_argument(where(i), "is written by the kernel; the array is read-only");
        converted.push_back(pointer_arg(data[0].cast<uintptr_t>(), kind, read_only));
        continue;
      }
      bad_argument(where(i), "is a pointer; the argument is a " + std::string(py::str(a.get_type().attr("__name__"))) +
                                 " (pass a tensor, an array or an address)");
    }
    auto dim = [](const std::vector<uint32_t>& v) {
      return kiln::Dim3(v.size() > 0 ? v[0] : 1, v.size() > 1 ? v[1] : 1, v.size() > 2 ? v[2] : 1);
    };
    kiln::Launch config(dim(grid), dim(block), shared_bytes);
    config.wait = sync;  // the op waits on its stream (on the CPU: runs on this thread's OpenMP team)
    // CUDA tensors: on torch's current stream, so the launch is ordered with torch's own work.
    if (stream) config.stream = stream;
    else if (any_cuda_tensor) config.stream = torch_current_stream();
    py::gil_scoped_release release;
    m_op.launch_args(entry, config, converted.data(), converted.size());  // waits on its stream
    if (sync && !config.stream) m_ctx->synchronize();  // and, as before, the device's other streams
  }

 private:
  // torch.cuda.current_stream() adopted as a kiln stream, one wrapper per native stream.
  kiln::Stream* torch_current_stream() {
    static py::object current_stream = py::module_::import("torch.cuda").attr("current_stream");
    uintptr_t handle = current_stream().attr("cuda_stream").cast<uintptr_t>();
    auto& wrapped = m_streams[handle];
    if (!wrapped) wrapped = m_ctx->wrap_stream(reinterpret_cast<void*>(handle));
    return wrapped.get();
  }

  std::unordered_map<uintptr_t, std::shared_ptr<kiln::Stream>> m_streams;
  kiln::Context* m_ctx;  // outlives the op: op() keeps the Context alive (py::keep_alive)
  kiln::Op m_op;
  std::string m_accelerator;
  std::vector<std::pair<std::string, std::vector<ParamInfo>>> m_params;
};

std::vector<uint32_t> dims_of(const py::handle& h) {
  if (PyLong_Check(h.ptr())) return {h.cast<uint32_t>()};
  return h.cast<std::vector<uint32_t>>();
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's C++ API for Python (use the kiln package, not this module)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::Error& e) {
      raise_kiln_error(e);
    }
  });
  m.def("_set_error_type", [](py::object type) { g_error_type = std::move(type); });

  // The accelerator interface, as DeepSpeed's accelerator and torch.cuda expose it.
  py::class_<kiln::Event>(m, "Event")
      .def("query", &kiln::Event::query)
      .def("synchronize", &kiln::Event::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("elapsed_time", [](kiln::Event& end, kiln::Event& start) { return end.elapsed_ms_since(start); },
           py::arg("start"), "milliseconds from `start` to this event (torch.cuda.Event.elapsed_time's order is start.elapsed_time(end))");
  py::class_<kiln::Graph>(m, "Graph").def("replay", &kiln::Graph::launch, py::arg("stream"), py::call_guard<py::gil_scoped_release>());
  py::class_<kiln::Stream>(m, "Stream")
      .def("synchronize", &kiln::Stream::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("query", &kiln::Stream::query)
      .def("record_event", &kiln::Stream::record, py::arg("event"))
      .def("wait_event", &kiln::Stream::wait, py::arg("event"))
      .def("begin_capture", &kiln::Stream::begin_capture)
      .def("end_capture", &kiln::Stream::end_capture);
  py::class_<kiln::MemoryStats>(m, "MemoryStats")
      .def_readonly("allocated", &kiln::MemoryStats::allocated)
      .def_readonly("max_allocated", &kiln::MemoryStats::max_allocated)
      .def_readonly("reserved", &kiln::MemoryStats::reserved)
      .def_readonly("max_reserved", &kiln::MemoryStats::max_reserved)
      .def_readonly("total", &kiln::MemoryStats::total)
      .def_readonly("available", &kiln::MemoryStats::available);

  py::class_<PyOp>(m, "Op")
      .def_property_readonly("name", [](PyOp& o) { return o.op().name(); })
      .def_property_readonly("target", [](PyOp& o) { return o.op().target(); })
      .def_property_readonly("entries", [](PyOp& o) { return o.op().entries(); })
      .def("params", [](PyOp& o, const std::string& entry) {
            std::vector<std::pair<std::string, std::string>> out;
            for (auto& p : o.params_of(entry)) out.emplace_back(p.type, p.name);
            return out;
          }, py::arg("entry") = "")
      .def("build", [](PyOp& o) {
            py::gil_scoped_release release;
            o.op().build();
          })
      .def("launch_shape", [](PyOp& o, const std::map<std::string, int64_t>& sizes, uint32_t block) {
            kiln::Launch l = o.op().launch_for(sizes, block);
            return py::make_tuple(l.grid.x, l.block.x, l.shared_bytes);
          }, py::arg("sizes"), py::arg("block") = 0)
      .def_property_readonly("loaded", [](PyOp& o) { return o.op().loaded(); })
      .def_property_readonly("cache_source", [](PyOp& o) { return o.op().cache_source(); })
      .def("launch", [](PyOp& o, py::handle grid, py::handle block, py::args args, uint32_t shared_bytes, const std::string& entry,
                        bool sync, py::object stream) {
             o.launch(dims_of(grid), dims_of(block), args, shared_bytes, entry, sync, stream.is_none() ? nullptr : stream.cast<kiln::Stream*>());
           },
           py::arg("grid"), py::arg("block"), py::kw_only(), py::arg("shared_bytes") = 0, py::arg("entry") = "",
           py::arg("sync") = true, py::arg("stream") = py::none());



  py::class_<kiln::Claim>(m, "Claim")
      .def_property_readonly("held", &kiln::Claim::held)
      .def("release", &kiln::Claim::release, py::call_guard<py::gil_scoped_release>());

  py::class_<kiln::Context>(m, "Context")
      .def(py::init([](const std::string& accelerator, const std::string& cache_dir, const std::vector<std::string>& spec_dirs) {
             kiln::Options o;
             o.accelerator = accelerator;
             o.cache_dir = cache_dir;
             o.spec_dirs = spec_dirs;
             return std::make_unique<kiln::Context>(o);
           }),
           py::arg("accelerator") = "", py::arg("cache_dir") = "", py::arg("spec_dirs") = std::vector<std::string>{})
      .def_property_readonly("accelerator", &kiln::Context::accelerator)
      .def_property_readonly("native_target", &kiln::Context::native_target)
      .def_property_readonly("cache_dir", &kiln::Context::cache_dir)
      .def("op", [](kiln::Context& c, const std::string& name, const std::string& target) {
            return PyOp(c, c.op(name, target));
          }, py::arg("name"), py::arg("target") = "", py::keep_alive<0, 1>())
      .def("op_from_spec", [](kiln::Context& c, const std::string& toml, const std::string& base_dir, const std::string& target) {
            return PyOp(c, c.op_from_spec(toml, base_dir, target));
          }, py::arg("toml"), py::arg("base_dir"), py::arg("target") = "", py::keep_alive<0, 1>())
      .def("synchronize", [](kiln::Context& c) {
            py::gil_scoped_release release;
            c.synchronize();
          })
      .def("create_stream", &kiln::Context::create_stream, py::keep_alive<0, 1>())
      .def("wrap_stream", [](kiln::Context& c, uintptr_t handle) { return c.wrap_stream(reinterpret_cast<void*>(handle)); },
           py::arg("native"), py::keep_alive<0, 1>())
      .def("create_event", &kiln::Context::create_event, py::keep_alive<0, 1>())
      .def("device_count", &kiln::Context::device_count)
      .def("device_name", &kiln::Context::device_name, py::arg("device") = 0)
      .def("current_device", &kiln::Context::current_device)
      .def("memory_stats", &kiln::Context::memory_stats)
      .def("reset_peak_memory", &kiln::Context::reset_peak_memory)
      .def("supported_dtypes", &kiln::Context::supported_dtypes)
      .def("unsupported_reason", &kiln::Context::unsupported_reason, py::arg("capability"))
      .def("communication_backend", &kiln::Context::communication_backend)
      .def("build_library", [](kiln::Context& c, const std::string& name, const std::vector<std::string>& sources,
                               const std::vector<std::string>& include_dirs, const std::vector<std::string>& system_include_dirs,
                               const std::vector<std::string>& defines, const std::vector<std::string>& unit_defines,
                               const std::vector<std::string>& flags, const std::vector<std::string>& link_flags,
                               const std::vector<std::string>& prelude, const std::vector<std::pair<std::string, std::string>>& facts,
                               const std::string& root, const std::string& output, const std::vector<std::string>& cuda_flags,
                               const std::vector<std::string>& cuda_archs, bool make_precompiled_headers) {
            kiln::LibraryOptions o{name, sources, include_dirs, system_include_dirs, defines, unit_defines, flags, link_flags, prelude,
                                   facts, root, output, cuda_flags, cuda_archs, make_precompiled_headers};
            kiln::Library lib;
            {
              py::gil_scoped_release release;
              lib = c.build_library(o);
            }
            py::dict out;
            out["path"] = lib.path;
            out["key"] = lib.key;
            out["cache_source"] = lib.cache_source;
            out["compile_ms"] = lib.compile_ms;
            out["total_ms"] = lib.total_ms;
            out["log"] = lib.log;
            out["warnings"] = lib.warnings;
            out["precompiled_headers_used"] = lib.precompiled_headers_used;
            out["route"] = lib.route;
            out["nvcc_sources"] = lib.nvcc_sources;
            return out;
          },
          py::arg("name"), py::arg("sources"), py::arg("include_dirs") = std::vector<std::string>{},
          py::arg("system_include_dirs") = std::vector<std::string>{}, py::arg("defines") = std::vector<std::string>{},
          py::arg("unit_defines") = std::vector<std::string>{}, py::arg("flags") = std::vector<std::string>{},
          py::arg("link_flags") = std::vector<std::string>{}, py::arg("prelude") = std::vector<std::string>{},
          py::arg("facts") = std::vector<std::pair<std::string, std::string>>{}, py::arg("root") = "", py::arg("output") = "",
          py::arg("cuda_flags") = std::vector<std::string>{}, py::arg("cuda_archs") = std::vector<std::string>{},
          py::arg("make_precompiled_headers") = true)
      // Groups of files another compiler made (kiln.triton): a dict {key, folder, files: [(name,
      // path)], cache_source}, or None. The waits of find_or_claim_files run without the GIL.
      .def("find_files", [](kiln::Context& c, const std::string& kind, const std::string& key) -> py::object {
            std::optional<kiln::FileGroup> found;
            {
              py::gil_scoped_release release;
              found = c.find_files(kind, key);
            }
            if (!found) return py::none();
            return file_group_dict(*found);
          }, py::arg("kind"), py::arg("key"))
      .def("find_or_claim_files", [](kiln::Context& c, const std::string& kind, const std::string& key) {
            kiln::FilesOrClaim got;
            {
              py::gil_scoped_release release;
              got = c.find_or_claim_files(kind, key);
            }
            py::object found = py::none();
            if (got.found) found = file_group_dict(*got.found);
            py::object claim = got.claim ? py::cast(std::move(got.claim)) : py::none();
            return py::make_tuple(found, claim);
          }, py::arg("kind"), py::arg("key"))
      .def("list_files", [](kiln::Context& c, const std::string& kind) {
            std::vector<kiln::FileGroup> groups;
            {
              py::gil_scoped_release release;
              groups = c.list_files(kind);
            }
            py::list out;
            for (const kiln::FileGroup& g : groups) out.append(file_group_dict(g));
            return out;
          }, py::arg("kind"))
      .def("store_files", [](kiln::Context& c, const std::string& kind, const std::string& key,
                             const std::vector<std::pair<std::string, py::bytes>>& files, const std::string& label,
                             const std::string& target, const std::string& toolchain, double compile_ms, kiln::Claim* claim,
                             bool keep_first, double compile_cpu_ms, bool compiled) {
            std::vector<std::pair<std::string, std::string>> contents;
            for (auto& [name, data] : files) contents.emplace_back(name, std::string(data));
            kiln::ArtifactInfo info;
            info.label = label;
            info.target = target;
            info.toolchain = toolchain;
            info.compile_ms = compile_ms;
            info.compile_cpu_ms = compile_cpu_ms;
            info.compiled = compiled;
            kiln::FileGroup stored;
            {
              py::gil_scoped_release release;
              stored = c.store_files(kind, key, contents, info, claim, keep_first);
            }
            return file_group_dict(stored);
          }, py::arg("kind"), py::arg("key"), py::arg("files"), py::arg("label") = "", py::arg("target") = "",
          py::arg("toolchain") = "", py::arg("compile_ms") = 0.0, py::arg("claim") = nullptr, py::arg("keep_first") = false,
          py::arg("compile_cpu_ms") = 0.0, py::arg("compiled") = true);
}
