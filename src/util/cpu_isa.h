// The instruction set the CPU reference's matrix products run on, chosen once at start-up.
// One binary carries the product kernels compiled three times (src/cpu/gemm_*.cpp, gemm.h): for the baseline
// x86-64 ISA (SSE2, no FMA), for AVX2 with FMA and for AVX-512 (F). The best one this machine and its
// operating system support is used, unless DEGEN_CPU_ISA=baseline|avx2|avx512 forces another (a
// binary copied to an older machine still runs; a record can be remade under another ISA to compare).
// Results are deterministic for a given (ISA, build); the thread count does not change them.
// The chunked GDN's inner loops follow the same choice (src/cpu/gdn_loops.inc) with the same bits
// under each; the rest of the reference (norms, attention, the recurrent GDN) is compiled once, for
// the baseline ISA.
#pragma once
#include <cstdint>
#include <string>

// The per-ISA kernels exist on x86-64 only; elsewhere the baseline kernels are portable C++.
#if defined(__x86_64__) || defined(_M_X64)
#define DEGEN_GEMM_X86 1
#else
#define DEGEN_GEMM_X86 0
#endif

namespace degen::cpu {

enum class Isa : uint8_t { baseline, avx2, avx512 };

const char* isa_name(Isa isa);
// The best ISA of the three that this machine (CPUID and the OS's saved register state) and this
// build support.
Isa best_isa();
// The ISA in use: DEGEN_CPU_ISA when set, else best_isa(). Throws InputError when DEGEN_CPU_ISA holds
// an unknown value or an ISA this machine lacks; main() calls it before any command runs, so that
// the error comes first and with the input exit code.
Isa active_isa();
// One line for --version, bench, golden and inspect: "avx512 (the best of baseline, avx2, avx512 on
// this machine)" or "avx2 (forced by DEGEN_CPU_ISA; this machine has avx512)". Never throws: an
// invalid DEGEN_CPU_ISA is described instead.
std::string isa_description();

}  // namespace degen::cpu
