#include "config/text_format_support.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace vramd::config::text_format {
namespace {

namespace pb = google::protobuf;

// What protobuf's text parser says when AllowUnknownField(true) skips a field:
//   Message type "vramd.config.ModelConfig" has no field named "optimization".
constexpr std::string_view kNoFieldNamed = "has no field named \"";

// Configures a tokenizer the way TextFormat's parser does, so positions agree with its reports.
void ConfigureLikeTextFormat(pb::io::Tokenizer* tokenizer) {
  tokenizer->set_allow_f_after_float(true);
  tokenizer->set_comment_style(pb::io::Tokenizer::SH_COMMENT_STYLE);
  tokenizer->set_require_space_after_number(false);
  tokenizer->set_allow_multiline_strings(true);
}

// For re-tokenizing text the parser has already judged: errors are the parser's to report.
struct QuietCollector : pb::io::ErrorCollector {
  void AddError(int, pb::io::ColumnNumber, const std::string&) override {}
};

// The byte offset of a tokenizer position: columns count a tab as reaching the next multiple of 8.
size_t ByteOffset(std::string_view text, const std::vector<size_t>& line_starts, Position pos) {
  size_t offset = line_starts[static_cast<size_t>(pos.first)];
  int column = 0;
  while (column < pos.second && offset < text.size() && text[offset] != '\n') {
    column += text[offset] == '\t' ? 8 - column % 8 : 1;
    ++offset;
  }
  return offset;
}

struct SkippedFieldPlace {
  std::string path;  // the known fields enclosing it, each followed by '.': "instance_group."
  int line;          // 0-based line of the field's name
};

// protobuf reports a skipped field at the token after its name (`:` or `{`). For each such
// position, finds the name's line and the dotted path of the known fields around it. The text
// must already have parsed; the parser never looks inside a skipped message, so the path holds
// known fields only.
std::map<Position, SkippedFieldPlace> FindSkippedFieldPlaces(std::string_view text,
                                                             const std::set<Position>& wanted) {
  struct Scope {
    std::string name;
    bool is_list;  // `name: [ ... ]`: its `{` elements are messages named `name`
  };
  std::map<Position, SkippedFieldPlace> places;
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  QuietCollector quiet;
  pb::io::Tokenizer tokenizer(&input, &quiet);
  ConfigureLikeTextFormat(&tokenizer);

  std::vector<Scope> stack;
  std::string pending;  // the field name just read, while `:` or an opening bracket may follow
  while (tokenizer.Next()) {
    const pb::io::Tokenizer::Token& token = tokenizer.current();
    if (wanted.count({token.line, token.column}) != 0) {
      SkippedFieldPlace place{"", token.line};
      for (const Scope& scope : stack) {
        if (!scope.is_list) place.path += scope.name + ".";
      }
      if (tokenizer.previous().type == pb::io::Tokenizer::TYPE_IDENTIFIER) {
        place.line = tokenizer.previous().line;
      }
      places[{token.line, token.column}] = place;
    }
    const std::string& symbol = token.text;
    if (token.type == pb::io::Tokenizer::TYPE_IDENTIFIER) {
      pending = token.text;
    } else if (token.type != pb::io::Tokenizer::TYPE_SYMBOL) {
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
  return places;
}

// The position of the token before the one at `pos`, if it reads `expected_text`.
std::optional<Position> TokenBefore(std::string_view text, Position pos,
                                    const std::string& expected_text) {
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  QuietCollector quiet;
  pb::io::Tokenizer tokenizer(&input, &quiet);
  ConfigureLikeTextFormat(&tokenizer);
  bool more = true;
  while (more) {
    more = tokenizer.Next();  // at the end, current() is the end marker, still positioned
    const pb::io::Tokenizer::Token& token = tokenizer.current();
    if (Position{token.line, token.column} < pos) continue;
    const pb::io::Tokenizer::Token& before = tokenizer.previous();
    if (Position{token.line, token.column} == pos && before.text == expected_text) {
      return Position{before.line, before.column};
    }
    break;
  }
  return std::nullopt;
}

}  // namespace

std::string AddColonsBeforeLists(std::string_view text) {
  std::vector<size_t> line_starts{0};
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') line_starts.push_back(i + 1);
  }
  std::vector<size_t> colons;  // byte offsets just after a field name followed by `[`
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  QuietCollector quiet;
  pb::io::Tokenizer tokenizer(&input, &quiet);
  ConfigureLikeTextFormat(&tokenizer);
  pb::io::Tokenizer::Token before_name;  // the token before `name`: not ':' for a field name
  while (tokenizer.Next()) {
    const pb::io::Tokenizer::Token& name = tokenizer.previous();
    const pb::io::Tokenizer::Token& token = tokenizer.current();
    if (token.type == pb::io::Tokenizer::TYPE_SYMBOL && token.text == "[" &&
        name.type == pb::io::Tokenizer::TYPE_IDENTIFIER && before_name.text != ":") {
      colons.push_back(ByteOffset(text, line_starts, {name.line, name.end_column}));
    }
    before_name = name;
  }
  std::string out;
  out.reserve(text.size() + colons.size());
  size_t copied = 0;
  for (size_t offset : colons) {
    out.append(text.substr(copied, offset - copied));
    out += ':';
    copied = offset;
    if (copied < text.size() && text[copied] == ' ') ++copied;  // the space became the colon
  }
  out.append(text.substr(copied));
  return out;
}

std::vector<std::string> DescribeSkippedFields(
    std::string_view text, const std::vector<Diagnostic>& warnings) {
  std::set<Position> wanted;
  for (const auto& warning : warnings) wanted.insert(warning.position);
  std::map<Position, SkippedFieldPlace> places = FindSkippedFieldPlaces(text, wanted);

  std::vector<std::string> entries;
  for (const auto& warning : warnings) {
    auto place = places.find(warning.position);
    int line = (place == places.end() ? warning.position.first : place->second.line) + 1;
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
    std::string path = place == places.end() ? "" : place->second.path;
    entries.push_back(fmt::format("{}{} (line {})", path, field, line));
  }
  return entries;
}

std::string FormatError(std::string_view text, std::string_view file_name,
                        const Diagnostic& error) {
  static constexpr std::string_view kAfterCulprit[] = {"Unknown enumeration value of \"",
                                                       "Non-repeated field \""};
  Position pos = error.position;
  for (std::string_view prefix : kAfterCulprit) {
    if (error.message.rfind(prefix, 0) != 0) continue;
    size_t end = error.message.find('"', prefix.size());
    if (end == std::string::npos) break;
    std::string culprit = error.message.substr(prefix.size(), end - prefix.size());
    pos = TokenBefore(text, pos, culprit).value_or(pos);
    break;
  }
  std::string message = error.message;
  if (message.size() >= 5 && message.compare(message.size() - 5, 5, "got: ") == 0) {
    message += "end of file";  // protobuf prints the end marker's empty text
  }
  return fmt::format("{}:{}:{}: {}", file_name, pos.first + 1, pos.second + 1, message);
}

}  // namespace vramd::config::text_format
