// A golden record's manifest.json over the seed record's data files, then every case loaded. When
// the input is a JSON object that carries manifest_sha256, the harness sets it to the input's own
// checksum, so the fuzzer reaches the checks behind it (the input without the key is read as a
// record made before checksums, unverified).
#include "golden_seed.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fuzz::golden_scratch_record();
  std::string text(fuzz::as_view(data, size));
  fuzz::expect_clean("golden manifest", [&] {
    try {
      nlohmann::json m = degen::parse_json(text, "manifest.json");
      if (m.is_object() && m.contains(degen::kManifestChecksumKey)) {
        m[degen::kManifestChecksumKey] = degen::manifest_checksum(m);
        text = m.dump();
      }
    } catch (const nlohmann::json::parse_error&) {
      // written as is: the reader must refuse it
    } catch (const degen::Error&) {
      // nested too deep: written as is
    }
    fuzz::write_bytes(dir / "manifest.json", text);
    fuzz::golden_read_all(dir);
  });
  return 0;
}
