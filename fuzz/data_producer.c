#include "data_producer.h"

void
fuzz_dp_init(fuzz_dp *dp, const uint8_t *data, size_t size)
{
    dp->data = size ? data : NULL;
    dp->size = data ? size : 0;
}

size_t
fuzz_dp_remaining(const fuzz_dp *dp)
{
    return dp->size;
}

bool
fuzz_dp_empty(const fuzz_dp *dp)
{
    return dp->size == 0;
}

size_t
fuzz_dp_enc_len(uint32_t min, uint32_t max)
{
    uint32_t range = max - min;
    size_t n = 0;
    while (range > 0) {
        n++;
        range >>= 8;
    }
    return n;
}

static uint32_t
finish(uint64_t raw, uint32_t min, uint32_t max)
{
    uint32_t range = max - min;
    if (range == UINT32_MAX)
        return (uint32_t)raw;
    return min + (uint32_t)(raw % ((uint64_t)range + 1));
}

uint32_t
fuzz_dp_take_range(fuzz_dp *dp, uint32_t min, uint32_t max)
{
    if (max < min)
        return min;
    size_t n = fuzz_dp_enc_len(min, max);
    uint64_t raw = 0;
    for (size_t i = 0; i < n && dp->size > 0; i++) {
        raw |= (uint64_t)dp->data[dp->size - 1] << (8 * i);
        dp->size--;
    }
    return finish(raw, min, max);
}

uint32_t
fuzz_dp_take_u32(fuzz_dp *dp)
{
    return fuzz_dp_take_range(dp, 0, UINT32_MAX);
}

uint64_t
fuzz_dp_take_u64(fuzz_dp *dp)
{
    uint64_t lo = fuzz_dp_take_u32(dp);
    return lo | ((uint64_t)fuzz_dp_take_u32(dp) << 32);
}

bool
fuzz_dp_take_bool(fuzz_dp *dp)
{
    return fuzz_dp_take_range(dp, 0, 1) != 0;
}

const uint8_t *
fuzz_dp_bytes(fuzz_dp *dp, size_t want, size_t *got)
{
    size_t n = want < dp->size ? want : dp->size;
    const uint8_t *p = dp->data;
    *got = n;
    if (n == 0)
        return NULL;
    dp->data += n;
    dp->size -= n;
    return p;
}

const uint8_t *
fuzz_dp_rest(fuzz_dp *dp, size_t *got)
{
    return fuzz_dp_bytes(dp, dp->size, got);
}

uint32_t
fuzz_dp_next_range(fuzz_dp *dp, uint32_t min, uint32_t max)
{
    if (max < min)
        return min;
    size_t n = fuzz_dp_enc_len(min, max);
    uint64_t raw = 0;
    for (size_t i = 0; i < n && dp->size > 0; i++) {
        raw |= (uint64_t)dp->data[0] << (8 * i);
        dp->data++;
        dp->size--;
    }
    return finish(raw, min, max);
}

uint32_t
fuzz_dp_next_u32(fuzz_dp *dp)
{
    return fuzz_dp_next_range(dp, 0, UINT32_MAX);
}

uint64_t
fuzz_dp_next_u64(fuzz_dp *dp)
{
    uint64_t lo = fuzz_dp_next_u32(dp);
    return lo | ((uint64_t)fuzz_dp_next_u32(dp) << 32);
}

bool
fuzz_dp_next_bool(fuzz_dp *dp)
{
    return fuzz_dp_next_range(dp, 0, 1) != 0;
}

size_t
fuzz_dp_enc_range(uint8_t *out, uint32_t min, uint32_t max, uint32_t v)
{
    size_t n = fuzz_dp_enc_len(min, max);
    uint32_t raw = v - min;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(raw >> (8 * i));
    return n;
}
