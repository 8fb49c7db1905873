# Cython's view of csrc/batch_header.h: record batch v2 header offsets, big-endian loads and stores,
# and the one header check (the facts and their tests are described there). Each native module
# cimports what it uses from here (setup.py puts csrc/ on Cython's include path); nothing here
# exists at run time, so no module imports another.

from libc.stdint cimport int8_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t

cdef extern from "batch_header.h":
    enum:
        KL_BASE_OFFSET_AT
        KL_LENGTH_AT
        KL_LEADER_EPOCH_AT
        KL_MAGIC_AT
        KL_CRC_AT
        KL_ATTRIBUTES_AT
        KL_LAST_OFFSET_DELTA_AT
        KL_BASE_TIMESTAMP_AT
        KL_MAX_TIMESTAMP_AT
        KL_PRODUCER_ID_AT
        KL_PRODUCER_EPOCH_AT
        KL_BASE_SEQUENCE_AT
        KL_RECORD_COUNT_AT
        KL_HEADER_SIZE
        KL_LOG_OVERHEAD
        KL_MIN_BATCH_LENGTH
        KL_MAGIC
        KL_CODEC_MASK
        KL_CONTROL_BIT
    enum:
        KL_BATCH_OK
        KL_BATCH_TRUNCATED_HEADER
        KL_BATCH_BAD_MAGIC
        KL_BATCH_SHORT_LENGTH
        KL_BATCH_NEGATIVE
        KL_BATCH_OFFSET_OVERFLOW
        KL_BATCH_TRUNCATED
    uint16_t kl_load_be16(const unsigned char *p) noexcept nogil
    uint32_t kl_load_be32(const unsigned char *p) noexcept nogil
    uint64_t kl_load_be64(const unsigned char *p) noexcept nogil
    void kl_store_be16(unsigned char *p, uint16_t v) noexcept nogil
    void kl_store_be32(unsigned char *p, uint32_t v) noexcept nogil
    void kl_store_be64(unsigned char *p, uint64_t v) noexcept nogil
    int kl_batch_header_problem(int64_t base_offset, int32_t length, int8_t magic, int32_t last_delta,
                                int32_t record_count, int64_t avail, bint assigned_offsets, int64_t *size) noexcept nogil
    int kl_check_batch_header(const unsigned char *p, int64_t avail, bint assigned_offsets, int64_t *size) noexcept nogil
