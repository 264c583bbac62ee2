// A .safetensors file (header length, JSON header, data section) as SafetensorsFile::open reads it
// from disk (memory-mapped), then every tensor's first and last element read through the map.
#include "fuzz_common.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "model.safetensors";
  fuzz::write_bytes(path, fuzz::as_view(data, size));
  fuzz::expect_clean("safetensors", [&] {
    auto f = degen::SafetensorsFile::open(path);
    double sum = 0;
    for (const auto& t : f->tensors()) {
      const int64_t n = t.numel();
      if (n != 0 && t.nbytes != size_t(n) * degen::dtype_size(t.dtype))
        fuzz::finding("safetensors", "tensor " + t.name + ": nbytes does not match dtype x shape");
      const bool is_float = t.dtype != degen::DType::i32 && t.dtype != degen::DType::i64 && t.dtype != degen::DType::u8;
      if (t.nbytes > 0 && is_float) sum += t.at(0) + t.at(size_t(n) - 1);
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
    }
    (void)f->metadata();
    if (sum == 12345.678) std::abort();  // keeps the reads
  });
  return 0;
}
