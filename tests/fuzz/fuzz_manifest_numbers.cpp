// The numbers of a golden record's manifest (record_manifest.cpp "reading"): the harness takes the seed
// record (tests/fuzz/seeds/golden-mini) with every optional part a manifest can have added (the spot
// checks of a reference made on the GPU, the bf16 floors' spot check, cpu_isa), lists the places that
// hold a number (or null) in it, and writes fuzzer-chosen values there: the input is a sequence of
// 10-byte records (byte 0 picks the place, byte 1 the kind of value, bytes 2-9 its payload: an int64,
// a uint64, a double's bits, 2^32 + 1, 2^63, 1e300, a fraction, "nan", "inf", null, the value there
// plus 2^32, ...). The manifest's own checksum is then recomputed (as someone editing a record
// could), and the record is opened and read the way compare reads it (every case loaded; each stored
// layer's floor turned into its limit k x floor + eps).
// The rule: an answer or a degen::Error, never a crash, a sanitizer report or another exception; and
// what is accepted is in range: it serialises back to the very values written (a number is never
// narrowed: 2^32 + 1 read as 1 would not), and no floor gives a negative limit.
#include <cmath>
#include <cstring>
#include <limits>

#include "golden_seed.h"
#include "util/file_io.h"

namespace {

using nlohmann::json;

// The seed manifest with the optional parts a record can carry, each valid (the harness checks that
// it opens), so that their numbers are reached too.
json extended_seed() {
  json m = json::parse(degen::read_file(fuzz::golden_seed_dir() / "manifest.json"));
  m["model"].erase("tensor_digests");  // (strings, a record may lack them: a smaller document per input)
  m["settings"]["cpu_isa"] = "avx2";
  m["settings"]["verification"] = {{"status", "passed"}, {"by", "cpu:ref"}, {"what", "seed"}, {"layers", {0, 7}},
                                   {"positions", 4}, {"cases", 2}, {"limit_rel_l2", 1e-4}, {"limit_kld", 1e-4},
                                   {"worst_rel_l2", 2e-7}, {"worst_kld", 3e-9}, {"worst_generation_kld", 4e-9},
                                   {"generation", "seed"}};
  m["noise_floors"]["classes"]["bf16"]["spot_check"] = {{"status", "passed"}, {"by", "cpu:bf16"}, {"what", "seed"},
                                                        {"cases", 2}, {"positions", 4}, {"k", 3.0}, {"worst_ratio", 0.5}};
  for (json& c : m["cases"]) {
    c["verification"] = {{"by", "cpu:ref"}, {"positions", 4}, {"worst_rel_l2", 2e-7}, {"worst_layer", 7}, {"worst_kld", 3e-9},
                         {"greedy_tokens_checked", 1}, {"generation_steps_checked", 1}, {"worst_generation_kld", 4e-9},
                         {"layers", {{{"layer", 0}, {"rel_l2", 1e-7}}, {{"layer", 7}, {"rel_l2", nullptr}}}}};
    c["floor_check"] = {{"by", "cpu:bf16"}, {"positions", 4}, {"worst_ratio", 0.5}, {"worst_layer", 0},
                        {"layers", {{{"layer", 0}, {"gpu_vs_emulation", 0.01}, {"emulation_vs_record", "inf"}}}}};
  }
  return m;
}

// Every place of `j` that holds a number or null, as JSON pointers (the degeneration summaries left
// out: the reader keeps them as they are and nothing reads their numbers).
void numeric_places(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (j.is_number() || j.is_null()) {
    out.push_back(at);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (k != "degeneration") numeric_places(v, at / k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) numeric_places(j[i], at / i, out);
  }
}

struct Seed {
  json manifest;
  std::vector<json::json_pointer> places;
};

const Seed& seed() {
  static const Seed s = [] {
    Seed r;
    r.manifest = extended_seed();
    numeric_places(r.manifest, json::json_pointer(), r.places);
    return r;
  }();
  return s;
}

int64_t i64(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// An integer plus d, in uint64 arithmetic where int64 would overflow (defined: modulo 2^64).
json plus(const json& cur, uint64_t d) {
  if (cur.is_number_unsigned()) return cur.get<uint64_t>() + d;
  const int64_t x = cur.get<int64_t>();
  if (x <= std::numeric_limits<int64_t>::max() - static_cast<int64_t>(d)) return x + static_cast<int64_t>(d);
  return static_cast<uint64_t>(x) + d;
}

// The value a record writes where `cur` was.
json value_of(uint8_t kind, const uint8_t* p, const json& cur) {
  const double c = cur.is_number() ? cur.get<double>() : 1.0;
  switch (kind % 12) {
    case 0: return i64(p);
    case 1: return static_cast<uint64_t>(i64(p));
    case 2: {
      double d;
      std::memcpy(&d, p, 8);
      if (!std::isfinite(d)) return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
      return d;
    }
    case 3: {
      static const json specials[] = {uint64_t{4294967297},  // 2^32 + 1
                                      uint64_t{9223372036854775808u},  // 2^63
                                      uint64_t{18446744073709551615u}, int64_t{-1}, 0, uint64_t{2147483648u},
                                      int64_t{2147483647}, int64_t{-2147483649}, 1e300, -1e-300, 0.5, -0.0,
                                      uint64_t{9007199254740993u},  // 2^53 + 1
                                      1e-320, 1048577, 4097};
      return specials[p[0] % 16];
    }
    case 4: {
      static const char* const strings[] = {"nan", "inf", "-inf", "NaN", "1e999", "-0", "1", ""};
      return strings[p[0] % 8];
    }
    case 5: return nullptr;
    case 6: return static_cast<int>(p[0]) - 128;
    case 7: return c + 0.5;  // a fraction where an integer was
    case 8: return -c;
    case 9: return cur.is_number_integer() ? plus(cur, 1) : json(std::nextafter(c, INFINITY));
    case 10: return cur.is_number_integer() ? plus(cur, uint64_t{1} << 32) : json(c * 4294967296.0);  // the same value, wrapped
    default: return static_cast<double>(i64(p)) / std::ldexp(1.0, p[0] % 64);
  }
}

// What compare does with the numbers it reads: every case loaded; each stored layer's floor and each
// KLD floor made into a limit (metrics::FloorRule: k x floor + eps), which must not be negative.
void read_as_compare(const degen::GoldenRecord& rec) {
  const std::vector<bool> stored = rec.stored_layers();
  for (size_t i = 0; i < rec.cases().size(); ++i) {
    const degen::GoldenCase c = rec.load_case(i, true);
    (void)rec.load_case(i, false);
    for (const auto& f : c.floors) {
      if (!f) continue;
      std::vector<std::optional<double>> all;
      for (int m = 0; m < 2; ++m) {
        for (size_t l = 0; l < stored.size(); ++l)
          if (stored[l]) all.push_back(f->iso[m].at(l));
        all.push_back(f->kld[m]);
      }
      all.push_back(f->mtp_kld);
      for (const auto& v : all)
        if (v && 3.0 * *v + 1e-12 < 0) fuzz::finding("manifest numbers", "a floor accepted gives a negative limit: " + std::to_string(*v));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Seed& s = seed();
  const auto& dir = fuzz::golden_scratch_record();
  json m = s.manifest;
  for (size_t at = 0; at + 10 <= size && at < 10 * 32; at += 10) {
    const json::json_pointer& place = s.places[data[at] % s.places.size()];
    m[place] = value_of(data[at + 1], data + at + 2, m[place]);
  }
  m[degen::kManifestChecksumKey] = degen::manifest_checksum(m);
  const std::string text = m.dump(1);
  fuzz::write_bytes(dir / "manifest.json", text);
  const json written = json::parse(text);
  bool opened = false;
  fuzz::expect_clean("manifest numbers", [&] {
    const degen::GoldenRecord rec = degen::GoldenRecord::open(dir);
    opened = true;
    // accepted: read without narrowing (the manifest type writes back what it read)
    if (json(rec.manifest()) != written)
      fuzz::finding("manifest numbers", "a value was accepted but not read as written (narrowed or changed): " +
                                            json::diff(written, json(rec.manifest())).dump().substr(0, 400));
    read_as_compare(rec);
  });
  if (size < 10 && !opened) fuzz::finding("manifest numbers", "the harness's seed does not open");
  return 0;
}
