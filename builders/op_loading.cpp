// The ops API's loading (builders/ops.h): an op by name, built or found, loaded on the accelerator
// that runs its target; later uses of a loaded op are a hash-map lookup, counted as memory hits.
#include "builders/ops.h"
#include "runtime/registry.h"
#include "support/log.h"

namespace kiln::builders {

Result<runtime::Kernel*> LoadedOp::kernel(std::string_view name) const {
  if (name.empty()) name = m_spec.entries.front().name;
  return m_module->kernel(name);
}

Result<OpBuilder> Ops::create_op_builder(const std::string& op, const std::string& target_text) {
  OpBuilder b;
  b.m_ops = this;
  KILN_ASSIGN_OR_RETURN(b.m_spec, find_spec(op));
  KILN_ASSIGN_OR_RETURN(b.m_target, parse_target(target_text.empty() ? m_accelerator->native_target() : target_text));
  return b;
}

Status OpBuilder::is_compatible() const {
  KILN_RETURN_IF_ERROR(builders::is_compatible(m_spec, m_target));
  KILN_ASSIGN_OR_RETURN(runtime::Accelerator * acc, m_ops->accelerator_for(m_target));
  Target built_for = effective_target(m_spec.flags, m_target);
  return acc->can_load(artifact_kind_for(built_for), built_for.str());
}

void Ops::wait_background() {
  if (m_pchs) m_pchs->wait();
}

Result<BuildOutcome> OpBuilder::build() const { return m_ops->build(m_spec, m_target); }

Result<std::shared_ptr<LoadedOp>> OpBuilder::load() const { return m_ops->get(m_spec.name, m_target.str()); }

Result<std::shared_ptr<LoadedOp>> Ops::get(const std::string& op, const std::string& target_text) {
  std::string target_str = target_text.empty() ? m_accelerator->native_target() : target_text;
  std::string slot_key = op + "@" + target_str;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(m_mutex);
    if (auto it = m_loaded.find(slot_key); it != m_loaded.end()) {
      if (it->second->done && it->second->op) {
        if (m_store) m_store->count(cache::Counter::kHitsMemory);  // an atomic add to the counter page
        return it->second->op;  // the common case: a hash-map lookup
      }
      slot = it->second;
    }
  }
  bool builder = false;
  if (!slot) {
    // A new slot is locked before anyone else can see it, and outside m_mutex, so the two
    // mutexes are only ever taken in one order (slot, then m_mutex).
    auto fresh = std::make_shared<Slot>();
    fresh->mutex.lock();
    std::lock_guard lock(m_mutex);
    auto& s = m_loaded[slot_key];
    if (!s) {
      s = fresh;
      builder = true;
    }
    slot = s;
    if (!builder) fresh->mutex.unlock();
  }
  if (!builder) {
    std::lock_guard wait(slot->mutex);  // blocks until the building thread is done
    if (slot->op) return slot->op;
    return slot->error;  // the same failure, without compiling again
  }
  auto target = parse_target(target_str);
  Result<std::shared_ptr<LoadedOp>> result = target.ok() ? load(op, target.value()) : Result<std::shared_ptr<LoadedOp>>(target.status());
  {
    std::lock_guard lock(m_mutex);
    if (result.ok()) {
      slot->op = result.value();
      slot->done = true;
    } else {
      slot->error = result.status();
      m_loaded.erase(slot_key);  // not remembered: a later call tries again (the source may be fixed)
    }
  }
  slot->mutex.unlock();
  return result;
}

Result<runtime::Accelerator*> Ops::accelerator_for(const Target& target) {
  // Any accelerator that runs the target's artifacts will do, the chosen one first: a
  // plug-in that runs host code takes cpu targets.
  if (target.backend == m_accelerator->name() || m_accelerator->can_load(artifact_kind_for(target), target.str()).ok())
    return m_accelerator;
  return runtime::get_accelerator(target.backend);
}

Result<std::shared_ptr<LoadedOp>> Ops::load(const std::string& name, const Target& target) {
  KILN_ASSIGN_OR_RETURN(OpSpec spec, find_spec(name));
  return load_spec(std::move(spec), target);
}

Result<std::shared_ptr<LoadedOp>> Ops::load_spec(OpSpec spec, const std::string& target_text) {
  KILN_ASSIGN_OR_RETURN(Target target, parse_target(target_text.empty() ? m_accelerator->native_target() : target_text));
  return load_spec(std::move(spec), target);
}

Result<std::shared_ptr<LoadedOp>> Ops::load_spec(OpSpec spec, const Target& target) {
  const std::string name = spec.name;
  KILN_ASSIGN_OR_RETURN(runtime::Accelerator * accelerator, accelerator_for(target));
  // An artifact this device cannot run (a CPU level it lacks, a newer GPU) is refused before
  // it is even looked up.
  Target built_for = effective_target(spec.flags, target);  // an op's instruction-set flags may raise it
  KILN_RETURN_IF_ERROR(accelerator->can_load(artifact_kind_for(built_for), built_for.str()));
  KILN_ASSIGN_OR_RETURN(BuildOutcome outcome, build(spec, target));
  if (!outcome.success)
    return Status(StatusCode::kCompileError, "op " + name + " does not compile for " + target.str() + ":\n" + outcome.diagnostics_text());
  runtime::ModuleImage image{outcome.kind, outcome.target, outcome.artifact, outcome.kernels, "op " + name};
  image.derived_cache = m_derived.get();
  double load_start = log_clock_ms();
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Module> module, accelerator->load_module(image));
  KILN_LOG_AT(kDebug, "load", "op " + name + ": " + outcome.kind + " loaded on " + std::string(accelerator->name()) + " in " +
                                  std::to_string(log_clock_ms() - load_start) + " ms");
  auto loaded = std::make_shared<LoadedOp>();
  loaded->m_spec = std::move(spec);
  outcome.artifact.clear();
  outcome.artifact.shrink_to_fit();
  loaded->m_outcome = std::move(outcome);
  loaded->m_accelerator = accelerator;
  loaded->m_module = std::move(module);
  return loaded;
}

}  // namespace kiln::builders
