// The shipped trained model (models/tiny-trained, issue 17) and the eval module (src/diag/model_eval.h):
// the checkpoint is the one recorded in models/fingerprints.json, has the 27B's architecture in
// miniature, its tokenizer carries the Qwen3.5 conventions, its suites have the token counts they
// claim; and the held-out answer rule, the question selection and the held-out file checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "record/cases.h"
#include "diag/model_eval.h"
#include "helpers.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace degen;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
fs::path trained_dir() { return test::source_dir() / "models" / "tiny-trained"; }
}  // namespace

TEST_CASE("trained model: the shipped files are the recorded ones") {
  const json rec = json::parse(read_file(test::source_dir() / "models" / "fingerprints.json"));
  REQUIRE(rec.contains("tiny-trained"));
  const json& r = rec["tiny-trained"];
  CHECK(load_model(trained_dir())->fingerprint == r["fingerprint"].get<std::string>());
  for (const char* f : {"model.safetensors", "tokenizer.json", "heldout.json", "config.json"}) {
    CAPTURE(f);
    REQUIRE(r.contains(f));
    CHECK(sha256_hex(read_file(trained_dir() / f)) == r[f].get<std::string>());
  }
  CHECK(fs::file_size(trained_dir() / "model.safetensors") <= 30u * 1024 * 1024);  // issue 17: at most 30 MB
}

TEST_CASE("trained model: Qwen3.6-27B's architecture in miniature") {
  auto m = load_model(trained_dir());
  const ModelConfig& c = m->config;
  const json raw = json::parse(read_file(trained_dir() / "config.json"));
  CHECK(raw["model_type"] == "qwen3_5");                       // nested text_config, as the released checkpoints
  CHECK(raw["text_config"]["model_type"] == "qwen3_5_text");
  CHECK(c.tensor_prefix == "model.language_model.");
  CHECK(c.layer_map() == "GGGA×2");                             // 3 GDN then 1 attention, repeated
  CHECK(c.num_layers >= 8);
  CHECK(c.r() == 3);                                            // n_v / n_k = 3 as in the 27B
  CHECK(c.head_dim != c.hidden_size / c.n_q);                   // head_dim is not hidden / heads
  CHECK(c.partial_rotary_factor == 0.25);
  CHECK(c.rotary_dim == c.head_dim / 4);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(m->checkpoint->find("lm_head.weight") != nullptr);
  CHECK(c.mtp_num_layers == 1);
  CHECK(m->checkpoint->find("mtp.fc.weight") != nullptr);
  CHECK(m->checkpoint->find("mtp.layers.0.self_attn.q_proj.weight") != nullptr);
  CHECK(m->checkpoint->find("mtp.embed_tokens.weight") == nullptr);  // shared embedding and LM head
  // bf16 everywhere, A_log and the GDN norm included (as Qwen3.6-27B stores them)
  for (const TensorView* t : m->checkpoint->tensors()) {
    if (t->name.rfind("model.visual.", 0) == 0) continue;
    CAPTURE(t->name);
    CHECK(t->dtype == DType::bf16);
  }
}

TEST_CASE("trained model: tokenizer with the Qwen3.5 split pattern, special tokens and chat template") {
  auto tok = Tokenizer::load(trained_dir() / "tokenizer.json");
  CHECK(tok->pretokenizer() == PreTokenizerKind::qwen35);
  for (const char* s : {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>"}) {
    CAPTURE(s);
    REQUIRE(tok->token_id(s));
    CHECK(tok->is_special(*tok->token_id(s)));
  }
  // a chat turn tokenizes with the specials as single ids and decodes back
  const std::string text = render_single_turn(ChatFamily::qwen35, "", "What is 2+2?", true);
  CHECK(text == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n");
  const auto ids = tok->encode(text);
  CHECK(ids.front() == *tok->token_id("<|im_start|>"));
  CHECK(ids.back() != *tok->token_id("<think>"));  // "<think>" then "\n"
  CHECK(tok->decode(ids) == text);
  const auto stops = stop_token_ids(trained_dir() / "generation_config.json", *tok);
  CHECK(std::find(stops.begin(), stops.end(), *tok->token_id("<|im_end|>")) != stops.end());
}

TEST_CASE("trained model: the chunk-boundaries suite has exactly 63, 64, 65, 127, 128, 129 tokens") {
  Suite s = load_suite(test::source_dir() / "cases" / "tiny-trained" / "chunk-boundaries.json");
  auto m = load_model(trained_dir());
  auto tok = Tokenizer::load(trained_dir() / "tokenizer.json");
  const std::vector<size_t> want = {63, 64, 65, 127, 128, 129};
  REQUIRE(s.cases.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(s.cases[i].id);
    CHECK(s.cases[i].id == "tokens-" + std::to_string(want[i]));
    CHECK(encode_case(s.cases[i], tok.get(), m->config).ids.size() == want[i]);
  }
  Suite ld = load_suite(test::source_dir() / "cases" / "tiny-trained" / "long-decode.json");
  int sampled = 0;
  for (const Case& c : ld.cases) {
    CHECK(c.max_new_tokens >= 512);
    CHECK(c.ignore_stop);
    sampled += !sampling_str(c.sampling).empty();
  }
  CHECK(sampled >= 16);  // the long cases under the model card's sampling
}

TEST_CASE("eval: the answer rule") {
  CHECK(answer_matches("2+2 = 4.", {"4"}));
  CHECK_FALSE(answer_matches("2+2 = 5.", {"2"}));       // the question's 2 is not the answer: last number
  CHECK_FALSE(answer_matches("The answer is 14.", {"4"}));  // whole words only
  CHECK(answer_matches("Mira lives in Oslo.", {"Oslo"}));
  CHECK_FALSE(answer_matches("Mira lives in Oslomo.", {"Oslo"}));
  CHECK(answer_matches("Milo owns 27 cups.", {"27"}));
  CHECK(answer_matches("46, 47, 48.", {"46, 47, 48"}));
  CHECK_FALSE(answer_matches("46, 47, 49.", {"46, 47, 48"}));
  CHECK(answer_matches("Ida has a parrot.", {"parrot", "Ida"}));
  CHECK_FALSE(answer_matches("Ida has a parrot.", {"parrot", "Tom"}));
  CHECK_FALSE(answer_matches("", {"x"}));
}

TEST_CASE("eval: the answer is the text after </think>, cut at the end of the turn") {
  CHECK(answer_of("The user asks.\n</think>\n\n2+2 = 4.<|im_end|>", true) == "2+2 = 4.");
  CHECK(answer_of("still thinking about it", true).empty());        // no </think>: no answer
  CHECK(answer_of("Oslo.<|im_end|><|im_start|>user", false) == "Oslo.");
  CHECK(answer_of("  Oslo. \n", false) == "Oslo.");
}

TEST_CASE("eval: held-out files are checked, and a subset keeps every kind") {
  const HeldoutSet h = load_heldout(trained_dir() / "heldout.json");
  CHECK(h.questions.size() >= 100);
  std::map<std::string, size_t> kinds;
  for (const auto& q : h.questions) ++kinds[q.kind];
  CHECK(kinds.size() >= 3);
  const auto sub = select_questions(h, 20);
  CHECK(sub.size() <= 20);
  CHECK(sub.size() >= 15);
  std::set<std::string> sub_kinds;
  for (const auto& q : sub) sub_kinds.insert(q.kind);
  CHECK(sub_kinds.size() == kinds.size());
  CHECK(select_questions(h, 0).size() == h.questions.size());

  auto bad = [](const std::string& text) { return parse_heldout(text, "h.json"); };
  CHECK_THROWS_WITH_AS(bad("[]"), doctest::Contains("expected a JSON object"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "x", "questions": []})"), doctest::Contains("expected \"degenbisect-heldout-1\""), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "degenbisect-heldout-1", "questions": []})"), doctest::Contains("non-empty array"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "degenbisect-heldout-1", "questions": [{"id": "a", "prompt": "p"}]})"),
                       doctest::Contains("field 'expect' is missing"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "degenbisect-heldout-1", "questions": [{"id": "a", "prompt": "p", "expect": ["x"], "answer": 1}]})"),
                       doctest::Contains("unknown field 'answer'"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "degenbisect-heldout-1", "questions": [{"id": "a", "prompt": "p", "expect": ["x"]},
                                                                             {"id": "a", "prompt": "q", "expect": ["y"]}]})"),
                       doctest::Contains("appears twice"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"format": "degenbisect-heldout-1", "questions": [{"id": "a", "prompt": "p", "expect": [""]}]})"),
                       doctest::Contains("non-empty strings"), InputError);
  CHECK_THROWS_AS(load_heldout(test::source_dir() / "no-such-heldout.json"), InputError);
}
