// The python backend's C ABI table (include/vramd/backend.h): Triton model.py files run in
// one interpreter embedded in the server process (interpreter.h). It takes request lists
// (execute_requests), answering each request through VramdServerApi::respond, on the
// instances' own threads. Every entry point catches everything: no C++ or Python exception
// crosses into vramd.
//
// A model's is_ready() answers instance_ready, and its static auto_complete_config()
// auto_complete_config (model_hooks.cc).
#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "common.h"
#include "interpreter.h"
#include "model.h"
#include "vramd/backend.h"

namespace vramd::python {
namespace {

template <typename F>
VramdCode Guarded(VramdError* error, const char* what, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SetError(error, std::string(what) + ": out of host memory");
    return VRAMD_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    SetError(error, std::string(what) + ": " + e.what());
    return VRAMD_INTERNAL;
  } catch (...) {
    SetError(error, std::string(what) + ": unknown exception");
    return VRAMD_INTERNAL;
  }
}

bool ServerHasRequestLists(const VramdServerApi* server) {
  return server->struct_size >= offsetof(VramdServerApi, metric_value) + sizeof(server->metric_value);
}

VramdCode ModelCreate(const VramdModelInfo* info, void** model, VramdError* error) {
  return Guarded(error, "model_create", [&] {
    if (info == nullptr || model == nullptr || info->server == nullptr) {
      SetError(error, "model_create: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    *model = nullptr;
    if (!ServerHasRequestLists(info->server)) {
      SetError(error, "the python backend needs a server with the request-list interface "
                      "(VramdServerApi::respond); this server's table is older");
      return VRAMD_UNSUPPORTED;
    }
    std::string message;
    if (!StartInterpreter(&message)) {
      SetError(error, message);
      return VRAMD_INTERNAL;
    }
    std::unique_ptr<PythonModel> created;
    VramdCode rc = PythonModel::Create(*info, &created, &message);
    if (rc != VRAMD_OK) {
      SetError(error, message);
      return rc;
    }
    *model = created.release();  // owned by vramd until model_destroy
    return VRAMD_OK;
  });
}

void ModelDestroy(void* model) {
  try {
    std::unique_ptr<PythonModel> owned(static_cast<PythonModel*>(model));
  } catch (...) {
  }
}

VramdCode InstanceCreate(void* model, const VramdInstanceInfo* info, void** instance,
                         VramdError* error) {
  return Guarded(error, "instance_create", [&] {
    if (model == nullptr || info == nullptr || instance == nullptr) {
      SetError(error, "instance_create: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    *instance = nullptr;
    std::unique_ptr<PythonInstance> created;
    std::string message;
    VramdCode rc =
        PythonInstance::Create(static_cast<PythonModel*>(model), *info, &created, &message);
    if (rc != VRAMD_OK) {
      SetError(error, message);
      return rc;
    }
    *instance = created.release();
    return VRAMD_OK;
  });
}

void InstanceDestroy(void* instance) {
  try {
    std::unique_ptr<PythonInstance> owned(static_cast<PythonInstance*>(instance));
  } catch (...) {
  }
}

VramdCode Execute(void*, const VramdRequest*, const VramdOutputs*, VramdError* error) {
  SetError(error, "the python backend takes request lists only (execute_requests)");
  return VRAMD_UNSUPPORTED;
}

VramdCode ExecuteRequests(void* instance, VramdRequest* const* requests, size_t count,
                          VramdError* error) {
  return Guarded(error, "execute", [&] {
    if (instance == nullptr || (requests == nullptr && count > 0)) {
      SetError(error, "execute_requests: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    return static_cast<PythonInstance*>(instance)->ExecuteRequests(requests, count, error);
  });
}

VramdCode InstanceReady(void* instance, VramdError* error) {
  return Guarded(error, "is_ready", [&] {
    if (instance == nullptr) {
      SetError(error, "instance_ready: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    return static_cast<PythonInstance*>(instance)->Ready(error);
  });
}

VramdCode AutoComplete(const VramdModelInfo* info,
                       void (*complete)(void* context, const char* json, size_t size),
                       void* context, VramdError* error) {
  return Guarded(error, "auto_complete_config", [&] {
    if (info == nullptr || complete == nullptr) {
      SetError(error, "auto_complete_config: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    std::string message;
    if (!StartInterpreter(&message)) {
      SetError(error, message);
      return VRAMD_INTERNAL;
    }
    std::string completed;
    VramdCode rc = AutoCompleteConfig(*info, &completed, &message);
    if (rc != VRAMD_OK) {
      SetError(error, message);
      return rc;
    }
    if (!completed.empty()) complete(context, completed.data(), completed.size());
    return VRAMD_OK;
  });
}

VramdBackendApi MakeApi() {
  VramdBackendApi api{};
  api.struct_size = sizeof(VramdBackendApi);
  api.abi_version = VRAMD_BACKEND_ABI_VERSION;
  api.name = "python";
  // The backend itself needs no CUDA: a model uses the GPU through its framework (torch), on
  // the device the instance was given (model_instance_device_id; like Triton's stub, vramd does
  // not switch the thread's device for it).
  api.supports_gpu = 1;
  api.model_create = &ModelCreate;
  api.model_destroy = &ModelDestroy;
  api.instance_create = &InstanceCreate;
  api.instance_destroy = &InstanceDestroy;
  api.execute = &Execute;
  // One thread per instance: Python thread state, torch's per-thread handles and caches stay
  // with it.
  api.execute_on_instance_threads = 1;
  api.execute_requests = &ExecuteRequests;
  api.instance_ready = &InstanceReady;
  api.auto_complete_config = &AutoComplete;
  // A GPU input becomes a GPU pb_utils.Tensor where FORCE_CPU_ONLY_INPUT_TENSORS is "no", and
  // is copied to host here otherwise (model.cc), as Triton's stub does.
  api.accepts_gpu_inputs = 1;
  // A model's GPU memory, where vramd sees it (torch's, through torch_ledger.h), is charged to
  // its instances, and torch keeps pointers into it: vramd parks it in place while the model
  // sleeps (docs/memory.md, "Sleeping in place"). Memory a model takes past the ledger (another
  // framework, torch's default pool) stays on the device while it sleeps.
  api.sleeps_in_place = 1;
  return api;
}

}  // namespace
}  // namespace vramd::python

extern "C" __attribute__((visibility("default"))) const VramdBackendApi* vramd_backend_get_api(
    uint32_t server_abi_version) {
  static const VramdBackendApi api = vramd::python::MakeApi();
  (void)server_abi_version;
  return &api;
}
