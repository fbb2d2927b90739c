// Who Python code runs for: the model version (ModelShared), the instance and the phase, kept
// per thread around every call into a model (initialize, execute, finalize, the import of
// model.py) and on an instance's asyncio thread for good. pb_utils.get_model_dir(), the Logger,
// BLS and model control read it. Code on a thread the model started itself has no context; the
// model is then found from the Python call stack (the nearest frame of a model package).
//
// Threads: ContextScope and CurrentContext are per thread; the registry is locked.
#ifndef VRAMD_BACKENDS_PYTHON_CONTEXT_H_
#define VRAMD_BACKENDS_PYTHON_CONTEXT_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "vramd/backend.h"

namespace vramd::python {

struct LedgerTable;  // ledger_table.h

// A model version as the rest of the backend sees it; immutable after model_create, except
// `alive`.
struct ModelShared {
  std::string name;
  int64_t version = 0;
  std::string model_dir;
  std::string version_dir;
  std::string config_json;
  std::string model_file;  // <version_dir>/model.py (or default_model_filename)
  std::string package;     // the synthetic package, _vramd_models.<model>_v<version>
  const VramdServerApi* server = nullptr;
  VramdOwner owner = 0;
  bool decoupled = false;
  bool force_cpu_inputs = true;  // parameters FORCE_CPU_ONLY_INPUT_TENSORS (default "yes")
  std::vector<std::string> output_names;
  // Memory hooks (numpy_ledger.h, torch_ledger.h): parameters VRAMD_PYTHON_LEDGER_NUMPY and
  // VRAMD_PYTHON_LEDGER_TORCH ("on", the default, or "off"), and the table they allocate
  // through.
  bool ledger_numpy = true;
  bool ledger_torch = true;
  // VRAMD_PYTHON_TORCH_INSTANCE_STREAM ("on", the default, or "off"): a KIND_GPU instance runs
  // under a CUDA stream of its own (torch_ledger.h).
  bool torch_instance_stream = true;
  size_t numpy_min_bytes = 512;  // VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES (kNumpyLedgerMinBytes)
  LedgerTable* ledger_table = nullptr;
  // False once model_destroy began: the server table may no longer be used after that.
  std::atomic<bool> alive{true};
};

// Where an instance is in its life (Triton's stub: initialized_ / finalizing_).
struct InstanceStatus {
  std::atomic<bool> initialized{false};
  std::atomic<bool> finalizing{false};
};

enum class Phase { kNone, kImport, kInitialize, kExecute, kFinalize };

struct CallContext {
  std::shared_ptr<ModelShared> model;
  std::shared_ptr<InstanceStatus> instance;  // null while the module is imported
  Phase phase = Phase::kNone;
  // The ledger owner of what runs now: the instance's, or the request's during execute (for the
  // later attribution of framework allocations).
  VramdOwner owner = 0;
  // The instance's owner (0 while the module is imported): what the memory hooks charge for
  // state that outlives a request by design (a decoupled model's arrays, torch's pool segments).
  VramdOwner instance_owner = 0;
};

// Sets the thread's context for its lifetime, restoring the previous one after.
class ContextScope {
 public:
  explicit ContextScope(CallContext context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  CallContext context_;
  const CallContext* previous_;
};

// Gives the calling thread `context` for good (an instance's asyncio thread).
void BindThread(CallContext context);

// The thread's context: the innermost scope, else the bound one, else null.
const CallContext* CurrentContext();

// The model Python code runs for: the context's, else the one whose package is on the Python
// stack, else null. Needs the GIL.
std::shared_ptr<ModelShared> CurrentModel();
// CurrentModel(), else any live model (for what only needs the server table). Needs the GIL.
std::shared_ptr<ModelShared> ModelForServer();

void RegisterModel(const std::shared_ptr<ModelShared>& model);
void UnregisterModel(const ModelShared* model);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_CONTEXT_H_
