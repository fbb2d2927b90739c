#include "config/model_config_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include "config/reflection_util.h"

namespace vramd::config {
namespace {

namespace pb = google::protobuf;

// What protobuf's text parser says when AllowUnknownField(true) skips a field:
//   Message type "vramd.config.ModelConfig" has no field named "optimization".
constexpr std::string_view kNoFieldNamed = "has no field named \"";

// A (0-based line, 0-based column) position as protobuf's tokenizer counts it.
using Position = std::pair<int, int>;

// Collects the text parser's diagnostics. Errors become "<file>:<line>:<col>: <message>" with
// 1-based numbers; warnings are kept with their 0-based position to be named afterwards.
class DiagnosticCollector : public pb::io::ErrorCollector {
 public:
  struct Warning {
    Position position;
    std::string message;
  };

  explicit DiagnosticCollector(std::string_view file_name) : file_name_(file_name) {}

  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    errors_.push_back(fmt::format("{}:{}:{}: {}", file_name_, line + 1, column + 1, message));
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    warnings_.push_back({{line, column}, message});
  }

  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<Warning>& warnings() const { return warnings_; }

 private:
  std::string file_name_;
  std::vector<std::string> errors_;
  std::vector<Warning> warnings_;
};

// Configures a tokenizer the way TextFormat's parser does, so positions agree with its reports.
void ConfigureLikeTextFormat(pb::io::Tokenizer* tokenizer) {
  tokenizer->set_allow_f_after_float(true);
  tokenizer->set_comment_style(pb::io::Tokenizer::SH_COMMENT_STYLE);
  tokenizer->set_require_space_after_number(false);
  tokenizer->set_allow_multiline_strings(true);
}

// For each wanted position, the dotted path of the known fields enclosing the token there, e.g.
// "instance_group." for a field inside `instance_group [ { ... } ]`, "" at top level. The text
// must already have parsed; skipped (unknown) messages never contain a wanted position because
// the parser does not look inside them.
std::map<Position, std::string> EnclosingPaths(std::string_view text,
                                               const std::set<Position>& wanted) {
  struct Scope {
    std::string name;
    bool is_list;  // `name [ ... ]`: its `{` elements are messages named `name`
  };
  std::map<Position, std::string> paths;
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  struct Quiet : pb::io::ErrorCollector {
    void AddError(int, pb::io::ColumnNumber, const std::string&) override {}
  } quiet;
  pb::io::Tokenizer tokenizer(&input, &quiet);
  ConfigureLikeTextFormat(&tokenizer);

  std::vector<Scope> stack;
  std::string pending;  // the field name just read, while `:` or an opening bracket may follow
  while (tokenizer.Next()) {
    const pb::io::Tokenizer::Token& token = tokenizer.current();
    if (token.type == pb::io::Tokenizer::TYPE_IDENTIFIER) {
      if (wanted.count({token.line, token.column}) != 0) {
        std::string path;
        for (const Scope& scope : stack) {
          if (!scope.is_list) path += scope.name + ".";
        }
        paths[{token.line, token.column}] = path;
      }
      pending = token.text;
      continue;
    }
    const std::string& symbol = token.text;
    if (token.type != pb::io::Tokenizer::TYPE_SYMBOL) {
      pending.clear();
    } else if (symbol == ":") {
      // keep `pending`: `name: { ... }` and `name: [ ... ]` are both valid
    } else if (symbol == "[") {
      stack.push_back({pending, true});
      pending.clear();
    } else if (symbol == "{" || symbol == "<") {
      std::string name = pending;
      if (name.empty() && !stack.empty() && stack.back().is_list) name = stack.back().name;
      stack.push_back({name, false});
      pending.clear();
    } else if (symbol == "}" || symbol == ">" || symbol == "]") {
      if (!stack.empty()) stack.pop_back();
      pending.clear();
    } else {
      pending.clear();
    }
  }
  return paths;
}

// Turns the parser's warnings into ParsedModelConfig::unsupported_fields entries:
// "<path.>field (line N)", N 1-based; other warnings are kept as "<message> (line N)".
std::vector<std::string> DescribeSkippedFields(
    std::string_view text, const std::vector<DiagnosticCollector::Warning>& warnings) {
  std::set<Position> wanted;
  for (const auto& warning : warnings) wanted.insert(warning.position);
  std::map<Position, std::string> paths = EnclosingPaths(text, wanted);

  std::vector<std::string> entries;
  for (const auto& warning : warnings) {
    int line = warning.position.first + 1;
    size_t start = warning.message.find(kNoFieldNamed);
    size_t end = start == std::string::npos
                     ? std::string::npos
                     : warning.message.find('"', start + kNoFieldNamed.size());
    if (end == std::string::npos) {
      entries.push_back(fmt::format("{} (line {})", warning.message, line));
      continue;
    }
    start += kNoFieldNamed.size();
    std::string field = warning.message.substr(start, end - start);
    auto path = paths.find(warning.position);
    std::string prefix = path == paths.end() ? "" : path->second;
    entries.push_back(fmt::format("{}{} (line {})", prefix, field, line));
  }
  return entries;
}

std::string TensorLabel(std::string_view kind, int index, const std::string& name) {
  return name.empty() ? fmt::format("{}[{}]", kind, index) : fmt::format("{} '{}'", kind, name);
}

Status CheckDims(const std::string& where, std::string_view field_name,
                 const pb::RepeatedField<int64_t>& dims) {
  for (int i = 0; i < dims.size(); ++i) {
    if (dims[i] != -1 && dims[i] <= 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: {}[{}] is {}; each dimension must be -1 (variable) or positive", where, field_name,
          i, dims[i]));
    }
  }
  return Status::Ok();
}

// The products of the fixed dimensions between variable (-1) ones: [2,-1,3,4] -> {2, 12}.
std::vector<int64_t> FixedSegments(const pb::RepeatedField<int64_t>& dims) {
  std::vector<int64_t> segments{1};
  for (int64_t d : dims) {
    if (d == -1) {
      segments.push_back(1);
    } else if (segments.back() > INT64_MAX / d) {
      segments.back() = INT64_MAX;  // saturate: only equality matters
    } else {
      segments.back() *= d;
    }
  }
  return segments;
}

// A reshape must describe the same elements: the same number of variable dimensions, and the
// same product of fixed dimensions before, between and after them (dims [-1,4] and reshape
// [-1,2,2] agree; [16] and [4,2] do not).
Status CheckReshape(const std::string& where, const pb::RepeatedField<int64_t>& dims,
                    const ModelTensorReshape& reshape) {
  VRAMD_RETURN_IF_ERROR(CheckDims(where, "reshape.shape", reshape.shape()));
  if (FixedSegments(dims) == FixedSegments(reshape.shape())) return Status::Ok();
  auto join = [](const pb::RepeatedField<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); };
  return Status::InvalidArgument(fmt::format(
      "{}: reshape.shape {} does not have the same elements as dims {}", where,
      join(reshape.shape()), join(dims)));
}

template <typename Tensor>
Status CheckTensors(const std::string& model, std::string_view kind,
                    const pb::RepeatedPtrField<Tensor>& tensors) {
  std::set<std::string> seen;
  for (int i = 0; i < tensors.size(); ++i) {
    const Tensor& tensor = tensors[i];
    std::string where = fmt::format("{}: {}", model, TensorLabel(kind, i, tensor.name()));
    if (tensor.name().empty()) {
      return Status::InvalidArgument(fmt::format("{}: name is empty", where));
    }
    if (!seen.insert(tensor.name()).second) {
      return Status::InvalidArgument(
          fmt::format("{}: the name is used by more than one {}", where, kind));
    }
    if (tensor.data_type() == TYPE_INVALID) {
      return Status::InvalidArgument(fmt::format("{}: data_type is not set", where));
    }
    VRAMD_RETURN_IF_ERROR(CheckDims(where, "dims", tensor.dims()));
    if (tensor.has_reshape()) {
      VRAMD_RETURN_IF_ERROR(CheckReshape(where, tensor.dims(), tensor.reshape()));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ParsedModelConfig> ParseModelConfigText(std::string_view text, std::string_view file_name) {
  if (text.size() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument(fmt::format("{}: config is too large ({} bytes)", file_name,
                                               text.size()));
  }
  ParsedModelConfig parsed;
  DiagnosticCollector diagnostics(file_name);
  pb::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  parser.RecordErrorsTo(&diagnostics);
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  if (!parser.Parse(&input, &parsed.config)) {
    if (diagnostics.errors().empty()) {
      return Status::InvalidArgument(fmt::format("{}: cannot parse the model config", file_name));
    }
    return Status::InvalidArgument(fmt::format("{}", fmt::join(diagnostics.errors(), "; ")));
  }
  Status enums = CheckEnumValuesKnown(parsed.config);
  if (!enums.ok()) return enums.WithContext(file_name);
  parsed.unsupported_fields = DescribeSkippedFields(text, diagnostics.warnings());
  return parsed;
}

Result<ParsedModelConfig> LoadModelConfigFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound(fmt::format("model config {} does not exist", path.string()));
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file || !text) {
    return Status::Internal(fmt::format("cannot read model config {}", path.string()));
  }
  return ParseModelConfigText(text.str(), path.string());
}

Status ValidateAndNormalize(ModelConfig* config, std::string_view model_dir_name) {
  std::string model = fmt::format("model '{}'", model_dir_name);
  if (!config->name().empty() && config->name() != model_dir_name) {
    return Status::InvalidArgument(fmt::format(
        "{}: name '{}' in the config does not match the model directory '{}'", model,
        config->name(), model_dir_name));
  }
  if (config->name().empty() && model_dir_name.empty()) {
    return Status::InvalidArgument("model config: name is empty and no directory name is given");
  }
  if (config->max_batch_size() < 0) {
    return Status::InvalidArgument(fmt::format("{}: max_batch_size is {}; must be 0 or positive",
                                               model, config->max_batch_size()));
  }
  VRAMD_RETURN_IF_ERROR(CheckTensors(model, "input", config->input()));
  VRAMD_RETURN_IF_ERROR(CheckTensors(model, "output", config->output()));
  for (int i = 0; i < config->instance_group_size(); ++i) {
    const ModelInstanceGroup& group = config->instance_group(i);
    if (group.count() < 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: instance_group[{}] count is {}; must be 0 (meaning 1) or positive", model, i,
          group.count()));
    }
  }
  if (config->has_dynamic_batching()) {
    for (int size : config->dynamic_batching().preferred_batch_size()) {
      if (size <= 0 || size > config->max_batch_size()) {
        return Status::InvalidArgument(fmt::format(
            "{}: dynamic_batching.preferred_batch_size {} must be positive and at most "
            "max_batch_size ({})",
            model, size, config->max_batch_size()));
      }
    }
  }
  Status enums = CheckEnumValuesKnown(*config);
  if (!enums.ok()) return enums.WithContext(model);

  // Valid: fill Triton's defaults.
  if (config->name().empty()) config->set_name(std::string(model_dir_name));
  if (!config->has_version_policy()) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (config->instance_group_size() == 0) {
    ModelInstanceGroup* group = config->add_instance_group();
    group->set_kind(ModelInstanceGroup::KIND_AUTO);
    group->set_count(1);
  }
  for (ModelInstanceGroup& group : *config->mutable_instance_group()) {
    if (group.count() == 0) group.set_count(1);
  }
  return Status::Ok();
}

}  // namespace vramd::config
