// Hostile inputs (issue 21 items 1, 3): every one is an InputError (exit 128) that says what was
// expected and what was found, never a crash, a hang or unbounded memory.
//  - JSON nested 300,000 deep in each reader of external JSON (the stack overflowed in dump());
//  - a FIFO, /dev/zero or a folder where a file is expected; the size cap of read_file.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <fstream>
#include <string>

#include "diag/cases.h"
#include "diag/golden.h"
#include "diag/model_eval.h"
#include "diag/sweep.h"
#include "helpers.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "report/inputs.h"
#include "util/error.h"
#include "util/json_input.h"

using namespace degen;
using degen::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string deep_array(int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); }

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Runs f, expecting an InputError whose message contains every needle.
template <typename F>
void expect_input_error(F&& f, std::initializer_list<std::string> needles) {
  bool threw = false;
  try {
    f();
  } catch (const InputError& e) {
    threw = true;
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(e.code() == ExitCode::input);
    for (const std::string& n : needles) CHECK_MESSAGE(msg.find(n) != std::string::npos, "missing '" << n << "'");
  }
  CHECK_MESSAGE(threw, "no InputError");
}

}  // namespace

TEST_CASE("bad input: JSON nesting depth is measured outside strings and bounded") {
  CHECK(json_nesting_depth("") == 0);
  CHECK(json_nesting_depth("[[{}], {\"a\": [1]}]") == 3);
  CHECK(json_nesting_depth(R"(["[[[[", "\"[[[[\\", {"k]": "{{{{"}])") == 2);  // brackets in strings do not count
  CHECK(json_nesting_depth(deep_array(300000)) == kMaxJsonDepth + 1);        // counting stops past the limit

  CHECK(parse_json(deep_array(kMaxJsonDepth), "ok.json").is_array());
  expect_input_error([] { parse_json(deep_array(kMaxJsonDepth + 1), "deep.json"); },
                     {"deep.json", "nested deeper than 256 levels", "expected at most 256"});
  // Depth is an InputError even where syntax errors are not exceptions.
  expect_input_error([] { parse_json(deep_array(300000), "deep.json", /*allow_exceptions=*/false); }, {"deep.json"});
  CHECK(parse_json("{", "x", false).is_discarded());
  CHECK_THROWS_AS(parse_json("{", "x"), json::parse_error);
}

TEST_CASE("bad input: json_excerpt stops at its limit, even for a 300,000-deep value") {
  json root = json::array();
  json* cur = &root;
  for (int i = 0; i < 300000; ++i) {  // built without the parser; nlohmann destroys it iteratively
    cur->push_back(json::array());
    cur = &cur->back();
  }
  const std::string s = json_excerpt(root, 60);
  CHECK(s.size() == 60);
  CHECK(s == std::string(57, '[') + "...");
  CHECK(json_excerpt(json{{"a", 1}}) == R"({"a":1})");
  // A cut never leaves half a UTF-8 sequence: "\"" + 30 x "é" cut at 10 characters.
  std::string e;
  for (int i = 0; i < 30; ++i) e += "\xc3\xa9";
  const std::string cut = json_excerpt(json(e), 10);
  CHECK(cut == "\"\xc3\xa9\xc3\xa9\xc3\xa9...");
}

TEST_CASE("bad input: every reader of external JSON rejects 300,000 nested arrays") {
  TempDir tmp("deep");
  const std::string deep = deep_array(300000);
  SUBCASE("cases file (the prompt)") {
    expect_input_error([&] { parse_suite(R"({"suite": "s", "cases": [{"id": "a", "prompt": )" + deep + "}]}", "cases.json"); },
                       {"cases.json", "nested deeper than 256"});
  }
  SUBCASE("config.json") {
    fs::create_directories(tmp / "m");
    write_text(tmp / "m" / "config.json", R"({"model_type": "qwen3_5", "text_config": )" + deep + "}");
    expect_input_error([&] { load_model_config(tmp / "m"); }, {"config.json", "nested deeper"});
  }
  SUBCASE("safetensors header") {
    const std::string h = R"({"a": )" + deep + "}";
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    write_text(tmp / "deep.safetensors", s + h);
    expect_input_error([&] { SafetensorsFile::open(tmp / "deep.safetensors"); }, {"deep.safetensors", "nested deeper"});
  }
  SUBCASE("tokenizer.json") {
    expect_input_error([&] { Tokenizer::from_json_text(R"({"model": )" + deep + "}", "tokenizer.json"); },
                       {"tokenizer.json", "nested deeper"});
  }
  SUBCASE("held-out set") {
    expect_input_error([&] { parse_heldout(R"({"questions": )" + deep + "}", "heldout.json"); }, {"heldout.json", "nested deeper"});
  }
  SUBCASE("sweep matrix") {
    write_text(tmp / "matrix.json", R"({"axes": )" + deep + "}");
    expect_input_error([&] { load_sweep_matrix(tmp / "matrix.json"); }, {"matrix.json", "nested deeper"});
  }
  SUBCASE("report input: sweep.json and results.jsonl") {
    fs::create_directories(tmp / "sw");
    write_text(tmp / "sw" / "sweep.json", R"({"name": )" + deep + "}");
    expect_input_error([&] { report::read_sweep_folder(tmp / "sw"); }, {"sweep.json", "nested deeper"});
    fs::create_directories(tmp / "sw2");
    write_text(tmp / "sw2" / "results.jsonl", R"({"cell": )" + deep + "}\n");
    expect_input_error([&] { report::read_sweep_folder(tmp / "sw2"); }, {"results.jsonl", "nested deeper"});
  }
  SUBCASE("golden manifest") {
    fs::create_directories(tmp / "g");
    write_text(tmp / "g" / "manifest.json", R"({"format": )" + deep + "}");
    expect_input_error([&] { GoldenRecord::open(tmp / "g"); }, {"manifest.json", "nested deeper"});
  }
}

TEST_CASE("bad input: read_file refuses folders, FIFOs and devices, and caps the size") {
  TempDir tmp("rf");
  expect_input_error([&] { read_file(tmp.path()); }, {tmp.path().string(), "expected a regular file, found a folder"});
  REQUIRE(::mkfifo((tmp / "fifo").c_str(), 0600) == 0);
  // Without a writer, a blocking open of the FIFO would wait forever: the test would hang, not fail.
  expect_input_error([&] { read_file(tmp / "fifo"); }, {"fifo", "expected a regular file, found a named pipe (FIFO)"});
  expect_input_error([&] { read_file("/dev/zero"); }, {"/dev/zero", "found a character device"});
  write_text(tmp / "big.txt", std::string(100, 'x'));
  CHECK(read_file(tmp / "big.txt", 100).size() == 100);
  expect_input_error([&] { read_file(tmp / "big.txt", 99); }, {"big.txt", "100 bytes, expected at most 99"});

  // The readers of user-given paths go through it.
  expect_input_error([&] { load_suite(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { load_suite("/dev/zero"); }, {"character device"});
  expect_input_error([&] { load_sweep_matrix(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { Tokenizer::load(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { SafetensorsFile::open(tmp / "fifo"); }, {"fifo", "expected a regular file, found a named pipe"});
  fs::create_directories(tmp / "m");
  REQUIRE(::mkfifo((tmp / "m" / "config.json").c_str(), 0600) == 0);
  expect_input_error([&] { load_model_config(tmp / "m"); }, {"config.json", "named pipe"});
}
