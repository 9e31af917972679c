/* Splits a fuzz input into parameters and payload (after zstd's
 * FUZZ_dataProducer, B35).
 *
 *   data: [ payload / op stream ...................... | ... parameters ]
 *           ^ front: fuzz_dp_bytes(), fuzz_dp_next_*()    ^ back:
 * fuzz_dp_take_*()
 *
 * Parameters come off the END of the input, payload and op streams off the
 * FRONT, so that a mutation of the payload does not shift the parameters
 * (and the other way round). Nothing ever reads outside [data, data+size):
 * once the input is used up every integer read returns its minimum and
 * every byte read returns nothing.
 *
 * Integer encoding, the same at both ends: a value in [min, max] needs
 * ceil(log256(max - min + 1)) bytes, taken least significant first (the
 * back end takes bytes from the last one backwards), and is
 * min + raw % (max - min + 1). fuzz_dp_enc_*() write that encoding for
 * seed generators.
 */
#ifndef LIBROUTE_FUZZ_DATA_PRODUCER_H
#define LIBROUTE_FUZZ_DATA_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_dp {
    const uint8_t *data; /* first unread byte */
    size_t size;         /* unread bytes */
} fuzz_dp;

void fuzz_dp_init(fuzz_dp *dp, const uint8_t *data, size_t size);
size_t fuzz_dp_remaining(const fuzz_dp *dp);
bool fuzz_dp_empty(const fuzz_dp *dp);

/* ---- parameters, from the back ---------------------------------------- */
uint32_t fuzz_dp_take_range(fuzz_dp *dp, uint32_t min, uint32_t max);
uint32_t fuzz_dp_take_u32(fuzz_dp *dp);
uint64_t fuzz_dp_take_u64(fuzz_dp *dp);
bool fuzz_dp_take_bool(fuzz_dp *dp);

/* ---- payload and op streams, from the front --------------------------- */
/* Up to `want` bytes; *got says how many (the pointer is into the input). */
const uint8_t *fuzz_dp_bytes(fuzz_dp *dp, size_t want, size_t *got);
/* Everything that is left. */
const uint8_t *fuzz_dp_rest(fuzz_dp *dp, size_t *got);
uint32_t fuzz_dp_next_range(fuzz_dp *dp, uint32_t min, uint32_t max);
uint32_t fuzz_dp_next_u32(fuzz_dp *dp);
uint64_t fuzz_dp_next_u64(fuzz_dp *dp);
bool fuzz_dp_next_bool(fuzz_dp *dp);

/* ---- encoder for seed generators (front encoding) ----------------------- */
/* Bytes the encoding of a value in [min, max] takes. */
size_t fuzz_dp_enc_len(uint32_t min, uint32_t max);
/* Append the encoding of v (min <= v <= max) at out; returns bytes written
 * (fuzz_dp_enc_len(min, max)). */
size_t fuzz_dp_enc_range(uint8_t *out, uint32_t min, uint32_t max, uint32_t v);

#endif /* LIBROUTE_FUZZ_DATA_PRODUCER_H */
