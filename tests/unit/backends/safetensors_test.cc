// The safetensors reader: valid files (F32, F16, metadata, scalars, empty tensors) read back
// exactly, and every kind of corruption is refused with an InvalidArgument that names the file,
// the tensor where there is one, and the problem, without crashing or reading out of bounds
// (the exhaustive truncation and random-mutation tests run clean under ASan as well).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/mlp/safetensors.h"
#include "backends/mlp/safetensors_writer.h"
#include "core/half.h"

namespace vramd::backends::safetensors {
namespace {

using ::testing::HasSubstr;

constexpr char kSource[] = "/models/m/1/model.safetensors";

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file from a literal header and data.
std::string Raw(const std::string& header, const std::string& data) {
  return Le64(header.size()) + header + data;
}

Result<File> ParseBytes(const std::string& bytes) {
  return File::Parse(SharedBuffer::CopyOf(bytes.data(), bytes.size()), kSource);
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The parse of `bytes` fails with InvalidArgument whose message names the file and contains
// every one of `parts`.
void ExpectRejected(const std::string& bytes, std::initializer_list<std::string> parts) {
  auto f = ParseBytes(bytes);
  ASSERT_FALSE(f.ok()) << "accepted a corrupt file";
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << f.status().ToString();
  EXPECT_THAT(f.status().message(), HasSubstr(kSource));
  for (const auto& part : parts) EXPECT_THAT(f.status().message(), HasSubstr(part));
}

// ---- valid files ------------------------------------------------------------------------------

TEST(SafetensorsTest, F32AndF16TensorsAndMetadataReadBack) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const std::vector<uint16_t> h = {HalfFromFloat(0.5f), HalfFromFloat(-1.0f), HalfFromFloat(65504)};
  auto bytes = Serialize({{"w", Dtype::kF32, {2, 3}, Bytes(w)}, {"h", Dtype::kF16, {3}, Bytes(h)}},
                         {{"format", "pt"}, {"note", "x"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto f = ParseBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "w");  // data order
  const TensorInfo* tw = f->Find("w");
  ASSERT_NE(tw, nullptr);
  EXPECT_EQ(tw->dtype, Dtype::kF32);
  EXPECT_EQ(tw->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tw->element_count, 6);
  ASSERT_EQ(tw->size(), 24u);
  std::vector<float> w2(6);
  std::memcpy(w2.data(), tw->data, 24);
  EXPECT_EQ(w2, w);
  const TensorInfo* th = f->Find("h");
  ASSERT_NE(th, nullptr);
  EXPECT_EQ(th->dtype, Dtype::kF16);
  uint16_t h2[3];
  std::memcpy(h2, th->data, 6);
  EXPECT_EQ(HalfToFloat(h2[0]), 0.5f);
  EXPECT_EQ(HalfToFloat(h2[1]), -1.0f);
  EXPECT_EQ(HalfToFloat(h2[2]), 65504.0f);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->Find("nope"), nullptr);
  EXPECT_EQ((8 + f->header_bytes()) % 8, 0u);  // the writer pads the header
}

TEST(SafetensorsTest, ScalarsEmptyTensorsAndPaddingAreValid) {
  const std::string data = std::string(4, '\x01') + std::string(2, '\x02');
  auto f = ParseBytes(Raw(R"({"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                          R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                          R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}}     )",
                          data));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Find("s")->element_count, 1);
  EXPECT_EQ(f->Find("e")->element_count, 0);
  EXPECT_EQ(f->Find("e")->size(), 0u);
  EXPECT_EQ(f->Find("b")->dtype, Dtype::kBF16);
  // The empty file of tensors.
  auto empty = ParseBytes(Raw("{}", ""));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->tensors().empty());
}

TEST(SafetensorsTest, EveryDtypeNameRoundTrips) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
                           "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    auto d = ParseDtype(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(DtypeName(*d), name);
  }
  EXPECT_EQ(DtypeSize(Dtype::kF64), 8u);
  EXPECT_EQ(DtypeSize(Dtype::kBF16), 2u);
  EXPECT_FALSE(ParseDtype("f32").has_value());
  EXPECT_FALSE(ParseDtype("F4").has_value());
}

TEST(SafetensorsTest, ReadsAFileAndReportsAMissingOne) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("vramd-st-" + std::to_string(::getpid()) + ".safetensors");
  const std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE(WriteFile(path, {{"v", Dtype::kF32, {3}, Bytes(v)}}).ok());
  auto f = File::Read(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->source(), path.string());
  EXPECT_EQ(f->file_bytes(), std::filesystem::file_size(path));
  std::filesystem::remove(path);
  auto missing = File::Read(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(path.string()));
  auto dir = File::Read(std::filesystem::temp_directory_path());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dir.status().message(), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, WriterRefusesAMismatchedTensor) {
  auto bytes = Serialize({{"v", Dtype::kF32, {3}, std::string(8, '\0')}});
  EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("'v'"));
}

// ---- corruption, one kind per test ------------------------------------------------------------

const std::string kGoodEntry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kEightBytes(8, '\0');

TEST(SafetensorsCorruptionTest, FileShorterThanTheHeaderSize) {
  ExpectRejected("", {"0 bytes", "too short"});
  ExpectRejected(std::string("\x05\x00\x00", 3), {"3 bytes", "too short"});
}

TEST(SafetensorsCorruptionTest, HeaderSizeBeyondTheFile) {
  ExpectRejected(Le64(1000) + "{}", {"header size 1000", "runs past the end"});
}

TEST(SafetensorsCorruptionTest, HeaderSizeAboveTheLimit) {
  ExpectRejected(Le64(uint64_t{1} << 62) + "{}", {"above the 100000000-byte limit"});
  ExpectRejected(Le64(~uint64_t{0}) + "{}", {"above the"});
}

TEST(SafetensorsCorruptionTest, HeaderTooSmallOrNotAnObject) {
  ExpectRejected(Le64(0), {"header size 0"});
  ExpectRejected(Raw("[1,2]", ""), {"does not start with '{'"});
  ExpectRejected(Raw(" {}", ""), {"does not start with '{'"});
}

TEST(SafetensorsCorruptionTest, InvalidJson) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F32",)", kEightBytes), {"not valid JSON"});
  ExpectRejected(Raw("{} trailing", ""), {"not valid JSON"});
  ExpectRejected(Raw("{\"t\xff\":1}", ""), {"not valid JSON"});  // invalid UTF-8
  ExpectRejected(Raw(R"({"t":NaN})", ""), {"not valid JSON"});
}

TEST(SafetensorsCorruptionTest, HeaderNestedTooDeeply) {
  ExpectRejected(Raw("{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}", ""),
                 {"nests deeper than 3"});
}

TEST(SafetensorsCorruptionTest, EntryNotAnObject) {
  ExpectRejected(Raw(R"({"t":[1,2]})", ""), {"tensor 't'", "not a JSON object"});
}

TEST(SafetensorsCorruptionTest, MissingKeys) {
  ExpectRejected(Raw(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", kEightBytes),
                 {"tensor 't'", "'dtype' is missing"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", kEightBytes),
                 {"tensor 't'", "'shape' is missing"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[2]}})", kEightBytes),
                 {"tensor 't'", "'data_offsets' is missing"});
}

TEST(SafetensorsCorruptionTest, UnknownDtype) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", kEightBytes),
                 {"tensor 't'", "unknown dtype 'F17'"});
  ExpectRejected(Raw(R"({"t":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", kEightBytes),
                 {"'dtype' is not a string"});
}

TEST(SafetensorsCorruptionTest, BadShape) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kEightBytes),
                 {"tensor 't'", "non-negative integers"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kEightBytes),
                 {"non-negative integers"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kEightBytes),
                 {"'shape' is not an array"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],)"
                     R"("data_offsets":[0,8]}})",
                     kEightBytes),
                 {"tensor 't'", "overflows 64 bits"});
}

TEST(SafetensorsCorruptionTest, BadDataOffsets) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kEightBytes),
                 {"two non-negative integers"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kEightBytes),
                 {"two non-negative integers"});
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kEightBytes),
                 {"tensor 't'", "end before they begin"});
}

TEST(SafetensorsCorruptionTest, OffsetsOutOfRange) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kEightBytes),
                 {"tensor 't'", "[0, 16] run past the data, which is 8 bytes"});
  ExpectRejected(Raw(R"({"t":{"dtype":"U8","shape":[1],)"
                     R"("data_offsets":[18446744073709551615,18446744073709551615]}})",
                     kEightBytes),
                 {"run past the data"});
}

TEST(SafetensorsCorruptionTest, ByteSizeDisagreesWithShape) {
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kEightBytes),
                 {"tensor 't'", "hold 8 bytes, but shape 3 of F32 needs 12"});
}

TEST(SafetensorsCorruptionTest, OverlappingTensors) {
  ExpectRejected(Raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     kEightBytes),
                 {"tensor 'b'", "overlap tensor 'a'"});
}

TEST(SafetensorsCorruptionTest, HoleBetweenTensors) {
  ExpectRejected(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                     kEightBytes),
                 {"tensor 'b'", "leave bytes [4, 6) that no tensor covers"});
  ExpectRejected(Raw(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kEightBytes),
                 {"leave bytes [0, 4)"});
}

TEST(SafetensorsCorruptionTest, TrailingBytesAfterTheLastTensor) {
  ExpectRejected(Raw("{" + kGoodEntry + "}", kEightBytes + "xx"),
                 {"cover 8 bytes of data but the file holds 10", "trailing bytes [8, 10)"});
}

TEST(SafetensorsCorruptionTest, DuplicateKey) {
  ExpectRejected(Raw("{" + kGoodEntry + "," + kGoodEntry + "}", kEightBytes),
                 {"key 't' appears twice"});
}

TEST(SafetensorsCorruptionTest, BadMetadata) {
  ExpectRejected(Raw(R"({"__metadata__":{"k":1}})", ""), {"'__metadata__' value of 'k'"});
  ExpectRejected(Raw(R"({"__metadata__":"x"})", ""), {"'__metadata__' is not a JSON object"});
}

TEST(SafetensorsCorruptionTest, LongTensorNamesAreCutInMessages) {
  const std::string name(5000, 'n');
  auto f = ParseBytes(Raw(R"({")" + name + R"(":{"dtype":"X"}})", ""));
  ASSERT_FALSE(f.ok());
  EXPECT_LT(f.status().message().size(), 400u);
  EXPECT_THAT(f.status().message(), HasSubstr("(5000 bytes)"));
}

// ---- fuzzing: never crash, never accept a broken file -------------------------------------------

std::string ValidFile() {
  std::vector<float> w(24, 0.25f), b(4, -1.0f);
  std::vector<uint16_t> h(5, HalfFromFloat(2.0f));
  auto bytes = Serialize({{"layers.0.weight", Dtype::kF32, {4, 6}, Bytes(w)},
                          {"layers.0.bias", Dtype::kF32, {4}, Bytes(b)},
                          {"extra", Dtype::kF16, {5}, Bytes(h)}},
                         {{"format", "pt"}});
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

TEST(SafetensorsFuzzTest, EveryTruncationIsRejected) {
  const std::string good = ValidFile();
  ASSERT_TRUE(ParseBytes(good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = ParseBytes(good.substr(0, n));
    EXPECT_FALSE(f.ok()) << "accepted the first " << n << " bytes";
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(SafetensorsFuzzTest, RandomMutationsNeverCrashAndValidResultsStayInBounds) {
  const std::string good = ValidFile();
  std::mt19937_64 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = static_cast<char>(rng()); break;        // flip a byte
        case 1: bytes[at] = "{}[]\",:0123456789-"[rng() % 18]; break;  // a JSON character
        case 2: bytes.erase(at, 1 + rng() % 8); break;                // delete a few
        default: bytes.insert(at, 1, static_cast<char>(rng())); break;
      }
      if (bytes.empty()) bytes = "x";
    }
    auto f = ParseBytes(bytes);
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << f.status().ToString();
      continue;
    }
    ++accepted;  // e.g. a digit of a metadata value changed: then the tensors must be in bounds
    const auto* begin = reinterpret_cast<const std::byte*>(f->tensors().empty()
                                                               ? nullptr
                                                               : f->tensors()[0].data);
    for (const auto& t : f->tensors()) {
      EXPECT_LE(t.end, f->data_bytes());
      EXPECT_EQ(t.data, begin + t.begin);
    }
  }
  std::printf("mutated files accepted as still valid: %d of 20000\n", accepted);
}

}  // namespace
}  // namespace vramd::backends::safetensors
