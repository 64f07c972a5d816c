/* elem_value.h - one tensor element as a number, for `diff`: every float format torch saves (float8
 * included) widened to double, integers exactly. */
#ifndef SCK_ELEM_VALUE_H
#define SCK_ELEM_VALUE_H

#include <stdint.h>

#include "shardckpt.h"

typedef enum elem_class {
    ELEM_FLOAT,   /* compared in double, NaN == NaN */
    ELEM_COMPLEX, /* two floats (real, imaginary), each compared in double */
    ELEM_SIGNED,
    ELEM_UNSIGNED, /* bool and bit containers too: compared as their unsigned integer */
} elem_class;

elem_class elem_class_of(sck_dtype dt);
/* Component k of the float or complex element at p (k is 0 for a float), in double. */
double elem_float(sck_dtype dt, const uint8_t *p, int k);
int64_t elem_signed(sck_dtype dt, const uint8_t *p);
uint64_t elem_unsigned(sck_dtype dt, const uint8_t *p);

#endif
