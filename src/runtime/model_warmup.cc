// Model warmup: building each sample's requests from the config (and the warmup/ files), then
// running them through LoadedModel::Infer. The header gives the semantics and why each one.
#include "runtime/model_warmup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/half.h"
#include "core/tensor.h"
#include "runtime/model_file.h"
#include "runtime/request_validator.h"

namespace vramd::runtime {
namespace {

namespace fs = std::filesystem;

// Element bytes are written with memcpy from host values: the tensor format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "warmup data is built from host values; a big-endian host needs byte swapping");

// Every load of a config sends the same random values, so a warmup failure reproduces.
constexpr uint64_t kRandomSeed = 0x5eed'0f'0a'4d'a7a5ULL;

constexpr std::string_view kWarmupFolder = "warmup";  // Triton's kWarmupDataFolder

DataType CoreType(config::DataType t) { return static_cast<DataType>(static_cast<int>(t)); }


// The prefix every error of one sample carries.
class SampleErrors {
 public:
  SampleErrors(const config::ModelConfig& config, const config::ModelWarmup& sample)
      : prefix_(fmt::format("model '{}': warmup sample '{}'", config.name(), sample.name())) {}

  Status Sample(std::string_view what) const {
    return Status::InvalidArgument(fmt::format("{}: {}", prefix_, what));
  }
  Status Input(std::string_view input, std::string_view what) const {
    return Status::InvalidArgument(fmt::format("{}: input '{}': {}", prefix_, input, what));
  }
  Status InputInternal(std::string_view input, std::string_view what) const {
    return Status::Internal(fmt::format("{}: input '{}': {}", prefix_, input, what));
  }
  Status Wrap(const Status& status) const { return status.WithContext(prefix_); }

 private:
  std::string prefix_;
};

// One batch element of an input, read from its input_data_file.
Result<std::string> FileElement(const SampleErrors& errors, const std::string& input,
                                const config::ModelWarmup::Input& spec, DataType type,
                                int64_t elements, size_t element_bytes,
                                const fs::path& model_dir) {
  // The config can come from a load request: model_file.h's rule keeps the file inside warmup/.
  // Variable-length (BYTES) data is the whole file, so only then does its size need a limit.
  const ModelFileRule rule{.field = "input_data_file",
                           .folder = "the model's warmup/ folder",
                           .max_bytes = type == DataType::kBytes ? kMaxWarmupTensorBytes
                                                                 : UINTMAX_MAX};
  auto refused = [&](const Status& status) {
    return status.code() == StatusCode::kInternal ? errors.InputInternal(input, status.message())
                                                  : errors.Input(input, status.message());
  };
  auto file = ResolveModelFile(model_dir / kWarmupFolder, spec.input_data_file(), rule);
  if (!file.ok()) return refused(file.status());
  const fs::path& path = file->path;
  const uintmax_t size = file->size;

  if (type == DataType::kBytes) {
    // Variable-length elements: the whole file is the data, checked against dims below.
    auto data = ReadModelFile(*file, static_cast<size_t>(size), rule);
    if (!data.ok()) return refused(data.status());
    auto split = SplitBytesElements(*data, input, elements);
    if (!split.ok()) {
      // SplitBytesElements names the tensor, which this message already does.
      std::string_view detail = split.status().message();
      const std::string named = fmt::format("input '{}': ", input);
      if (detail.substr(0, named.size()) == named) detail.remove_prefix(named.size());
      return errors.Input(
          input, fmt::format("input_data_file '{}' does not hold {} TYPE_STRING element(s) "
                             "(4-byte little-endian length + bytes each): {}",
                             path.string(), elements, detail));
    }
    return std::move(*data);
  }

  // Fixed-size elements: at least one element's worth; Triton uses the prefix of a longer file.
  if (size < element_bytes) {
    return errors.Input(
        input, fmt::format("input_data_file '{}' has {} bytes, expected {} ({} element(s) of {})",
                           path.string(), size, element_bytes, elements,
                           DataTypeConfigName(type)));
  }
  auto data = ReadModelFile(*file, element_bytes, rule);
  if (!data.ok()) return refused(data.status());
  return std::move(data).value();
}

// Appends `count` random elements of `type` to `out`.
void AppendRandom(DataType type, int64_t count, std::mt19937_64& rng, std::string* out) {
  const size_t size = DataTypeByteSize(type);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    switch (type) {
      case DataType::kBool:
        out->push_back(static_cast<char>(bits & 1));
        break;
      case DataType::kFp32: {
        const float v = static_cast<float>(bits >> 40) * 0x1p-24f;  // [0, 1), exact
        out->append(reinterpret_cast<const char*>(&v), sizeof v);
        break;
      }
      case DataType::kFp64: {
        const double v = static_cast<double>(bits >> 11) * 0x1p-53;  // [0, 1), exact
        out->append(reinterpret_cast<const char*>(&v), sizeof v);
        break;
      }
      case DataType::kFp16:
      case DataType::kBf16: {
        const float f = static_cast<float>(bits >> 40) * 0x1p-24f;
        // Rounding to nearest can reach 1.0; clamp to the largest value below it.
        uint16_t h = type == DataType::kFp16 ? HalfFromFloat(f) : Bf16FromFloat(f);
        if (type == DataType::kFp16 && h >= 0x3c00) h = 0x3bff;
        if (type == DataType::kBf16 && h >= 0x3f80) h = 0x3f7f;
        out->append(reinterpret_cast<const char*>(&h), sizeof h);
        break;
      }
      default:  // integer types: uniform over all their bits, as Triton's random bytes
        out->append(reinterpret_cast<const char*>(&bits), size);
        break;
    }
  }
}

// The tensor of one sample input: shape [batch, dims...] or [dims...], data one element
// repeated `copies` times.
Result<Tensor> BuildInput(const SampleErrors& errors, const config::ModelConfig& config,
                          const config::ModelWarmup& sample, const config::ModelInput& model_in,
                          const config::ModelWarmup::Input& spec, const fs::path& model_dir,
                          std::mt19937_64& rng) {
  const std::string& name = model_in.name();
  if (spec.data_type() == config::TYPE_INVALID) {
    return errors.Input(name, fmt::format("data_type is not set (the model input is {})",
                                          config::DataType_Name(model_in.data_type())));
  }
  if (spec.data_type() != model_in.data_type()) {
    return errors.Input(name, fmt::format("data_type {} does not match the model input's {}",
                                          config::DataType_Name(spec.data_type()),
                                          config::DataType_Name(model_in.data_type())));
  }
  const DataType type = CoreType(spec.data_type());
  const Shape dims(spec.dims().begin(), spec.dims().end());
  for (int64_t d : dims) {
    if (d < 0) {
      return errors.Input(name, fmt::format("dims {} has a variable-size dimension; warmup needs "
                                            "every dimension given (batch excluded)",
                                            ShapeToString(dims)));
    }
  }
  const int64_t elements = ElementCount(dims);
  const bool batching = config.max_batch_size() > 0;
  const uint64_t copies = batching ? sample.batch_size() : 1;

  // One element's bytes, checked against the limit before anything is allocated. BYTES zero
  // data takes its 4-byte length prefix per element; BYTES file data is sized by its file.
  const size_t type_bytes = type == DataType::kBytes ? 4 : DataTypeByteSize(type);
  const uint64_t limit = kMaxWarmupTensorBytes;
  if (type_bytes == 0 || static_cast<uint64_t>(elements) > limit / type_bytes / copies) {
    return errors.Input(name, fmt::format("dims {} x batch {} of {} exceed the warmup limit of "
                                          "{} bytes",
                                          ShapeToString(dims), copies,
                                          DataTypeConfigName(type), kMaxWarmupTensorBytes));
  }
  const size_t element_bytes = static_cast<size_t>(elements) * type_bytes;

  std::string one;
  switch (spec.input_data_type_case()) {
    case config::ModelWarmup::Input::kZeroData:
      one.assign(element_bytes, '\0');
      break;
    case config::ModelWarmup::Input::kRandomData:
      if (type == DataType::kBytes) {
        // Random bytes are not a valid serialization; Triton falls back to zero data.
        one.assign(element_bytes, '\0');
      } else {
        one.reserve(element_bytes);
        AppendRandom(type, elements, rng, &one);
      }
      break;
    case config::ModelWarmup::Input::kInputDataFile: {
      VRAMD_ASSIGN_OR_RETURN(one, FileElement(errors, name, spec, type, elements,
                                              element_bytes, model_dir));
      if (one.size() > limit / copies) {
        return errors.Input(name, fmt::format("{} bytes x batch {} exceed the warmup limit of {} "
                                              "bytes",
                                              one.size(), copies, kMaxWarmupTensorBytes));
      }
      break;
    }
    case config::ModelWarmup::Input::INPUT_DATA_TYPE_NOT_SET:
      return errors.Input(name, "none of zero_data, random_data and input_data_file is set");
  }

  std::string data;
  data.reserve(one.size() * copies);
  for (uint64_t i = 0; i < copies; ++i) data += one;

  Tensor t;
  t.name = name;
  t.datatype = type;
  if (batching) t.shape.push_back(static_cast<int64_t>(sample.batch_size()));
  t.shape.insert(t.shape.end(), dims.begin(), dims.end());
  t.data = SharedBuffer::FromString(std::move(data));
  return t;
}

}  // namespace

Result<std::vector<InferRequest>> BuildWarmupRequests(const config::ModelConfig& config,
                                                      const config::ModelWarmup& given,
                                                      const std::filesystem::path& model_dir) {
  // Triton skips these too ("Skipping batch 0 warmup sample"); batch_size is unset in them.
  if (given.batch_size() == 0) return std::vector<InferRequest>{};
  const SampleErrors errors(config, given);
  const bool sequence = config.has_sequence_batching();
  // A sequence model takes requests of batch 1, each a sequence of its own (START and END,
  // kWarmupCorrelationId): its samples run as batch_size requests of one element. The
  // control and state inputs a Triton sample may list are the sequence batcher's to fill, and
  // are skipped here.
  config::ModelWarmup sample = given;
  if (sequence) {
    sample.set_batch_size(1);
    for (const auto& control : config.sequence_batching().control_input()) {
      sample.mutable_inputs()->erase(control.name());
    }
    for (const auto& state : config.sequence_batching().state()) {
      sample.mutable_inputs()->erase(state.input_name());
    }
  }
  const int32_t max_batch = config.max_batch_size();
  if (max_batch > 0 && given.batch_size() > static_cast<uint32_t>(max_batch)) {
    return errors.Sample(fmt::format("batch_size {} exceeds max_batch_size {}",
                                     given.batch_size(), max_batch));
  }

  // Names in sorted order, so the error for a sample with several problems is stable (a map's
  // iteration order is not).
  std::vector<std::string> names;
  for (const auto& [name, spec] : sample.inputs()) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (FindConfigInput(config, name) == nullptr) {
      return errors.Input(name, fmt::format("not an input of the model (inputs: {})",
                                            ConfigInputNames(config)));
    }
  }
  for (const auto& in : config.input()) {
    if (!in.optional() && sample.inputs().count(in.name()) == 0) {
      return errors.Input(in.name(), "missing: a warmup sample must give every non-optional "
                                     "input of the model");
    }
  }

  // Inputs in config order, so the request (and its random values) do not depend on map order.
  InferRequest request;
  request.id = "warmup:" + sample.name();
  request.model_name = config.name();
  std::mt19937_64 rng(kRandomSeed);
  for (const auto& in : config.input()) {
    auto it = sample.inputs().find(in.name());
    if (it == sample.inputs().end()) continue;  // an optional input left out
    VRAMD_ASSIGN_OR_RETURN(Tensor t,
                           BuildInput(errors, config, sample, in, it->second, model_dir, rng));
    request.inputs.push_back(std::move(t));
  }

  // What Infer would check: dims against the config's (fixed sizes, reshape), byte sizes.
  Status valid = ValidateInferRequest(config, request);
  if (!valid.ok()) return errors.Wrap(valid);

  // A batching model takes the batch in one request; one without batching gets batch_size
  // copies (sharing their data).
  const size_t n = max_batch > 0 && !sequence ? 1 : given.batch_size();
  if (sequence) {
    request.flags = kRequestFlagSequenceStart | kRequestFlagSequenceEnd;
    const auto& controls = config.sequence_batching().control_input();
    const bool string_id = std::any_of(controls.begin(), controls.end(), [](const auto& c) {
      return c.control_size() == 1 && c.control(0).data_type() == config::TYPE_STRING;
    });
    if (string_id) {
      request.correlation_id_string = kWarmupCorrelationString;
    } else {
      request.correlation_id = kWarmupCorrelationId;
    }
  }
  return std::vector<InferRequest>(n, request);
}

Status ValidateModelWarmup(const config::ModelConfig& config,
                           const std::filesystem::path& model_dir) {
  for (const auto& sample : config.model_warmup()) {
    auto requests = BuildWarmupRequests(config, sample, model_dir);
    if (!requests.ok()) return requests.status();
  }
  return Status::Ok();
}

Status RunModelWarmup(LoadedModel& model, const std::filesystem::path& model_dir) {
  const config::ModelConfig& config = model.config();
  if (config.model_warmup_size() == 0) return Status::Ok();

  // Every sample first: a bad sample fails the load before any sample has run.
  std::vector<std::vector<InferRequest>> built;
  built.reserve(config.model_warmup_size());
  for (const auto& sample : config.model_warmup()) {
    VRAMD_ASSIGN_OR_RETURN(auto requests, BuildWarmupRequests(config, sample, model_dir));
    built.push_back(std::move(requests));
  }

  const auto start = std::chrono::steady_clock::now();
  size_t ran = 0;
  for (int s = 0; s < config.model_warmup_size(); ++s) {
    const config::ModelWarmup& sample = config.model_warmup(s);
    if (built[s].empty()) {
      spdlog::debug("model '{}' version {}: skipping warmup sample '{}' (batch_size 0)",
                    model.name(), model.version(), sample.name());
      continue;
    }
    const uint32_t iterations = WarmupIterations(sample);
    spdlog::debug("model '{}' version {}: running warmup sample '{}', {} request(s) x {}",
                  model.name(), model.version(), sample.name(), built[s].size(), iterations);
    for (uint32_t i = 1; i <= iterations; ++i) {
      for (const InferRequest& request : built[s]) {
        auto outcome = model.Infer(request);
        if (!outcome.ok()) {
          return outcome.status().WithContext(
              iterations > 1
                  ? fmt::format("warmup sample '{}' iteration {} of {}", sample.name(), i,
                                iterations)
                  : fmt::format("warmup sample '{}'", sample.name()));
        }
        // The outcome (outputs, then the request's ledger owner) is released here: warmup
        // does not look at results, as Triton does not.
      }
    }
    ++ran;
  }
  if (ran > 0) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    spdlog::info("model '{}' version {}: warmup ran {} sample(s) in {} ms", model.name(),
                 model.version(), ran, ms);
  }
  return Status::Ok();
}

}  // namespace vramd::runtime
