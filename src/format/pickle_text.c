/* pickle_text.c - conversions the pickle reader and writer share: UTF-8 validity, and integers of any
 * size between decimal text and little-endian two's complement (LONG1/LONG4's form). */
#include "format/pickle_parse.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Accepts UTF-8 including encoded surrogates (Python decodes pickled str with "surrogatepass"). */
int pk_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1Fu; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0Fu; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07u; min = 0x10000; }
        else return 0;
        if (n - i - 1 < k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF) return 0;
        i += k + 1;
    }
    return 1;
}

/* ---- integers of any size: decimal text <-> little-endian two's complement ---- */

size_t pk_decimal_to_long(const char *s, size_t len, uint8_t *out) {
    size_t i = 0, n = 0;
    int neg = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    /* magnitude *= 10, += digit, on a little-endian byte array */
    for (; i < len; i++) {
        unsigned carry = (unsigned)(s[i] - '0');
        for (size_t k = 0; k < n; k++) {
            unsigned x = out[k] * 10u + carry;
            out[k] = (uint8_t)x;
            carry = x >> 8;
        }
        while (carry) out[n++] = (uint8_t)carry, carry >>= 8;
    }
    out[n++] = 0;   /* room for the sign bit */
    if (neg) {      /* two's complement: invert and add one */
        unsigned carry = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned x = (uint8_t)~out[k] + carry;
            out[k] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    /* shortest form, as Python's encode_long */
    while (n > 1 && ((out[n - 1] == 0x00 && !(out[n - 2] & 0x80)) || (out[n - 1] == 0xFF && (out[n - 2] & 0x80)))) n--;
    return n;
}

size_t pk_long_to_decimal(const uint8_t *le, size_t n, char *out) {
    size_t k = 0;
    if (n == 0) {
        out[0] = '0', out[1] = 0;
        return 1;
    }
    uint8_t *mag = malloc(n);
    if (!mag) return 0;
    int neg = (le[n - 1] & 0x80) != 0;
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        if (!neg) {
            mag[i] = le[i];
        } else {
            unsigned x = (uint8_t)~le[i] + carry;
            mag[i] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    size_t top = n;   /* digits come out least significant first: repeated division by 10 */
    while (top && !mag[top - 1]) top--;
    do {
        unsigned rem = 0;
        for (size_t i = top; i-- > 0;) {
            unsigned x = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(x / 10);
            rem = x % 10;
        }
        out[k++] = (char)('0' + rem);
        while (top && !mag[top - 1]) top--;
    } while (top);
    free(mag);
    if (neg) out[k++] = '-';
    for (size_t i = 0; i < k / 2; i++) {
        char c = out[i];
        out[i] = out[k - 1 - i];
        out[k - 1 - i] = c;
    }
    out[k] = 0;
    return k;
}
