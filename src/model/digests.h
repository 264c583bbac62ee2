// Digests of a checkpoint's weight values, recorded in a golden record's manifest so that compare
// can tell two checkpoints of one architecture apart (the model fingerprint covers the config and
// the tensor headers only) and name the tensors that differ.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "model/safetensors.h"

namespace degen {

// A cheap digest of the weight VALUES: SHA-256 over, for every tensor sorted by name, its name and
// its first and last 64 bytes. The model fingerprint covers config and tensor headers only, so two
// checkpoints of one architecture (another seed, a fine-tune, a modified copy) share it; this sample
// tells them apart without reading the whole checkpoint (compare warns, it does not refuse).
std::string weights_sample_digest(const Checkpoint& ckpt);

// Every tensor's digest over ALL its bytes (name -> 16 hex digits): the sample above misses an edit
// inside a tensor. A 64-bit hash of our own (64-bit words through a multiply-xorshift mix in four
// lanes, then the length): it detects changes, it is not a cryptographic checksum. Tensors are
// hashed in parallel; it reads the whole checkpoint once (bandwidth-bound: see README for the cost
// on a 27B checkpoint).
std::map<std::string, std::string> tensor_digests(const Checkpoint& ckpt);
uint64_t content_hash64(const uint8_t* data, size_t n);

}  // namespace degen
