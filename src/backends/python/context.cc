#include "context.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <mutex>

#include "ledger_table.h"

namespace vramd::python {
namespace py = pybind11;
namespace {

thread_local const CallContext* tls_scope = nullptr;
thread_local CallContext* tls_bound = nullptr;  // leaked per bound thread (few, long-lived)

std::mutex& RegistryMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::weak_ptr<ModelShared>>& Registry() {
  static auto* models = new std::vector<std::weak_ptr<ModelShared>>;
  return *models;
}

std::shared_ptr<ModelShared> FindByPackage(const std::string& package) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& weak : Registry()) {
    auto model = weak.lock();
    if (model && model->package == package && model->alive.load()) return model;
  }
  return nullptr;
}

}  // namespace

ContextScope::ContextScope(CallContext context)
    : context_(std::move(context)), previous_(tls_scope) {
  tls_scope = &context_;
  ClearLedgerFailure();  // a failure belongs to the call it happened in (ErrorText)
}

ContextScope::~ContextScope() { tls_scope = previous_; }

void BindThread(CallContext context) {
  if (tls_bound == nullptr) {
    tls_bound = new CallContext(std::move(context));
  } else {
    *tls_bound = std::move(context);
  }
}

const CallContext* CurrentContext() {
  if (tls_scope != nullptr) return tls_scope;
  return tls_bound;
}

std::shared_ptr<ModelShared> CurrentModel() {
  if (const CallContext* context = CurrentContext(); context != nullptr && context->model) {
    return context->model;
  }
  try {
    py::object package = py::module_::import("vramd_python_host").attr("package_on_stack")(1);
    if (!package.is_none()) return FindByPackage(package.cast<std::string>());
  } catch (const py::error_already_set&) {
  }
  return nullptr;
}

std::shared_ptr<ModelShared> ModelForServer() {
  if (auto model = CurrentModel()) return model;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& weak : Registry()) {
    auto model = weak.lock();
    if (model && model->alive.load()) return model;
  }
  return nullptr;
}

void RegisterModel(const std::shared_ptr<ModelShared>& model) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& models = Registry();
  models.erase(std::remove_if(models.begin(), models.end(),
                              [](const std::weak_ptr<ModelShared>& w) { return w.expired(); }),
               models.end());
  models.push_back(model);
}

void UnregisterModel(const ModelShared* model) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& models = Registry();
  models.erase(std::remove_if(models.begin(), models.end(),
                              [model](const std::weak_ptr<ModelShared>& w) {
                                auto m = w.lock();
                                return !m || m.get() == model;
                              }),
               models.end());
}

}  // namespace vramd::python
