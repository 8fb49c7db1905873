/* Record batch v2 header facts for every native module (static inline, included through
 * csrc/batch_header.pxd): the named byte offsets, big-endian loads and stores, and the one header
 * check every native reader makes.
 *
 * Python's copy is engine/records/layout.py (its docstring has the byte table; check_header_bytes
 * is this check for the pure twins): tests/test_batch_header.py reads every KL_* value of this file
 * and checks it against layout.py's name for the same fact, so the two copies cannot drift.
 *
 *   0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
 *   21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
 *   43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 | 61 records
 * All integers big-endian; the CRC-32C covers [attributes, 12 + batchLength).
 */
#ifndef KRAFTLOG_BATCH_HEADER_H
#define KRAFTLOG_BATCH_HEADER_H

#include <stdint.h>

enum {
    KL_BASE_OFFSET_AT = 0,
    KL_LENGTH_AT = 8,
    KL_LEADER_EPOCH_AT = 12,
    KL_MAGIC_AT = 16,
    KL_CRC_AT = 17,
    KL_ATTRIBUTES_AT = 21, /* the CRC covers [KL_ATTRIBUTES_AT, end of batch) */
    KL_LAST_OFFSET_DELTA_AT = 23,
    KL_BASE_TIMESTAMP_AT = 27,
    KL_MAX_TIMESTAMP_AT = 35,
    KL_PRODUCER_ID_AT = 43,
    KL_PRODUCER_EPOCH_AT = 51,
    KL_BASE_SEQUENCE_AT = 53,
    KL_RECORD_COUNT_AT = 57,
    KL_HEADER_SIZE = 61,
    KL_LOG_OVERHEAD = 12,                                /* baseOffset + batchLength */
    KL_MIN_BATCH_LENGTH = KL_HEADER_SIZE - KL_LOG_OVERHEAD, /* a header and no records */
    KL_MAGIC = 2,
    KL_CODEC_MASK = 0x07,  /* attributes bits 0-2: the compression codec (0 none) */
    KL_CONTROL_BIT = 0x20, /* attributes bit 5: a control batch */
};

/* What kl_check_batch_header finds wrong: the numbers of batch_types' P_* problem codes. */
enum {
    KL_BATCH_OK = 0,
    KL_BATCH_TRUNCATED_HEADER = 1, /* fewer than KL_HEADER_SIZE bytes */
    KL_BATCH_BAD_MAGIC = 2,
    KL_BATCH_SHORT_LENGTH = 3,     /* batchLength < KL_MIN_BATCH_LENGTH */
    KL_BATCH_NEGATIVE = 4,         /* lastOffsetDelta or recordCount < 0 */
    KL_BATCH_OFFSET_OVERFLOW = 5,  /* baseOffset + lastOffsetDelta > INT64_MAX */
    KL_BATCH_TRUNCATED = 6,        /* the batch runs past the bytes available */
};

/* Big-endian loads and stores (gcc and clang turn each into one load or store + bswap). */
static inline uint16_t kl_load_be16(const unsigned char *p) {
    return (uint16_t)(((uint32_t)p[0] << 8) | (uint32_t)p[1]);
}

static inline uint32_t kl_load_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t kl_load_be64(const unsigned char *p) {
    return ((uint64_t)kl_load_be32(p) << 32) | (uint64_t)kl_load_be32(p + 4);
}

static inline void kl_store_be16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void kl_store_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void kl_store_be64(unsigned char *p, uint64_t v) {
    kl_store_be32(p, (uint32_t)(v >> 32));
    kl_store_be32(p + 4, (uint32_t)v);
}

/* The checks that need only the header, in the order every reader reports them, on fields already
 * read from a header that is whole (avail >= KL_HEADER_SIZE): KL_BATCH_OK and the batch's size in
 * bytes (KL_LOG_OVERHEAD + batchLength, within `avail`) in *size, or the first problem found.
 * `avail` is the count of readable bytes from the batch's start on. The CRC is the caller's to
 * check (not every reader wants it). `assigned_offsets` is 0 only for a batch whose baseOffset the
 * log is about to assign (a leader stamping a producer's batch): its baseOffset is then not
 * checked for overflow, the stamper checks the offsets it assigns instead. A reader that decodes
 * every field anyway (_batch) calls this on them; the others call kl_check_batch_header. */
static inline int kl_batch_header_problem(int64_t base_offset, int32_t length, int8_t magic, int32_t last_delta,
                                          int32_t record_count, int64_t avail, int assigned_offsets, int64_t *size) {
    if (magic != KL_MAGIC) return KL_BATCH_BAD_MAGIC;
    if (length < KL_MIN_BATCH_LENGTH) return KL_BATCH_SHORT_LENGTH;
    if (last_delta < 0 || record_count < 0) return KL_BATCH_NEGATIVE;
    if (assigned_offsets && base_offset > INT64_MAX - last_delta) return KL_BATCH_OFFSET_OVERFLOW;
    *size = KL_LOG_OVERHEAD + (int64_t)length;
    if (*size > avail) return KL_BATCH_TRUNCATED;
    return KL_BATCH_OK;
}

/* kl_batch_header_problem of the header at p, `avail` readable bytes from p on (p is read only
 * when the header is whole). */
static inline int kl_check_batch_header(const unsigned char *p, int64_t avail, int assigned_offsets,
                                        int64_t *size) {
    if (avail < KL_HEADER_SIZE) return KL_BATCH_TRUNCATED_HEADER;
    return kl_batch_header_problem((int64_t)kl_load_be64(p + KL_BASE_OFFSET_AT), (int32_t)kl_load_be32(p + KL_LENGTH_AT),
                                   (int8_t)p[KL_MAGIC_AT], (int32_t)kl_load_be32(p + KL_LAST_OFFSET_DELTA_AT),
                                   (int32_t)kl_load_be32(p + KL_RECORD_COUNT_AT), avail, assigned_offsets, size);
}

#endif
