/* crc32c.h - CRC-32C (Castagnoli), the checksum shardckpt records for every item it writes. */
#ifndef SCK_CRC32C_H
#define SCK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (0 to start) over n bytes: crc32c(crc32c(0, a), b) == crc32c(0, a||b).
 * Standard CRC-32C: sck_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t sck_crc32c(uint32_t crc, const void *p, size_t n);

/* The CRC-32C of a||b from crc_a = sck_crc32c(0, a), crc_b = sck_crc32c(0, b) and b's length: ranks
 * that each read part of an item checksum their parts, and the parts combine into the item's CRC. */
uint32_t sck_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
