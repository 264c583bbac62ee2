#include "util/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace degen::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::baseline: return "baseline";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

Isa best_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && DEGEN_GEMM_X86
  // __builtin_cpu_supports checks CPUID and, for AVX and AVX-512, that the OS saves the registers
  // (XGETBV), so a hypervisor that hides AVX-512 state is respected.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::baseline;
}

namespace {

// The value of DEGEN_CPU_ISA checked against the machine: the ISA, or the reason it cannot be used.
struct Choice {
  Isa isa = Isa::baseline;
  bool forced = false;
  std::string error;
};

Choice choose() {
  Choice c;
  const Isa best = best_isa();
  c.isa = best;
  const char* env = std::getenv("DEGEN_CPU_ISA");
  if (!env || !*env) return c;
  c.forced = true;
  Isa want;
  if (!std::strcmp(env, "baseline")) {
    want = Isa::baseline;
  } else if (!std::strcmp(env, "avx2")) {
    want = Isa::avx2;
  } else if (!std::strcmp(env, "avx512")) {
    want = Isa::avx512;
  } else {
    c.error = cat("DEGEN_CPU_ISA='", env, "': expected baseline, avx2 or avx512 (or unset for the best this machine "
                  "has, ", isa_name(best), ")");
    return c;
  }
  if (static_cast<int>(want) > static_cast<int>(best)) {
    c.error = cat("DEGEN_CPU_ISA=", env, ": this machine (or this build) supports only up to ", isa_name(best));
    return c;
  }
  c.isa = want;
  return c;
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

Isa active_isa() {
  const Choice& c = choice();
  if (!c.error.empty()) input_error(c.error);
  return c.isa;
}

std::string isa_description() {
  const Choice& c = choice();
  const Isa best = best_isa();
  if (!c.error.empty()) return cat("invalid: ", c.error);
  if (c.forced) return cat(isa_name(c.isa), " (forced by DEGEN_CPU_ISA; this machine has ", isa_name(best), ")");
  return cat(isa_name(c.isa), " (the best of baseline, avx2, avx512 on this machine)");
}

}  // namespace degen::cpu
