/* lr_index, the block keys: a prompt's tokens become one key a full
 * block, each chained to the one before it, so that a key names the whole
 * prefix up to its block. The chain starts from a root per tenant salt, so
 * that equal prompts under two salts never share a node. lr_block_keys()
 * gives hosts the same keys, to hash at the edge; lr__index_prompt_keys()
 * checks a prompt for the calls that take one and hashes it unless the
 * host did.
 *
 * Worked example, B = 4, 10 tokens t0..t9, salt 0: two full blocks (t8,
 * t9 are a partial block and count for nothing); key[-1] = the tenant
 * root of salt 0, g[0] = XXH3(t0..t3), key[0] = step(key[-1], g[0]),
 * g[1] = XXH3(t4..t7), key[1] = step(key[0], g[1]) (docs/index.md, Keys).
 * The hashes do not depend on each other, only the cheap steps do. */
#include "index/index_keys.h"
#include "index/index.h"
#include "index/index_keys_simd.h"
#include "index/index_store.h"

uint64_t
lr__index_tenant_root(uint64_t salt)
{
    uint8_t b[sizeof salt];
    lr__put_u64(b, salt);
    return lr__hash(b, sizeof b, LR_SEED_TENANT);
}

/* g[d] of each block: its tokens' hash alone. */
static void
block_hashes(const uint32_t *tok, size_t nblocks, uint32_t B, uint64_t *out)
{
    size_t bytes = (size_t)B * sizeof(uint32_t);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t buf[sizeof(uint32_t) * LR_INDEX_MAX_BLOCK_TOKENS];
    for (size_t i = 0; i < nblocks; i++) {
        for (uint32_t j = 0; j < B; j++)
            lr__put_u32(buf + sizeof(uint32_t) * j, tok[i * B + j]);
        out[i] = lr__hash(buf, bytes, LR_SEED_BLOCK);
    }
#else
    for (size_t i = 0; i < nblocks; i++)
        out[i] = lr__hash(tok + i * B, bytes, LR_SEED_BLOCK);
#endif
}

/* The chain over the blocks' hashes in out, in place. */
static void
chain(uint64_t prev, size_t nblocks, uint64_t *out)
{
    for (size_t i = 0; i < nblocks; i++) {
        prev = lr__index_chain_step(prev, out[i]);
        out[i] = prev;
    }
}

#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
/* The default block of 16 tokens: a constant length lets XXH3 specialise.
 * Out of line, the loop keeps every product in a register (inlined, gcc
 * 12 spills one: a route's keys cost 1.8% more). */
LR_NOINLINE static void
chain_keys16(uint64_t prev, const uint32_t *tok, size_t nblocks, uint64_t *out)
{
    for (size_t i = 0; i < nblocks; i++) {
        prev = lr__index_chain_step(prev,
                                    lr__hash(tok + i * 16, 64, LR_SEED_BLOCK));
        out[i] = prev;
    }
}
#endif

void
lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                     uint32_t B, uint64_t *out)
{
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    if (B == 16) {
        size_t done = lr__index_chain_keys16_simd(&prev, tok, nblocks, out);
        if (done < nblocks) /* tok and out may be NULL when none */
            chain_keys16(prev, tok + done * 16, nblocks - done, out + done);
        return;
    }
#endif
    block_hashes(tok, nblocks, B, out);
    chain(prev, nblocks, out);
}

void
lr__index_chain_keys_mm(uint64_t prev, const uint32_t *tok, size_t nblocks,
                        uint32_t B, const uint64_t *mm, uint64_t *out)
{
    if (mm == NULL) {
        lr__index_chain_keys(prev, tok, nblocks, B, out);
        return;
    }
    block_hashes(tok, nblocks, B, out);
    for (size_t i = 0; i < nblocks; i++)
        out[i] ^= mm[i];
    chain(prev, nblocks, out);
}

static uint64_t
mm_mix(uint64_t id_hash, int64_t offset)
{
    uint8_t b[2 * sizeof(uint64_t)];
    lr__put_u64(b, id_hash);
    lr__put_u64(b + sizeof(uint64_t), (uint64_t)offset);
    return lr__hash(b, sizeof b, LR_SEED_MMKEY);
}

uint64_t
lr_mm_key_hash(const char *identifier, size_t len, int64_t offset)
{
    return mm_mix(lr_name_hash(identifier, len), offset);
}

/* An identifier's length, or LR_INDEX_MAX_MM_IDENTIFIER + 1 past it. */
static size_t
mm_id_len(const char *id)
{
    size_t n = 0;
    while (n <= LR_INDEX_MAX_MM_IDENTIFIER && id[n] != '\0')
        n++;
    return n;
}

lr_status
lr__index_mm_check(const lr_mm_input *mm, size_t n_mm, size_t n_tokens)
{
    LR_RETURN_IF(mm == NULL && n_mm != 0, LR_EINVAL);
    LR_RETURN_IF(n_mm > n_tokens, LR_EINVAL); /* each holds a token */
    uint64_t next = 0; /* where the next input may begin */
    for (size_t k = 0; k < n_mm; k++) {
        LR_RETURN_IF(mm[k].identifier == NULL, LR_EINVAL);
        size_t len = mm_id_len(mm[k].identifier);
        LR_RETURN_IF(len == 0 || len > LR_INDEX_MAX_MM_IDENTIFIER, LR_EINVAL);
        LR_RETURN_IF(mm[k].length == 0 || mm[k].offset < next, LR_EINVAL);
        next = (uint64_t)mm[k].offset + mm[k].length;
        LR_RETURN_IF(next > n_tokens, LR_EINVAL);
    }
    return LR_OK;
}

void
lr__index_input_keys(uint64_t salt, const uint32_t *tok, size_t nblocks,
                     uint32_t B, const lr_mm_input *mm, size_t n_mm,
                     uint64_t *out)
{
    uint64_t prev = lr__index_tenant_root(salt);
    if (n_mm == 0) {
        lr__index_chain_keys(prev, tok, nblocks, B, out);
        return;
    }
    block_hashes(tok, nblocks, B, out);
    /* block b holds input k when b*B < end and (b+1)*B > offset */
    for (size_t k = 0; k < n_mm; k++) {
        size_t b = mm[k].offset / B;
        if (b >= nblocks)
            break; /* ascending: the rest are past the full blocks too */
        size_t last = ((size_t)mm[k].offset + mm[k].length - 1) / B;
        if (last >= nblocks)
            last = nblocks - 1;
        const char *id = mm[k].identifier;
        uint64_t h = lr_name_hash(id, strlen(id));
        for (; b <= last; b++)
            out[b] ^= mm_mix(h, (int64_t)mm[k].offset - (int64_t)(b * B));
    }
    chain(prev, nblocks, out);
}

lr_status
lr_block_keys(uint32_t block_tokens, const uint32_t *tokens, size_t n_tokens,
              uint64_t tenant_salt, uint64_t *keys, size_t capacity,
              size_t *n_keys)
{
    LR_RETURN_IF(n_keys == NULL, LR_EINVAL);
    LR_RETURN_IF(block_tokens == 0 || block_tokens > LR_INDEX_MAX_BLOCK_TOKENS,
                 LR_EINVAL);
    LR_RETURN_IF(n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(tokens == NULL && n_tokens != 0, LR_EINVAL);
    size_t n = n_tokens / block_tokens;
    *n_keys = n;
    if (keys == NULL)
        return capacity == 0 ? LR_OK : LR_EINVAL;
    LR_RETURN_IF(capacity < n, LR_EBUFSIZE);
    lr__index_chain_keys(lr__index_tenant_root(tenant_salt), tokens, n,
                         block_tokens, keys);
    return LR_OK;
}

uint64_t
lr_name_hash(const char *name, size_t len)
{
    if (len == 0 || name == NULL)
        return 0;
    uint64_t h = lr__hash(name, len, LR_SEED_NAME);
    return h != 0 ? h : 1;
}

uint64_t
lr_adapter_salt(uint64_t tenant_salt, uint64_t adapter_hash)
{
    if (adapter_hash == 0)
        return tenant_salt;
    uint8_t b[2 * sizeof(uint64_t)];
    lr__put_u64(b, tenant_salt);
    lr__put_u64(b + sizeof(uint64_t), adapter_hash);
    return lr__hash(b, sizeof b, LR_SEED_ADAPT);
}

/* Validate a prompt and put its keys in ix->kbuf (or point at the host's).
 * Can fail with LR_ENOMEM growing the scratch buffer, which is not state. */
lr_status
lr__index_prompt_keys(lr_index *ix, const lr_prompt *in, lr_prompt *p,
                      const uint64_t **keys, uint32_t *n_keys)
{
    LR_RETURN_IF(in == NULL, LR_EINVAL);
    memset(p, 0, sizeof *p);
    LR_TRY(lr__copy_sized(p, sizeof *p, in, LR_PROMPT_SIZE_V1));
    LR_RETURN_IF(p->n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_TRY(lr__index_mm_check(p->mm, p->n_mm, p->n_tokens));
    LR_RETURN_IF(p->keys != NULL && p->n_mm > 0, LR_EINVAL);
    LR_RETURN_IF(p->boundaries == NULL && p->n_boundaries != 0, LR_EINVAL);
    LR_RETURN_IF(p->n_boundaries > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    size_t n = p->n_tokens / ix->B;
    if (p->keys != NULL) {
        LR_RETURN_IF(p->n_keys != n, LR_EINVAL);
        *keys = p->keys;
    } else {
        LR_RETURN_IF(p->tokens == NULL && p->n_tokens != 0, LR_EINVAL);
        LR_TRY(lr__index_scratch_keys(ix, n));
        lr__index_input_keys(p->tenant_salt, p->tokens, n, ix->B, p->mm,
                             p->n_mm, ix->kbuf);
        *keys = ix->kbuf;
    }
    for (size_t i = 0; i < p->n_boundaries; i++) {
        LR_RETURN_IF(p->boundaries[i] > p->n_tokens, LR_EINVAL);
        LR_RETURN_IF(i > 0 && p->boundaries[i] < p->boundaries[i - 1],
                     LR_EINVAL);
    }
    *n_keys = (uint32_t)n;
    return LR_OK;
}
