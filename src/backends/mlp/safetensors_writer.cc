#include "backends/mlp/safetensors_writer.h"

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <fstream>
#include <set>

namespace vramd::backends::safetensors {

Result<std::string> Serialize(const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  rapidjson::StringBuffer json;
  rapidjson::Writer<rapidjson::StringBuffer> w(json);
  w.StartObject();
  if (!metadata.empty()) {
    w.Key("__metadata__");
    w.StartObject();
    for (const auto& [k, v] : metadata) {
      w.Key(k.data(), static_cast<rapidjson::SizeType>(k.size()));
      w.String(v.data(), static_cast<rapidjson::SizeType>(v.size()));
    }
    w.EndObject();
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument(fmt::format("safetensors: tensor '{}' given twice", t.name));
    }
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    if (elements * DtypeSize(t.dtype) != t.bytes.size()) {
      return Status::InvalidArgument(fmt::format(
          "safetensors: tensor '{}' has {} bytes, but shape [{}] of {} needs {}", t.name,
          t.bytes.size(), fmt::join(t.shape, ","), DtypeName(t.dtype),
          elements * DtypeSize(t.dtype)));
    }
    w.Key(t.name.data(), static_cast<rapidjson::SizeType>(t.name.size()));
    w.StartObject();
    w.Key("dtype");
    const std::string_view dtype = DtypeName(t.dtype);
    w.String(dtype.data(), static_cast<rapidjson::SizeType>(dtype.size()));
    w.Key("shape");
    w.StartArray();
    for (int64_t d : t.shape) w.Int64(d);
    w.EndArray();
    w.Key("data_offsets");
    w.StartArray();
    w.Uint64(offset);
    w.Uint64(offset + t.bytes.size());
    w.EndArray();
    w.EndObject();
    offset += t.bytes.size();
  }
  w.EndObject();

  std::string header(json.GetString(), json.GetSize());
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size() + offset);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header;
  for (const auto& t : tensors) out += t.bytes;
  return out;
}

Status WriteFile(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  VRAMD_ASSIGN_OR_RETURN(std::string bytes, Serialize(tensors, metadata));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::Internal(fmt::format("{}: cannot write the file", path.string()));
  return Status::Ok();
}

}  // namespace vramd::backends::safetensors
