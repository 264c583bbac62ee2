// The two ways a sequence is run teacher-forced, which a golden record keeps a result of each:
// prefill: the whole sequence in one forward call (chunked GDN unless the config says otherwise);
// decode: one token per call through the decode path (recurrent GDN, KV cache appends).
#pragma once
#include <cstdint>

namespace degen {

enum class ForcedMode : uint8_t { prefill, decode };
inline const char* forced_mode_name(ForcedMode m) { return m == ForcedMode::prefill ? "prefill" : "decode"; }

}  // namespace degen
