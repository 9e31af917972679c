/* lrsim ships with the library it drives: one version for both. */
#ifndef LRSIM_VERSION_H
#define LRSIM_VERSION_H

#include <libroute.h>

#define LRSIM_VERSION LR_VERSION_STRING

#endif /* LRSIM_VERSION_H */
