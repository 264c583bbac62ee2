// doctest entry point of the GPU tests: without a usable CUDA device every test exits 77, which
// ctest reports as skipped (SKIP_RETURN_CODE), never as passed or failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/device.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-ltc", 4) == 0) listing = true;
  if (!listing) {
    std::string why;
    if (degen::cuda::list_devices(&why).empty()) {
      std::printf("skipped: %s\n", why.c_str());
      return 77;
    }
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
