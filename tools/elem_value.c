/* elem_value.c - tensor elements widened to double or 64-bit integers (little-endian, as stored). */
#include "elem_value.h"

#include <math.h>
#include <string.h>

elem_class elem_class_of(sck_dtype dt) {
    switch (dt) {
    case SCK_F32: case SCK_F64: case SCK_F16: case SCK_BF16:
    case SCK_F8_E4M3FN: case SCK_F8_E4M3FNUZ: case SCK_F8_E5M2: case SCK_F8_E5M2FNUZ: case SCK_F8_E8M0FNU:
        return ELEM_FLOAT;
    case SCK_COMPLEX32: case SCK_COMPLEX64: case SCK_COMPLEX128: return ELEM_COMPLEX;
    case SCK_I8: case SCK_I16: case SCK_I32: case SCK_I64: return ELEM_SIGNED;
    default: return ELEM_UNSIGNED;
    }
}

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

static double bf16_to_double(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* An 8-bit float with `mbits` mantissa bits and exponent bias `bias`.  `fnuz`: 0x80 is the only NaN and
 * there is no infinity (torch's *fnuz); otherwise e4m3fn (mbits 3: only S.1111.111 is NaN, no infinity)
 * or e5m2 (IEEE-like: the top exponent is infinity or NaN). */
static double f8_to_double(uint8_t b, int mbits, int bias, int fnuz) {
    int emax = (1 << (7 - mbits)) - 1, e = (b >> mbits) & emax, m = b & ((1 << mbits) - 1);
    if (fnuz && b == 0x80) return NAN;
    if (!fnuz && e == emax) {
        if (mbits == 3) {
            if (m == 7) return NAN;
        } else {
            return m ? NAN : (b & 0x80 ? -INFINITY : INFINITY);
        }
    }
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp(m + (1 << mbits), e - bias - mbits);
    return b & 0x80 ? -v : v;
}

double elem_float(sck_dtype dt, const uint8_t *p, int k) {
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case SCK_F32: memcpy(&f, p, 4); return f;
    case SCK_F64: memcpy(&d, p, 8); return d;
    case SCK_F16: memcpy(&h, p, 2); return half_to_double(h);
    case SCK_BF16: memcpy(&h, p, 2); return bf16_to_double(h);
    case SCK_COMPLEX32: memcpy(&h, p + 2 * k, 2); return half_to_double(h);
    case SCK_COMPLEX64: memcpy(&f, p + 4 * k, 4); return f;
    case SCK_COMPLEX128: memcpy(&d, p + 8 * k, 8); return d;
    case SCK_F8_E4M3FN: return f8_to_double(p[0], 3, 7, 0);
    case SCK_F8_E4M3FNUZ: return f8_to_double(p[0], 3, 8, 1);
    case SCK_F8_E5M2: return f8_to_double(p[0], 2, 15, 0);
    case SCK_F8_E5M2FNUZ: return f8_to_double(p[0], 2, 16, 1);
    case SCK_F8_E8M0FNU: return p[0] == 0xff ? NAN : ldexp(1, p[0] - 127);
    default: return NAN;
    }
}

int64_t elem_signed(sck_dtype dt, const uint8_t *p) {
    int16_t s;
    int32_t i;
    int64_t l;
    switch (dt) {
    case SCK_I16: memcpy(&s, p, 2); return s;
    case SCK_I32: memcpy(&i, p, 4); return i;
    case SCK_I64: memcpy(&l, p, 8); return l;
    default: return (int8_t)p[0];
    }
}

uint64_t elem_unsigned(sck_dtype dt, const uint8_t *p) {
    uint16_t s;
    uint32_t i;
    uint64_t l;
    switch (sck_dtype_size(dt)) {
    case 2: memcpy(&s, p, 2); return s;
    case 4: memcpy(&i, p, 4); return i;
    case 8: memcpy(&l, p, 8); return l;
    default: return dt == SCK_BOOL ? p[0] != 0 : p[0];
    }
}
