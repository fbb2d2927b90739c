#include "server/trace/trace_settings.h"

#include <fmt/format.h>

#include <charconv>

namespace vramd::trace {
namespace {

template <typename T>
Result<T> ParseNumber(std::string_view name, std::string_view text, T min) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min) {
    return Status::InvalidArgument(fmt::format(
        "trace setting '{}' must be {}, not '{}'", name,
        min < 0 ? "-1 or a non-negative integer" : "a non-negative integer", text));
  }
  return value;
}

Result<std::string_view> Single(std::string_view name, const std::vector<std::string>& value) {
  if (value.size() != 1) {
    return Status::InvalidArgument(
        fmt::format("trace setting '{}' takes one value, not {}", name, value.size()));
  }
  return std::string_view(value.front());
}

Result<bool> ParseLevel(const std::vector<std::string>& levels) {
  if (levels.empty()) {
    return Status::InvalidArgument("trace setting 'trace_level' needs at least one level");
  }
  bool timestamps = false;
  bool off = false;
  for (const std::string& level : levels) {
    if (level == "OFF") {
      off = true;
    } else if (level == "TIMESTAMPS") {
      timestamps = true;
    } else if (level == "TENSORS") {
      return Status::InvalidArgument(
          "trace level TENSORS is not supported by vramd: it traces TIMESTAMPS only");
    } else {
      return Status::InvalidArgument(fmt::format(
          "trace setting 'trace_level' takes OFF or TIMESTAMPS, not '{}'", level));
    }
  }
  if (off && timestamps) {
    return Status::InvalidArgument("trace setting 'trace_level' cannot be both OFF and TIMESTAMPS");
  }
  return timestamps;
}

}  // namespace

std::string_view TraceModeName(TraceMode mode) {
  return mode == TraceMode::kTriton ? "triton" : "opentelemetry";
}

TraceSettings::TraceSettings(TraceMode mode) : TraceSettings(mode, Values()) {}

TraceSettings::TraceSettings(TraceMode mode, Values global) : mode_(mode) {
  WriterLock lock(mu_);
  global_.values = std::move(global);
  global_.remaining.store(global_.values.count);
  RefreshAnyOn();
}

Status TraceSettings::Apply(const Changes& changes, Holder* holder, bool is_model) {
  // Checked in full before anything changes.
  Values values = holder->values;
  Holder::Own own = holder->own;
  bool count_set = false;
  for (const auto& [name, value] : changes) {
    if (!value) {
      if (!is_model) {
        return Status::InvalidArgument(fmt::format(
            "trace setting '{}' cannot be cleared globally: only a model's setting can go back "
            "to the global one",
            name));
      }
    }
    if (name == "trace_level") {
      if (value) {
        VRAMD_ASSIGN_OR_RETURN(values.timestamps, ParseLevel(*value));
      }
      own.level = value.has_value();
    } else if (name == "trace_rate") {
      if (value) {
        VRAMD_ASSIGN_OR_RETURN(std::string_view text, Single(name, *value));
        VRAMD_ASSIGN_OR_RETURN(values.rate, ParseNumber<uint64_t>(name, text, 0));
      }
      own.rate = value.has_value();
    } else if (name == "trace_count") {
      if (value) {
        VRAMD_ASSIGN_OR_RETURN(std::string_view text, Single(name, *value));
        VRAMD_ASSIGN_OR_RETURN(values.count, ParseNumber<int64_t>(name, text, -1));
        count_set = true;
      }
      own.count = value.has_value();
    } else if (name == "log_frequency") {
      if (value) {
        VRAMD_ASSIGN_OR_RETURN(std::string_view text, Single(name, *value));
        VRAMD_ASSIGN_OR_RETURN(values.log_frequency, ParseNumber<uint64_t>(name, text, 0));
      }
      own.frequency = value.has_value();
    } else if (name == "trace_file") {
      if (value) {
        VRAMD_ASSIGN_OR_RETURN(std::string_view text, Single(name, *value));
        values.file = std::string(text);
      }
      own.file = value.has_value();
    } else if (name == "trace_mode") {
      return Status::InvalidArgument(
          "trace setting 'trace_mode' cannot change while serving: start vramd with "
          "--trace-config mode=triton or mode=opentelemetry");
    } else {
      return Status::InvalidArgument(fmt::format(
          "unknown trace setting '{}' (trace_level, trace_rate, trace_count, log_frequency, "
          "trace_file)",
          name));
    }
  }
  holder->values = values;
  holder->own = own;
  if (count_set) holder->remaining.store(values.count);
  return Status::Ok();
}

Status TraceSettings::Update(std::string_view model, const Changes& changes) {
  WriterLock lock(mu_);
  if (model.empty()) {
    VRAMD_RETURN_IF_ERROR(Apply(changes, &global_, /*is_model=*/false));
  } else if (changes.empty()) {
    return Status::Ok();  // a read (gRPC's TraceSetting with no setting)
  } else {
    auto it = models_.find(model);
    if (it == models_.end()) {
      // A model's first settings: a copy of the global ones, then the changes.
      auto holder = std::make_unique<Holder>();
      holder->values = global_.values;
      holder->values.count = global_.remaining.load();
      holder->remaining.store(holder->values.count);
      VRAMD_RETURN_IF_ERROR(Apply(changes, holder.get(), /*is_model=*/true));
      models_.emplace(std::string(model), std::move(holder));
    } else {
      VRAMD_RETURN_IF_ERROR(Apply(changes, it->second.get(), /*is_model=*/true));
    }
  }
  RefreshAnyOn();
  return Status::Ok();
}

void TraceSettings::RefreshAnyOn() {
  bool on = global_.values.timestamps;
  for (const auto& [name, holder] : models_) {
    on = on || (holder->own.level ? holder->values.timestamps : global_.values.timestamps);
  }
  any_on_.store(on, std::memory_order_relaxed);
}

TraceSettings::Values TraceSettings::EffectiveLocked(const Holder* model) const {
  Values v = global_.values;
  v.count = global_.remaining.load();
  if (model == nullptr) return v;
  if (model->own.level) v.timestamps = model->values.timestamps;
  if (model->own.rate) v.rate = model->values.rate;
  if (model->own.count) v.count = model->remaining.load();
  if (model->own.frequency) v.log_frequency = model->values.log_frequency;
  if (model->own.file) v.file = model->values.file;
  return v;
}

TraceSettings::Values TraceSettings::Effective(std::string_view model) const {
  ReaderLock lock(mu_);
  const Holder* holder = nullptr;
  if (!model.empty()) {
    auto it = models_.find(model);
    if (it != models_.end()) holder = it->second.get();
  }
  return EffectiveLocked(holder);
}

std::vector<std::pair<std::string, std::vector<std::string>>> TraceSettings::Answer(
    std::string_view model) const {
  const Values v = Effective(model);
  return {
      {"trace_level", {v.timestamps ? "TIMESTAMPS" : "OFF"}},
      {"trace_rate", {std::to_string(v.rate)}},
      {"trace_count", {std::to_string(v.count)}},
      {"log_frequency", {std::to_string(v.log_frequency)}},
      {"trace_file", {v.file}},
      {"trace_mode", {std::string(TraceModeName(mode_))}},
  };
}

bool TraceSettings::Sample(std::string_view model, bool has_parent) {
  if (!any_on()) return false;
  ReaderLock lock(mu_);
  const Holder* own = nullptr;
  if (!models_.empty()) {
    auto it = models_.find(model);
    if (it != models_.end()) own = it->second.get();
  }
  const bool timestamps =
      own != nullptr && own->own.level ? own->values.timestamps : global_.values.timestamps;
  if (!timestamps) return false;
  if (has_parent) return true;
  const Holder& rate_holder = own != nullptr && own->own.rate ? *own : global_;
  const uint64_t rate = rate_holder.values.rate;
  if (rate == 0) return false;
  // The counter is the model's own when it has settings, so its rate counts its requests.
  std::atomic<uint64_t>& seen = own != nullptr ? own->seen : global_.seen;
  if ((seen.fetch_add(1, std::memory_order_relaxed) + 1) % rate != 0) return false;
  std::atomic<int64_t>& remaining =
      own != nullptr && own->own.count ? own->remaining : global_.remaining;
  int64_t left = remaining.load(std::memory_order_relaxed);
  while (left != 0) {
    if (left < 0) return true;
    if (remaining.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

Result<TraceSettings::FlagSetting> TraceSettings::ParseFlag(std::string_view text) {
  FlagSetting flag;
  const size_t comma = text.find(',');
  const size_t equals = text.find('=');
  if (comma != std::string_view::npos && (equals == std::string_view::npos || comma < equals)) {
    flag.mode = std::string(text.substr(0, comma));
    text.remove_prefix(comma + 1);
    if (flag.mode != "triton" && flag.mode != "opentelemetry") {
      return Status::InvalidArgument(fmt::format(
          "--trace-config: '{}' is not a trace mode (triton, opentelemetry)", flag.mode));
    }
  }
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return Status::InvalidArgument(fmt::format(
        "--trace-config takes [mode,]setting=value, not '{}'", text));
  }
  flag.name = std::string(text.substr(0, eq));
  flag.value = std::string(text.substr(eq + 1));
  return flag;
}

}  // namespace vramd::trace
