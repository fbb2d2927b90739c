// Logger, custom metrics (MetricFamily, Metric), model control (load_model, unload_model,
// is_model_ready) and get_model_dir: the parts of pb_utils that reach the server through
// VramdServerApi on behalf of the model Python code runs for (context.h).
#include <pybind11/stl.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "context.h"
#include "py_types.h"

namespace vramd::python {
namespace {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2, kVerbose = 3 };
struct LoggerTag {};  // Logger has static methods only

VramdLogLevel ToVramd(LogLevel level) {
  switch (level) {
    case LogLevel::kWarning: return VRAMD_LOG_WARNING;
    case LogLevel::kError: return VRAMD_LOG_ERROR;
    case LogLevel::kVerbose: return VRAMD_LOG_VERBOSE;
    default: return VRAMD_LOG_INFO;
  }
}

void LogMessage(const std::string& message, LogLevel level) {
  auto model = ModelForServer();
  if (!model) return;  // no server to log to
  std::string where;
  try {
    where = py::module_::import("vramd_python_host").attr("caller_location")(1).cast<std::string>();
  } catch (const py::error_already_set&) {
  }
  auto current = CurrentModel();
  std::string name = current ? "python model '" + current->name + "'" : "python backend";
  std::string text = name + (where.empty() ? "" : " (" + where + ")") + ": " + message;
  const VramdServerApi* api = model->server;
  py::gil_scoped_release release;
  Log(api, ToVramd(level), text);
}

std::shared_ptr<ModelShared> ServerModel(const char* what) {
  auto model = ModelForServer();
  if (!model || !model->alive.load()) {
    throw ModelException(std::string(what) + ": no model of this server is loaded");
  }
  return model;
}

class Metric {
 public:
  Metric(std::shared_ptr<ModelShared> model, void* handle)
      : model_(std::move(model)), handle_(handle) {}
  ~Metric() {
    if (model_->alive.load()) model_->server->metric_release(model_->server->server, handle_);
  }
  void Update(int32_t op, double value) {
    VramdError error{};
    VramdCode rc;
    {
      py::gil_scoped_release release;
      rc = model_->server->metric_update(model_->server->server, handle_, op, value, &error);
    }
    if (rc != VRAMD_OK) throw ModelException(error.message);
  }
  double Value() {
    VramdError error{};
    double value = 0;
    VramdCode rc;
    {
      py::gil_scoped_release release;
      rc = model_->server->metric_value(model_->server->server, handle_, &value, &error);
    }
    if (rc != VRAMD_OK) throw ModelException(error.message);
    return value;
  }

 private:
  std::shared_ptr<ModelShared> model_;
  void* handle_;
};

enum class MetricKind { kCounter = 0, kGauge = 1, kHistogram = 2 };

class MetricFamily {
 public:
  MetricFamily(const std::string& name, const std::string& description, MetricKind kind)
      : model_(ServerModel("MetricFamily")) {
    VramdError error{};
    VramdCode rc;
    {
      py::gil_scoped_release release;
      rc = model_->server->metric_family_create(model_->server->server, name.c_str(),
                                                description.c_str(), static_cast<int32_t>(kind),
                                                &handle_, &error);
    }
    if (rc != VRAMD_OK) throw ModelException(error.message);
  }
  ~MetricFamily() {
    if (model_->alive.load()) model_->server->metric_family_release(model_->server->server, handle_);
  }
  std::shared_ptr<Metric> Create(py::object labels, py::object buckets) {
    std::string labels_json = "{}";
    if (!labels.is_none()) {
      if (!py::isinstance<py::dict>(labels)) {
        throw ModelException("Expect dict, got " + TypeName(labels));
      }
      for (const auto& item : py::dict(labels)) {
        if (!py::isinstance<py::str>(item.first) || !py::isinstance<py::str>(item.second)) {
          throw ModelException("Metric labels must be a dict of str keys and str values");
        }
      }
      labels_json = py::module_::import("json").attr("dumps")(labels).cast<std::string>();
    }
    std::vector<double> bounds;
    if (!buckets.is_none()) bounds = buckets.cast<std::vector<double>>();
    VramdError error{};
    void* handle = nullptr;
    VramdCode rc;
    {
      py::gil_scoped_release release;
      rc = model_->server->metric_create(model_->server->server, handle_, labels_json.c_str(),
                                         bounds.empty() ? nullptr : bounds.data(), bounds.size(),
                                         &handle, &error);
    }
    if (rc != VRAMD_OK) throw ModelException(error.message);
    return std::make_shared<Metric>(model_, handle);
  }

 private:
  std::shared_ptr<ModelShared> model_;
  void* handle_ = nullptr;
};

// `files` as Triton's: a dict of "file:<path>" (relative to the model's directory) to bytes,
// which needs `config`; the model then loads from exactly those files.
void LoadModel(const std::string& name, const std::string& config, py::object files) {
  std::vector<std::pair<std::string, std::string>> copied;
  if (!files.is_none()) {
    if (!py::isinstance<py::dict>(files)) {
      throw ModelException("load_model: 'files' must be a dict of 'file:<path>' to bytes");
    }
    for (auto [key, value] : files.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key)) {
        throw ModelException("load_model: every key of 'files' must be a str 'file:<path>'");
      }
      const std::string k = key.cast<std::string>();
      if (k.rfind("file:", 0) != 0) {
        throw ModelException("load_model: the key '" + k + "' of 'files' must start with 'file:'");
      }
      if (!py::isinstance<py::bytes>(value)) {
        throw ModelException("load_model: the file '" + k + "' must be bytes");
      }
      copied.emplace_back(k.substr(5), value.cast<std::string>());
    }
  }
  auto model = ServerModel("load_model");
  const VramdServerApi* server = model->server;
  if (!copied.empty() && server->struct_size <= offsetof(VramdServerApi, load_model_files)) {
    throw ModelException("load_model: this server loads no model files");
  }
  std::vector<VramdModelFile> table;
  for (const auto& [path, bytes] : copied) table.push_back({path.c_str(), bytes.data(), bytes.size()});
  VramdError error{};
  VramdCode rc;
  {
    py::gil_scoped_release release;
    rc = table.empty()
             ? server->load_model(server->server, name.c_str(), config.c_str(), &error)
             : server->load_model_files(server->server, name.c_str(), config.c_str(),
                                        table.data(), table.size(), &error);
  }
  if (rc != VRAMD_OK) throw ModelException(error.message);
}

void UnloadModel(const std::string& name, bool unload_dependents) {
  auto model = ServerModel("unload_model");
  VramdError error{};
  VramdCode rc;
  {
    py::gil_scoped_release release;
    rc = model->server->unload_model(model->server->server, name.c_str(),
                                     unload_dependents ? 1 : 0, &error);
  }
  if (rc != VRAMD_OK) throw ModelException(error.message);
}

bool IsModelReady(const std::string& name, const std::string& version) {
  auto model = ServerModel("is_model_ready");
  int64_t v = 0;
  if (!version.empty()) {
    try {
      v = std::stoll(version);
    } catch (...) {
      throw ModelException("is_model_ready: model_version '" + version + "' is not a number");
    }
  }
  py::gil_scoped_release release;
  return model->server->is_model_ready(model->server->server, name.c_str(), v) != 0;
}

}  // namespace

void BindServices(py::module_& m) {
  py::class_<LoggerTag> logger(m, "Logger");
  py::enum_<LogLevel>(logger, "LogLevel")
      .value("INFO", LogLevel::kInfo)
      .value("WARNING", LogLevel::kWarning)
      .value("ERROR", LogLevel::kError)
      .value("VERBOSE", LogLevel::kVerbose)
      .export_values();
  logger
      .def_static("log", &LogMessage, py::arg("message"), py::arg("level") = LogLevel::kInfo)
      .def_static("log_info", [](const std::string& s) { LogMessage(s, LogLevel::kInfo); },
                  py::arg("message"))
      .def_static("log_warn", [](const std::string& s) { LogMessage(s, LogLevel::kWarning); },
                  py::arg("message"))
      .def_static("log_error", [](const std::string& s) { LogMessage(s, LogLevel::kError); },
                  py::arg("message"))
      .def_static("log_verbose", [](const std::string& s) { LogMessage(s, LogLevel::kVerbose); },
                  py::arg("message"));

  py::enum_<MetricKind>(m, "MetricKind")
      .value("COUNTER", MetricKind::kCounter)
      .value("GAUGE", MetricKind::kGauge)
      .value("HISTOGRAM", MetricKind::kHistogram)
      .export_values();
  py::class_<Metric, std::shared_ptr<Metric>>(m, "Metric")
      .def("increment", [](Metric& metric, double v) { metric.Update(0, v); }, py::arg("value"))
      .def("set", [](Metric& metric, double v) { metric.Update(1, v); }, py::arg("value"))
      .def("observe", [](Metric& metric, double v) { metric.Update(2, v); }, py::arg("value"))
      .def("value", &Metric::Value);
  py::class_<MetricFamily, std::shared_ptr<MetricFamily>> family(m, "MetricFamily");
  family
      .def(py::init<const std::string&, const std::string&, MetricKind>(), py::arg("name"),
           py::arg("description"), py::arg("kind"))
      .def("Metric", &MetricFamily::Create, py::arg("labels") = py::none(),
           py::arg("buckets") = py::none());
  family.attr("COUNTER") = MetricKind::kCounter;
  family.attr("GAUGE") = MetricKind::kGauge;
  family.attr("HISTOGRAM") = MetricKind::kHistogram;

  m.def("load_model", &LoadModel, py::arg("model_name"), py::arg("config") = "",
        py::arg("files") = py::none());
  m.def("unload_model", &UnloadModel, py::arg("model_name"), py::arg("unload_dependents") = false);
  m.def("is_model_ready", &IsModelReady, py::arg("model_name"), py::arg("model_version") = "");
  m.def("get_model_dir", []() -> py::object {
    auto model = CurrentModel();
    if (!model) return py::none();
    return py::str(model->version_dir);
  });
}

}  // namespace vramd::python
