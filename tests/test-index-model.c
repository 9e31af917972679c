/* Differential test of lr_index against a naive block-by-block model with
 * eviction (B34).
 *
 * The model keeps one record per block route (instance, prefix key, depth,
 * stamp, flags) in a plain array and two LRU lists as plain arrays, and
 * implements the documented semantics with linear scans, block by block:
 *  - learn holds every block of the prompt for the instance; the
 *    boundaries (aligned down) and the full length are anchors; a known
 *    prompt's deepest route is touched, else the new deepest is pushed on
 *    the head of its list; a LOCAL learn makes the path LOCAL, moving the
 *    listed routes it flips to where their stamps belong in the LOCAL list;
 *  - match reports each instance's deepest route and touches it (deepest
 *    first, then the lower id) unless NO_TOUCH;
 *  - settle expires list tails older than the TTL until stable, then pops
 *    tails (REMOTE first) while routes exceed the capacity: an internal
 *    route is unlisted, a leaf is removed and the removal walks up while
 *    the parent is left childless, is not an anchor and (unless precise)
 *    was not used later than the removed block, carrying the newest stamp;
 *    a parent that stays re-enters its list by stamp (searching at most 64
 *    steps from the tail);
 *  - KV events: a stored event is a LOCAL learn under its parent with an
 *    anchor at each engine block end; a removed hash drops its block, every
 *    deeper block of the instance, and walks up (precise), unless the
 *    instance holds below it a leaf none of whose m deepest blocks (down
 *    to the removed one at most) has an engine hash of it (m: index blocks per
 * engine block of the instance's last store, 1 before any): then only the hash
 * goes; cleared drops the instance's routes. An engine hash maps to its block
 * exactly while the instance holds the block: every removal of a route forgets
 * the instance's hashes of it. After every operation the index's routes (keys,
 * parents, depths, flags, child counts, stamps), both LRU lists in order, and
 * the counters must equal the model's. The index stores spans over runs; the
 * model stores blocks: the edge cases of the encoding (eviction inside a shared
 * prefix, removal of an inner block, a drained instance, a tip expiring
 * under a touched middle, a clock that steps back) come up in every
 * sequence, and the named tests at the end pin each of them down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index-helpers.h"

#define B 4
#define NINST 5
#define MAXBLK 24
#define MAXR 8192
#define SEEK_MAX 64 /* lr_index's bounded search of a re-entering route */
#define MAXE 4096   /* engine hashes the model remembers */

enum {
    EVICT,
    EXPIRE,
    DROP
};

struct mr {
    uint64_t key, pkey;
    uint32_t depth, inst, stamp;
    bool alive, remote, anchor, listed;
};

struct ment { /* an engine hash of an instance: the tokens of its prefix */
    uint32_t inst;
    uint64_t hash;
    uint64_t key; /* the prefix's key */
    uint32_t ntok;
    uint32_t tok[MAXBLK * B];
};

struct model {
    struct mr r[MAXR];
    int hi; /* slots [hi, MAXR) were never used */
    uint32_t list[2][MAXR];
    uint32_t nl[2];
    uint64_t capacity, ttl_ticks, epoch;
    bool has_epoch;
    uint64_t holds, remote, evicted, expired, learned;
    struct ment e[MAXE];
    uint32_t ne;
    uint32_t evm[3 + 11 * NINST]; /* by instance id: index blocks per
                                   * engine block of its last store (0:
                                   * none since it was added) */
};

static uint32_t
m_tick(struct model *m, uint64_t now)
{
    if (!m->has_epoch) {
        m->has_epoch = true;
        m->epoch = now;
    }
    if (now <= m->epoch)
        return 0;
    uint64_t t = (now - m->epoch) >> 24;
    return t >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)t;
}

static int
m_find(const struct model *m, uint32_t inst, uint64_t key)
{
    for (int i = 0; i < m->hi; i++)
        if (m->r[i].alive && m->r[i].inst == inst && m->r[i].key == key)
            return i;
    return -1;
}

static uint32_t
m_nchild(const struct model *m, int s)
{
    uint32_t k = 0;
    for (int i = 0; i < m->hi; i++)
        if (m->r[i].alive && m->r[i].inst == m->r[s].inst &&
            m->r[i].depth == m->r[s].depth + 1 && m->r[i].pkey == m->r[s].key)
            k++;
    return k;
}

static int
m_parent(const struct model *m, int s)
{
    return m->r[s].depth == 1 ? -1 : m_find(m, m->r[s].inst, m->r[s].pkey);
}

static void
m_unlink(struct model *m, int s)
{
    int l = m->r[s].remote;
    for (uint32_t i = 0; i < m->nl[l]; i++)
        if ((int)m->list[l][i] == s) {
            memmove(&m->list[l][i], &m->list[l][i + 1],
                    (m->nl[l] - i - 1) * sizeof(uint32_t));
            m->nl[l]--;
            m->r[s].listed = false;
            return;
        }
    fail_msg("model: unlinking a route that is not listed");
}

/* position 0 is the head, nl - 1 the tail */
static void
m_insert_at(struct model *m, int l, uint32_t pos, int s)
{
    memmove(&m->list[l][pos + 1], &m->list[l][pos],
            (m->nl[l] - pos) * sizeof(uint32_t));
    m->list[l][pos] = (uint32_t)s;
    m->nl[l]++;
    m->r[s].listed = true;
}

static void
m_push_head(struct model *m, int s)
{
    m_insert_at(m, m->r[s].remote, 0, s);
}

static void
m_insert_by_stamp(struct model *m, int s)
{
    int l = m->r[s].remote;
    int cur = (int)m->nl[l] - 1;
    for (int steps = 0; cur >= 0 && steps < SEEK_MAX; steps++) {
        if (m->r[m->list[l][cur]].stamp >= m->r[s].stamp)
            break;
        cur--;
    }
    if (cur < 0)
        m_push_head(m, s);
    else
        m_insert_at(m, l, (uint32_t)cur + 1, s);
}

static void
m_touch(struct model *m, int s, uint32_t t)
{
    if (m->r[s].listed)
        m_unlink(m, s);
    m->r[s].stamp = t;
    m_push_head(m, s);
}

/* A route goes; the map forgets the instance's engine hashes of it. */
static void
m_remove(struct model *m, int s, int why)
{
    for (uint32_t i = 0; i < m->ne;)
        if (m->e[i].inst == m->r[s].inst && m->e[i].key == m->r[s].key)
            m->e[i] = m->e[--m->ne];
        else
            i++;
    if (m->r[s].listed)
        m_unlink(m, s);
    m->holds--;
    if (m->r[s].remote)
        m->remote--;
    if (why == EVICT)
        m->evicted++;
    else if (why == EXPIRE)
        m->expired++;
    m->r[s].alive = false;
}

static int
m_new(struct model *m)
{
    for (int i = 0; i < MAXR; i++)
        if (!m->r[i].alive) {
            if (i >= m->hi)
                m->hi = i + 1;
            return i;
        }
    fail_msg("model full");
    return -1;
}

/* The block-by-block walk of lr_index (docs/index.md, "Forgetting"). */
static void
m_trim(struct model *m, int s, int why, bool precise)
{
    for (;;) {
        uint32_t stamp = m->r[s].stamp;
        int p = m_parent(m, s);
        m_remove(m, s, why);
        if (p < 0 || m_nchild(m, p) > 0)
            return;
        if (!m->r[p].anchor && (precise || m->r[p].stamp <= stamp)) {
            if (m->r[p].stamp < stamp)
                m->r[p].stamp = stamp;
            s = p;
            continue;
        }
        if (m->r[p].stamp < stamp) {
            m->r[p].stamp = stamp;
            if (m->r[p].listed)
                m_unlink(m, p);
        }
        if (!m->r[p].listed)
            m_insert_by_stamp(m, p);
        return;
    }
}

static void
m_pop_tail(struct model *m, int l, int why)
{
    int s = (int)m->list[l][m->nl[l] - 1];
    m_unlink(m, s);
    if (m_nchild(m, s) == 0)
        m_trim(m, s, why, false);
}

static bool
m_expired(const struct model *m, int s, uint32_t t)
{
    if (m->ttl_ticks == UINT64_MAX || t <= m->r[s].stamp)
        return false;
    return (uint64_t)(t - m->r[s].stamp) > m->ttl_ticks;
}

static void
m_expire(struct model *m, uint32_t t)
{
    if (m->ttl_ticks == UINT64_MAX)
        return;
    bool more = true;
    while (more) {
        more = false;
        for (int l = 0; l < 2; l++)
            while (m->nl[l] > 0 &&
                   m_expired(m, (int)m->list[l][m->nl[l] - 1], t)) {
                m_pop_tail(m, l, EXPIRE);
                more = true;
            }
    }
}

static void
m_settle(struct model *m, uint32_t t)
{
    m_expire(m, t);
    while (m->holds > m->capacity) {
        int l = m->nl[1] > 0 ? 1 : 0;
        m_pop_tail(m, l, EVICT);
    }
}

/* Hold keys[bd, n) (depths bd+1..n) for inst, which holds depth bd when
 * bd > 0; anchors are absolute depths in (bd, n], ascending. */
static void
m_learn(struct model *m, uint32_t inst, const uint64_t *keys, uint32_t bd,
        uint32_t n, const uint32_t *anchors, uint32_t na, bool remote,
        uint32_t t)
{
    uint32_t ds = bd;
    while (ds < n && m_find(m, inst, keys[ds]) >= 0)
        ds++;
    int ref = ds > 0 ? m_find(m, inst, keys[ds - 1]) : -1;
    if (!remote)
        for (int s = ref; s >= 0 && m->r[s].remote; s = m_parent(m, s)) {
            bool listed = m->r[s].listed;
            if (listed)
                m_unlink(m, s);
            m->r[s].remote = false;
            m->remote--;
            if (listed)
                m_insert_by_stamp(m, s);
        }
    uint32_t a = 0;
    for (; a < na && anchors[a] <= ds; a++)
        m->r[m_find(m, inst, keys[anchors[a] - 1])].anchor = true;
    if (n == ds) {
        if (n > bd && ref >= 0)
            m_touch(m, ref, t);
        return;
    }
    int last = -1;
    for (uint32_t d = ds + 1; d <= n; d++) {
        int s = m_new(m);
        struct mr *r = &m->r[s];
        r->alive = true;
        r->key = keys[d - 1];
        r->pkey = d > 1 ? keys[d - 2] : 0;
        r->depth = d;
        r->inst = inst;
        r->stamp = t;
        r->remote = remote;
        r->listed = false;
        r->anchor = a < na && anchors[a] == d;
        if (r->anchor)
            a++;
        m->holds++;
        m->remote += remote;
        m->learned++;
        last = s;
    }
    m_push_head(m, last);
}

static void
m_drop_all(struct model *m, uint32_t inst)
{
    for (int i = 0; i < m->hi; i++)
        if (m->r[i].alive && m->r[i].inst == inst)
            m_remove(m, i, DROP);
}

/* Whether route s of an instance lies under the route at depth d with key
 * k (walking its parents). */
static bool
m_under(const struct model *m, int s, uint32_t d, uint64_t k)
{
    while (s >= 0 && m->r[s].depth > d)
        s = m_parent(m, s);
    return s >= 0 && m->r[s].depth == d && m->r[s].key == k;
}

/* ---- comparison ----------------------------------------------------------- */

struct seen {
    const struct model *m;
    bool *hit;
    uint64_t n;
    int lpos[2];
    const char *what;
};

static void
on_hold(void *ctx, const struct lr__hold_view *h)
{
    struct seen *sn = ctx;
    const struct model *m = sn->m;
    int s = m_find(m, h->instance, h->key);
    if (s < 0)
        fail_msg("%s: index holds key %016llx for %u, model does not", sn->what,
                 (unsigned long long)h->key, h->instance);
    const struct mr *r = &m->r[s];
    uint32_t flags = (r->listed ? LR__HOLD_LISTED : 0) |
                     (r->remote ? LR__HOLD_REMOTE : 0) |
                     (r->anchor ? LR__HOLD_ANCHOR : 0);
    if (r->depth != h->depth || r->pkey != h->parent_key || flags != h->flags ||
        m_nchild(m, s) != h->children || r->stamp != h->stamp)
        fail_msg("%s: route of %u at depth %u: index flags %x children %u "
                 "stamp %u depth %u, model flags %x children %u stamp %u",
                 sn->what, h->instance, r->depth, h->flags, h->children,
                 h->stamp, h->depth, flags, m_nchild(m, s), r->stamp);
    if (sn->hit[s])
        fail_msg("%s: route reported twice", sn->what);
    sn->hit[s] = true;
    sn->n++;
}

static void
on_listed(void *ctx, int l, uint64_t key, uint32_t inst)
{
    struct seen *sn = ctx;
    const struct model *m = sn->m;
    int pos = sn->lpos[l]++;
    if ((uint32_t)pos >= m->nl[l])
        fail_msg("%s: list %d longer in the index", sn->what, l);
    const struct mr *r = &m->r[m->list[l][pos]];
    if (r->key != key || r->inst != inst)
        fail_msg("%s: list %d differs at position %d", sn->what, l, pos);
}

static void
compare(const lr_index *ix, const struct model *m, const char *what)
{
    static bool hit[MAXR];
    memset(hit, 0, (size_t)m->hi * sizeof *hit);
    struct seen sn = { .m = m, .hit = hit, .what = what };
    lr__index_holds(ix, on_hold, on_listed, &sn);
    if (sn.n != m->holds)
        fail_msg("%s: index has %llu routes, model %llu", what,
                 (unsigned long long)sn.n, (unsigned long long)m->holds);
    for (int l = 0; l < 2; l++)
        if ((uint32_t)sn.lpos[l] != m->nl[l])
            fail_msg("%s: list %d shorter in the index", what, l);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    assert_st(lr_index_get_stats(ix, &st), LR_OK);
    if (st.blocks != m->holds || st.remote_blocks != m->remote ||
        st.evicted_blocks != m->evicted || st.expired_blocks != m->expired ||
        st.learned_blocks != m->learned)
        fail_msg(
            "%s: counters: blocks %llu/%llu remote %llu/%llu evicted "
            "%llu/%llu expired %llu/%llu learned %llu/%llu (index/model)",
            what, (unsigned long long)st.blocks, (unsigned long long)m->holds,
            (unsigned long long)st.remote_blocks, (unsigned long long)m->remote,
            (unsigned long long)st.evicted_blocks,
            (unsigned long long)m->evicted,
            (unsigned long long)st.expired_blocks,
            (unsigned long long)m->expired,
            (unsigned long long)st.learned_blocks,
            (unsigned long long)m->learned);
    assert_st(lr__index_verify(ix), LR_OK);
}

/* ---- the operations, on both ---------------------------------------------- */

struct rig {
    lr_index *ix;
    struct model *m;
    uint32_t ids[NINST];
    uint64_t now;
    uint64_t rs;
};

/* A prompt of up to MAXBLK blocks from a few block patterns, so that
 * prompts share prefixes (a system prompt) and fork often. */
static uint32_t
make_prompt(uint64_t *rs, uint32_t *tok, uint32_t *ntok)
{
    uint32_t nblk = (uint32_t)tu_below(rs, MAXBLK + 1);
    for (uint32_t b = 0; b < nblk; b++) {
        uint32_t pat = (uint32_t)tu_below(rs, b < 4 ? 1 : b < 8 ? 3 : 5);
        for (uint32_t j = 0; j < B; j++)
            tok[b * B + j] = pat * 100 + j + (pat == 4 ? b : 0);
    }
    uint32_t tail = (uint32_t)tu_below(rs, B);
    for (uint32_t j = 0; j < tail; j++)
        tok[nblk * B + j] = 999;
    *ntok = nblk * B + tail;
    return nblk;
}

static void
keys_of(const uint32_t *tok, uint32_t ntok, uint64_t *keys)
{
    size_t nk;
    assert_st(lr_block_keys(B, tok, ntok, 0, keys, MAXBLK + 1, &nk), LR_OK);
}

static void
op_learn(struct rig *g, uint32_t inst, const uint32_t *tok, uint32_t ntok,
         const uint32_t *bnd, size_t nb, bool remote)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = tok;
    p.n_tokens = ntok;
    p.boundaries = bnd;
    p.n_boundaries = nb;
    assert_st(lr_index_learn(g->ix, &p, inst,
                             remote ? LR_TRUST_REMOTE : LR_TRUST_LOCAL, g->now),
              LR_OK);
    uint64_t keys[MAXBLK + 1];
    keys_of(tok, ntok, keys);
    uint32_t n = ntok / B, anchors[8], na = 0;
    if (n > g->m->capacity) /* a learn holds at most capacity blocks */
        n = (uint32_t)g->m->capacity;
    for (size_t i = 0; i < nb; i++) {
        uint32_t d = bnd[i] / B;
        if (d == 0 || d > n || (na > 0 && anchors[na - 1] == d))
            continue;
        anchors[na++] = d;
    }
    if (n > 0 && (na == 0 || anchors[na - 1] != n))
        anchors[na++] = n;
    uint32_t t = m_tick(g->m, g->now);
    m_learn(g->m, inst, keys, 0, n, anchors, na, remote, t);
    m_settle(g->m, t);
}

static int
hit_cmp(const void *a, const void *b)
{
    const lr_index_hit *x = a, *y = b;
    if (x->tokens != y->tokens)
        return x->tokens > y->tokens ? -1 : 1;
    return x->instance < y->instance ? -1 : x->instance > y->instance;
}

static void
op_match(struct rig *g, const uint32_t *tok, uint32_t ntok, bool touch)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = tok;
    p.n_tokens = ntok;
    lr_index_hit hits[NINST];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = hits;
    r.hits_capacity = NINST;
    assert_st(
        lr_index_match(g->ix, &p, g->now, touch ? 0 : LR_MATCH_NO_TOUCH, &r),
        LR_OK);
    uint32_t t = m_tick(g->m, g->now);
    m_expire(g->m, t);
    uint64_t keys[MAXBLK + 1];
    keys_of(tok, ntok, keys);
    uint32_t n = ntok / B;
    lr_index_hit want[NINST];
    int ref[NINST];
    size_t k = 0;
    for (int i = 0; i < NINST; i++) {
        uint32_t d = 0;
        while (d < n && m_find(g->m, g->ids[i], keys[d]) >= 0)
            d++;
        if (d == 0)
            continue;
        want[k].instance = g->ids[i];
        want[k].tokens = d * B;
        k++;
    }
    qsort(want, k, sizeof *want, hit_cmp);
    assert_int_equal(r.n_hits, k);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(hits[i].instance, want[i].instance);
        assert_int_equal(hits[i].tokens, want[i].tokens);
        ref[i] = m_find(g->m, want[i].instance, keys[want[i].tokens / B - 1]);
    }
    if (touch)
        for (size_t i = 0; i < k; i++)
            m_touch(g->m, ref[i], t);
}

static struct ment *
m_ent(struct model *m, uint32_t inst, uint64_t hash)
{
    for (uint32_t i = 0; i < m->ne; i++)
        if (m->e[i].inst == inst && m->e[i].hash == hash)
            return &m->e[i];
    return NULL;
}

/* A stored event of nb engine blocks of mb index blocks under `parent`
 * (an engine hash of inst, or none). */
static void
op_kv_stored(struct rig *g, uint32_t inst, const uint32_t *tok, uint32_t nb,
             uint32_t mb, const uint64_t *hashes, const uint64_t *parent)
{
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = hashes;
    ev.n_blocks = nb;
    ev.block_size = mb * B;
    ev.token_ids = tok;
    ev.n_tokens = (size_t)nb * mb * B;
    ev.has_parent = parent != NULL;
    ev.parent_hash = parent ? *parent : 0;
    struct model *m = g->m;
    struct ment *pe = parent ? m_ent(m, inst, *parent) : NULL;
    uint32_t full[MAXBLK * B], nfull = 0;
    if (pe != NULL) {
        memcpy(full, pe->tok, pe->ntok * sizeof *full);
        nfull = pe->ntok;
    }
    uint64_t keys[MAXBLK + 1];
    bool known = parent == NULL || pe != NULL;
    if (pe != NULL) /* a hash lives as long as its route */
        assert_true(m_find(m, inst, pe->key) >= 0);
    bool fits = nfull + nb * mb * B <= MAXBLK * B && nb * mb <= m->capacity;
    if (!fits && known)
        return; /* longer than the model keeps: skip on both */
    lr_status st = lr_index_kv_stored(g->ix, inst, &ev, g->now);
    if (!known) {
        assert_st(st, LR_ENOENT);
        return;
    }
    assert_st(st, LR_OK);
    uint32_t bd = nfull / B;
    memcpy(full + nfull, tok, (size_t)nb * mb * B * sizeof *full);
    nfull += nb * mb * B;
    keys_of(full, nfull, keys);
    uint32_t anchors[MAXBLK];
    for (uint32_t j = 0; j < nb; j++)
        anchors[j] = bd + (j + 1) * mb;
    uint32_t t = m_tick(m, g->now);
    m_learn(m, inst, keys, bd, bd + nb * mb, anchors, nb, false, t);
    m->evm[inst] = mb;
    for (uint32_t j = 0; j < nb; j++) {
        struct ment *e = m_ent(m, inst, hashes[j]);
        if (e == NULL) {
            assert_true(m->ne < MAXE);
            e = &m->e[m->ne++];
        }
        e->inst = inst;
        e->hash = hashes[j];
        e->ntok = (bd + (j + 1) * mb) * B;
        e->key = keys[bd + (j + 1) * mb - 1];
        memcpy(e->tok, full, e->ntok * sizeof *full);
    }
    m_settle(m, t);
}

/* Whether route j of inst has an engine hash. */
static bool
m_hashed(const struct model *m, uint32_t inst, int j)
{
    for (uint32_t i = 0; i < m->ne; i++)
        if (m->e[i].inst == inst && m->e[i].key == m->r[j].key)
            return true;
    return false;
}

/* Whether a leaf among the routes `under` (of inst, below depth d) has no
 * engine hash on its m deepest routes, down to depth d at most. */
static bool
m_unstored(const struct model *m, uint32_t inst, const bool *under, uint32_t d)
{
    uint32_t mb = m->evm[inst] ? m->evm[inst] : 1;
    for (int j = 0; j < m->hi; j++) {
        if (!under[j] || m_nchild(m, j) > 0)
            continue;
        bool hashed = false;
        int x = j;
        for (uint32_t k = 0; k < mb && x >= 0 && m->r[x].depth >= d; k++) {
            if (m_hashed(m, inst, x)) {
                hashed = true;
                break;
            }
            x = m_parent(m, x);
        }
        if (!hashed)
            return true;
    }
    return false;
}

static void
op_kv_removed(struct rig *g, uint32_t inst, const uint64_t *hashes, size_t n)
{
    size_t resolved;
    lr_status st = lr_index_kv_removed(g->ix, inst, hashes, n, &resolved);
    struct model *m = g->m;
    bool seen =
        lr_index_instance_blocks(g->ix, inst, &(uint64_t){ 0 }) == LR_OK;
    if (!seen) {
        assert_st(st, LR_ENOENT);
        return;
    }
    assert_st(st, LR_OK);
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        struct ment *e = m_ent(m, inst, hashes[i]);
        if (e == NULL)
            continue;
        uint32_t d = e->ntok / B;
        uint64_t k = e->key;
        int s = m_find(m, inst, k);
        assert_true(s >= 0);     /* a hash lives as long as its route */
        static bool under[MAXR]; /* found first: removal cuts chains */
        for (int j = 0; j < m->hi; j++)
            under[j] = m->r[j].alive && m->r[j].inst == inst &&
                       m->r[j].depth > d && m_under(m, j, d, k);
        want++;
        if (m_unstored(m, inst, under, d)) { /* only the block's hashes go */
            for (uint32_t j = 0; j < m->ne;)
                if (m->e[j].inst == inst && m->e[j].key == k)
                    m->e[j] = m->e[--m->ne];
                else
                    j++;
            continue;
        }
        for (int j = 0; j < m->hi; j++)
            if (under[j])
                m_remove(m, j, DROP);
        m_trim(m, s, DROP, true); /* forgets this hash with its route */
    }
    assert_int_equal(resolved, want);
}

static void
run_model(uint64_t seed, int ops)
{
    struct rig g = { .rs = seed, .now = T0 };
    g.m = calloc(1, sizeof *g.m);
    assert_non_null(g.m);
    struct model *m = g.m;
    uint64_t *rs = &g.rs;
    m->capacity = 16 + tu_below(rs, 150);
    uint32_t ttl_kind = (uint32_t)tu_below(rs, 3);
    uint64_t ttl_ns = ttl_kind == 0 ? UINT64_MAX : (1 + tu_below(rs, 8)) * SEC;
    m->ttl_ticks = ttl_ns == UINT64_MAX ? UINT64_MAX : ttl_ns >> 24;
    bool back = tu_below(rs, 3) == 0; /* a clock that sometimes steps back */
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = B;
    o.capacity_blocks = m->capacity;
    o.ttl_ns = ttl_ns;
    o.max_instances = NINST;
    o.seed = seed;
    o.engine_map_capacity = 1u << 20; /* no sweep: the model keeps all */
    assert_st(lr_index_create(&o, &g.ix), LR_OK);
    for (int k = 0; k < NINST; k++)
        g.ids[k] = 3 + 11 * (uint32_t)k;
    uint32_t tok[(MAXBLK + 1) * B];
    uint64_t next_hash = 1;
    char what[64];
    for (int op = 0; op < ops; op++) {
        uint32_t ntok;
        uint32_t nblk = make_prompt(rs, tok, &ntok);
        uint32_t inst = g.ids[tu_below(rs, NINST)];
        uint32_t w = (uint32_t)tu_below(rs, 100);
        g.now += tu_below(rs, ttl_ns == UINT64_MAX ? SEC : ttl_ns / 4 + 1);
        if (back && tu_below(rs, 8) == 0)
            g.now -= tu_below(rs, g.now - T0 + 1);
        if (w < 35) {
            uint32_t bnd[4];
            size_t nb = (size_t)tu_below(rs, 5);
            for (size_t i = 0; i < nb; i++)
                bnd[i] = (uint32_t)tu_below(rs, ntok + 1);
            for (size_t i = 1; i < nb; i++)
                for (size_t j = i; j > 0 && bnd[j] < bnd[j - 1]; j--) {
                    uint32_t t = bnd[j];
                    bnd[j] = bnd[j - 1];
                    bnd[j - 1] = t;
                }
            op_learn(&g, inst, tok, ntok, bnd, nb, tu_below(rs, 4) == 0);
            snprintf(what, sizeof what, "op %d learn", op);
        } else if (w < 55) {
            op_match(&g, tok, ntok, tu_below(rs, 2) == 0);
            snprintf(what, sizeof what, "op %d match", op);
        } else if (w < 72) {
            uint32_t mb = 1 + (uint32_t)tu_below(rs, 2);
            uint32_t nb = nblk / mb > 6 ? 6 : nblk / mb;
            uint64_t hs[6];
            const uint64_t *par = NULL;
            uint64_t ph = 0;
            uint32_t mine[MAXE], nmine = 0;
            for (uint32_t i = 0; i < m->ne; i++)
                if (m->e[i].inst == inst)
                    mine[nmine++] = i;
            if (nmine > 0 && tu_below(rs, 3) != 0) {
                ph = m->e[mine[tu_below(rs, nmine)]].hash;
                par = &ph;
            } else if (tu_below(rs, 8) == 0) {
                ph = 1u << 30; /* never stored: unknown */
                par = &ph;
            }
            for (uint32_t i = 0; i < nb; i++)
                hs[i] = nmine > 0 && tu_below(rs, 6) == 0
                            ? m->e[mine[tu_below(rs, nmine)]].hash
                            : next_hash++;
            if (nb > 0)
                op_kv_stored(&g, inst, tok, nb, mb, hs, par);
            snprintf(what, sizeof what, "op %d kv_stored", op);
        } else if (w < 82) {
            uint64_t hs[3];
            size_t nh = 0;
            for (uint32_t i = 0; i < m->ne && nh < 3; i++)
                if (m->e[i].inst == inst && tu_below(rs, 3) == 0)
                    hs[nh++] = m->e[i].hash;
            if (nh < 3 && tu_below(rs, 2) == 0)
                hs[nh++] = 1u << 31; /* unknown: skipped */
            op_kv_removed(&g, inst, hs, nh);
            snprintf(what, sizeof what, "op %d kv_removed", op);
        } else if (w < 94) {
            assert_st(lr_index_expire(g.ix, g.now), LR_OK);
            m_expire(m, m_tick(m, g.now));
            snprintf(what, sizeof what, "op %d expire", op);
        } else {
            bool clear = tu_below(rs, 2) == 0;
            lr_status st = clear ? lr_index_kv_cleared(g.ix, inst)
                                 : lr_index_remove_instance(g.ix, inst);
            assert_true(st == LR_OK || st == LR_ENOENT);
            m_drop_all(m, inst);
            if (!clear)
                m->evm[inst] = 0;
            for (uint32_t i = 0; i < m->ne;)
                if (m->e[i].inst == inst)
                    m->e[i] = m->e[--m->ne];
                else
                    i++;
            snprintf(what, sizeof what, "op %d %s", op,
                     clear ? "kv_cleared" : "remove_instance");
        }
        compare(g.ix, m, what);
    }
    lr_index_destroy(g.ix);
    free(g.m);
}

static void
model_many_seeds(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index model with eviction", 0x5eed0101);
    for (uint64_t i = 0; i < 24; i++)
        run_model(seed + i, 1500);
}

/* ---- the representation's edge cases, one by one -------------------------- */

static lr_index *
small_index(uint64_t capacity, uint64_t ttl_ns)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = B;
    o.capacity_blocks = capacity;
    o.ttl_ns = ttl_ns;
    o.seed = OPT_SEED;
    lr_index *ix;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

/* tok = `sys` blocks of the shared system prompt, then `own` blocks of
 * conversation c */
static uint32_t
conv(uint32_t *tok, uint32_t sys, uint32_t own, uint32_t c)
{
    uint32_t n = 0;
    for (uint32_t b = 0; b < sys; b++)
        for (uint32_t j = 0; j < B; j++)
            tok[n++] = 7000 + b * B + j;
    for (uint32_t b = 0; b < own; b++)
        for (uint32_t j = 0; j < B; j++)
            tok[n++] = c * 1000 + b * B + j;
    return n;
}

static void
learn_at(lr_index *ix, const uint32_t *tok, uint32_t n, uint32_t bnd,
         uint32_t inst, uint64_t now)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = tok;
    p.n_tokens = n;
    p.boundaries = &bnd;
    p.n_boundaries = bnd ? 1 : 0;
    assert_st(lr_index_learn(ix, &p, inst, LR_TRUST_LOCAL, now), LR_OK);
}

static uint32_t
depth(const lr_index *ix, uint32_t inst, const uint32_t *tok, uint32_t n)
{
    uint64_t keys[64];
    size_t nk;
    assert_st(lr_block_keys(B, tok, n, 0, keys, 64, &nk), LR_OK);
    return lr__index_depth_of(ix, inst, keys, (uint32_t)nk);
}

/* Two instances hold one system prompt (one run, two holders); evicting
 * one's conversation trims its hold on the shared run back to the anchor
 * at the prompt's end, and the other's stays whole. Then the shared
 * prompt's own tail, past that anchor, goes for one holder only. */
static void
evict_inside_shared_prefix(void **state)
{
    (void)state;
    lr_index *ix = small_index(26, UINT64_MAX);
    uint32_t a[64], b[64], c[64];
    uint32_t na = conv(a, 6, 4, 1), nb = conv(b, 6, 4, 2);
    learn_at(ix, a, na, 6 * B, 1, T(1)); /* 1: sys(6) + conv 1 (4) */
    learn_at(ix, b, nb, 6 * B, 2, T(2)); /* 2: sys(6) + conv 2 (4) */
    learn_at(ix, a, na, 6 * B, 2, T(3)); /* 2 also holds conv 1 */
    assert_int_equal(depth(ix, 1, a, na), 10);
    assert_int_equal(depth(ix, 2, a, na), 10);
    assert_int_equal(depth(ix, 2, b, nb), 10);
    assert_verified(ix);
    /* 24 routes; a new 6-block prompt for 3 evicts the LRU leaf: 1's conv
     * 1 (stamp 1), trimmed back to 1's anchor at the end of sys */
    uint32_t nc = conv(c, 0, 6, 3);
    learn_at(ix, c, nc, 0, 3, T(4));
    assert_int_equal(depth(ix, 1, a, na), 6);
    assert_int_equal(depth(ix, 2, a, na), 10);
    assert_int_equal(depth(ix, 2, b, nb), 10);
    assert_verified(ix);
    /* more pressure (9 more routes): 1's system prompt (now a leaf of
     * stamp 1) goes whole, then 2's conversation 2 (stamp 2) back to its
     * anchor in the shared run; 2's conversation 1 stays */
    learn_at(ix, c, conv(c, 0, 9, 4), 0, 3, T(5));
    assert_int_equal(depth(ix, 1, a, na), 0);
    assert_int_equal(depth(ix, 2, a, na), 10);
    assert_int_equal(depth(ix, 2, b, nb), 6); /* conv 2 (stamp 2) went */
    assert_verified(ix);
    lr_index_destroy(ix);
}

/* A KV "removed" event for an inner block takes that block and every
 * deeper one of that instance, walks up to the engine block boundary, and
 * leaves another instance holding the same blocks alone. */
static void
kv_removed_inner_block(void **state)
{
    (void)state;
    lr_index *ix = small_index(1000, UINT64_MAX);
    uint32_t tok[64];
    uint32_t n = conv(tok, 0, 8, 5);
    uint64_t h[4] = { 101, 102, 103, 104 };
    for (uint32_t inst = 1; inst <= 2; inst++) {
        lr_kv_stored ev;
        lr_kv_stored_init(&ev);
        ev.block_hashes = h;
        ev.n_blocks = 4;
        ev.block_size = 2 * B; /* one engine block = two index blocks */
        ev.token_ids = tok;
        ev.n_tokens = n;
        assert_st(lr_index_kv_stored(ix, inst, &ev, T(inst)), LR_OK);
    }
    assert_int_equal(depth(ix, 1, tok, n), 8);
    size_t res;
    assert_st(lr_index_kv_removed(ix, 1, &h[1], 1, &res), LR_OK);
    assert_int_equal(res, 1);
    /* engine block 2 (index blocks 3-4) and everything deeper: gone for
     * 1, which keeps engine block 1 (blocks 1-2, an anchor at 2) */
    assert_int_equal(depth(ix, 1, tok, n), 2);
    assert_int_equal(depth(ix, 2, tok, n), 8);
    /* the removed hash is forgotten; a deeper one of 1 is stale */
    assert_st(lr_index_kv_removed(ix, 1, &h[1], 1, &res), LR_OK);
    assert_int_equal(res, 0);
    assert_st(lr_index_kv_removed(ix, 1, &h[3], 1, &res), LR_OK);
    assert_int_equal(res, 0);
    assert_verified(ix);
    uint64_t blocks;
    assert_st(lr_index_instance_blocks(ix, 1, &blocks), LR_OK);
    assert_int_equal(blocks, 2);
    lr_index_destroy(ix);
}

/* A drained instance (its engine cleared, or removed): every run it held
 * alone goes, a run it shared shrinks to what the others hold, and the
 * others' matches do not move. */
static void
drained_instance(void **state)
{
    (void)state;
    lr_index *ix = small_index(1000, UINT64_MAX);
    uint32_t a[64], b[64];
    uint32_t na = conv(a, 6, 5, 1), nb = conv(b, 3, 2, 2);
    learn_at(ix, a, na, 6 * B, 1, T(1));
    learn_at(ix, b, nb, 0, 2, T(2)); /* 2 holds sys[0..3) + its own 2 */
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    assert_st(lr_index_get_stats(ix, &st), LR_OK);
    assert_int_equal(st.prefixes, 13);
    assert_st(lr_index_kv_cleared(ix, 1), LR_OK);
    assert_int_equal(depth(ix, 1, a, na), 0);
    assert_int_equal(depth(ix, 2, b, nb), 5);
    assert_int_equal(depth(ix, 2, a, na), 3);
    assert_st(lr_index_get_stats(ix, &st), LR_OK);
    assert_int_equal(st.prefixes, 5); /* only what 2 holds is left */
    assert_int_equal(st.blocks, 5);
    assert_verified(ix);
    /* learning again after the drain reuses the freed slots */
    learn_at(ix, a, na, 6 * B, 1, T(3));
    assert_int_equal(depth(ix, 1, a, na), 11);
    assert_st(lr_index_remove_instance(ix, 2), LR_OK);
    assert_int_equal(depth(ix, 1, a, na), 11);
    assert_st(lr_index_get_stats(ix, &st), LR_OK);
    assert_int_equal(st.prefixes, 11);
    assert_verified(ix);
    lr_index_destroy(ix);
}

/* TTL expiry of a tip: a match touched the middle of a long prompt, so
 * when the tip expires the walk stops at the touched block (used later),
 * which stays until its own recency runs out. */
static void
ttl_expiry_of_a_tip(void **state)
{
    (void)state;
    lr_index *ix = small_index(1000, 10 * SEC);
    uint32_t a[64], q[64];
    uint32_t na = conv(a, 0, 12, 1);
    learn_at(ix, a, na, 0, 1, T(100));
    /* a prompt sharing the first 5 blocks, touched at T(105) */
    uint32_t nq = conv(q, 0, 12, 1);
    for (uint32_t i = 5 * B; i < nq; i++)
        q[i] = 424242;
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = q;
    p.n_tokens = nq;
    lr_index_hit hits[4];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = hits;
    r.hits_capacity = 4;
    assert_st(lr_index_match(ix, &p, T(105), 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 1);
    assert_int_equal(hits[0].tokens, 5 * B);
    assert_verified(ix);
    /* T(111): the tip (stamp 100) expired, the touched block 5 did not */
    assert_st(lr_index_expire(ix, T(111)), LR_OK);
    assert_int_equal(depth(ix, 1, a, na), 5);
    assert_verified(ix);
    /* T(116): block 5 (stamp 105) expires, and with it blocks 1-4 */
    assert_st(lr_index_expire(ix, T(116)), LR_OK);
    assert_int_equal(depth(ix, 1, a, na), 0);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    assert_st(lr_index_get_stats(ix, &st), LR_OK);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.prefixes, 0);
    assert_int_equal(st.expired_blocks, 12);
    assert_verified(ix);
    lr_index_destroy(ix);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(model_many_seeds),
        cmocka_unit_test(evict_inside_shared_prefix),
        cmocka_unit_test(kv_removed_inner_block),
        cmocka_unit_test(drained_instance),
        cmocka_unit_test(ttl_expiry_of_a_tip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
