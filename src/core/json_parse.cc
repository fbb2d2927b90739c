#include "core/json_parse.h"

#include <fmt/format.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <cstdint>
#include <utility>

namespace vramd {
namespace {

// The document's own SAX handler behind a gate that refuses to open one level too many. The
// refusal stops the reader at once, so neither the reader's stack nor the document's ever holds
// more than max_depth levels.
class DepthLimitedBuilder {
 public:
  using Ch = rapidjson::Document::Ch;

  DepthLimitedBuilder(rapidjson::Document& doc, size_t max_depth)
      : doc_(doc), max_depth_(max_depth) {}

  bool too_deep() const { return too_deep_; }

  bool Null() { return doc_.Null(); }
  bool Bool(bool b) { return doc_.Bool(b); }
  bool Int(int i) { return doc_.Int(i); }
  bool Uint(unsigned u) { return doc_.Uint(u); }
  bool Int64(int64_t i) { return doc_.Int64(i); }
  bool Uint64(uint64_t u) { return doc_.Uint64(u); }
  bool Double(double d) { return doc_.Double(d); }
  bool RawNumber(const Ch* s, rapidjson::SizeType n, bool copy) {
    return doc_.RawNumber(s, n, copy);
  }
  bool String(const Ch* s, rapidjson::SizeType n, bool copy) { return doc_.String(s, n, copy); }
  bool Key(const Ch* s, rapidjson::SizeType n, bool copy) { return doc_.Key(s, n, copy); }
  bool StartObject() { return Enter() && doc_.StartObject(); }
  bool EndObject(rapidjson::SizeType members) {
    --depth_;
    return doc_.EndObject(members);
  }
  bool StartArray() { return Enter() && doc_.StartArray(); }
  bool EndArray(rapidjson::SizeType elements) {
    --depth_;
    return doc_.EndArray(elements);
  }

 private:
  bool Enter() {
    if (depth_ >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    ++depth_;
    return true;
  }

  rapidjson::Document& doc_;
  const size_t max_depth_;
  size_t depth_ = 0;
  bool too_deep_ = false;
};

}  // namespace

Result<rapidjson::Document> ParseJson(std::string_view text, std::string_view what,
                                      const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::InvalidArgument(fmt::format("{} has {} bytes, over the limit of {} bytes",
                                               what, text.size(), limits.max_bytes));
  }
  // Not in situ: strings are copied, so the document outlives `text`.
  constexpr unsigned kFlags = rapidjson::kParseIterativeFlag;
  constexpr unsigned kStrictFlags = kFlags | rapidjson::kParseValidateEncodingFlag;

  rapidjson::Document doc;
  rapidjson::Reader reader;
  DepthLimitedBuilder builder(doc, limits.max_depth);
  rapidjson::ParseResult result;
  auto generate = [&](rapidjson::Document&) {
    rapidjson::MemoryStream memory(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> in(memory);
    result = limits.validate_utf8 ? reader.Parse<kStrictFlags>(in, builder)
                                  : reader.Parse<kFlags>(in, builder);
    return !result.IsError();
  };
  doc.Populate(generate);
  if (builder.too_deep()) {
    return Status::InvalidArgument(fmt::format("{} nests deeper than {} levels (at offset {})",
                                               what, limits.max_depth, result.Offset()));
  }
  if (result.IsError()) {
    return Status::InvalidArgument(fmt::format("{} is not valid JSON at offset {}: {}", what,
                                               result.Offset(),
                                               rapidjson::GetParseError_En(result.Code())));
  }
  return Result<rapidjson::Document>(std::move(doc));
}

}  // namespace vramd
