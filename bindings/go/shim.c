/* See shim.h for why these exist. */
#include "shim.h"

#include <string.h>

/* A name buffer: the longest name the library takes, one byte more (so
 * that a longer name stays too long) and the NUL. */
typedef char lrgo_name_buf[LR_ROUTER_MAX_NAME + 2];

/* name[0..len) NUL-terminated in buf, cut at LR_ROUTER_MAX_NAME + 1
 * bytes; NULL for no name. */
static const char *
name_of(const char *name, size_t len, lrgo_name_buf buf)
{
    if (name == NULL || len == 0)
        return NULL;
    if (len > LR_ROUTER_MAX_NAME + 1)
        len = LR_ROUTER_MAX_NAME + 1;
    memcpy(buf, name, len);
    buf[len] = '\0';
    return buf;
}

lr_status
lrgo_router_route(lr_router *r, const lr_request *q, const uint32_t *tokens,
                  const uint32_t *boundaries, const char *model,
                  size_t model_len, const char *adapter, size_t adapter_len,
                  lr_score *scores, lr_decision *d)
{
    lrgo_name_buf mbuf, abuf;
    lr_request req = *q;
    req.tokens = tokens;
    req.boundaries = boundaries;
    req.model = name_of(model, model_len, mbuf);
    req.adapter = name_of(adapter, adapter_len, abuf);
    lr_decision dec = *d;
    dec.scores = scores;
    lr_status st = lr_router_route(r, &req, &dec);
    dec.scores = NULL;
    *d = dec;
    return st;
}

lr_status
lrgo_router_candidates(lr_router *r, const lr_request *q,
                       const uint32_t *tokens, const char *model,
                       size_t model_len, const char *adapter,
                       size_t adapter_len, lr_candidate *rows,
                       size_t capacity, size_t row_size, size_t *n_rows)
{
    lrgo_name_buf mbuf, abuf;
    lr_request req = *q;
    req.tokens = tokens;
    req.boundaries = NULL;
    req.model = name_of(model, model_len, mbuf);
    req.adapter = name_of(adapter, adapter_len, abuf);
    return lr_router_candidates(r, &req, rows, capacity, row_size, n_rows);
}

lr_status
lrgo_router_policy_input(lr_router *r, const lr_request *q,
                         const uint32_t *tokens, const uint32_t *boundaries,
                         const char *model, size_t model_len,
                         const char *adapter, size_t adapter_len,
                         lr_policy_input *in, double *params, size_t capacity)
{
    lrgo_name_buf mbuf, abuf;
    lr_request req = *q;
    req.tokens = tokens;
    req.boundaries = boundaries;
    req.model = name_of(model, model_len, mbuf);
    req.adapter = name_of(adapter, adapter_len, abuf);
    lr_policy_input pin = *in;
    lr_status st = lr_router_policy_input(r, &req, &pin, params, capacity);
    pin.params = NULL; /* the caller's buffer: Go keeps its own slice */
    pin.model = NULL;
    *in = pin;
    return st;
}

lr_status
lrgo_policy_decide(int32_t policy, const lr_policy_input *in,
                   const double *params, lr_mlp *model,
                   const lr_candidate *rows, size_t n_rows, size_t row_size,
                   double *scores, lr_decision *d)
{
    lr_policy_input pin = *in;
    pin.params = params;
    pin.model = model;
    return lr_policy_decide(policy, &pin, rows, n_rows, row_size, scores, d);
}

static lr_kv_stored
kv_event(const lr_kv_stored *ev, const uint64_t *block_hashes,
         const uint32_t *token_ids, const uint64_t *mm_hashes)
{
    lr_kv_stored e = *ev;
    e.block_hashes = block_hashes;
    e.token_ids = token_ids;
    e.mm_hashes = mm_hashes;
    return e;
}

lr_status
lrgo_router_kv_stored(lr_router *r, uint32_t id, const lr_kv_stored *ev,
                      const uint64_t *block_hashes, const uint32_t *token_ids,
                      const uint64_t *mm_hashes, uint64_t now_ns)
{
    lr_kv_stored e = kv_event(ev, block_hashes, token_ids, mm_hashes);
    return lr_router_kv_stored(r, id, &e, now_ns);
}

lr_status
lrgo_index_kv_stored(lr_index *idx, uint32_t instance, const lr_kv_stored *ev,
                     const uint64_t *block_hashes, const uint32_t *token_ids,
                     const uint64_t *mm_hashes, uint64_t now_ns)
{
    lr_kv_stored e = kv_event(ev, block_hashes, token_ids, mm_hashes);
    return lr_index_kv_stored(idx, instance, &e, now_ns);
}

static lr_prompt
prompt(const lr_prompt *p, const uint32_t *tokens, const uint32_t *boundaries,
       const uint64_t *keys)
{
    lr_prompt q = *p;
    q.tokens = tokens;
    q.boundaries = boundaries;
    q.keys = keys;
    return q;
}

lr_status
lrgo_index_learn(lr_index *idx, const lr_prompt *p, const uint32_t *tokens,
                 const uint32_t *boundaries, const uint64_t *keys,
                 uint32_t instance, int32_t trust, uint64_t now_ns)
{
    lr_prompt q = prompt(p, tokens, boundaries, keys);
    return lr_index_learn(idx, &q, instance, trust, now_ns);
}

lr_status
lrgo_index_match(lr_index *idx, const lr_prompt *p, const uint32_t *tokens,
                 const uint64_t *keys, uint64_t now_ns, uint32_t flags,
                 lr_index_hit *hits, lr_index_match_result *m)
{
    lr_prompt q = prompt(p, tokens, NULL, keys);
    lr_index_match_result res = *m;
    res.hits = hits;
    lr_status st = lr_index_match(idx, &q, now_ns, flags, &res);
    res.hits = NULL;
    *m = res;
    return st;
}

lr_status
lrgo_learner_create(const lr_learner_options *o, const lr_mlp_options *mlp,
                    lr_learner **out)
{
    lr_learner_options lo = *o;
    lo.mlp = mlp;
    return lr_learner_create(&lo, out);
}

lr_status
lrgo_router_create(const lr_router_options *o,
                   const lr_learner_options *learner,
                   const lr_mlp_options *mlp, lr_router **out)
{
    lr_router_options ro = *o;
    lr_learner_options lo;
    if (learner != NULL) {
        lo = *learner;
        lo.mlp = mlp;
        ro.learner = &lo;
    }
    return lr_router_create(&ro, out);
}

lr_status
lrgo_text_tokens(const void *text, size_t len, uint32_t width, uint32_t *out,
                 size_t capacity)
{
    size_t needed;
    lr_status st = lr_text_tokens(text, len, width, out, capacity, &needed);
    return st == LR_OK && needed != capacity ? LR_EINVAL : st;
}
