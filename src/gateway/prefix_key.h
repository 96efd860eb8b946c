// The prefix-affinity key of a prompt: the prompt's leading text hashed in fixed-size blocks, the
// way the workers' prefix cache identifies a prompt by a chain of block hashes (core/block_ids.h),
// but over characters instead of token ids (the gateway has no tokenizer; docs/gateway.md).
//
// The text is cut into blocks of chunk_chars bytes; the key is the chained 64-bit FNV-1a hash of
// the first min(max_chunks, full blocks) blocks (a partial last block is not hashed, as the cache
// does not share partial blocks). Two prompts that share their first max_chunks blocks get the
// same key. nullopt when the text has no full block (no affinity: least-load routing).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda::gateway {

std::optional<uint64_t> prefix_key(std::string_view text, int chunk_chars, int max_chunks);
// FNV-1a 64 of `data` continuing from `seed` (the chain's previous hash).
uint64_t fnv1a64(std::string_view data, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace pagoda::gateway
