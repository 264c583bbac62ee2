// A golden record's data file (one case's safetensors: tokens, top-k log-probabilities, layer
// outputs) in the seed record, with the manifest's size and SHA-256 of that file (and the
// manifest's own checksum) set to match, so every check of the file's content is reached.
#include "golden_seed.h"
#include "util/sha256.h"
#include "util/file_io.h"

namespace {
const nlohmann::json& seed_manifest() {
  // Without the per-tensor digests (most of its bytes, and unused by the data file checks): the
  // checksum over it is computed twice per input, and it dominated the target's time.
  static const nlohmann::json m = [] {
    nlohmann::json j = degen::parse_json(degen::read_file(fuzz::golden_seed_dir() / "manifest.json"), "seed manifest");
    j["model"].erase("tensor_digests");
    return j;
  }();
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fuzz::golden_scratch_record();
  // The first byte picks the case whose file is replaced; the rest is the file.
  if (size < 1) return 0;
  const nlohmann::json& seed = seed_manifest();
  const size_t which = data[0] % seed.at("cases").size();
  const std::string file = seed["cases"][which].at("file").get<std::string>();
  const std::string_view bytes = fuzz::as_view(data + 1, size - 1);
  nlohmann::json m = seed;
  m["files"][file] = {{"bytes", bytes.size()}, {"sha256", degen::sha256_hex(std::string(bytes))}};
  m[degen::kManifestChecksumKey] = degen::manifest_checksum(m);
  fuzz::write_bytes(dir / file, bytes);
  fuzz::write_bytes(dir / "manifest.json", m.dump());
  fuzz::expect_clean("golden data", [&] { fuzz::golden_read_all(dir); });
  return 0;
}
