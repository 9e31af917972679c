/* Hash seeds from the operating system.
 *
 * Every handle that hashes data a client can choose (prompt block keys,
 * request ids, engine block hashes, instance names) keys its tables with
 * a seed the host does not have to pick: drawn here from getrandom(2)
 * unless the host gives one. A seed that is public (a constant, or the
 * routing seed a host fixes for reproducible decisions) lets a client
 * precompute colliding keys offline; a random one does not.
 *
 * The library never fails or aborts for want of entropy: if getrandom is
 * missing or refuses (an old kernel, a seccomp filter, early boot with
 * GRND_NONBLOCK), the seed is mixed from what varies between processes and
 * handles without a system call: addresses under ASLR and the clocks
 * (read for this only, never for a decision, B24).
 * Weaker, but never a constant. errno is left as the caller had it (B12).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* getrandom, clock_gettime */
#endif
#include <errno.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<sys/random.h>)
#include <sys/random.h>
#define LR_HAVE_GETRANDOM 1
#endif
#endif

#include "common/common.h"
#include "common/lr_hash.h"

#define SEED_SALT 0x4c5253454544314full /* "LRSEED1O" */

#ifdef LR_HAVE_GETRANDOM
static bool
os_entropy(void *buf, size_t n)
{
    int saved = errno;
    uint8_t *p = buf;
    bool ok = true;
    while (n > 0) {
        ssize_t got = getrandom(p, n, GRND_NONBLOCK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            ok = false;
            break;
        }
        p += got;
        n -= (size_t)got;
    }
    errno = saved;
    return ok;
}
#else
static bool
os_entropy(void *buf, size_t n)
{
    (void)buf;
    (void)n;
    return false;
}
#endif

/* The fallback: distinct per live handle within a process (the salt is
 * the handle's address) and, with ASLR, between processes (the stack,
 * heap and code addresses); the clocks add what they have. No global
 * state (B23). */
static uint64_t
fallback_seed(const void *salt)
{
    int local;
    uint64_t h = lr__mix64((uint64_t)(uintptr_t)salt, SEED_SALT);
    h = lr__mix64(h ^ (uint64_t)(uintptr_t)&local, SEED_SALT);
    h = lr__mix64(h ^ (uint64_t)(uintptr_t)&fallback_seed, SEED_SALT);
    struct timespec ts;
    int saved = errno;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
        h = lr__mix64(h ^ ((uint64_t)ts.tv_sec << 30 ^ (uint64_t)ts.tv_nsec),
                      SEED_SALT);
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        h = lr__mix64(h ^ ((uint64_t)ts.tv_sec << 30 ^ (uint64_t)ts.tv_nsec),
                      SEED_SALT);
    errno = saved;
    return h;
}

uint64_t
lr__seed_from(bool (*source)(void *buf, size_t n), const void *salt)
{
    uint64_t s = 0;
    if (source == NULL || !source(&s, sizeof s))
        s = fallback_seed(salt);
    /* never 0: 0 means "draw one" wherever a seed is an option */
    return s != 0 ? s : SEED_SALT;
}

uint64_t
lr__hash_seed(uint64_t given, const void *salt)
{
    return given != 0 ? given : lr__seed_from(os_entropy, salt);
}
