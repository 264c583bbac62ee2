// SHA-256 (FIPS 180-4), used for model/tokenizer fingerprints and golden-record checksums:
// the same bytes give the same digest on every machine.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace degen {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards
  std::string hex();                 // finalises; lowercase hex of the digest

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace degen
