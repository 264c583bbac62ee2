// Tests for the safetensors reader, checkpoint folders and the atomic writer (src/model/safetensors.*):
// writer -> reader round trips over dtypes and odd shapes, sharded checkpoints, and one case per
// class of corrupt file, each checking both the exception type and a distinguishing message.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "util/error.h"

using namespace degen;
using degen::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Writes a raw safetensors file: 8-byte LE `header_len` (default: header.size()), header, data bytes.
void write_raw(const fs::path& p, const std::string& header, size_t data_bytes = 0,
               uint64_t header_len = UINT64_MAX) {
  uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  s += header;
  s.append(data_bytes, '\x01');
  std::ofstream(p, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Expects SafetensorsFile::open(p) to throw InputError whose message contains every needle.
void expect_open_error(const fs::path& p, std::initializer_list<std::string> needles) {
  bool threw = false;
  try {
    SafetensorsFile::open(p);
  } catch (const InputError& e) {
    threw = true;
    std::string msg = e.what();
    CHECK(e.code() == ExitCode::input);
    for (const std::string& n : needles) {
      INFO("message: " << msg);
      CHECK_MESSAGE(msg.find(n) != std::string::npos, "missing '" << n << "'");
    }
  }
  CHECK_MESSAGE(threw, "no InputError for " << p.string());
}

void expect_checkpoint_error(const fs::path& dir, std::initializer_list<std::string> needles) {
  bool threw = false;
  try {
    Checkpoint::open(dir);
  } catch (const InputError& e) {
    threw = true;
    std::string msg = e.what();
    for (const std::string& n : needles) {
      INFO("message: " << msg);
      CHECK_MESSAGE(msg.find(n) != std::string::npos, "missing '" << n << "'");
    }
  }
  CHECK_MESSAGE(threw, "no InputError for checkpoint " << dir.string());
}

std::vector<float> ramp(size_t n, float scale = 0.37f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - static_cast<float>(n) / 3) * scale;
  return v;
}

}  // namespace

TEST_CASE("safetensors: round trip over dtypes and shapes") {
  TempDir tmp("st");
  SafetensorsWriter w;

  // f32 [2, 3]
  std::vector<float> a = ramp(6);
  w.add_f32("a.f32", {2, 3}, a);
  // bf16 [5]
  std::vector<float> b = ramp(5, 1.7f);
  std::vector<uint16_t> b16;
  for (float x : b) b16.push_back(f32_to_bf16(x));
  w.add("b.bf16", DType::bf16, {5}, b16.data(), b16.size() * 2);
  // f16 [3, 1, 2]
  std::vector<float> c = ramp(6, 0.11f);
  std::vector<uint16_t> c16;
  for (float x : c) c16.push_back(f32_to_f16(x));
  w.add("c.f16", DType::f16, {3, 1, 2}, c16.data(), c16.size() * 2);
  // f8_e4m3 [7] (odd length: following tensors are unaligned)
  std::vector<float> d = ramp(7, 3.0f);
  std::vector<uint8_t> d8;
  for (float x : d) d8.push_back(f32_to_e4m3(x));
  w.add("d.e4m3", DType::f8_e4m3, {7}, d8.data(), d8.size());
  // f64 [2]
  std::vector<double> e = {1.0 / 3.0, -2.5e10};
  w.add("e.f64", DType::f64, {2}, e.data(), e.size() * 8);
  // i32 [3], i64 [2], u8 [4]
  std::vector<int32_t> fi = {-1, 0, 2147483647};
  w.add("f.i32", DType::i32, {3}, fi.data(), 12);
  std::vector<int64_t> gi = {-5, int64_t(1) << 40};
  w.add("g.i64", DType::i64, {2}, gi.data(), 16);
  std::vector<uint8_t> hu = {0, 1, 254, 255};
  w.add("h.u8", DType::u8, {2, 2}, hu.data(), 4);
  // 0-d scalar and a tensor with a zero dim
  w.add_f32("scalar", {}, {42.5f});
  w.add_f32("empty", {0, 4}, {});
  w.add_f32("last", {1}, {-7.0f});
  CHECK(w.size() == 11);

  fs::path p = tmp / "rt.safetensors";
  w.write(p);

  // Data section starts at a multiple of 8; no temp file left behind.
  std::string raw = read_file(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  CHECK((8 + n) % 8 == 0);
  size_t files = 0;
  for (auto& de : fs::directory_iterator(tmp.path())) { (void)de; ++files; }
  CHECK(files == 1);

  auto f = SafetensorsFile::open(p);
  REQUIRE(f->tensors().size() == 11);
  // Data-offset order is insertion order for the writer, except that the empty tensor sorts
  // before a non-empty one at the same offset.
  std::vector<std::string> order;
  for (const auto& t : f->tensors()) order.push_back(t.name);
  CHECK(order == std::vector<std::string>{"a.f32", "b.bf16", "c.f16", "d.e4m3", "e.f64", "f.i32", "g.i64",
                                          "h.u8", "scalar", "empty", "last"});
  CHECK(f->header_json().size() == n);
  CHECK(f->metadata().empty());
  CHECK(f->find("nope") == nullptr);

  const TensorView* t = f->find("a.f32");
  REQUIRE(t);
  CHECK(t->dtype == DType::f32);
  CHECK(t->shape == std::vector<int64_t>{2, 3});
  CHECK(t->numel() == 6);
  CHECK(t->nbytes == 24);
  CHECK(t->offset == 0);
  CHECK(t->file == "rt.safetensors");
  for (size_t i = 0; i < a.size(); ++i) CHECK(t->at(i) == a[i]);

  t = f->find("b.bf16");
  REQUIRE(t);
  CHECK(t->dtype == DType::bf16);
  for (size_t i = 0; i < b.size(); ++i) CHECK(t->at(i) == round_bf16(b[i]));

  t = f->find("c.f16");
  REQUIRE(t);
  CHECK(t->shape == std::vector<int64_t>{3, 1, 2});
  for (size_t i = 0; i < c.size(); ++i) CHECK(t->at(i) == round_f16(c[i]));

  t = f->find("d.e4m3");
  REQUIRE(t);
  CHECK(t->nbytes == 7);
  for (size_t i = 0; i < d.size(); ++i) CHECK(t->at(i) == round_e4m3(d[i]));

  t = f->find("e.f64");
  REQUIRE(t);
  double e_back[2];
  std::memcpy(e_back, t->data, 16);
  CHECK(e_back[0] == e[0]);
  CHECK(e_back[1] == e[1]);

  t = f->find("f.i32");
  REQUIRE(t);
  CHECK(t->dtype == DType::i32);
  int32_t fi_back[3];
  std::memcpy(fi_back, t->data, 12);
  CHECK(std::vector<int32_t>(fi_back, fi_back + 3) == fi);

  t = f->find("g.i64");
  REQUIRE(t);
  int64_t gi_back[2];
  std::memcpy(gi_back, t->data, 16);
  CHECK(std::vector<int64_t>(gi_back, gi_back + 2) == gi);

  t = f->find("h.u8");
  REQUIRE(t);
  CHECK(std::vector<uint8_t>(t->data, t->data + 4) == hu);

  t = f->find("scalar");
  REQUIRE(t);
  CHECK(t->shape.empty());
  CHECK(t->numel() == 1);
  CHECK(t->nbytes == 4);
  CHECK(t->at(0) == 42.5f);

  t = f->find("empty");
  REQUIRE(t);
  CHECK(t->shape == std::vector<int64_t>{0, 4});
  CHECK(t->numel() == 0);
  CHECK(t->nbytes == 0);

  t = f->find("last");
  REQUIRE(t);
  CHECK(t->at(0) == -7.0f);

  CHECK(shape_str({2, 3, 4}) == "[2, 3, 4]");
  CHECK(shape_str({}) == "[]");
}

TEST_CASE("safetensors: metadata round trip and header order") {
  TempDir tmp("st");
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "quote \" and unicode \xc3\xa9");
  w.add_f32("z", {1}, {1.0f});
  w.add_f32("a", {1}, {2.0f});
  fs::path p = tmp / "m.safetensors";
  w.write(p);
  auto f = SafetensorsFile::open(p);
  CHECK(f->metadata().size() == 2);
  CHECK(f->metadata().at("format") == "pt");
  CHECK(f->metadata().at("note") == "quote \" and unicode \xc3\xa9");
  // Header keeps insertion order: __metadata__ first, then z before a.
  const std::string& h = f->header_json();
  CHECK(h.find("__metadata__") < h.find("\"z\""));
  CHECK(h.find("\"z\"") < h.find("\"a\""));
  CHECK(f->find("z")->offset == 0);
  CHECK(f->find("a")->offset == 4);
  CHECK(f->tensors().front().name == "z");
}

TEST_CASE("safetensors: writer rejects bad tensors") {
  SafetensorsWriter w;
  w.add_f32("x", {2}, {1, 2});
  CHECK_THROWS_AS(w.add_f32("x", {2}, {1, 2}), std::invalid_argument);     // duplicate
  CHECK_THROWS_AS(w.add_f32("y", {3}, {1, 2}), std::invalid_argument);     // 8 bytes for 12
  CHECK_THROWS_AS(w.add_f32("y", {-1, 2}, {1, 2}), std::invalid_argument); // negative dim
  CHECK_THROWS_AS(w.add_f32("__metadata__", {2}, {1, 2}), std::invalid_argument);
  CHECK(w.size() == 1);
  try {
    w.add_f32("x", {2}, {1, 2});
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("duplicate") != std::string::npos);
  }
}

TEST_CASE("safetensors: write_file_atomic and read_file") {
  TempDir tmp("st");
  fs::path p = tmp / "x.txt";
  write_file_atomic(p, "first");
  CHECK(read_file(p) == "first");
  write_file_atomic(p, std::string("sec\0ond", 7));
  CHECK(read_file(p) == std::string("sec\0ond", 7));
  write_file_atomic(p, "");
  CHECK(read_file(p).empty());
  size_t files = 0;
  for (auto& de : fs::directory_iterator(tmp.path())) { (void)de; ++files; }
  CHECK(files == 1);  // no temp file left behind
  CHECK_THROWS_AS(read_file(tmp / "missing.txt"), InputError);
  CHECK_THROWS_AS(write_file_atomic(tmp / "no-such-dir" / "x.txt", "y"), InputError);
}

// The reference reader (huggingface/safetensors) and this one demand that the tensors cover the data
// section exactly. Accepting gaps let a header length one byte short through: every tensor then
// read one byte off (misaligned loads of wrong values, issue 21).
TEST_CASE("safetensors: the tensors must cover the data section exactly") {
  TempDir tmp("st");
  const std::string two = R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},)"
                          R"( "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}     )";
  SUBCASE("contiguous in any header order, with an empty tensor: accepted") {
    fs::path p = tmp / "ok.safetensors";
    write_raw(p, R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},)"
                 R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [12, 12]},)"
                 R"( "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}  )",
              12);
    auto f = SafetensorsFile::open(p);
    REQUIRE(f->tensors().size() == 3);
    CHECK(f->tensors()[0].name == "a");
    CHECK(f->find("b")->nbytes == 8);
  }
  SUBCASE("a gap between tensors") {
    fs::path p = tmp / "gap.safetensors";
    write_raw(p, R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                 R"( "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})",
              16);
    expect_open_error(p, {"gap in the data section: bytes [4, 8) belong to no tensor", "after 'a', before 'b'"});
  }
  SUBCASE("the first tensor does not begin at 0") {
    fs::path p = tmp / "late.safetensors";
    write_raw(p, R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]}})", 8);
    expect_open_error(p, {"bytes [0, 4) belong to no tensor", "before 'a'"});
  }
  SUBCASE("trailing bytes after the last tensor") {
    fs::path p = tmp / "trail.safetensors";
    write_raw(p, two, 17);
    expect_open_error(p, {"data section is 17 bytes", "cover only 12 bytes", "end exactly at the end of the file"});
  }
  SUBCASE("header length one byte short (the data section starts a byte early)") {
    fs::path p = tmp / "short.safetensors";
    write_raw(p, two, 12, two.size() - 1);  // the header's last byte (a space) becomes data
    expect_open_error(p, {"header length " + std::to_string(two.size() - 1), "data section is 13 bytes",
                          "cover only 12 bytes"});
  }
  SUBCASE("header length one byte long") {
    fs::path p = tmp / "long.safetensors";
    write_raw(p, two, 12, two.size() + 1);  // the first data byte becomes header text
    expect_open_error(p, {"not JSON"});
  }
  SUBCASE("a file written by SafetensorsWriter, header length decremented") {
    fs::path p = tmp / "w.safetensors";
    SafetensorsWriter w;
    w.add_f32("x", {3}, {1, 2, 3});
    w.add_f32("y", {2}, {4, 5});
    w.write(p);
    std::string bytes = read_file(p);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    REQUIRE(bytes[8 + n - 1] == ' ');  // the writer pads the header with spaces to a multiple of 8
    n -= 1;
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    write_file_atomic(p, bytes);
    expect_open_error(p, {"w.safetensors", "header length", "cover only 20 bytes"});
  }
}

TEST_CASE("safetensors: open cost does not depend on data size (2 GiB sparse file)") {
  TempDir tmp("st");
  fs::path p = tmp / "huge.safetensors";
  const uint64_t big = uint64_t(1) << 31;  // 2 GiB of F32 data that is never written (a hole)
  std::string header = R"({"w": {"dtype": "F32", "shape": [536870912], "data_offsets": [0, 2147483648]}})";
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  write_raw(p, header);
  {
    int fd = ::open(p.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(8 + header.size() + big)) == 0);
    ::close(fd);
  }
  auto f = SafetensorsFile::open(p);
  const TensorView* t = f->find("w");
  REQUIRE(t);
  CHECK(t->nbytes == big);
  CHECK(t->numel() == (int64_t(1) << 29));
  // Lazy mapping: beyond a readahead margin past the header, no data page was brought in by open.
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t margin = size_t(16) << 20;
  uintptr_t start = (reinterpret_cast<uintptr_t>(t->data) + margin) & ~static_cast<uintptr_t>(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(t->data) + big;
  size_t len = (end - start) / page * page;
  std::vector<unsigned char> resident(len / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(start), len, resident.data()) == 0);
  size_t n_resident = 0;
  for (unsigned char r : resident) n_resident += r & 1;
  CHECK(n_resident == 0);
  // The measurement itself works: touching a page in the middle makes it resident.
  volatile uint8_t sink = t->data[big / 2];
  (void)sink;
  uintptr_t mid = (reinterpret_cast<uintptr_t>(t->data) + big / 2) & ~static_cast<uintptr_t>(page - 1);
  unsigned char one = 0;
  REQUIRE(::mincore(reinterpret_cast<void*>(mid), static_cast<size_t>(page), &one) == 0);
  CHECK((one & 1) == 1);
}

TEST_CASE("safetensors: corrupt files are rejected with distinct messages") {
  TempDir tmp("st");
  const std::string ok_x = R"("x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]})";
  int k = 0;
  auto path = [&]() { return tmp / ("c" + std::to_string(k++) + ".safetensors"); };

  SUBCASE("missing file") { expect_open_error(tmp / "absent.safetensors", {"cannot open", "absent.safetensors"}); }
  SUBCASE("shorter than 8 bytes") {
    fs::path p = path();
    std::ofstream(p, std::ios::binary) << "abc";
    expect_open_error(p, {"shorter than the 8-byte", p.filename().string()});
  }
  SUBCASE("empty file") {
    fs::path p = path();
    std::ofstream(p, std::ios::binary).flush();
    expect_open_error(p, {"shorter than the 8-byte"});
  }
  SUBCASE("header length past end of file") {
    fs::path p = path();
    write_raw(p, "{}", 0, 1000);
    expect_open_error(p, {"header length 1000 runs past end of file", "file is 10 bytes"});
  }
  SUBCASE("header length near 2^64 does not overflow") {
    fs::path p = path();
    write_raw(p, "{}", 0, UINT64_MAX - 3);
    expect_open_error(p, {"runs past end of file"});
  }
  SUBCASE("header length absurdly large") {
    fs::path p = path();
    write_raw(p, "{}", 0, 150'000'000);
    int fd = ::open(p.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 8 + 150'000'000 + 16) == 0);  // sparse: the length fits in the file
    ::close(fd);
    expect_open_error(p, {"is too large"});
  }
  SUBCASE("header not JSON") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32",)");
    expect_open_error(p, {"header is not JSON"});
  }
  SUBCASE("zero-length header") {
    fs::path p = path();
    write_raw(p, "");
    expect_open_error(p, {"header is not JSON"});
  }
  SUBCASE("header not an object") {
    fs::path p = path();
    write_raw(p, "[1, 2]");
    expect_open_error(p, {"header is not a JSON object", "an array"});
  }
  SUBCASE("entry not an object") {
    fs::path p = path();
    write_raw(p, R"({"x": 5})");
    expect_open_error(p, {"tensor 'x'", "expected an object"});
  }
  SUBCASE("missing dtype") {
    fs::path p = path();
    write_raw(p, R"({"x": {"shape": [3], "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "missing 'dtype'"});
  }
  SUBCASE("missing shape") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "missing 'shape'"});
  }
  SUBCASE("missing data_offsets") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3]}})", 12);
    expect_open_error(p, {"tensor 'x'", "missing 'data_offsets'"});
  }
  SUBCASE("unexpected key") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12], "strides": [1]}})", 12);
    expect_open_error(p, {"tensor 'x'", "unexpected key 'strides'"});
  }
  SUBCASE("dtype not a string") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": 3, "shape": [3], "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "'dtype' must be a string"});
  }
  SUBCASE("shape not an array") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": "3", "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "'shape' must be an array"});
  }
  SUBCASE("negative dim") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [-3], "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "dimension 0 must be a non-negative integer", "negative"});
  }
  SUBCASE("non-integer dim") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3, 1.5], "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"tensor 'x'", "dimension 1", "non-integer"});
  }
  SUBCASE("data_offsets wrong arity") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12, 24]}})", 24);
    expect_open_error(p, {"tensor 'x'", "'data_offsets' must be an array [begin, end]"});
  }
  SUBCASE("data_offsets negative") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [-4, 8]}})", 12);
    expect_open_error(p, {"tensor 'x'", "must be two non-negative integers"});
  }
  SUBCASE("unsupported dtypes") {
    for (const char* dt : {"F8_E5M2", "BOOL", "Q4"}) {
      CAPTURE(dt);
      fs::path p = path();
      write_raw(p, std::string(R"({"w.q": {"dtype": ")") + dt + R"(", "shape": [3], "data_offsets": [0, 3]}})", 3);
      expect_open_error(p, {std::string("unsupported dtype '") + dt + "'", "tensor 'w.q'", p.filename().string()});
    }
  }
  SUBCASE("truncated file") {
    fs::path p = path();
    write_raw(p, "{" + ok_x + "}", 8);  // 12 bytes promised, 8 present
    const size_t hdr = 2 + ok_x.size();
    expect_open_error(p, {"truncated file", "tensor 'x'",
                          "expected a file of at least " + std::to_string(8 + hdr + 12),
                          "found " + std::to_string(8 + hdr + 8) + " bytes"});
  }
  SUBCASE("begin after end") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [12, 0]}})", 12);
    expect_open_error(p, {"tensor 'x'", "begin is after end"});
  }
  SUBCASE("byte size does not match dtype x shape") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 10]}})", 12);
    expect_open_error(p, {"tensor 'x': data_offsets [0, 10] give 10 bytes, expected 12 (F32 x [3])"});
  }
  SUBCASE("shape product overflows") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})");
    expect_open_error(p, {"tensor 'x'", "overflows"});
  }
  SUBCASE("byte size overflows") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})");
    expect_open_error(p, {"tensor 'x'", "overflows"});
  }
  SUBCASE("overlapping tensors") {
    fs::path p = path();
    write_raw(p,
              R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
              R"( "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
              16);
    expect_open_error(p, {"'x'", "'y'", "overlap"});
  }
  SUBCASE("tensor nested inside another overlaps") {
    fs::path p = path();
    write_raw(p,
              R"({"big": {"dtype": "U8", "shape": [32], "data_offsets": [0, 32]},)"
              R"( "mid": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},)"
              R"( "late": {"dtype": "U8", "shape": [4], "data_offsets": [20, 24]}})",
              32);
    expect_open_error(p, {"'big'", "overlap"});
  }
  SUBCASE("duplicate tensor name") {
    fs::path p = path();
    write_raw(p, "{" + ok_x + ", " + ok_x + "}", 12);
    expect_open_error(p, {"duplicate tensor name 'x'"});
  }
  SUBCASE("duplicate key inside an entry") {
    fs::path p = path();
    write_raw(p, R"({"x": {"dtype": "F32", "dtype": "BF16", "shape": [3], "data_offsets": [0, 12]}})", 12);
    expect_open_error(p, {"entry 'x': duplicate key 'dtype'"});
  }
  SUBCASE("metadata value not a string") {
    fs::path p = path();
    write_raw(p, R"({"__metadata__": {"format": "pt", "step": 3}, )" + ok_x + "}", 12);
    expect_open_error(p, {"__metadata__ 'step' must be a string", "an integer"});
  }
  SUBCASE("metadata not an object") {
    fs::path p = path();
    write_raw(p, R"({"__metadata__": "pt", )" + ok_x + "}", 12);
    expect_open_error(p, {"__metadata__ must be an object"});
  }
}

TEST_CASE("safetensors: sharded checkpoint with index") {
  TempDir tmp("st");
  SafetensorsWriter w1, w2;
  w1.add_f32("layers.0.w", {2, 2}, {1, 2, 3, 4});
  w1.add_f32("embed", {3}, {5, 6, 7});
  w2.add_f32("layers.1.w", {2}, {8, 9});
  w1.write(tmp / "model-00001-of-00002.safetensors");
  w2.write(tmp / "model-00002-of-00002.safetensors");
  write_file_atomic(tmp / "model.safetensors.index.json",
                    R"({"metadata": {"total_size": 36}, "weight_map": {)"
                    R"("layers.0.w": "model-00001-of-00002.safetensors",)"
                    R"("embed": "model-00001-of-00002.safetensors",)"
                    R"("layers.1.w": "model-00002-of-00002.safetensors"}})");
  // A stray file that the index does not name is ignored.
  SafetensorsWriter stray;
  stray.add_f32("embed", {1}, {0});
  stray.write(tmp / "stray.safetensors");

  auto ck = Checkpoint::open(tmp.path());
  CHECK(ck->dir() == tmp.path());
  CHECK(ck->files().size() == 2);
  auto all = ck->tensors();
  REQUIRE(all.size() == 3);
  CHECK(all[0]->name == "embed");
  CHECK(all[1]->name == "layers.0.w");
  CHECK(all[2]->name == "layers.1.w");
  CHECK(ck->total_bytes() == 36);
  CHECK(ck->get("layers.1.w").at(1) == 9.0f);
  CHECK(ck->get("layers.1.w").file == "model-00002-of-00002.safetensors");
  CHECK(ck->get("embed").at(2) == 7.0f);
  CHECK(ck->find("nope") == nullptr);
  try {
    ck->get("nope");
    FAIL("get of an absent tensor must throw");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("no tensor 'nope'") != std::string::npos);
  }
}

TEST_CASE("safetensors: checkpoint folder without index") {
  TempDir tmp("st");
  SafetensorsWriter w;
  w.add_f32("x", {2}, {1, 2});

  SUBCASE("model.safetensors wins over other files") {
    w.write(tmp / "model.safetensors");
    w.write(tmp / "other.safetensors");
    auto ck = Checkpoint::open(tmp.path());
    CHECK(ck->files().size() == 1);
    CHECK(ck->get("x").file == "model.safetensors");
  }
  SUBCASE("single file of another name") {
    w.write(tmp / "weights.safetensors");
    auto ck = Checkpoint::open(tmp.path());
    CHECK(ck->get("x").file == "weights.safetensors");
  }
  SUBCASE("several files and no index") {
    w.write(tmp / "a.safetensors");
    w.write(tmp / "b.safetensors");
    expect_checkpoint_error(tmp.path(), {"several .safetensors files", "a.safetensors", "b.safetensors"});
  }
  SUBCASE("no safetensors file") {
    write_file_atomic(tmp / "config.json", "{}");
    expect_checkpoint_error(tmp.path(), {"no .safetensors file"});
  }
  SUBCASE("not a folder") {
    expect_checkpoint_error(tmp / "absent", {"expected a folder"});
  }
}

TEST_CASE("safetensors: corrupt checkpoint indexes are rejected") {
  TempDir tmp("st");
  SafetensorsWriter w1, w2;
  w1.add_f32("a", {1}, {1});
  w1.add_f32("shared", {1}, {2});
  w2.add_f32("b", {1}, {3});
  w2.add_f32("shared", {1}, {4});
  w1.write(tmp / "s1.safetensors");
  w2.write(tmp / "s2.safetensors");
  const fs::path index = tmp / "model.safetensors.index.json";

  SUBCASE("index names a missing shard") {
    write_file_atomic(index, R"({"weight_map": {"a": "s1.safetensors", "c": "s9.safetensors"}})");
    expect_checkpoint_error(tmp.path(), {"names shard 's9.safetensors'", "does not exist"});
  }
  SUBCASE("index names a tensor absent from its shard") {
    write_file_atomic(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
    expect_checkpoint_error(tmp.path(), {"lists tensor 'b' in shard 's1.safetensors'", "no such tensor"});
  }
  SUBCASE("tensor present in two shards") {
    write_file_atomic(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
    expect_checkpoint_error(tmp.path(), {"tensor 'shared' is in two shards", "s1.safetensors", "s2.safetensors"});
  }
  SUBCASE("index not JSON") {
    write_file_atomic(index, R"({"weight_map": {"a": )");
    expect_checkpoint_error(tmp.path(), {"index is not JSON"});
  }
  SUBCASE("index without weight_map") {
    write_file_atomic(index, R"({"metadata": {}})");
    expect_checkpoint_error(tmp.path(), {"weight_map"});
  }
  SUBCASE("weight_map not an object") {
    write_file_atomic(index, R"({"weight_map": ["a"]})");
    expect_checkpoint_error(tmp.path(), {"weight_map must be an object"});
  }
  SUBCASE("corrupt shard is reported with its file name") {
    write_raw(tmp / "s3.safetensors", "{not json");
    write_file_atomic(index, R"({"weight_map": {"a": "s3.safetensors"}})");
    expect_checkpoint_error(tmp.path(), {"s3.safetensors", "header is not JSON"});
  }
}
