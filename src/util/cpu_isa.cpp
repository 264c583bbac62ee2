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
  Isa best = Isa::baseline;  // what this machine and build support
  Isa isa = Isa::baseline;
  bool forced = false;
  std::string error;
};

Choice choose() {
  Choice c;
  c.best = c.isa = best_isa();
  const char* env = std::getenv("DEGEN_CPU_ISA");
  if (!env || !*env) return c;
  c.forced = true;
  for (Isa want : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (std::strcmp(env, isa_name(want)) != 0) continue;
    if (static_cast<int>(want) > static_cast<int>(c.best))
      c.error = cat("DEGEN_CPU_ISA=", env, ": this machine (or this build) supports only up to ", isa_name(c.best));
    else
      c.isa = want;
    return c;
  }
  c.error = cat("DEGEN_CPU_ISA='", env, "': expected baseline, avx2 or avx512 (or unset for the best this machine has, ",
                isa_name(c.best), ")");
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
  if (!c.error.empty()) return cat("invalid: ", c.error);
  if (c.forced) return cat(isa_name(c.isa), " (forced by DEGEN_CPU_ISA; this machine has ", isa_name(c.best), ")");
  return cat(isa_name(c.isa), " (the best of baseline, avx2, avx512 on this machine)");
}

}  // namespace degen::cpu
