// TorchModel and TorchInstance: a TorchScript model served the way Triton's PyTorch backend
// serves it, with vramd's sharing rules.
//
//   TorchModel     one per model version: the config (ModelSpec) and the modules, loaded once
//                  per device the first time an instance there asks, charged to the version and
//                  shared by every instance on that device.
//   TorchInstance  one per instance: its device, its CUDA stream (GPU), and execute():
//                  inputs -> forward() under inference mode -> outputs.
//
// Inputs map to forward()'s arguments by name (the config's input names are the argument names)
// or by Triton's convention "<name>__<index>" (the index is the argument's position); outputs
// map by "<name>__<index>" into a returned tuple or list, by name into a returned dict, else in
// config order. An exception from LibTorch becomes an error for that call, never a crash.
//
// Errors are values: functions return false / null and write a message naming what is wrong.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ledger_allocators.h"
#include "model_spec.h"
#include "vramd/backend.h"

namespace vramd::pytorch {

struct LoadedModule;  // torch_model.cc: a torch::jit::Module on one device, with its I/O plan

// A failure: the ABI code and a message.
struct Failure {
  VramdCode code = VRAMD_OK;
  std::string message;
};

class TorchModel {
 public:
  // Reads the config and checks the model file exists. Loads nothing yet.
  static std::unique_ptr<TorchModel> Create(const VramdModelInfo& info, Failure* failure);
  ~TorchModel();
  TorchModel(const TorchModel&) = delete;
  TorchModel& operator=(const TorchModel&) = delete;

  // The module on `device` ("cpu" or "cuda:<n>"), loaded on first use under the version's
  // charge. Null with `failure` set when it cannot be loaded or does not fit the config.
  std::shared_ptr<LoadedModule> ModuleFor(const std::string& device, Failure* failure);

  // Sleeping (include/vramd/backend.h, model_sleep): every module's parameters and buffers
  // leave their device; the modules, their compiled graphs and the instances stay. Level 1
  // keeps a copy of a GPU module's tensors in pinned host memory (charged to the version) and
  // Wake copies them back; a CPU module's tensors (host memory already) and level 2 keep
  // nothing, and Wake loads the file again and takes its tensors, after checking they have
  // the names, types and shapes they had. Wake's tensors are charged to the version. The
  // runtime calls neither while an instance executes. False with `failure` set on an error:
  // Sleep then leaves the model awake, Wake asleep.
  bool Sleep(int level, Failure* failure);
  bool Wake(Failure* failure);

  const ModelSpec& spec() const { return spec_; }
  const std::shared_ptr<ServerLink>& link() const { return link_; }
  VramdOwner owner() const { return owner_; }
  const VramdServerApi* server() const { return server_; }

 private:
  TorchModel(ModelSpec spec, std::string path, const VramdModelInfo& info);

  const ModelSpec spec_;
  const std::string path_;  // the model file
  const VramdOwner owner_;  // the version
  const VramdServerApi* const server_;
  const std::shared_ptr<ServerLink> link_;
  std::mutex mu_;  // serializes loads; a device's module is loaded once
  std::map<std::string, std::shared_ptr<LoadedModule>> modules_;  // guarded by mu_
  // While asleep (guarded by mu_): per device, its module's tensors in StateTensors' order, with
  // the one pinned image holding their bytes at level 1 on a GPU (none where Wake reads the file
  // again).
  struct Slept;
  std::map<std::string, std::vector<Slept>> slept_;
  bool asleep_ = false;
};

class TorchInstance {
 public:
  static std::unique_ptr<TorchInstance> Create(TorchModel* model, const VramdInstanceInfo& info,
                                               Failure* failure);
  ~TorchInstance();
  TorchInstance(const TorchInstance&) = delete;
  TorchInstance& operator=(const TorchInstance&) = delete;

  // One batch: the request's inputs through forward(), every output added to `outputs`.
  bool Execute(const VramdRequest& request, const VramdOutputs& outputs, Failure* failure);

 private:
  struct DeviceState;  // torch_model.cc: the device and, on a GPU, the stream
  struct Profile;      // torch_model.cc: VRAMD_PYTORCH_PROFILE's timings
  TorchInstance(TorchModel* model, VramdOwner owner, std::shared_ptr<LoadedModule> module,
                std::unique_ptr<DeviceState> device);
  void ProfileMark(std::chrono::steady_clock::time_point Profile::*mark);
  void ProfileDone();

  TorchModel* const model_;  // outlives every instance (the ABI destroys instances first)
  const VramdOwner owner_;
  const std::shared_ptr<LoadedModule> module_;
  const std::unique_ptr<DeviceState> device_;
  const std::unique_ptr<Profile> profile_;  // null unless VRAMD_PYTORCH_PROFILE=1
};

}  // namespace vramd::pytorch
