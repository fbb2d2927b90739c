// Token-level help around protobuf's (3.21) text-format parser, for model_config_parser.cc:
// a rewrite that lets the parser skip unknown fields written as `name [ ... ]`, names for the
// fields it skipped, and error positions moved onto the token at fault.
//
// Positions are protobuf's: 0-based lines and columns, a tab advancing the column to the next
// multiple of 8. Thread safety: no shared state; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/io/tokenizer.h>

namespace vramd::config::text_format {

// (line, column), both 0-based.
using Position = std::pair<int, int>;

// A message from the text parser at its position.
struct Diagnostic {
  Position position;
  std::string message;
};

// Keeps the text parser's errors and warnings, to be located and worded afterwards.
class DiagnosticCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back({{line, column}, message});
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    warnings_.push_back({{line, column}, message});
  }

  const std::vector<Diagnostic>& errors() const { return errors_; }
  const std::vector<Diagnostic>& warnings() const { return warnings_; }

 private:
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
};

// Rewrites `name [ ... ]` as `name:[ ... ]`, which means the same for a known field. protobuf
// 3.21 cannot skip an *unknown* field written in list form without the colon (it expects `{`
// and fails), and real Triton configs write `control_input [ ... ]` inside sequence_batching.
// A space after the name becomes the colon, so lines and columns stay as written; with no space
// (`name[`) the colon is inserted and later columns on that line move right by one.
std::string AddColonsBeforeLists(std::string_view text);

// Names the fields the parser skipped (AllowUnknownField), from its warnings on `text` (the
// text it parsed, which must have parsed): "<enclosing known fields.>field (line N)", N 1-based,
// e.g. "instance_group.profile (line 35)". Any other warning becomes "<message> (line N)".
std::vector<std::string> DescribeSkippedFields(std::string_view text,
                                               const std::vector<Diagnostic>& warnings);

// "<file_name>:<line>:<col>: <message>", 1-based. protobuf reports a bad enum value and a
// repeated singular field at the token after the culprit; those are moved back onto it.
std::string FormatError(std::string_view text, std::string_view file_name,
                        const Diagnostic& error);

}  // namespace vramd::config::text_format
