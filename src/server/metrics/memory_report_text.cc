#include "server/metrics/memory_report_text.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <vector>

#include "core/json_parse.h"

namespace vramd::metrics {
namespace {

using Value = rapidjson::Value;

const Value* Member(const Value& v, const char* key) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(key);
  return it == v.MemberEnd() ? nullptr : &it->value;
}

std::optional<int64_t> Int(const Value& v, const char* key) {
  const Value* m = Member(v, key);
  if (m == nullptr) return std::nullopt;
  if (m->IsInt64()) return m->GetInt64();
  if (m->IsUint64()) return static_cast<int64_t>(m->GetUint64());
  return std::nullopt;
}

std::optional<double> Double(const Value& v, const char* key) {
  const Value* m = Member(v, key);
  return m != nullptr && m->IsNumber() ? std::optional(m->GetDouble()) : std::nullopt;
}

std::string Str(const Value& v, const char* key) {
  const Value* m = Member(v, key);
  return m != nullptr && m->IsString() ? std::string(m->GetString(), m->GetStringLength()) : "";
}

bool Bool(const Value& v, const char* key) {
  const Value* m = Member(v, key);
  return m != nullptr && m->IsBool() && m->GetBool();
}

const Value* Array(const Value& v, const char* key) {
  const Value* m = Member(v, key);
  return m != nullptr && m->IsArray() ? m : nullptr;
}

std::string Bytes(const std::optional<int64_t>& v) { return v ? HumanBytes(*v) : "?"; }

void RenderDevices(const Value& doc, std::string& out) {
  out += "Devices\n";
  const Value* devices = Array(doc, "devices");
  if (devices == nullptr || devices->Empty()) {
    const Value* cuda = Member(doc, "cuda");
    std::string reason = cuda != nullptr ? Str(*cuda, "reason") : "";
    out += fmt::format("  no CUDA device{}\n", reason.empty() ? "" : ": " + reason);
  } else {
    for (const Value& d : devices->GetArray()) {
      std::string head = Str(d, "device");
      if (!Str(d, "name").empty()) head += "  " + Str(d, "name");
      if (!Str(d, "uuid").empty()) head += "  " + Str(d, "uuid");
      out += "  " + head + "\n";
      const Value* nvml = Member(d, "nvml");
      if (nvml != nullptr && Bool(*nvml, "available")) {
        std::string line = fmt::format("total {}  used {}  free {}", Bytes(Int(d, "total_bytes")),
                                       Bytes(Int(d, "used_bytes")), Bytes(Int(d, "free_bytes")));
        if (auto r = Int(d, "driver_reserved_bytes")) line += "  driver reserved " + HumanBytes(*r);
        if (auto u = Int(d, "utilization_gpu_percent")) line += fmt::format("  gpu {}%", *u);
        out += "    nvml          " + line + "\n";
      } else {
        out += "    nvml          unavailable: " +
               (nvml != nullptr ? Str(*nvml, "reason") : std::string("?")) + "\n";
      }
      if (auto used = Int(d, "process_used_bytes")) {
        out += "    this process  " + HumanBytes(*used) + "\n";
      } else {
        out += "    this process  unknown: " + Str(d, "process_used_reason") + "\n";
      }
      if (auto reserved = Int(d, "pool_reserved_bytes")) {
        out += fmt::format(
            "    pool          reserved {}  allocated {}  peak {}  segments {}  "
            "fragmentation {:.2f}\n",
            HumanBytes(*reserved), Bytes(Int(d, "pool_allocated_bytes")),
            Bytes(Int(d, "pool_peak_reserved_bytes")), Int(d, "pool_segments").value_or(0),
            Double(d, "pool_fragmentation").value_or(0.0));
      } else {
        out += "    pool          none yet\n";
      }
      if (auto base = Int(d, "context_baseline_bytes")) {
        out += "    context       " + HumanBytes(*base) + " at start-up\n";
      } else {
        out += "    context       unknown: " + Str(d, "context_baseline_reason") + "\n";
      }
      const int64_t native = Int(d, "native_measured_bytes").value_or(0);
      if (native != 0) {
        const int64_t residue = Int(d, "native_residue_bytes").value_or(0);
        out += "    native        " + HumanBytes(native) +
               " measured, charged to the owners that took it" +
               (residue != 0 ? " (" + HumanBytes(residue) + " outlived them: backend:<name>)"
                             : std::string()) +
               "\n";
      }
      if (auto un = Int(d, "unattributed_bytes")) {
        out += fmt::format("    unattributed  {} = process {} - pool {} - context {}{}\n",
                           HumanBytes(*un), Bytes(Int(d, "process_used_bytes")),
                           HumanBytes(Int(d, "pool_reserved_bytes").value_or(0)),
                           Bytes(Int(d, "context_baseline_bytes")),
                           native != 0 ? " - native " + HumanBytes(native) : std::string());
        if (Bool(d, "unattributed_alarm")) {
          out += "    ALARM         unattributed memory past --memory-unattributed-alarm\n";
        }
      } else {
        out += "    unattributed  unknown: " + Str(d, "unattributed_reason") + "\n";
      }
      if (const Value* hosted = Member(d, "hosted_processes"); hosted != nullptr && hosted->IsArray()) {
        for (const Value& h : hosted->GetArray()) {
          out += fmt::format("    host pid {}   {} ({}), NVML; {}\n", Int(h, "pid").value_or(0),
                             Bytes(Int(h, "used_bytes")), Str(h, "owner"), Str(h, "label"));
        }
      }
    }
  }
  const Value* nvml = Member(doc, "nvml");
  if (nvml != nullptr && !Bool(*nvml, "available")) {
    // Nvml::Load's reasons already start with "NVML unavailable".
    const std::string reason = Str(*nvml, "reason");
    out += reason.rfind("NVML", 0) == 0 ? "  " + reason + "\n"
                                         : "  NVML unavailable: " + reason + "\n";
  }
}

void RenderPools(const Value& doc, std::string& out) {
  const Value* pools = Array(doc, "pools");
  out += "\nPools\n";
  if (pools == nullptr || pools->Empty()) {
    out += "  none yet\n";
    return;
  }
  for (const Value& p : pools->GetArray()) {
    out += fmt::format(
        "  {:<8} reserved {}  allocated {}  peak {}  segments {}  fragmentation {:.2f}\n",
        Str(p, "device"), Bytes(Int(p, "reserved_bytes")), Bytes(Int(p, "allocated_bytes")),
        Bytes(Int(p, "peak_reserved_bytes")), Int(p, "segments").value_or(0),
        Double(p, "fragmentation").value_or(0.0));
  }
}

struct OwnerLine {
  std::string label;  // indented
  std::string live, peak, subtree, devices;
};

void CollectOwners(const Value& node, int depth, std::vector<OwnerLine>& lines) {
  OwnerLine line;
  const std::string kind = Str(node, "kind");
  std::string label = depth == 0 || kind == "server" ? kind : kind + ":" + Str(node, "name");
  if (Bool(node, "closed")) label += " (closed)";
  line.label = std::string(2 * depth, ' ') + label;
  line.live = Bytes(Int(node, "live_bytes"));
  line.peak = Bytes(Int(node, "peak_bytes"));
  line.subtree = Bytes(Int(node, "subtree_live_bytes"));
  if (const Value* by = Member(node, "by_device"); by != nullptr && by->IsObject()) {
    for (const auto& m : by->GetObject()) {
      if (!m.value.IsInt64()) continue;
      if (!line.devices.empty()) line.devices += ", ";
      line.devices += fmt::format("{} {}", m.name.GetString(), HumanBytes(m.value.GetInt64()));
    }
  }
  // The owner's quota ("quota cpu 772.0 KiB of 1.0 MiB, 2 refused") and what one execution
  // made ("per execution: cuda:0 batch 8 1.0 GiB").
  if (const Value* quota = Array(node, "quota")) {
    for (const Value& q : quota->GetArray()) {
      line.devices += fmt::format("{}quota {} {} of {}", line.devices.empty() ? "" : "; ",
                                  Str(q, "device"), Bytes(Int(q, "used_bytes")),
                                  Bytes(Int(q, "limit_bytes")));
      if (const int64_t refused = Int(q, "refusals").value_or(0); refused > 0) {
        line.devices += fmt::format(", {} refused", refused);
      }
    }
  }
  if (const Value* peaks = Array(node, "execution_peaks"); peaks != nullptr && !peaks->Empty()) {
    line.devices += line.devices.empty() ? "per execution:" : "; per execution:";
    bool first = true;
    for (const Value& p : peaks->GetArray()) {
      line.devices += fmt::format("{} {} batch {} {}", first ? "" : ",", Str(p, "device"),
                                  Int(p, "batch_size").value_or(0), Bytes(Int(p, "bytes")));
      first = false;
    }
  }
  lines.push_back(std::move(line));
  if (const Value* children = Array(node, "children")) {
    for (const Value& child : children->GetArray()) CollectOwners(child, depth + 1, lines);
  }
}

void RenderOwners(const Value& doc, std::string& out) {
  out += "\nOwners\n";
  const Value* root = Member(doc, "owners");
  if (root == nullptr || !root->IsObject()) {
    out += "  none\n";
    return;
  }
  std::vector<OwnerLine> lines;
  CollectOwners(*root, 0, lines);
  size_t width = 5;
  for (const OwnerLine& l : lines) width = std::max(width, l.label.size());
  out += fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {}\n", "owner", width, "live", "peak",
                     "subtree", "by device");
  for (const OwnerLine& l : lines) {
    std::string row = fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {}", l.label, width, l.live,
                                  l.peak, l.subtree, l.devices);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
}

void RenderLeaks(const Value& doc, std::string& out) {
  const Value* leaks = Array(doc, "leaks");
  const size_t count = leaks != nullptr ? leaks->Size() : 0;
  out += fmt::format("\nLeaks: {} report(s) listed, {} leaked in total, {} unknown free(s)\n",
                     count, HumanBytes(Int(doc, "leaked_bytes_total").value_or(0)),
                     Int(doc, "unknown_frees").value_or(0));
  if (count == 0) return;
  for (const Value& leak : leaks->GetArray()) {
    out += fmt::format("  {} ({}): {} in {} allocation(s), {} still live, closed {}\n",
                       Str(leak, "owner"), Str(leak, "kind"), Bytes(Int(leak, "bytes")),
                       Int(leak, "count").value_or(0), Bytes(Int(leak, "still_live_bytes")),
                       Str(leak, "closed_at"));
    const Value* allocations = Array(leak, "allocations");
    if (allocations == nullptr) continue;
    for (const Value& a : allocations->GetArray()) {
      out += fmt::format("    {} {} on {}, {} ms old\n", Str(a, "address"),
                         Bytes(Int(a, "size")), Str(a, "device"), Int(a, "age_ms").value_or(0));
      const Value* frames = Array(a, "backtrace");
      if (frames == nullptr || frames->Empty()) {
        out += "      (no backtrace: start vramd with --memory-trace)\n";
        continue;
      }
      int i = 0;
      for (const Value& f : frames->GetArray()) {
        if (f.IsString()) out += fmt::format("      #{} {}\n", i++, f.GetString());
      }
    }
  }
}

}  // namespace

std::string HumanBytes(int64_t bytes) {
  const uint64_t magnitude =
      bytes < 0 ? uint64_t{0} - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  const char* sign = bytes < 0 ? "-" : "";
  if (magnitude < 1024) return fmt::format("{}{} B", sign, magnitude);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(magnitude) / 1024.0;
  size_t unit = 0;
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{}{:.1f} {}", sign, value, kUnits[unit]);
}

Result<std::string> RenderMemoryReportText(std::string_view json) {
  // vramctl's HTTP client already bounds the answer at 256 MiB; the depth limit (an owner tree
  // nests two levels per owner) bounds CollectOwners' recursion.
  VRAMD_ASSIGN_OR_RETURN(const rapidjson::Document doc,
                         ParseJson(json, "the memory report", {.max_bytes = size_t{256} << 20}));
  if (!doc.IsObject()) return Status::InvalidArgument("not a memory report: not a JSON object");
  std::string out;
  RenderDevices(doc, out);
  RenderPools(doc, out);
  RenderOwners(doc, out);
  RenderLeaks(doc, out);
  return out;
}

}  // namespace vramd::metrics
