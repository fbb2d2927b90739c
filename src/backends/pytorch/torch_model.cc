#include "torch_model.h"

#include "forward_probe.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <utility>

#if defined(VRAMD_TORCH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace vramd::pytorch {

// Where each of forward()'s arguments (after self) comes from.
struct ArgSource {
  std::string input;                       // the config input feeding it; empty: `fallback`
  std::optional<c10::IValue> fallback;     // the argument's default, or None for Optional
  bool strings = false;                    // a TYPE_STRING input, passed as List[str]
};

struct LoadedModule {
  torch::jit::Module module;
  c10::Device device;
  std::vector<ArgSource> args;
  bool outputs_by_index = false;  // every output is named "<name>__<index>"
};

namespace {

at::ScalarType ScalarTypeOf(VramdDataType type) {
  switch (type) {
    case VRAMD_TYPE_BOOL: return at::kBool;
    case VRAMD_TYPE_UINT8: return at::kByte;
    case VRAMD_TYPE_INT8: return at::kChar;
    case VRAMD_TYPE_INT16: return at::kShort;
    case VRAMD_TYPE_INT32: return at::kInt;
    case VRAMD_TYPE_INT64: return at::kLong;
    case VRAMD_TYPE_FP16: return at::kHalf;
    case VRAMD_TYPE_BF16: return at::kBFloat16;
    case VRAMD_TYPE_FP64: return at::kDouble;
    default: return at::kFloat;  // FP32; ModelSpec refuses the types LibTorch lacks
  }
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string ShapeText(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << ']';
  return out.str();
}

// LibTorch's messages carry C++ and TorchScript tracebacks; the error a client sees keeps the
// part that says what went wrong. TorchScript's own `raise` ends with "<Error>: <text>".
std::string Condense(const std::string& what) {
  std::vector<std::string> lines;
  std::istringstream in(what);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.find_first_not_of(' ') != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) return "unknown error";
  if (lines.size() == 1) return lines.front();
  // The TorchScript interpreter puts the original error last.
  const std::string& last = lines.back();
  if (what.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    return last;
  }
  return lines.front() + (last != lines.front() ? " (" + last + ")" : "");
}

bool IsStringList(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::StringType;
}

bool IsTensorType(const c10::TypePtr& type, bool* optional) {
  *optional = false;
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) {
    *optional = true;
    return opt->getElementType()->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

// Maps the config's inputs onto forward()'s arguments (see torch_model.h).
bool PlanInputs(const ModelSpec& spec, const c10::FunctionSchema& schema,
                std::vector<ArgSource>* plan, std::string* error) {
  const auto& all = schema.arguments();
  std::vector<const c10::Argument*> params;
  for (size_t i = 1; i < all.size(); ++i) params.push_back(&all[i]);  // [0] is self
  std::vector<std::string> names;
  for (const auto* p : params) names.push_back(p->name());

  plan->assign(params.size(), ArgSource{});
  bool by_name = true;
  for (const auto& in : spec.inputs) {
    if (std::find(names.begin(), names.end(), in.name) == names.end()) by_name = false;
  }
  if (by_name) {
    for (const auto& in : spec.inputs) {
      const size_t at = std::find(names.begin(), names.end(), in.name) - names.begin();
      (*plan)[at].input = in.name;
    }
  } else {
    for (const auto& in : spec.inputs) {
      if (!in.convention_index || *in.convention_index >= static_cast<int>(params.size()) ||
          !(*plan)[*in.convention_index].input.empty()) {
        *error = "input '" + in.name + "' matches none of forward()'s arguments (" +
                 Join(names) + "): name every input after an argument, or every input " +
                 "<name>__<index> with index 0.." + std::to_string(params.size() - 1) +
                 " once each";
        return false;
      }
      (*plan)[*in.convention_index].input = in.name;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto in = std::find_if(spec.inputs.begin(), spec.inputs.end(),
                                 [&](const TensorSpec& t) { return t.name == (*plan)[i].input; });
    if (in != spec.inputs.end() && in->datatype == VRAMD_TYPE_BYTES) {
      // Triton's convention for strings: TorchScript has no string tensors, so a TYPE_STRING
      // input arrives as a List[str] of all its elements in order.
      if (!IsStringList(params[i]->type())) {
        *error = "input '" + in->name + "' is TYPE_STRING, so forward() argument '" +
                 params[i]->name() + "' must be List[str], not " +
                 params[i]->type()->annotation_str();
        return false;
      }
      (*plan)[i].strings = true;
      continue;
    }
    bool optional = false;
    if (!IsTensorType(params[i]->type(), &optional)) {
      *error = "forward() argument '" + params[i]->name() + "' is " +
               params[i]->type()->annotation_str() +
               "; the pytorch backend passes tensors, and List[str] for TYPE_STRING inputs";
      return false;
    }
    if (params[i]->default_value()) {
      (*plan)[i].fallback = *params[i]->default_value();
    } else if (optional) {
      (*plan)[i].fallback = c10::IValue();
    }
    if ((*plan)[i].input.empty() && !(*plan)[i].fallback) {
      *error = "forward() argument '" + params[i]->name() + "' (position " + std::to_string(i) +
               ") gets no input: the config has no input named '" + params[i]->name() +
               "' or '<name>__" + std::to_string(i) + "'";
      return false;
    }
  }
  return true;
}

bool IsStringListValue(const c10::IValue& v) {
  return v.isList() && v.toList().elementType()->kind() == c10::TypeKind::StringType;
}

// The returned value for output `index` of the config: a tensor, or a List[str] for a
// TYPE_STRING output.
bool PickOutput(const c10::IValue& result, const ModelSpec& spec, size_t index,
                bool by_convention, c10::IValue* out, std::string* error) {
  const TensorSpec& o = spec.outputs[index];
  c10::IValue value;
  if (result.isGenericDict()) {
    for (const auto& entry : result.toGenericDict()) {
      if (entry.key().isString() && entry.key().toStringRef() == o.name) value = entry.value();
    }
    if (value.isNone()) {
      *error = "forward() returned a dict without key '" + o.name + "'";
      return false;
    }
  } else {
    const size_t at = by_convention ? static_cast<size_t>(*o.convention_index) : index;
    std::vector<c10::IValue> items;
    if (result.isTuple()) {
      const auto& elements = result.toTupleRef().elements();
      items.assign(elements.begin(), elements.end());
    } else if (result.isList() && !IsStringListValue(result)) {
      for (const auto& v : result.toListRef()) items.push_back(v);
    } else {
      items.push_back(result);  // one tensor, or one List[str]
    }
    if (at >= items.size()) {
      *error = "output '" + o.name + "' wants value " + std::to_string(at) + " of forward()'s " +
               "result, which has " + std::to_string(items.size());
      return false;
    }
    value = items[at];
  }
  if (o.datatype == VRAMD_TYPE_BYTES) {
    if (!IsStringListValue(value)) {
      *error = "output '" + o.name + "' is TYPE_STRING: forward() must return a List[str] for "
               "it, not " + value.type()->annotation_str();
      return false;
    }
  } else if (!value.isTensor()) {
    *error = "output '" + o.name + "': forward() returned " + value.tagKind() + ", not a tensor";
    return false;
  }
  *out = std::move(value);
  return true;
}

// TYPE_STRING data as vramd carries it (backend.h): each element a 4-byte little-endian length,
// then its bytes. Decoded here because the backend links nothing of vramd but its C header.
bool DecodeStrings(const VramdTensor& in, c10::List<std::string>* out, std::string* error) {
  size_t count = 1;
  for (size_t d = 0; d < in.rank; ++d) count *= static_cast<size_t>(std::max<int64_t>(0, in.shape[d]));
  const auto* p = static_cast<const unsigned char*>(in.data);
  size_t at = 0;
  out->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (in.byte_size - at < 4) {
      *error = "input '" + std::string(in.name) + "': element " + std::to_string(i) +
               " has no length (the data ends after " + std::to_string(at) + " bytes)";
      return false;
    }
    const uint32_t n = uint32_t{p[at]} | uint32_t{p[at + 1]} << 8 | uint32_t{p[at + 2]} << 16 |
                       uint32_t{p[at + 3]} << 24;
    at += 4;
    if (in.byte_size - at < n) {
      *error = "input '" + std::string(in.name) + "': element " + std::to_string(i) + " says " +
               std::to_string(n) + " bytes but " + std::to_string(in.byte_size - at) + " are left";
      return false;
    }
    out->push_back(std::string(reinterpret_cast<const char*>(p + at), n));
    at += n;
  }
  return true;
}

// The shape of a TYPE_STRING output of `count` elements: the config's dims after the batch
// dimension, with at most one -1 worked out from the count.
bool StringOutputShape(const TensorSpec& o, int64_t batch, size_t count,
                       std::vector<int64_t>* shape, std::string* error) {
  shape->clear();
  if (batch >= 0) shape->push_back(batch);
  int64_t known = batch >= 0 ? batch : 1;
  int unknown = -1;
  for (size_t d = 0; d < o.dims.size(); ++d) {
    if (o.dims[d] < 0) {
      if (unknown >= 0) {
        *error = "output '" + o.name + "': a List[str] of " + std::to_string(count) +
                 " strings cannot fill dims with more than one -1";
        return false;
      }
      unknown = static_cast<int>(shape->size());
      shape->push_back(-1);
    } else {
      known *= o.dims[d];
      shape->push_back(o.dims[d]);
    }
  }
  const auto n = static_cast<int64_t>(count);
  if (unknown >= 0 && known > 0 && n % known == 0) (*shape)[static_cast<size_t>(unknown)] = n / known;
  int64_t total = 1;
  for (int64_t d : *shape) total *= d;
  if (total != n || (unknown >= 0 && known == 0)) {
    *error = "output '" + o.name + "': forward() returned " + std::to_string(count) +
             " strings, which do not fill " + (batch >= 0 ? "[batch " + std::to_string(batch) + "]+" : "") +
             ShapeText(o.dims);
    return false;
  }
  return true;
}

bool CheckOutput(const TensorSpec& o, const ModelSpec& spec, const at::Tensor& t,
                 std::string* error) {
  if (t.scalar_type() != ScalarTypeOf(o.datatype)) {
    *error = "output '" + o.name + "' is " + std::string(c10::toString(t.scalar_type())) +
             " but the config says " + DataTypeName(o.datatype);
    return false;
  }
  const size_t batch = spec.max_batch_size > 0 ? 1 : 0;
  bool fits = static_cast<size_t>(t.dim()) == o.dims.size() + batch;
  for (size_t i = 0; fits && i < o.dims.size(); ++i) {
    fits = o.dims[i] < 0 || o.dims[i] == t.size(static_cast<int64_t>(i + batch));
  }
  if (!fits) {
    *error = "output '" + o.name + "' has shape " + ShapeText(t.sizes()) +
             " but the config says " + (batch ? "[batch]+" : "") + ShapeText(o.dims);
    return false;
  }
  return true;
}

// Adds TYPE_STRING output `o` to `outputs`, serialized as vramd carries strings.
bool AddStringOutput(const TensorSpec& o, const c10::List<c10::IValue>& list, int64_t batch,
                     const VramdOutputs& outputs, Failure* failure) {
  std::vector<int64_t> shape;
  std::string error;
  if (!StringOutputShape(o, batch, list.size(), &shape, &error)) {
    *failure = {VRAMD_INTERNAL, error};
    return false;
  }
  const std::vector<c10::IValue> strings = list.vec();
  size_t bytes = 0;
  for (const c10::IValue& v : strings) bytes += 4 + v.toStringRef().size();
  void* data = nullptr;
  VramdError err{};
  const VramdCode code = outputs.add(outputs.outputs, o.name.c_str(), o.datatype, shape.data(),
                                     shape.size(), bytes, &data, &err);
  if (code != VRAMD_OK) {
    *failure = {code, std::string(err.message, strnlen(err.message, sizeof err.message))};
    return false;
  }
  auto* p = static_cast<unsigned char*>(data);
  for (const c10::IValue& v : strings) {
    const std::string& text = v.toStringRef();
    const auto n = static_cast<uint32_t>(text.size());
    for (int b = 0; b < 4; ++b) *p++ = static_cast<unsigned char>(n >> (8 * b));
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  }
  return true;
}

#if defined(VRAMD_TORCH_CUDA)
// GPU executions hold this shared; clearing LibTorch's per-stream cuBLAS workspaces holds it
// exclusively, so no execution is using a workspace while the map is cleared.
std::shared_mutex& WorkspaceLock() {
  static std::shared_mutex mu;
  return mu;
}
#endif

// VRAMD_PYTORCH_PROFILE=1: each instance logs, every kProfileEvery executions, where the time
// of an execution went (inputs to the device, forward, outputs back), synchronizing its stream
// between the parts so that GPU time lands in the part that queued it, with forward()'s CPU time
// and context switches, and once the node kinds of the graph it ran. VRAMD_PYTORCH_OP_STATS=1
// adds the operators with the most time (forward_probe.h). For diagnosis only: the
// synchronizations and the operator callback cost time themselves.
bool EnvIsOne(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "1";
}
bool ProfileEnabled() {
  static const bool on = EnvIsOne("VRAMD_PYTORCH_PROFILE");
  return on;
}
bool OpStatsEnabled() {
  static const bool on = [] {
    const bool enabled = ProfileEnabled() && EnvIsOne("VRAMD_PYTORCH_OP_STATS");
    if (enabled) probe::StartOpStats();
    return enabled;
  }();
  return on;
}
constexpr int kProfileEvery = 200;

}  // namespace

struct TorchInstance::Profile {
  using Clock = std::chrono::steady_clock;
  int count = 0;
  double inputs_us = 0, forward_us = 0, forward_launch_us = 0, outputs_us = 0;
  double forward_cpu_us = 0, forward_voluntary = 0, forward_involuntary = 0;
  Clock::time_point start, inputs_done, forward_returned, forward_done;
  probe::ThreadUsage before_forward;
  bool graph_logged = false;  // kept across resets: the graph is logged once per instance
};

// ---- TorchModel ---------------------------------------------------------------------------

TorchModel::TorchModel(ModelSpec spec, std::string path, const VramdModelInfo& info)
    : spec_(std::move(spec)),
      path_(std::move(path)),
      owner_(info.owner),
      server_(info.server),
      link_(std::make_shared<ServerLink>(info.server, info.name ? info.name : "")) {
  AddLiveLink(link_);
}

TorchModel::~TorchModel() {
  {
    std::lock_guard lock(mu_);
    slept_.clear();
    modules_.clear();
  }
  const LiveUsage kept = LiveUsageOf(link_.get());
  if (kept.allocations > 0 && server_ != nullptr) {
    const std::string text = "LibTorch still holds " + std::to_string(kept.allocations) +
                             " allocation(s), " + std::to_string(kept.bytes) +
                             " bytes, made for model '" + link_->model_name() +
                             "' after its modules were destroyed";
    server_->log(server_->server, VRAMD_LOG_WARNING, text.c_str());
  }
  RemoveLiveLink(link_.get());
  link_->Close();
}

std::unique_ptr<TorchModel> TorchModel::Create(const VramdModelInfo& info, Failure* failure) {
  std::string error;
  auto spec = ParseModelSpec(info.config_json, info.config_json_size, &error);
  if (!spec) {
    *failure = {VRAMD_INVALID_ARGUMENT, error};
    return nullptr;
  }
  const std::filesystem::path path =
      std::filesystem::path(info.version_dir ? info.version_dir : "") / spec->model_filename;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    *failure = {VRAMD_NOT_FOUND, "no TorchScript file " + path.string() +
                                     " (the version directory holds '" +
                                     spec->model_filename + "', Triton's layout)"};
    return nullptr;
  }
  if (spec->intra_op_threads) at::set_num_threads(*spec->intra_op_threads);
  if (!spec->ignored_parameters.empty() && info.server != nullptr) {
    const std::string text = "model '" + spec->name + "': parameters " +
                             Join(spec->ignored_parameters) +
                             " change nothing in vramd (modules are always shared per device; "
                             "vramd's pools replace LibTorch's caching)";
    info.server->log(info.server->server, VRAMD_LOG_INFO, text.c_str());
  }
  return std::unique_ptr<TorchModel>(new TorchModel(std::move(*spec), path.string(), info));
}

// ---- Sleeping -------------------------------------------------------------------------------

struct TorchModel::Slept {
  at::Tensor live;     // the module's own tensor: its data goes and comes back (set_data)
  std::vector<int64_t> sizes;  // its shape when it went to sleep
  size_t offset = 0;   // where its bytes are in the device's image
  at::Tensor host;     // level 1, a tensor that is not contiguous: a pinned copy of its own
  at::Tensor image;    // level 1 on a GPU: the device's image (every tensor of it holds it)
};

namespace {

// A module's state: its parameters and buffers, submodules' included, named.
std::vector<std::pair<std::string, at::Tensor>> StateTensors(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    state.emplace_back(p.name, p.value);
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    state.emplace_back(b.name, b.value);
  }
  return state;
}

size_t BytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// `bytes` of pinned host memory from vramd (VRAMD_DEVICE_CUDA_HOST, charged to `owner`) as a
// byte tensor, freed through `link` when the tensor goes. Undefined, with `failure` set, when
// vramd has none.
at::Tensor PinnedBytes(const std::shared_ptr<ServerLink>& link, VramdOwner owner, size_t bytes,
                       Failure* failure) {
  void* ptr = nullptr;
  VramdCode code = VRAMD_UNAVAILABLE;
  VramdError error{};
  link->WithApi([&](const VramdServerApi* api) {
    code = api->allocate(api->server, owner, VRAMD_DEVICE_CUDA_HOST, -1, std::max<size_t>(bytes, 1),
                         nullptr, &ptr, &error);
  });
  if (code != VRAMD_OK || ptr == nullptr) {
    *failure = {code == VRAMD_OK ? VRAMD_INTERNAL : code,
                std::string("pinned host memory for a sleeping model's tensors: ") + error.message};
    return {};
  }
  return torch::from_blob(
      ptr, {static_cast<int64_t>(bytes)},
      [link](void* p) {
        link->WithApi([p](const VramdServerApi* api) {
          api->free(api->server, VRAMD_DEVICE_CUDA_HOST, -1, p);
        });
      },
      at::TensorOptions().dtype(at::kByte).device(c10::kCPU));
}

// A contiguous tensor of `sizes` and `like`'s dtype over the bytes of `image` (a byte tensor)
// from `offset`, on `image`'s device, keeping `image` alive.
at::Tensor ViewOf(const at::Tensor& image, size_t offset, at::IntArrayRef sizes,
                  const at::Tensor& like) {
  at::Tensor keep = image;
  return torch::from_blob(static_cast<uint8_t*>(image.data_ptr()) + offset, sizes,
                          [keep](void*) mutable { keep.reset(); },
                          like.options().device(image.device()).requires_grad(false));
}

void SynchronizeDevice(const c10::Device& device) {
#if defined(VRAMD_TORCH_CUDA)
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    cudaDeviceSynchronize();
  }
#else
  (void)device;
#endif
}

std::string ShapeOf(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

// Offsets of the tensors' bytes in one image: each aligned to 256 bytes.
constexpr size_t kImageAlignment = 256;

}  // namespace

// Level 1 on a GPU packs every contiguous tensor of a device's module into one pinned image, so
// that a wake is one device allocation and one copy at the DMA rate (tensor by tensor, each with
// its own allocation, the copies ran at 0.53 of pinned H2D: H100 run 43). The woken tensors are
// views of one device image, which goes when the last of them does (a sleep drops them all).
bool TorchModel::Sleep(int level, Failure* failure) {
  std::lock_guard lock(mu_);
  if (asleep_) return true;
  ChargeScope charge(link_, owner_);
  std::map<std::string, std::vector<Slept>> slept;
  // Every copy is made before any tensor lets go, so a failure leaves the model as it was.
  for (const auto& [device, loaded] : modules_) {
    auto& tensors = slept[device];
    const bool keep = level == 1 && loaded->device.is_cuda();
    size_t total = 0;
    for (auto& [name, t] : StateTensors(loaded->module)) {
      Slept s{t, t.sizes().vec(), 0, {}, {}};
      if (keep && t.is_contiguous()) {
        s.offset = (total + kImageAlignment - 1) / kImageAlignment * kImageAlignment;
        total = s.offset + BytesOf(t);
      } else if (keep) {
        s.host = PinnedBytes(link_, owner_, BytesOf(t), failure);
        if (!s.host.defined()) return false;
        s.host = ViewOf(s.host, 0, s.sizes, t);
        s.host.copy_(t);
      }
      tensors.push_back(std::move(s));
    }
    if (keep) {
      at::Tensor image = PinnedBytes(link_, owner_, total, failure);
      if (!image.defined()) return false;
      for (Slept& s : tensors) {
        s.image = image;
        if (!s.host.defined()) {
          ViewOf(image, s.offset, s.sizes, s.live).copy_(s.live, /*non_blocking=*/true);
        }
      }
    }
    SynchronizeDevice(loaded->device);
  }
  for (auto& [device, tensors] : slept) {
    for (Slept& s : tensors) s.live.set_data(at::empty({0}, s.live.options()));
  }
  slept_ = std::move(slept);
  asleep_ = true;
  return true;
}

bool TorchModel::Wake(Failure* failure) {
  std::lock_guard lock(mu_);
  if (!asleep_) return true;
  ChargeScope charge(link_, owner_);
  // What each tensor gets back; applied only once every device has it.
  std::vector<std::pair<at::Tensor, at::Tensor>> restored;
  for (auto& [device, loaded] : modules_) {
    std::vector<Slept>& tensors = slept_[device];
    const at::Tensor image = tensors.empty() ? at::Tensor() : tensors.front().image;
    std::vector<std::pair<std::string, at::Tensor>> fresh;
    if (!image.defined()) {
      try {
        fresh = StateTensors(torch::jit::load(path_, loaded->device));
      } catch (const std::exception& e) {
        *failure = {VRAMD_UNAVAILABLE, "waking: cannot load TorchScript file " + path_ + " again: " +
                                           Condense(e.what())};
        return false;
      }
      if (fresh.size() != tensors.size()) {
        *failure = {VRAMD_INVALID_ARGUMENT,
                    path_ + " changed since the model loaded (it has " +
                        std::to_string(fresh.size()) + " parameters and buffers, the model " +
                        std::to_string(tensors.size()) + "), so it cannot wake from it (load it again)"};
        return false;
      }
    }
    at::Tensor on_device;
    if (image.defined()) {
      on_device = at::empty({image.numel()},
                            at::TensorOptions().dtype(at::kByte).device(loaded->device));
      on_device.copy_(image, /*non_blocking=*/true);
    }
    const auto names = StateTensors(loaded->module);
    for (size_t i = 0; i < tensors.size(); ++i) {
      at::Tensor data;
      if (image.defined()) {
        const Slept& s = tensors[i];
        data = s.host.defined() ? s.host.to(loaded->device, /*non_blocking=*/true)
                                : ViewOf(on_device, s.offset, s.sizes, s.live);
      } else {
        data = fresh[i].second.detach();
        if (fresh[i].first != names[i].first || data.scalar_type() != tensors[i].live.scalar_type()) {
          *failure = {VRAMD_INVALID_ARGUMENT,
                      path_ + " changed since the model loaded ('" + fresh[i].first + "', " +
                          ShapeOf(data) + ", where the model had '" + names[i].first +
                          "'), so it cannot wake from it (load it again)"};
          return false;
        }
      }
      restored.emplace_back(tensors[i].live, std::move(data));
    }
    SynchronizeDevice(loaded->device);
  }
  for (auto& [live, data] : restored) live.set_data(data);
  slept_.clear();
  asleep_ = false;
  return true;
}

std::shared_ptr<LoadedModule> TorchModel::ModuleFor(const std::string& device, Failure* failure) {
  std::lock_guard lock(mu_);
  if (auto it = modules_.find(device); it != modules_.end()) return it->second;
  ChargeScope charge(link_, owner_);  // the weights belong to the version
  const c10::Device where(device);
  torch::jit::Module module;
  try {
    // A GPU after the first copies the module's tensors from a GPU that has them (device to
    // device, peer to peer where LibTorch may) instead of reading the file again. LibTorch 1.x
    // (Debian's, CPU only) has no deepcopy to a device, and no second GPU to copy to.
    std::shared_ptr<LoadedModule> on_gpu;
#if TORCH_VERSION_MAJOR >= 2
    for (const auto& [name, loaded] : modules_) {
      if (where.is_cuda() && loaded->device.is_cuda()) on_gpu = loaded;
    }
    if (on_gpu != nullptr) {
      module = on_gpu->module.deepcopy(where);
      if (server_ != nullptr) {
        const std::string text = "model '" + spec_.name + "': the module on " + device +
                                 " is copied from " + on_gpu->device.str() +
                                 " (the file is read once)";
        server_->log(server_->server, VRAMD_LOG_INFO, text.c_str());
      }
    }
#endif
    if (on_gpu == nullptr) module = torch::jit::load(path_, where);
  } catch (const c10::Error& e) {
    *failure = {VRAMD_INVALID_ARGUMENT,
                "cannot load TorchScript file " + path_ + ": " + Condense(e.what_without_backtrace())};
    return nullptr;
  } catch (const std::exception& e) {
    *failure = {VRAMD_INVALID_ARGUMENT,
                "cannot load TorchScript file " + path_ + ": " + Condense(e.what())};
    return nullptr;
  }
  module.eval();
  auto method = module.find_method("forward");
  if (!method) {
    *failure = {VRAMD_INVALID_ARGUMENT, "TorchScript file " + path_ + " has no forward()"};
    return nullptr;
  }
  auto loaded = std::make_shared<LoadedModule>(LoadedModule{std::move(module), where, {}, false});
  std::string error;
  if (!PlanInputs(spec_, method->function().getSchema(), &loaded->args, &error)) {
    *failure = {VRAMD_INVALID_ARGUMENT, error};
    return nullptr;
  }
  loaded->outputs_by_index = std::all_of(spec_.outputs.begin(), spec_.outputs.end(),
                                         [](const TensorSpec& o) { return o.convention_index; });
  modules_.emplace(device, loaded);
  return loaded;
}

// ---- TorchInstance ------------------------------------------------------------------------

struct TorchInstance::DeviceState {
  c10::Device device{c10::DeviceType::CPU};
#if defined(VRAMD_TORCH_CUDA)
  c10::cuda::CUDAStream Stream() const {
    return c10::cuda::getStreamFromExternal(stream, device.index());
  }
  cudaStream_t stream = nullptr;  // owned
  ~DeviceState() {
    if (stream == nullptr) return;
    cudaStreamSynchronize(stream);
    {
      // LibTorch caches a cuBLAS workspace per (handle, stream); one for this stream must not
      // outlive it, or the memory stays held after the instance (and its ledger owner) are gone.
      std::unique_lock lock(WorkspaceLock());
#if TORCH_VERSION_MAJOR >= 2
      at::cuda::clearCublasWorkspaces();
#endif
    }
    cudaStreamDestroy(stream);
  }
#endif
};

TorchInstance::TorchInstance(TorchModel* model, VramdOwner owner,
                             std::shared_ptr<LoadedModule> module,
                             std::unique_ptr<DeviceState> device)
    : model_(model),
      owner_(owner),
      module_(std::move(module)),
      device_(std::move(device)),
      profile_(ProfileEnabled() ? std::make_unique<Profile>() : nullptr) {
  if (profile_) OpStatsEnabled();
}

TorchInstance::~TorchInstance() {
  // forward() runs charged to the instance, but what it leaves alive is LibTorch state in the
  // module that the version's instances share (a tensor the module keeps in itself), or per-
  // stream state freed just after with device_. Either way it is not the instance's leak.
  const size_t moved = RechargeLeftovers(model_->link().get(), owner_, model_->owner());
  const VramdServerApi* server = model_->server();
  if (moved > 0 && server != nullptr) {
    const std::string text = std::to_string(moved) + " allocation(s) made by instance " +
                             "executions outlive it; the version is charged for them now";
    server->log(server->server, VRAMD_LOG_VERBOSE, text.c_str());
  }
}

std::unique_ptr<TorchInstance> TorchInstance::Create(TorchModel* model,
                                                     const VramdInstanceInfo& info,
                                                     Failure* failure) {
  auto state = std::make_unique<DeviceState>();
  std::string device = "cpu";
  if (info.kind == VRAMD_DEVICE_GPU) {
#if defined(VRAMD_TORCH_CUDA)
    if (info.device_id < 0 || info.device_id >= static_cast<int32_t>(torch::cuda::device_count())) {
      *failure = {VRAMD_UNAVAILABLE, "instance '" + std::string(info.name ? info.name : "") +
                                         "' asks for cuda:" + std::to_string(info.device_id) +
                                         ", which LibTorch does not see"};
      return nullptr;
    }
    device = "cuda:" + std::to_string(info.device_id);
    state->device = c10::Device(device);
    c10::cuda::CUDAGuard guard(state->device);
    if (cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking) != cudaSuccess) {
      *failure = {VRAMD_UNAVAILABLE, "cannot create a CUDA stream on " + device + ": " +
                                         cudaGetErrorString(cudaGetLastError())};
      state->stream = nullptr;
      return nullptr;
    }
#else
    *failure = {VRAMD_UNSUPPORTED,
                "this pytorch backend was built against a CPU-only LibTorch; use KIND_CPU or "
                "the backend built against a CUDA LibTorch"};
    return nullptr;
#endif
  } else if (info.kind != VRAMD_DEVICE_CPU) {
    *failure = {VRAMD_INVALID_ARGUMENT, "unknown instance kind"};
    return nullptr;
  }
  auto module = model->ModuleFor(device, failure);
  if (!module) return nullptr;
  return std::unique_ptr<TorchInstance>(
      new TorchInstance(model, info.owner, std::move(module), std::move(state)));
}

void TorchInstance::ProfileMark(Profile::Clock::time_point Profile::*mark) {
  if (!profile_) return;
#if defined(VRAMD_TORCH_CUDA)
  if (device_->device.is_cuda()) device_->Stream().synchronize();
#endif
  profile_.get()->*mark = Profile::Clock::now();
}

void TorchInstance::ProfileDone() {
  if (!profile_) return;
  Profile& p = *profile_;
  const auto now = Profile::Clock::now();
  auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  p.inputs_us += us(p.start, p.inputs_done);
  p.forward_us += us(p.inputs_done, p.forward_done);
  p.forward_launch_us += us(p.inputs_done, p.forward_returned);
  p.outputs_us += us(p.forward_done, now);
  if (++p.count < kProfileEvery) return;
  const VramdServerApi* server = model_->server();
  auto log = [server](const std::string& text) {
    if (server != nullptr) server->log(server->server, VRAMD_LOG_INFO, text.c_str());
  };
  const std::string text = "profile of " + std::to_string(p.count) + " executions on " +
                           module_->device.str() + ", mean us: inputs " +
                           std::to_string(p.inputs_us / p.count) + ", forward " +
                           std::to_string(p.forward_us / p.count) + " (of which forward() returning " +
                           std::to_string(p.forward_launch_us / p.count) + ", CPU " +
                           std::to_string(p.forward_cpu_us / p.count) + ", switches " +
                           std::to_string(p.forward_voluntary / p.count) + " voluntary " +
                           std::to_string(p.forward_involuntary / p.count) +
                           " involuntary), outputs " + std::to_string(p.outputs_us / p.count);
  log(text);
  if (!p.graph_logged) log("graph run on " + module_->device.str() + ": " + probe::LastGraphSummary());
  if (OpStatsEnabled()) log("operators (total us, calls, us/call), process-wide:\n" + probe::TakeOpStats(25));
  p = Profile{};
  p.graph_logged = true;
}

bool TorchInstance::Execute(const VramdRequest& request, const VramdOutputs& outputs,
                            Failure* failure) {
  const ModelSpec& spec = model_->spec();
  // LibTorch keeps per-stream state (cuBLAS workspaces) beyond one request: it belongs to the
  // instance whose stream it serves, so the instance is charged, not the request.
  ChargeScope charge(model_->link(), owner_);
  std::optional<c10::InferenceMode> inference;
  if (spec.inference_mode) inference.emplace();
  torch::NoGradGuard no_grad;
  torch::jit::GraphOptimizerEnabledGuard optimize(spec.optimized_execution);
  const c10::Device device = module_->device;
#if defined(VRAMD_TORCH_CUDA)
  std::optional<std::shared_lock<std::shared_mutex>> workspaces;
  std::optional<c10::cuda::CUDAGuard> device_guard;
  std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
  if (device.is_cuda()) {
    workspaces.emplace(WorkspaceLock());
    device_guard.emplace(device);
    stream_guard.emplace(device_->Stream());
  }
#endif
  if (profile_) profile_->start = Profile::Clock::now();
  try {
    std::vector<c10::IValue> args;
    args.reserve(module_->args.size());
    for (const ArgSource& source : module_->args) {
      const VramdTensor* in = nullptr;
      for (size_t i = 0; i < request.input_count && !source.input.empty(); ++i) {
        if (source.input == request.inputs[i].name) in = &request.inputs[i];
      }
      if (in == nullptr) {
        if (!source.fallback) {
          *failure = {VRAMD_INVALID_ARGUMENT, "input '" + source.input + "' is missing"};
          return false;
        }
        args.push_back(*source.fallback);
        continue;
      }
      if (source.strings) {
        c10::List<std::string> strings;
        std::string error;
        if (!DecodeStrings(*in, &strings, &error)) {
          *failure = {VRAMD_INVALID_ARGUMENT, error};
          return false;
        }
        args.emplace_back(std::move(strings));
        continue;
      }
      const std::vector<int64_t> shape(in->shape, in->shape + in->rank);
      // The request's bytes are only read: forward() gets a copy on a GPU, and on the CPU a
      // module that writes into its input writes into vramd's buffer for this call only.
      at::Tensor t = torch::from_blob(const_cast<void*>(in->data), shape,
                                      torch::TensorOptions().dtype(ScalarTypeOf(in->datatype)));
      if (device.is_cuda()) t = t.to(device, /*non_blocking=*/false, /*copy=*/true);
      args.push_back(std::move(t));
    }
    ProfileMark(&Profile::inputs_done);
    if (profile_) profile_->before_forward = probe::ThreadUsageNow();
    const c10::IValue result = module_->module.forward(std::move(args));
    if (profile_) {
      profile_->forward_returned = Profile::Clock::now();
      const probe::ThreadUsage after = probe::ThreadUsageNow();
      profile_->forward_cpu_us += after.cpu_us - profile_->before_forward.cpu_us;
      profile_->forward_voluntary +=
          after.voluntary_switches - profile_->before_forward.voluntary_switches;
      profile_->forward_involuntary +=
          after.involuntary_switches - profile_->before_forward.involuntary_switches;
    }
    ProfileMark(&Profile::forward_done);

    // A batched model's batch size, for the shape of TYPE_STRING outputs: every input of the
    // request has it first.
    const int64_t batch = spec.max_batch_size > 0 && request.input_count > 0 &&
                                  request.inputs[0].rank > 0
                              ? request.inputs[0].shape[0]
                              : -1;
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
      const TensorSpec& o = spec.outputs[i];
      c10::IValue value;
      std::string error;
      if (!PickOutput(result, spec, i, module_->outputs_by_index, &value, &error)) {
        *failure = {VRAMD_INTERNAL, error};
        return false;
      }
      if (o.datatype == VRAMD_TYPE_BYTES) {
        if (!AddStringOutput(o, value.toList(), batch, outputs, failure)) return false;
        continue;
      }
      at::Tensor t = value.toTensor();
      if (!CheckOutput(o, spec, t, &error)) {
        *failure = {VRAMD_INTERNAL, error};
        return false;
      }
      t = t.contiguous();
      const std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
      void* data = nullptr;
      VramdError err{};
      const VramdCode code = outputs.add(outputs.outputs, o.name.c_str(), o.datatype,
                                         shape.data(), shape.size(), bytes, &data, &err);
      if (code != VRAMD_OK) {
        *failure = {code, std::string(err.message, strnlen(err.message, sizeof err.message))};
        return false;
      }
      if (bytes > 0) {
        torch::from_blob(data, shape, torch::TensorOptions().dtype(t.scalar_type())).copy_(t);
      }
    }
    ProfileDone();
    return true;
  } catch (const c10::Error& e) {
    *failure = {VRAMD_INTERNAL, "forward() failed: " + Condense(e.what_without_backtrace())};
  } catch (const std::exception& e) {
    *failure = {VRAMD_INTERNAL, "forward() failed: " + Condense(e.what())};
  }
  return false;
}

}  // namespace vramd::pytorch
