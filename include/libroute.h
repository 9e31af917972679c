/* libroute: the routing brain for LLM inference gateways.
 * Umbrella header: includes every stable public header, nothing else. */
#ifndef LIBROUTE_H
#define LIBROUTE_H

#include "libroute/lr_common.h"
#include "libroute/lr_cost.h"
#include "libroute/lr_index.h"
#include "libroute/lr_learner.h"
#include "libroute/lr_load.h"
#include "libroute/lr_mlp.h"
#include "libroute/lr_policy.h"
#include "libroute/lr_ring.h"
#include "libroute/lr_router.h"
#include "libroute/lr_text.h"
#include "libroute/lr_vllm.h"

#endif /* LIBROUTE_H */
