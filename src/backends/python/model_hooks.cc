// A model's optional hooks beside initialize / execute / finalize: is_ready() (the readiness
// vramd asks through instance_ready) and the static auto_complete_config() (before the config
// is validated), with Triton's rules and texts (python_backend's README; pb_stub.cc).
#include <pybind11/pybind11.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common.h"
#include "interpreter.h"
#include "context.h"
#include "model.h"

namespace vramd::python {
namespace {

py::module_ HostModule() { return py::module_::import("vramd_python_host"); }

}  // namespace

VramdCode PythonInstance::Ready(VramdError* error) {
  ScopedGil gil;
  if (!object_ || !py::hasattr(*object_, "is_ready")) return VRAMD_OK;
  ContextScope scope(Context(Phase::kExecute, owner_));
  try {
    py::object result = Call(object_->attr("is_ready"));
    if (HostModule().attr("is_coroutine")(result).cast<bool>()) {
      if (!readiness_loop_) {
        CallContext context = Context(Phase::kExecute, owner_);
        py::cpp_function bind([context]() { BindThread(context); });
        readiness_loop_ = std::shared_ptr<py::object>(
            new py::object(HostModule().attr("InstanceLoop")(name_ + "_is_ready", bind)),
            [](py::object* loop) {
              ScopedGil gil;
              try {
                loop->attr("stop")();
              } catch (const py::error_already_set&) {
              }
              delete loop;
            });
      }
      result = readiness_loop_->attr("run")(result);
    }
    if (!py::isinstance<py::bool_>(result)) {
      SetError(error, "is_ready() must return a boolean value");
      return VRAMD_INTERNAL;
    }
    if (result.cast<bool>()) return VRAMD_OK;
    SetError(error, "is_ready() returned False");
    return VRAMD_UNAVAILABLE;
  } catch (const py::error_already_set& e) {
    SetError(error, "is_ready() raised: " + ErrorText(e));
    Log(model_->server, VRAMD_LOG_VERBOSE,
        "python model '" + model_->name + "': is_ready() of instance '" + name_ +
            "' raised: " + TracebackText(e));
    return VRAMD_INTERNAL;
  }
}

VramdCode AutoCompleteConfig(const VramdModelInfo& info, std::string* completed,
                             std::string* error) {
  error->clear();
  auto shared = std::make_shared<ModelShared>();
  shared->name = info.name ? info.name : "";
  shared->version = info.version;
  shared->model_dir = info.model_dir ? info.model_dir : "";
  shared->version_dir = info.version_dir ? info.version_dir : "";
  shared->config_json.assign(info.config_json ? info.config_json : "{}",
                             info.config_json ? info.config_json_size : 2);
  shared->server = info.server;
  if (shared->version_dir.empty()) return VRAMD_OK;  // no version: the load says so

  ScopedGil gil;
  std::string package;
  try {
    py::dict config = py::module_::import("json").attr("loads")(shared->config_json);
    std::string file_name = "model.py";
    if (config.contains("default_model_filename")) {
      std::string named = py::cast<std::string>(config["default_model_filename"]);
      if (!named.empty()) file_name = named;
    }
    shared->model_file = (std::filesystem::path(shared->version_dir) / file_name).string();
    if (!std::filesystem::is_regular_file(shared->model_file)) return VRAMD_OK;

    // A package of its own, dropped below: the model's load imports model.py afresh.
    package = HostModule()
                  .attr("create_package")(shared->name, shared->version, shared->version_dir,
                                          shared->model_dir)
                  .cast<std::string>();
    shared->package = package;
    RegisterModel(shared);
    py::object cls;
    {
      ContextScope scope(CallContext{shared, nullptr, Phase::kImport, 0});
      py::object module = HostModule().attr("import_model")(package, file_name);
      cls = module.attr("TritonPythonModel");
    }
    if (py::hasattr(cls, "auto_complete_config")) {
      py::module_ pb_utils = py::module_::import("triton_python_backend_utils");
      py::object model_config = pb_utils.attr("ModelConfig")(shared->config_json);
      py::object result;
      {
        ContextScope scope(CallContext{shared, nullptr, Phase::kImport, 0});
        result = cls.attr("auto_complete_config")(model_config);
      }
      if (!py::isinstance(result, pb_utils.attr("ModelConfig"))) {
        throw ModelException("auto_complete_config function in model '" + shared->name +
                             "' must return a valid pb.ModelConfig object.");
      }
      *completed =
          py::module_::import("json").attr("dumps")(result.attr("as_dict")()).cast<std::string>();
    }
  } catch (const py::error_already_set& e) {
    *error = "auto_complete_config of python model '" + shared->name +
             "' failed: " + ErrorText(e);
    Log(info.server, VRAMD_LOG_ERROR, *error + "\n" + TracebackText(e));
  } catch (const std::exception& e) {
    *error = e.what();
  }
  shared->alive.store(false);
  UnregisterModel(shared.get());
  if (!package.empty()) {
    try {
      HostModule().attr("remove_package")(package);
    } catch (const py::error_already_set& e) {
      Log(info.server, VRAMD_LOG_WARNING, "python model '" + shared->name +
                                              "': removing the modules auto-complete imported "
                                              "failed: " + ErrorText(e));
    }
  }
  return error->empty() ? VRAMD_OK : VRAMD_INVALID_ARGUMENT;
}

}  // namespace vramd::python
