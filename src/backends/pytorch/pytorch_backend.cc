// The pytorch backend's C ABI table (include/vramd/backend.h): every entry point catches
// everything, so no C++ exception crosses into vramd, and turns a Failure into a VramdCode and
// its message. Like any library built apart from the server, it links nothing of vramd but
// include/vramd/backend.h, so it has its own small wrappers where the built-ins use
// src/backends/abi/backend_kit.h (which needs vramd's Status and config types).
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "ledger_allocators.h"
#include "torch_model.h"
#include "vramd/backend.h"

namespace vramd::pytorch {
namespace {

void SetError(VramdError* error, const std::string& message) {
  if (error == nullptr) return;
  const size_t n = std::min(message.size(), size_t{VRAMD_ERROR_MESSAGE_SIZE - 1});
  std::memcpy(error->message, message.data(), n);
  error->message[n] = '\0';
}

VramdCode Fail(VramdError* error, const Failure& failure) {
  SetError(error, failure.message);
  return failure.code == VRAMD_OK ? VRAMD_INTERNAL : failure.code;
}

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

void Log(const VramdServerApi* server, VramdLogLevel level, const std::string& text) {
  if (server != nullptr && server->log != nullptr) server->log(server->server, level, text.c_str());
}

VramdCode ModelCreate(const VramdModelInfo* info, void** model, VramdError* error) {
  return Guarded(error, "model_create", [&] {
    if (info == nullptr || model == nullptr || info->server == nullptr) {
      SetError(error, "model_create: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    *model = nullptr;
    const std::string& warning = InstallLedgerAllocators();
    if (!warning.empty()) Log(info->server, VRAMD_LOG_WARNING, warning);
    Failure failure;
    auto created = TorchModel::Create(*info, &failure);
    if (!created) return Fail(error, failure);
    *model = created.release();  // owned by vramd until model_destroy
    return VRAMD_OK;
  });
}

void ModelDestroy(void* model) {
  try {
    std::unique_ptr<TorchModel> owned(static_cast<TorchModel*>(model));
  } catch (...) {
    // Destruction reports through the server's log; nothing may escape to vramd.
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
    Failure failure;
    auto created = TorchInstance::Create(static_cast<TorchModel*>(model), *info, &failure);
    if (!created) return Fail(error, failure);
    *instance = created.release();  // owned by vramd until instance_destroy
    return VRAMD_OK;
  });
}

void InstanceDestroy(void* instance) {
  try {
    std::unique_ptr<TorchInstance> owned(static_cast<TorchInstance*>(instance));
  } catch (...) {
  }
}

VramdCode Execute(void* instance, const VramdRequest* request, const VramdOutputs* outputs,
                  VramdError* error) {
  return Guarded(error, "execute", [&] {
    if (instance == nullptr || request == nullptr || outputs == nullptr) {
      SetError(error, "execute: missing arguments");
      return VRAMD_INVALID_ARGUMENT;
    }
    Failure failure;
    if (!static_cast<TorchInstance*>(instance)->Execute(*request, *outputs, &failure)) {
      return Fail(error, failure);
    }
    return VRAMD_OK;
  });
}

VramdCode ModelSleep(void* model, int32_t level, VramdError* error) {
  return Guarded(error, "model_sleep", [&] {
    if (model == nullptr || (level != 1 && level != 2)) {
      SetError(error, "model_sleep: no model, or a level other than 1 or 2");
      return VRAMD_INVALID_ARGUMENT;
    }
    Failure failure;
    if (!static_cast<TorchModel*>(model)->Sleep(level, &failure)) return Fail(error, failure);
    return VRAMD_OK;
  });
}

VramdCode ModelWake(void* model, VramdError* error) {
  return Guarded(error, "model_wake", [&] {
    if (model == nullptr) {
      SetError(error, "model_wake: no model");
      return VRAMD_INVALID_ARGUMENT;
    }
    Failure failure;
    if (!static_cast<TorchModel*>(model)->Wake(&failure)) return Fail(error, failure);
    return VRAMD_OK;
  });
}

VramdBackendApi MakeApi() {
  VramdBackendApi api{};
  api.struct_size = sizeof(VramdBackendApi);
  api.abi_version = VRAMD_BACKEND_ABI_VERSION;
  api.name = "pytorch";
#if defined(VRAMD_TORCH_CUDA)
  api.supports_gpu = 1;
#else
  api.supports_gpu = 0;
#endif
  api.model_create = &ModelCreate;
  api.model_destroy = &ModelDestroy;
  api.instance_create = &InstanceCreate;
  api.instance_destroy = &InstanceDestroy;
  api.execute = &Execute;
  // LibTorch keeps state per thread (cuBLAS and cuDNN handles of ~5 MiB each, cuDNN plan
  // caches, caches that stay hot only on the thread using them). Run inline, forward() would
  // build them on every HTTP thread that ever took a request, and run colder there: on an
  // H200 at c=1, 348 req/s inline against 470 on the instance threads, which also bound that
  // state to one thread per instance.
  api.execute_on_instance_threads = 1;
  api.model_sleep = &ModelSleep;
  api.model_wake = &ModelWake;
  return api;
}

}  // namespace
}  // namespace vramd::pytorch

extern "C" __attribute__((visibility("default"))) const VramdBackendApi* vramd_backend_get_api(
    uint32_t server_abi_version) {
  static const VramdBackendApi api = vramd::pytorch::MakeApi();
  (void)server_abi_version;  // vramd compares api.abi_version with its own and names both
  return &api;
}
