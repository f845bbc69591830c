// compile_device_split: see split_device.h.
#include "jit/clang/split_device.h"

#include <clang/Basic/SourceManager.h>
#include <clang/CodeGen/BackendUtil.h>
#include <clang/Frontend/CompilerInstance.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <unordered_map>

#include "jit/clang/job_slots.h"
#include "support/cpu_time.h"
#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/log.h"
#include "support/subprocess.h"

namespace kiln::jit::stages {
namespace {

constexpr unsigned k_shared_address_space = 3;  // NVPTX's __shared__

// The module's functions, then its global variables, each a node by its place in the module,
// which bitcode keeps: a part's thread finds the same node in its own copy by the same number.
struct Nodes {
  std::vector<llvm::Function*> functions;
  std::vector<llvm::GlobalVariable*> globals;
  std::unordered_map<const llvm::GlobalValue*, size_t> index;

  explicit Nodes(llvm::Module& m) {
    for (auto& f : m.functions()) index.emplace(&f, index.size()), functions.push_back(&f);
    for (auto& g : m.globals()) index.emplace(&g, index.size()), globals.push_back(&g);
  }
  size_t size() const { return functions.size() + globals.size(); }
  const llvm::GlobalValue* at(size_t i) const {
    return i < functions.size() ? static_cast<const llvm::GlobalValue*>(functions[i]) : globals[i - functions.size()];
  }
};

bool is_kernel(const llvm::Function& f) {
  return !f.isDeclaration() && f.getCallingConv() == llvm::CallingConv::PTX_Kernel;
}

// May each part that reaches it have a copy of its own: a function (made internal), a local
// read-only constant, a __shared__ variable (each kernel has its own anyway). Not a device
// variable (it exists once; the host may register it), a kernel, or what the linker treats specially.
bool copyable(const llvm::GlobalValue& g) {
  if (auto* f = llvm::dyn_cast<llvm::Function>(&g)) return !is_kernel(*f);
  auto* v = llvm::dyn_cast<llvm::GlobalVariable>(&g);
  if (!v || v->getName().starts_with("llvm.")) return false;
  return v->hasLocalLinkage() && (v->isConstant() || v->getAddressSpace() == k_shared_address_space);
}

// The global values `value` refers to, through constant expressions and aggregates.
void referenced(const llvm::Value* value, std::vector<const llvm::GlobalValue*>& out,
                std::set<const llvm::Constant*>& seen) {
  if (auto* g = llvm::dyn_cast<llvm::GlobalValue>(value)) {
    out.push_back(g);
    return;
  }
  auto* c = llvm::dyn_cast<llvm::Constant>(value);
  if (!c || llvm::isa<llvm::ConstantData>(c) || !seen.insert(c).second) return;
  for (const llvm::Use& op : c->operands()) referenced(op.get(), out, seen);
}

// Each node's direct references (definitions only).
std::vector<std::vector<size_t>> references(const Nodes& nodes) {
  std::vector<std::vector<size_t>> out(nodes.size());
  std::set<const llvm::Constant*> seen;
  std::vector<const llvm::GlobalValue*> found;
  auto add = [&](size_t from) {
    for (auto* g : found)
      if (auto it = nodes.index.find(g); it != nodes.index.end() && !g->isDeclaration())
        out[from].push_back(it->second);
    found.clear();
  };
  for (size_t i = 0; i < nodes.functions.size(); ++i) {
    seen.clear();
    for (const auto& block : *nodes.functions[i])
      for (const auto& inst : block)
        for (const llvm::Use& op : inst.operands()) referenced(op.get(), found, seen);
    add(i);
  }
  for (size_t j = 0; j < nodes.globals.size(); ++j) {
    seen.clear();
    if (nodes.globals[j]->hasInitializer()) referenced(nodes.globals[j]->getInitializer(), found, seen);
    add(nodes.functions.size() + j);
  }
  return out;
}

struct Partition {
  std::vector<std::vector<char>> keep;  // per part, per node: defined in that part
  std::vector<char> internal;           // per node: a function reached from a kernel, made internal
  std::vector<size_t> kernels;          // per part: how many kernels
};

size_t find(std::vector<size_t>& parent, size_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

// The parts (see split_device.h); fewer than two when the module is not worth splitting.
Partition partition(llvm::Module& module) {
  Partition p;
  if (!module.alias_empty() || !module.ifunc_empty()) return p;
  Nodes nodes(module);
  const size_t n = nodes.size();
  auto refs = references(nodes);
  // Roots: each kernel, and one for everything no kernel reaches (it stays in the first part).
  std::vector<size_t> roots;
  for (size_t i = 0; i < nodes.functions.size(); ++i)
    if (is_kernel(*nodes.functions[i])) roots.push_back(i);
  if (roots.size() < 2) return p;
  std::vector<std::vector<char>> reach(roots.size() + 1, std::vector<char>(n, 0));
  auto walk = [&](std::vector<char>& r, size_t start) {
    std::vector<size_t> stack = {start};
    while (!stack.empty()) {
      size_t x = stack.back();
      stack.pop_back();
      if (r[x]) continue;
      r[x] = 1;
      for (size_t y : refs[x]) stack.push_back(y);
    }
  };
  std::vector<char> any(n, 0);
  for (size_t k = 0; k < roots.size(); ++k) {
    walk(reach[k], roots[k]);
    for (size_t x = 0; x < n; ++x) any[x] |= reach[k][x];
  }
  const size_t rest = roots.size();
  // Not from llvm.used and llvm.compiler.used: they name what must be kept, not what belongs
  // together (keep_only trims them in each part).
  for (size_t x = 0; x < n; ++x)
    if (!any[x] && !nodes.at(x)->isDeclaration() && !nodes.at(x)->getName().starts_with("llvm.")) walk(reach[rest], x);
  // Roots that reach the same node that must exist once belong together.
  std::vector<size_t> parent(roots.size() + 1);
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<size_t> owner(n, SIZE_MAX);
  for (size_t k = 0; k <= rest; ++k)
    for (size_t x = 0; x < n; ++x)
      if (reach[k][x] && !copyable(*nodes.at(x))) {
        if (owner[x] == SIZE_MAX)
          owner[x] = k;
        else
          parent[find(parent, k)] = find(parent, owner[x]);
      }
  // Groups, weighed by the instructions they reach; the rest's group is always in the first part.
  std::map<size_t, std::vector<size_t>> groups;
  for (size_t k = 0; k <= rest; ++k) groups[find(parent, k)].push_back(k);
  if (groups.size() < 2) return p;
  struct Group {
    std::vector<size_t> roots;
    size_t weight = 0;
    bool rest = false;
  };
  std::vector<Group> list;
  for (auto& [root, members] : groups) {
    Group g;
    g.roots = members;
    std::vector<char> all(n, 0);
    for (size_t k : members) {
      g.rest = g.rest || k == rest;
      for (size_t x = 0; x < n; ++x) all[x] |= reach[k][x];
    }
    for (size_t x = 0; x < nodes.functions.size(); ++x)
      if (all[x]) g.weight += nodes.functions[x]->getInstructionCount();
    list.push_back(std::move(g));
  }
  // The rest's group first, into the first part; then the heaviest first into the lightest part
  // (ties: the lower part, then module order): deterministic.
  std::stable_sort(list.begin(), list.end(),
                   [](const Group& a, const Group& b) { return a.rest != b.rest ? a.rest : a.weight > b.weight; });
  const size_t parts = std::min<size_t>(k_device_partitions, list.size());
  p.keep.assign(parts, std::vector<char>(n, 0));
  p.kernels.assign(parts, 0);
  std::vector<size_t> load(parts, 0);
  for (const Group& g : list) {
    size_t part = 0;
    if (!g.rest)
      for (size_t q = 1; q < parts; ++q)
        if (load[q] < load[part]) part = q;
    load[part] += g.weight;
    for (size_t k : g.roots) {
      p.kernels[part] += k != rest;
      for (size_t x = 0; x < n; ++x) p.keep[part][x] |= reach[k][x];
    }
  }
  // A part left with nothing (the rest's group was all of the first part's): gone.
  for (size_t q = parts; q-- > 1;)
    if (p.kernels[q] == 0) p.keep.erase(p.keep.begin() + q), p.kernels.erase(p.kernels.begin() + q);
  if (p.keep.size() < 2) return Partition{};
  p.internal.assign(n, 0);
  for (size_t x = 0; x < nodes.functions.size(); ++x) p.internal[x] = any[x] && !is_kernel(*nodes.functions[x]);
  return p;
}

// Reduces `module` (a copy of the whole) to part `part`: the other definitions become
// declarations and go, what the part copies is made internal, the used lists and kernel
// annotations lose what is gone.
void keep_only(llvm::Module& module, const Partition& p, size_t part) {
  Nodes nodes(module);
  const auto& keep = p.keep[part];
  for (size_t i = 0; i < nodes.functions.size(); ++i) {
    llvm::Function& f = *nodes.functions[i];
    if (f.isDeclaration()) continue;
    if (!keep[i]) {
      f.deleteBody();  // external, no comdat
    } else if (p.internal[i]) {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
      f.setVisibility(llvm::GlobalValue::DefaultVisibility);
      f.setComdat(nullptr);
    }
  }
  for (size_t j = 0; j < nodes.globals.size(); ++j) {
    llvm::GlobalVariable& g = *nodes.globals[j];
    if (!g.hasInitializer() || keep[nodes.functions.size() + j] || g.getName().starts_with("llvm.")) continue;
    g.setInitializer(nullptr);
    g.setLinkage(llvm::GlobalValue::ExternalLinkage);
    g.setComdat(nullptr);
  }
  llvm::removeFromUsedLists(module, [](llvm::Constant* c) {
    auto* g = llvm::dyn_cast<llvm::GlobalValue>(c->stripPointerCasts());
    return g && g->isDeclaration();
  });
  if (llvm::NamedMDNode* annotations = module.getNamedMetadata("nvvm.annotations")) {
    std::vector<llvm::MDNode*> kept;
    for (llvm::MDNode* entry : annotations->operands()) {
      auto* value =
          entry->getNumOperands() ? llvm::dyn_cast_or_null<llvm::ValueAsMetadata>(entry->getOperand(0).get()) : nullptr;
      auto* g = value ? llvm::dyn_cast<llvm::GlobalValue>(value->getValue()) : nullptr;
      if (!g || !g->isDeclaration()) kept.push_back(entry);
    }
    annotations->clearOperands();
    for (llvm::MDNode* entry : kept) annotations->addOperand(entry);
  }
  // What the part no longer uses, until nothing more goes.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = module.begin(); it != module.end();) {
      llvm::Function& f = *it++;
      f.removeDeadConstantUsers();
      if (f.isDeclaration() && f.use_empty()) f.eraseFromParent(), changed = true;
    }
    for (auto it = module.global_begin(); it != module.global_end();) {
      llvm::GlobalVariable& g = *it++;
      g.removeDeadConstantUsers();
      if (g.isDeclaration() && g.use_empty()) g.eraseFromParent(), changed = true;
    }
  }
}

// The relocatable cubin of one part's PTX, by the toolkit's ptxas (as nvcc -rdc runs it), in
// files of a private folder in RAM; an error carries ptxas's log.
Result<std::string> relocatable_cubin(const std::string& ptxas, const std::string& ptx, int sm) {
  std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (::getenv("TMPDIR") ? ::getenv("TMPDIR") : "/tmp");
  dir += "/kiln-ptxas-XXXXXX";
  if (!::mkdtemp(dir.data())) return internal_error("cannot make a folder for ptxas in " + dir);
  const std::string in = dir + "/part.ptx", out = dir + "/part.cubin";
  Result<std::string> cubin = internal_error("");
  if (Status written = write_file_atomic(in, ptx, /*durable=*/false); !written.ok()) {
    cubin = written;
  } else {
    auto ran = run_subprocess({ptxas, "-c", "-arch=sm_" + std::to_string(sm), in, "-o", out}, "");
    if (!ran.ok())
      cubin = ran.status();
    else if (ran->exit_code != 0 || ran->signal != 0)
      cubin = Status(StatusCode::kCompileError,
                     ptxas + " " + ran->how_it_ended() + " for sm_" + std::to_string(sm) + ": " + ran->err);
    else
      cubin = read_file(out);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return cubin;
}

}  // namespace

bool compile_device_split(const SourceFile& source, const CompileRequest& request, std::string_view pch,
                          const CudaPass& pass, CollectingConsumer& consumer, CompileResult& result,
                          std::vector<std::string>& ptx, std::vector<std::string>& objects) {
  auto stage_start = std::chrono::steady_clock::now();
  llvm::LLVMContext context;
  ModuleOut unit;
  unit.context = &context;
  unit.unoptimised = true;
  ObjectFile unused;
  if (!compile_one(source, request, pch, Make::kModule, consumer, result, unused, &unit, &pass)) return false;
  const std::string data_layout = unit.module->getDataLayoutStr();
  Partition parts = partition(*unit.module);
  const size_t n = std::max<size_t>(1, parts.keep.size());
  llvm::SmallString<0> bitcode;
  {
    llvm::raw_svector_ostream out(bitcode);
    llvm::WriteBitcodeToFile(*unit.module, out);
  }
  unit.module.reset();
  if (log_enabled(LogLevel::kDebug)) {
    std::string counts;
    for (size_t k : parts.kernels) counts += (counts.empty() ? "" : ", ") + std::to_string(k);
    log_stage(source,
              "sm_" + std::to_string(pass.device_sm) + " split into " + std::to_string(n) + " parts" +
                  (counts.empty() ? "" : " (kernels: " + counts + ")"),
              stage_start);
  }
  clang::DiagnosticOptions options;
  options.ShowColors = false;
  std::vector<std::unique_ptr<CollectingConsumer>> consumers;
  for (size_t i = 0; i < n; ++i) consumers.push_back(std::make_unique<CollectingConsumer>(options));
  ptx.assign(n, std::string());
  const std::string ptxas = n > 1 ? cuda_ptxas_path() : std::string();
  objects.assign(ptxas.empty() ? 0 : n, std::string());
  std::vector<char> done(n, 0);
  auto generate = [&](size_t i) {
    JobSlots::Held slot;
    PassTrace trace(source, "sm_" + std::to_string(pass.device_sm) + "-part" + std::to_string(i));
    llvm::LLVMContext own;
    auto module =
        llvm::parseBitcodeFile(llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), "device"), own);
    if (!module) {
      consumers[i]->add_error("device part " + std::to_string(i) +
                              " does not read back: " + llvm::toString(module.takeError()));
      return;
    }
    if (!parts.keep.empty()) keep_only(**module, parts, i);
    clang::CompilerInstance instance(std::make_shared<clang::CompilerInvocation>(*unit.invocation));
    instance.getCodeGenOpts().DisableLLVMPasses = false;  // the -O3 pipeline, on this part
    instance.createDiagnostics(consumers[i].get(), /*ShouldOwnClient=*/false);
    llvm::SmallString<0> text;
    clang::emitBackendOutput(instance, instance.getCodeGenOpts(), data_layout, module->get(),
                             clang::Backend_EmitAssembly, llvm::vfs::getRealFileSystem(),
                             std::make_unique<llvm::raw_svector_ostream>(text));
    ptx[i].assign(text.data(), text.size());
    done[i] = !instance.getDiagnostics().hasErrorOccurred();
    if (!done[i] || ptxas.empty()) return;
    module->reset();  // its memory back before ptxas runs
    auto cubin = relocatable_cubin(ptxas, ptx[i], pass.device_sm);
    if (!cubin.ok()) {
      consumers[i]->add_error("device part " + std::to_string(i) + " of sm_" + std::to_string(pass.device_sm) + ": " +
                              cubin.status().message());
      done[i] = 0;
      return;
    }
    objects[i] = std::move(cubin).value();
  };
  HelperThreads part_threads;  // support/cpu_time.h: each part's CPU counted for this thread
  for (size_t i = 1; i < n; ++i) part_threads.start([&, i] { generate(i); });
  generate(0);
  part_threads.join();
  log_stage(source, "sm_" + std::to_string(pass.device_sm) + " parts optimised and generated", stage_start);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    ok = ok && done[i];
    consumer.absorb(*consumers[i]);
  }
  return ok;
}

}  // namespace kiln::jit::stages
