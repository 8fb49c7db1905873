/* Varint primitives shared by every native module (static inline, included from each .pyx).
 *
 * Kafka's encodings (the protobuf base-128 form, least significant group first, high bit = more):
 *   unsigned varint  - used by flexible versions (compact lengths, tagged fields) and by the
 *                      metadata record frame (frameVersion, apiKey, version); at most 5 bytes
 *                      for a u32, we accept up to 10 for a u64.
 *   varint / varlong - zig-zag signed ((n << 1) ^ (n >> 63)); record fields in batches v2.
 *                      varint (int32) is at most 5 bytes, varlong (int64) at most 10.
 * Readers return the new position, KL_TRUNCATED when the bytes end first, or KL_OVERLONG when more
 * than max_bytes continuation bytes appear. They never read at or past `end`.
 */
#ifndef KRAFTLOG_WIRE_H
#define KRAFTLOG_WIRE_H

#include <stdint.h>

#define KL_TRUNCATED (-1)
#define KL_OVERLONG (-2)

static inline int64_t kl_read_uvarint(const unsigned char *buf, int64_t pos, int64_t end,
                                      int max_bytes, uint64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (pos >= end) return KL_TRUNCATED;
        unsigned char b = buf[pos++];
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = value; return pos; }
        shift += 7;
    }
    return KL_OVERLONG;
}

static inline int64_t kl_read_varint(const unsigned char *buf, int64_t pos, int64_t end,
                                     int max_bytes, int64_t *out) {
    uint64_t raw;
    int64_t next = kl_read_uvarint(buf, pos, end, max_bytes, &raw);
    if (next >= 0) *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return next;
}

static inline int kl_uvarint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

static inline uint64_t kl_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* Writes at most 10 bytes; returns the count written. */
static inline int kl_write_uvarint(unsigned char *dst, uint64_t v) {
    int n = 0;
    while (v >= 0x80) { dst[n++] = (unsigned char)(v | 0x80); v >>= 7; }
    dst[n++] = (unsigned char)v;
    return n;
}

#endif
