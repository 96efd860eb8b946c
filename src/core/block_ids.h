// Block identities shared by the KV block manager, the scheduler's output and the executors:
// block ids, the chained prefix hash of a full block, and block copies (swap).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace pagoda {

using BlockId = int32_t;
inline constexpr BlockId kNullBlock = 0;  // never allocated; padding in block tables

// Chained hash of a full block: hash(parent, tokens). The first block's parent is kRootHash.
using BlockHash = uint64_t;
inline constexpr BlockHash kRootHash = 0x5041474f44414b56ull;  // "PAGODAKV"
BlockHash hash_block_tokens(BlockHash parent, std::span<const int32_t> tokens);

using BlockCopy = std::pair<BlockId, BlockId>;  // (source, destination)

}  // namespace pagoda
