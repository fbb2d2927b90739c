// The internal backend interface: how the runtime loads a model version and runs it.
//
// As in Triton's backend API, state is split in two levels:
//   - BackendModel: loaded once per model version (weights, parsed files), shared read-only by
//     every instance of that version;
//   - BackendInstance: one per instance of the instance_group, owning what one execution
//     needs (scratch space, later a stream). An instance runs one execution at a time.
// Device memory comes from ModelContext::allocator, so the ledger knows who holds it. Instances
// are destroyed before their model; whatever an owner still holds when it ends is a leak.
// The runtime validates every request against the model config before Execute, so a backend
// may rely on input names, types and shapes; it must still never crash on data it dislikes and
// return an error Status instead.
//
// Thread safety: BackendModel methods may be called from any thread; one BackendInstance is
// used by one thread at a time.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/load_timing.h"
#include "core/status.h"
#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::backends {

class ServerServices;  // server_services.h

struct ModelContext {
  std::string name;
  int64_t version = 0;
  std::filesystem::path model_dir;    // <repository>/<model>
  std::filesystem::path version_dir;  // <repository>/<model>/<version>
  const config::ModelConfig* config = nullptr;  // outlives the BackendModel
  // Where the backend takes memory from (outlives the BackendModel), and the version's ledger
  // owner. LoadModel runs with that owner as the thread's OwnerScope, so allocations without
  // an explicit owner are charged to the version.
  memory::Allocator* allocator = nullptr;
  memory::OwnerId owner = memory::kNoOwner;
  // Where the backend records the phases of its load (load_timing.h); may be null.
  LoadTiming* timing = nullptr;
  // What a model may ask of the server beyond memory: calls into other models, model control,
  // custom metrics (server_services.h). Outlives the BackendModel; null where the runtime has
  // none (unit tests), and a backend then refuses those calls.
  ServerServices* services = nullptr;
};

enum class DeviceKind { kCpu, kGpu };

struct InstanceContext {
  std::string name;  // "<group name>_<index>", as Triton names instances
  int index = 0;     // across all groups of the model
  DeviceKind kind = DeviceKind::kCpu;
  int device_id = -1;  // GPU ordinal for kGpu
  // The instance's ledger owner: CreateInstance runs under it, and Execute under the owner of
  // the request being run (a child of this one).
  memory::OwnerId owner = memory::kNoOwner;
  // The load's timing, as ModelContext::timing (a device's first instance may upload weights).
  LoadTiming* timing = nullptr;
};

// One response of a request in a request list (BackendInstance::ExecuteRequests).
struct BackendResponse {
  std::vector<Tensor> outputs;  // every output the model made; the runtime drops the others
  std::vector<InferParameter> parameters;
};

// How one request of a request list is answered, now or later, from any thread, under the rules
// of include/vramd/backend.h's VramdServerApi::respond (one response for a model that is not
// decoupled; any number, then the final flag, for a decoupled one). A Responder dropped without
// its final flag answers its request with an Internal error saying so: a request is never left
// unanswered.
class Responder {
 public:
  virtual ~Responder() = default;
  // Sends `response` (an answer or an error; nullopt: none, only the flag) and, with `final`,
  // completes the request. InvalidArgument naming the rule when the rules refuse it (nothing is
  // sent then).
  virtual Status Respond(std::optional<Result<BackendResponse>> response, bool final) = 0;
  // Whether the client gave up on the request (InferRequest::cancel).
  virtual bool IsCancelled() const = 0;
  // Whether the request takes several responses: the model is decoupled.
  virtual bool decoupled() const = 0;
};

// A request of a request list.
struct ListedRequest {
  const InferRequest* request = nullptr;  // valid until ExecuteRequests returns
  std::shared_ptr<Responder> responder;   // the backend may keep it until its final flag
  // The request's own ledger owner (a child of the instance's): what the backend allocates for
  // this request alone is charged to it. Opened on first use; valid while `responder` lives.
  memory::OwnerId (*open_owner)(void* context) = nullptr;
  void* owner_context = nullptr;
  memory::OwnerId OpenOwner() const { return open_owner ? open_owner(owner_context) : 0; }
};

class BackendInstance {
 public:
  virtual ~BackendInstance() = default;
  // Runs `request` (inputs validated; with max_batch_size > 0 the first dimension is the
  // batch) and appends every output of the model to `outputs`. The runtime drops the outputs
  // the client did not ask for. Not called for a backend that TakesRequestLists().
  virtual Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) = 0;
  // For a backend that TakesRequestLists(): the scheduler's requests as they came (not joined
  // along dimension 0), each answered through its responder. An error return hands back every
  // request not yet answered with its final flag: the runtime answers them with it.
  virtual Status ExecuteRequests(std::span<const ListedRequest> requests) {
    return Status::Unsupported("this backend does not take request lists");
  }
  // Whether the instance can serve now (Triton's TRITONBACKEND_ModelInstanceReady): OK, or an
  // error saying why not. Asked only for a backend that ChecksReadiness(), on a thread of the
  // runtime's (readiness_probe.h), never twice at once for one instance, possibly while the
  // instance executes on another thread. It may block: the runtime stops waiting after 5 s.
  virtual Status Ready() { return Status::Ok(); }
  // What the instance knows of whether it can serve without asking its framework: OK, or why
  // not (a hosted instance whose process is restarting: remote/stub.h). For every backend,
  // whether it ChecksReadiness() or not. Never blocks; from any thread while the instance
  // exists (the repository index asks it of every serving instance).
  virtual Status Available() const { return Status::Ok(); }
};

// How deeply a model sleeps (docs/memory.md, "Sleeping models"), vLLM's levels: kHostCopy keeps
// what it held on devices in host memory (pinned where it goes back to a GPU) and copies it
// back on wake; kDiscard keeps nothing and reads it again from the model's files on wake.
enum class SleepLevel { kHostCopy = 1, kDiscard = 2 };

class BackendModel {
 public:
  virtual ~BackendModel() = default;
  // Sleeping: whether the model can (the backend opts in); Sleep gives the devices back what
  // the version holds there (its weights; the context, streams, handles and compiled state
  // stay) and Wake brings it back, so that answers after it equal answers before. The runtime
  // calls them with no execution of the version in flight and none starting until they return
  // (runtime/sleep_gate.h). A failed Sleep leaves the model awake and serving; a failed Wake
  // leaves it asleep, and the requests that wanted it get the error.
  virtual bool CanSleep() const { return false; }
  virtual Status Sleep(SleepLevel level) {
    return Status::Unsupported("this backend's models cannot sleep");
  }
  virtual Status Wake() { return Status::Unsupported("this backend's models cannot sleep"); }
  // For a model that cannot sleep by itself: whether the runtime may put it to sleep in place,
  // parking what the version and its instances hold on devices (memory::Allocator::Park; the
  // ABI's sleeps_in_place).
  virtual bool SleepsInPlace() const { return false; }
  virtual Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext& ctx) = 0;
  // Whether its instances (of a backend that TakesRequestLists()) take inputs in GPU memory
  // where they are (Tensor::gpu); false: the runtime moves them to host first. Per model, not
  // per backend: the same library may serve one model in process and host another. Asked once
  // its instances exist.
  virtual bool TakesGpuInputs() const { return false; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether instances of kind kGpu can be created. KIND_AUTO becomes GPU instances when this is
  // true and a GPU is present (as in Triton); KIND_GPU for a backend without it is an error.
  virtual bool SupportsGpu() const { return false; }
  // Whether every Execute must run on the instance's own thread. By default an idle instance
  // may run a request on the thread that received it (scheduler.h's fast path), which suits
  // small models; a framework that keeps state per thread (LibTorch's cuBLAS/cuDNN handles and
  // caches) would otherwise pay for it on every request thread, and run slower there.
  virtual bool ExecutesOnInstanceThreads() const { return false; }
  // Whether instances take the scheduler's requests unjoined, answering each through a
  // Responder (BackendInstance::ExecuteRequests), as Triton's backends do; a decoupled model
  // (model_transaction_policy.decoupled) needs a backend that does.
  virtual bool TakesRequestLists() const { return false; }
  // Whether the library may take inputs in GPU memory where they are (its table's
  // accepts_gpu_inputs); BackendModel::TakesGpuInputs says it per model.
  virtual bool AcceptsGpuInputs() const { return false; }
  // Whether its instances answer BackendInstance::Ready; false: an instance is ready once
  // created, and the runtime asks nothing.
  virtual bool ChecksReadiness() const { return false; }
  // Completes `config` (as read from config.pbtxt, not yet validated; the model's directory is
  // `model_dir`, and `version` the highest version it selects, 0 when none) in place, as
  // Triton's backends auto-complete. The default leaves it unchanged. An error fails the load.
  virtual Status AutoCompleteConfig(const std::filesystem::path& model_dir, int64_t version,
                                    config::ModelConfig* config) {
    return Status::Ok();
  }
  // Loads a version; a config the backend cannot serve is an InvalidArgument naming the field.
  virtual Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) = 0;
};

// The registry (defined in registry/backend_registry.cc, which links the built-ins in).
//
// Where FindBackend looks for backends that are not built in:
// <directory>/<name>/libvramd_<name>.so (Triton's layout; vramd's --backend-directory).
inline constexpr std::string_view kDefaultBackendDirectory = "/opt/vramd/backends";

// Sets the backend directory for the whole process. vramd sets it once from its flag before
// any model loads; a library already loaded stays in use.
void SetBackendDirectory(std::filesystem::path directory);
std::filesystem::path BackendDirectory();

// The backend a config asks for: `backend`, else derived from `platform` (Triton's platform
// names map to backend names). A name that is neither built in nor registered is loaded from
// its shared library under BackendDirectory() (loaded once, kept for the process's lifetime).
// Errors name the backend and list the built-in ones: NotFound for an unknown platform or a
// missing library (naming the path tried), InvalidArgument for a library of another ABI
// version, Internal when dlopen fails.
Result<Backend*> FindBackend(const config::ModelConfig& config);

// Names of every backend FindBackend can return, sorted.
std::vector<std::string> AvailableBackends();

// Makes `backend` available to FindBackend under its name (not owned: it must outlive every
// model loaded with it). AlreadyExists when the name is taken.
Status RegisterBackend(Backend* backend);

}  // namespace vramd::backends
