#include "core/block_ids.h"

#include <xxhash.h>

namespace pagoda {

BlockHash hash_block_tokens(BlockHash parent, std::span<const int32_t> tokens) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &parent, sizeof(parent));
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  const BlockHash h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace pagoda
