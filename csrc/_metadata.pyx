# distutils: sources = csrc/crc32c.c
"""Native decoders of the hot metadata records: record-batch bytes straight into column arrays.

Pure twin: kraftlog.engine.records.metadata_columns_pure (same functions, same errors, same
messages). Public module: kraftlog.engine.records.metadata_columns, which walks a region with
``walk_batches``, inflates zstd batches, then calls ``decode_sections``.

Record batch v2 header: see kraftlog.engine.records.layout (61 bytes; CRC-32C of [21, end)).
A record inside a batch's records section (Kafka's DefaultRecord; varints are zig-zag):

    length          varint   bytes after this field
    attributes      int8     unused
    timestampDelta  varlong
    offsetDelta     varint   offset = batch baseOffset + offsetDelta
    keyLength       varint   -1 = null (metadata records have a null key; a key is skipped)
    key             bytes
    valueLength     varint   must not be -1: a metadata record always has a value
    value           bytes    the framed metadata record below
    headerCount     varint   then per header: keyLength varint (>= 0), key, valueLength varint, value

Framed metadata record value (all unsigned varints, at most 5 bytes each):

    frameVersion (1), apiKey (<= 0x7fff), version (<= 0x7fff), then the body in flexible encoding:
    int8/16/32/64 big-endian; uuid 16 bytes (msb then lsb, big-endian); string / array: uvarint
    length+1 (0 = null); a string holds at most 0x7fff bytes of UTF-8; at the end of every struct the
    tagged fields: uvarint count, then per field uvarint tag, uvarint size, the value.

The decoders are as strict as the generic codec (engine/records/metadata.py): nothing may follow
a record's body, a known tagged field must fill exactly its declared size, nulls only where the
schema allows them, strings must be UTF-8. Every length is checked against the end of the record
before anything is read.

Two passes over a region, both without the GIL:
  pass 1 walks the records, fills the per-record arrays, classifies each record into its kind,
         counts rows per kind and sizes the list widths and string blobs;
  pass 2 decodes every body of a hot kind into its table (rows allocated exactly from pass 1).
Helpers return 0, or -1 after writing what failed and where into the Err struct; the Python level
turns that into one CorruptRecordError.
"""

from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import numpy as np

from kraftlog.errors import CorruptRecordError


from batch_header cimport (
    KL_ATTRIBUTES_AT, KL_BASE_OFFSET_AT, KL_BATCH_BAD_MAGIC, KL_BATCH_NEGATIVE, KL_BATCH_OFFSET_OVERFLOW, KL_BATCH_OK,
    KL_BATCH_SHORT_LENGTH, KL_BATCH_TRUNCATED_HEADER, KL_CODEC_MASK, KL_CONTROL_BIT, KL_CRC_AT, KL_HEADER_SIZE, KL_LAST_OFFSET_DELTA_AT,
    KL_LEADER_EPOCH_AT, KL_LENGTH_AT, KL_LOG_OVERHEAD, KL_MAGIC_AT, KL_MAX_TIMESTAMP_AT, KL_RECORD_COUNT_AT,
    kl_check_batch_header, kl_load_be16, kl_load_be32, kl_load_be64,
)

cdef extern from "crc32c.h":
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) nogil

cdef extern from "wire.h":
    int KL_TRUNCATED
    int64_t kl_read_uvarint(const unsigned char *buf, int64_t pos, int64_t end, int max_bytes, uint64_t *out) nogil
    int64_t kl_read_varint(const unsigned char *buf, int64_t pos, int64_t end, int max_bytes, int64_t *out) nogil

IMPLEMENTATION = "native"

# ---- limits and layout constants (mirrored by the twin) -------------------------------------------
DEF MIN_RECORD_BYTES = 7      # length, attributes, timestampDelta, offsetDelta, key, value, headers: 1 byte each
DEF FRAME_VERSION = 1
DEF UVARINT32_MAX_BYTES = 5   # frame fields, lengths, counts, tags
DEF VARINT_MAX_BYTES = 5      # record fields of type varint (int32)
DEF VARLONG_MAX_BYTES = 10
DEF INT16_MAX = 0x7FFF
DEF STRING_MAX_BYTES = 0x7FFF
# A replica or ISR list longer than this is not put in the columns (its row gets extras = True and
# the first LIST_COLUMN_MAX_WIDTH entries): one corrupt-but-valid record must not make every row of
# a million-row table that wide.
DEF LIST_COLUMN_MAX_WIDTH = 64

LIST_MAX_WIDTH = LIST_COLUMN_MAX_WIDTH

# Batch table columns (walk_batches)
DEF B_POS = 0
DEF B_SIZE = 1
DEF B_BASE_OFFSET = 2
DEF B_LAST_OFFSET_DELTA = 3
DEF B_LEADER_EPOCH = 4
DEF B_MAX_TIMESTAMP = 5
DEF B_ATTRIBUTES = 6
DEF B_RECORD_COUNT = 7
DEF B_COLS = 8

# Section table columns (decode_sections)
DEF S_START = 0
DEF S_END = 1
DEF S_BASE_OFFSET = 2
DEF S_RECORD_COUNT = 3
DEF S_CONTROL = 4
DEF S_COLS = 5

# Kinds: the table a record lands in
DEF K_OTHER = 0
DEF K_TOPIC = 1
DEF K_PARTITION = 2
DEF K_CHANGE = 3
DEF K_REMOVE = 4
DEF K_CONFIG = 5
DEF K_FEATURE = 6
DEF K_FENCE = 7
DEF K_BROKER_CHANGE = 8
DEF K_REGISTER = 9
DEF K_PRODUCER_IDS = 10
DEF K_ACL = 11
DEF K_QUOTA = 12
DEF K_SCRAM = 13
DEF K_TOKEN = 14
DEF K_COUNT = 15


# ---- errors --------------------------------------------------------------------------------------

cdef struct Err:
    int64_t pos          # byte position in the buffer where decoding failed
    int64_t offset       # offset of the record, -1 when not known
    int32_t api_key      # apiKey of the record, -1 when not known
    int32_t version
    const char *field    # the field being read ("" when none)
    const char *what     # what is wrong
    int64_t a            # numbers some messages carry
    int64_t b
    int64_t section      # the section being walked (pass 1), -1 when not known (pass 2)


cdef struct Cur:
    const uint8_t *p
    int64_t pos
    int64_t end
    Err *err


cdef inline int fail(Cur *c, int64_t pos, const char *field, const char *what) noexcept nogil:
    c.err.pos = pos
    c.err.field = field
    c.err.what = what
    return -1


cdef str message_of(Err *err):
    """The reason text of a record error, identical in the twin (metadata_columns_pure._message)."""
    what = err.what.decode("ascii")
    if "{a}" in what or "{b}" in what:
        what = what.replace("{a}", str(err.a)).replace("{b}", str(err.b))
    head = f"record at offset {err.offset}" if err.offset >= 0 else "record"
    if err.api_key >= 0:
        head += f" (apiKey {err.api_key} v{err.version})"
    field = err.field.decode("ascii")
    return f"{head}: {field}: {what}" if field else f"{head}: {what}"


# ---- big-endian and varint readers ---------------------------------------------------------------

cdef inline int need(Cur *c, int64_t n, const char *field) noexcept nogil:
    if c.end - c.pos < n:
        return fail(c, c.pos, field, "runs past the end of the record")
    return 0


cdef inline int rd_uvar(Cur *c, uint64_t *out, const char *field) noexcept nogil:
    """Unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint)."""
    cdef int64_t nxt
    if c.pos < c.end and c.p[c.pos] < 0x80:  # one byte: every small length, count and tag
        out[0] = c.p[c.pos]
        c.pos += 1
        return 0
    nxt = kl_read_uvarint(c.p, c.pos, c.end, UVARINT32_MAX_BYTES, out)
    if nxt < 0:
        if nxt == KL_TRUNCATED:
            return fail(c, c.pos, field, "unsigned varint runs past the end of the record")
        return fail(c, c.pos, field, "unsigned varint is longer than 5 bytes")
    c.pos = nxt
    return 0


cdef inline int rd_svar(Cur *c, int64_t *out, int max_bytes, const char *field) noexcept nogil:
    """Zig-zag varint (5 bytes) or varlong (10 bytes) of the record framing."""
    cdef int64_t nxt
    cdef uint8_t b
    if c.pos < c.end and c.p[c.pos] < 0x80:  # one byte: small lengths and deltas
        b = c.p[c.pos]
        out[0] = <int64_t>(b >> 1) ^ -<int64_t>(b & 1)
        c.pos += 1
        return 0
    nxt = kl_read_varint(c.p, c.pos, c.end, max_bytes, out)
    if nxt < 0:
        if nxt == KL_TRUNCATED:
            return fail(c, c.pos, field, "varint runs past the end")
        return fail(c, c.pos, field, "varint is longer than its maximum size")
    c.pos = nxt
    return 0


cdef inline int rd_i8(Cur *c, int8_t *out, const char *field) noexcept nogil:
    if need(c, 1, field) < 0:
        return -1
    out[0] = <int8_t>c.p[c.pos]
    c.pos += 1
    return 0


cdef inline int rd_i16(Cur *c, int16_t *out, const char *field) noexcept nogil:
    if need(c, 2, field) < 0:
        return -1
    out[0] = <int16_t>kl_load_be16(c.p + c.pos)
    c.pos += 2
    return 0


cdef inline int rd_u16(Cur *c, uint16_t *out, const char *field) noexcept nogil:
    if need(c, 2, field) < 0:
        return -1
    out[0] = kl_load_be16(c.p + c.pos)
    c.pos += 2
    return 0


cdef inline int rd_i32(Cur *c, int32_t *out, const char *field) noexcept nogil:
    if need(c, 4, field) < 0:
        return -1
    out[0] = <int32_t>kl_load_be32(c.p + c.pos)
    c.pos += 4
    return 0


cdef inline int rd_i64(Cur *c, int64_t *out, const char *field) noexcept nogil:
    if need(c, 8, field) < 0:
        return -1
    out[0] = <int64_t>kl_load_be64(c.p + c.pos)
    c.pos += 8
    return 0


cdef inline int rd_uuid(Cur *c, uint64_t *out, const char *field) noexcept nogil:
    """16 bytes: out[0] = most significant half, out[1] = least significant half."""
    if need(c, 16, field) < 0:
        return -1
    out[0] = kl_load_be64(c.p + c.pos)
    out[1] = kl_load_be64(c.p + c.pos + 8)
    c.pos += 16
    return 0


cdef inline int rd_len(Cur *c, int64_t *n, bint nullable, const char *field) noexcept nogil:
    """Compact length (uvarint n+1, 0 = null): n, or -1 for null."""
    cdef int64_t start = c.pos
    cdef uint64_t raw
    if rd_uvar(c, &raw, field) < 0:
        return -1
    if raw == 0 and not nullable:
        return fail(c, start, field, "null in a non-nullable field")
    n[0] = <int64_t>raw - 1
    return 0


cdef inline int rd_array(Cur *c, int64_t *n, int64_t elem_bytes, bint nullable, const char *field) noexcept nogil:
    """Compact array of fixed-size elements: its count (-1 null); the cursor moves past it.

    The elements start at c.pos - n * elem_bytes afterwards.
    """
    cdef int64_t start = c.pos
    if rd_len(c, n, nullable, field) < 0:
        return -1
    if n[0] < 0:
        return 0
    if n[0] > c.end - c.pos:  # every element takes at least one byte
        return fail(c, start, field, "array count exceeds the bytes left in the record")
    if n[0] * elem_bytes > c.end - c.pos:
        return fail(c, start, field, "array runs past the end of the record")
    c.pos += n[0] * elem_bytes
    return 0


cdef inline bint valid_utf8(const uint8_t *s, int64_t n) noexcept nogil:
    """Well-formed UTF-8 as Unicode's table 3-7 (and Python's strict decoder) defines it."""
    cdef int64_t i = 0
    cdef uint8_t b, lo, hi
    cdef int k, more
    while i < n:
        b = s[i]
        if b < 0x80:
            i += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= b <= 0xDF:
            more = 1
        elif b == 0xE0:
            more = 2
            lo = 0xA0
        elif b == 0xED:
            more = 2
            hi = 0x9F
        elif 0xE1 <= b <= 0xEF:
            more = 2
        elif b == 0xF0:
            more = 3
            lo = 0x90
        elif 0xF1 <= b <= 0xF3:
            more = 3
        elif b == 0xF4:
            more = 3
            hi = 0x8F
        else:
            return False
        if n - i <= more:
            return False
        if not (lo <= s[i + 1] <= hi):
            return False
        for k in range(2, more + 1):
            if not (0x80 <= s[i + k] <= 0xBF):
                return False
        i += more + 1
    return True


cdef inline int rd_string(Cur *c, int64_t *n, int64_t *at, bint nullable, const char *field) noexcept nogil:
    """Compact string: its byte length (-1 null) and where its bytes start."""
    cdef int64_t start = c.pos
    if rd_len(c, n, nullable, field) < 0:
        return -1
    at[0] = c.pos
    if n[0] < 0:
        return 0
    if n[0] > c.end - c.pos:
        return fail(c, start, field, "string runs past the end of the record")
    if n[0] > STRING_MAX_BYTES:
        return fail(c, start, field, "string is longer than 32767 bytes")
    if not valid_utf8(c.p + c.pos, n[0]):
        return fail(c, start, field, "string is not UTF-8")
    c.pos += n[0]
    return 0


cdef inline int rd_bytes(Cur *c, int64_t *n, int64_t *at, const char *field) noexcept nogil:
    """Compact bytes (not nullable): their length and where they start."""
    cdef int64_t start = c.pos
    if rd_len(c, n, False, field) < 0:
        return -1
    at[0] = c.pos
    if n[0] > c.end - c.pos:
        return fail(c, start, field, "bytes run past the end of the record")
    c.pos += n[0]
    return 0


cdef inline int rd_tag_count(Cur *c, uint64_t *count) noexcept nogil:
    cdef int64_t start = c.pos
    if rd_uvar(c, count, "tagged fields") < 0:
        return -1
    if count[0] > <uint64_t>(c.end - c.pos):  # each tagged field takes at least two bytes
        return fail(c, start, "tagged fields", "more tagged fields than bytes left in the record")
    return 0


cdef inline int rd_tag(Cur *c, Cur *sub, uint64_t *tag) noexcept nogil:
    """One tagged field's header; ``sub`` becomes a cursor over exactly its value."""
    cdef int64_t tag_at = c.pos
    cdef uint64_t size
    if rd_uvar(c, tag, "tagged fields") < 0 or rd_uvar(c, &size, "tagged fields") < 0:
        return -1
    if size > <uint64_t>(c.end - c.pos):
        c.err.a = <int64_t>tag[0]
        return fail(c, tag_at, "tagged fields", "tagged field {a} runs past the end of the record")
    sub.p = c.p
    sub.pos = c.pos
    sub.end = c.pos + <int64_t>size
    sub.err = c.err
    c.pos = sub.end
    return 0


cdef inline int tag_done(Cur *sub, int64_t tag_at, uint64_t tag) noexcept nogil:
    """A known tagged field's value must fill exactly the size it declared."""
    if sub.pos != sub.end:
        sub.err.a = <int64_t>tag
        return fail(sub, tag_at, "tagged fields", "tagged field {a} declares more bytes than its value takes")
    return 0


cdef int skip_tags(Cur *c) noexcept nogil:
    """A tagged-field section with no known tags (nested structs): validated and skipped."""
    cdef uint64_t count, tag, i
    cdef Cur sub
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        if rd_tag(c, &sub, &tag) < 0:
            return -1
    return 0


# ---- columns -------------------------------------------------------------------------------------

cdef struct Blob:
    uint8_t *buf
    int64_t cap
    int64_t used
    int64_t *offsets     # rows + 1 entries; offsets[0] = 0


cdef inline int blob_put(Cur *c, Blob *b, int64_t row, int64_t at, int64_t n) noexcept nogil:
    """Append bytes [at, at+n) of the buffer (n = -1: null, nothing) as row ``row``."""
    if n > 0:
        if b.used + n > b.cap:  # only when the bytes changed between the two passes
            return fail(c, at, "", "string blob overflow (the buffer changed while decoding)")
        memcpy(b.buf + b.used, c.p + at, n)
        b.used += n
    b.offsets[row + 1] = b.used
    return 0


cdef inline int16_t clip16(int64_t n) noexcept nogil:
    return <int16_t>(n if n <= INT16_MAX else INT16_MAX)


cdef inline void put_list(int32_t *dst, int64_t width, const uint8_t *src, int64_t n) noexcept nogil:
    """A row of a -1 padded list column: the first min(n, width) int32 of src, then -1."""
    cdef int64_t i, k = n if n < width else width
    for i in range(k):
        dst[i] = <int32_t>kl_load_be32(src + 4 * i)
    for i in range(k, width):
        dst[i] = -1


cdef inline bint any_nonzero(const uint8_t *p, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if p[i]:
            return True
    return False


DEF N_MORE_LISTS = 4  # PartitionChangeRecord lists past ISR and replicas in columns (MORE_LIST_COLUMNS)


cdef struct Ctx:
    # per record (pass 1)
    int64_t n
    int64_t cap
    int64_t *offsets
    int16_t *api_keys
    int16_t *versions
    int32_t *kind_rows
    int64_t *value_pos
    int32_t *value_len
    uint8_t *kinds
    int64_t counts[K_COUNT]
    int64_t blob_bytes[K_COUNT]   # sum of value lengths per kind: bounds every string blob
    int64_t p_rep_w
    int64_t p_isr_w
    int64_t c_rep_w
    int64_t c_isr_w
    int64_t c_more_w[N_MORE_LISTS]  # widths of the change lists past ISR and replicas
    uint8_t c_more_on[N_MORE_LISTS]  # some record of the region carries the list (not null)
    # other
    int32_t *o_rec
    # topics
    int32_t *t_rec
    uint64_t *t_id
    Blob t_name
    uint8_t *t_extras
    # partitions
    int32_t *p_rec
    uint64_t *p_tid
    int32_t *p_pid
    int32_t *p_leader
    int32_t *p_lepoch
    int32_t *p_pepoch
    int8_t *p_lrs
    int32_t *p_rep
    int16_t *p_rep_n
    int32_t *p_isr
    int16_t *p_isr_n
    uint8_t *p_dir       # [rows, p_rep_w * 16]: the first p_dir_n[row] replicas' directory ids
    int16_t *p_dir_n     # 0: none or all MIGRATING (the image stores those as empty)
    uint8_t *p_extras
    # partition changes
    int32_t *c_rec
    uint64_t *c_tid
    int32_t *c_pid
    int32_t *c_leader
    int8_t *c_lrs
    int32_t *c_rep
    int16_t *c_rep_n
    int32_t *c_isr
    int16_t *c_isr_n
    int32_t *c_more[N_MORE_LISTS]     # [rows, c_more_w[j]] -1 padded, for MORE_LIST_COLUMNS[j]
    int16_t *c_more_n[N_MORE_LISTS]   # -1: null (unchanged); NULL when no record carries the list
    uint8_t *c_extras
    # remove topics
    int32_t *r_rec
    uint64_t *r_tid
    uint8_t *r_extras
    # configs: three blobs, concatenated at the end
    int32_t *g_rec
    int8_t *g_rtype
    Blob g_rname
    Blob g_name
    Blob g_value
    uint8_t *g_value_null
    uint8_t *g_extras
    # features
    int32_t *f_rec
    Blob f_name
    int16_t *f_level
    uint8_t *f_extras
    # fence / unfence
    int32_t *e_rec
    int32_t *e_broker
    int64_t *e_epoch
    uint8_t *e_fenced
    uint8_t *e_extras
    # broker registration changes
    int32_t *bc_rec
    int32_t *bc_broker
    int64_t *bc_epoch
    int8_t *bc_fenced
    int8_t *bc_ics
    uint8_t *bc_extras
    # broker registrations; endpoints, features and log dirs each in a flat list (rg_*_end[row]:
    # one past the row's last), bounded by the kind's value bytes (an endpoint takes at least 7
    # bytes, a feature 6, a log dir 16)
    int32_t *rg_rec
    int32_t *rg_broker
    int64_t *rg_epoch
    uint64_t *rg_inc
    uint8_t *rg_fenced
    uint8_t *rg_ics
    uint8_t *rg_zk
    Blob rg_rack
    uint8_t *rg_rack_null
    int64_t *rg_endpoint_end
    int64_t rg_endpoints       # endpoints written so far
    int64_t rg_endpoint_cap
    Blob rg_ep_name
    Blob rg_ep_host
    uint16_t *rg_ep_port
    int16_t *rg_ep_protocol
    int64_t *rg_feature_end
    int64_t rg_features
    int64_t rg_feature_cap
    Blob rg_ft_name
    int16_t *rg_ft_min
    int16_t *rg_ft_max
    int64_t *rg_log_dir_end
    int64_t rg_log_dirs
    int64_t rg_log_dir_cap
    uint64_t *rg_log_dir       # [cap, 2]: most, least significant half
    uint8_t *rg_extras
    # producer id blocks
    int32_t *pi_rec
    int32_t *pi_broker
    int64_t *pi_epoch
    int64_t *pi_next
    uint8_t *pi_extras
    # ACL entries and their removals (one table: removed tells which; a removal has only the id)
    int32_t *ac_rec
    uint64_t *ac_id
    uint8_t *ac_removed
    int8_t *ac_rtype
    int8_t *ac_pattern
    int8_t *ac_op
    int8_t *ac_perm
    Blob ac_rname
    Blob ac_principal
    Blob ac_host
    uint8_t *ac_extras
    # client quotas: one row per record, its entities in a flat list (cq_entity_end[row]: one past
    # its last), bounded by the kind's value bytes (an entity takes at least three)
    int32_t *cq_rec
    Blob cq_key
    int64_t *cq_value     # float64 bits
    uint8_t *cq_remove
    int64_t *cq_entity_end
    int64_t cq_entities   # entities written so far
    int64_t cq_entity_cap
    Blob cq_etype
    Blob cq_ename
    uint8_t *cq_ename_null
    uint8_t *cq_extras
    # SCRAM credentials and their removals (removed: only name and mechanism)
    int32_t *sc_rec
    uint8_t *sc_removed
    int8_t *sc_mechanism
    int32_t *sc_iterations
    Blob sc_name
    Blob sc_salt
    Blob sc_stored
    Blob sc_server
    uint8_t *sc_extras
    # delegation tokens and their removals (removed: token id only); renewers in a flat list
    # (dt_renewer_end[row]: one past its last), bounded by the kind's value bytes
    int32_t *dt_rec
    uint8_t *dt_removed
    int64_t *dt_issue
    int64_t *dt_max
    int64_t *dt_expiration
    Blob dt_owner
    Blob dt_requester
    Blob dt_token_id
    int64_t *dt_renewer_end
    int64_t dt_renewers
    int64_t dt_renewer_cap
    Blob dt_renewer
    uint8_t *dt_extras


cdef inline int kind_of(int64_t api_key, int64_t version) noexcept nogil:
    """The table of (apiKey, version); K_OTHER for every other kind and unknown version."""
    if api_key == 3:
        return K_PARTITION if version <= 2 else K_OTHER
    if api_key == 2:
        return K_TOPIC if version == 0 else K_OTHER
    if api_key == 5:
        return K_CHANGE if version <= 2 else K_OTHER
    if api_key == 4:
        return K_CONFIG if version == 0 else K_OTHER
    if api_key == 9:
        return K_REMOVE if version == 0 else K_OTHER
    if api_key == 7 or api_key == 8:
        return K_FENCE if version == 0 else K_OTHER
    if api_key == 12:
        return K_FEATURE if version == 0 else K_OTHER
    if api_key == 17:
        return K_BROKER_CHANGE if version <= 2 else K_OTHER
    if api_key == 0:
        return K_REGISTER if version <= 3 else K_OTHER
    if api_key == 15:
        return K_PRODUCER_IDS if version == 0 else K_OTHER
    if api_key == 18 or api_key == 19:
        return K_ACL if version == 0 else K_OTHER
    if api_key == 14:
        return K_QUOTA if version == 0 else K_OTHER
    if api_key == 11 or api_key == 22:
        return K_SCRAM if version == 0 else K_OTHER
    if api_key == 10 or api_key == 26:
        return K_TOKEN if version == 0 else K_OTHER
    return K_OTHER


# ---- pass 1: record framing, kinds, sizes ---------------------------------------------------------

cdef inline int64_t max64(int64_t a, int64_t b) noexcept nogil:
    return a if a > b else b


cdef void size_partition(Ctx *x, const uint8_t *p, int64_t pos, int64_t end) noexcept nogil:
    """Replica and ISR counts of a PartitionRecord body, for the list widths. Bounds-safe; a
    malformed body is left for pass 2 to report."""
    cdef uint64_t raw
    pos += 20  # PartitionId int32, TopicId uuid
    pos = kl_read_uvarint(p, pos, end, UVARINT32_MAX_BYTES, &raw)
    if pos < 0 or raw == 0 or <int64_t>(raw - 1) > (end - pos) // 4:
        return
    x.p_rep_w = max64(x.p_rep_w, <int64_t>raw - 1)
    pos += 4 * (<int64_t>raw - 1)
    pos = kl_read_uvarint(p, pos, end, UVARINT32_MAX_BYTES, &raw)
    if pos < 0 or raw == 0 or <int64_t>(raw - 1) > (end - pos) // 4:
        return
    x.p_isr_w = max64(x.p_isr_w, <int64_t>raw - 1)


cdef void size_change(Ctx *x, const uint8_t *p, int64_t pos, int64_t end, int64_t version) noexcept nogil:
    """List lengths of a PartitionChangeRecord body (tags 0, 2, 3, 4, 6, 7). Bounds-safe."""
    cdef uint64_t count, tag, size, raw, i
    cdef int64_t nxt
    pos += 20
    pos = kl_read_uvarint(p, pos, end, UVARINT32_MAX_BYTES, &count)
    if pos < 0:
        return
    for i in range(count):
        pos = kl_read_uvarint(p, pos, end, UVARINT32_MAX_BYTES, &tag)
        if pos < 0:
            return
        pos = kl_read_uvarint(p, pos, end, UVARINT32_MAX_BYTES, &size)
        if pos < 0 or size > <uint64_t>(end - pos):
            return
        nxt = pos + <int64_t>size
        # the list tags of this version: 0, 2, 3, 4, and 6, 7 from v2 (as body_change reads them)
        if tag == 0 or tag == 2 or tag == 3 or tag == 4 or ((tag == 6 or tag == 7) and version >= 2):
            if kl_read_uvarint(p, pos, nxt, UVARINT32_MAX_BYTES, &raw) >= 0 and raw > 0 \
                    and <int64_t>(raw - 1) <= size // 4:
                if tag == 0:
                    x.c_isr_w = max64(x.c_isr_w, <int64_t>raw - 1)
                elif tag == 2:
                    x.c_rep_w = max64(x.c_rep_w, <int64_t>raw - 1)
                else:
                    x.c_more_w[more_list(tag)] = max64(x.c_more_w[more_list(tag)], <int64_t>raw - 1)
                    x.c_more_on[more_list(tag)] = 1
        pos = nxt


cdef inline int read_frame(Cur *c, int64_t *api_key, int64_t *version) noexcept nogil:
    """frameVersion, apiKey, version of a metadata record value; the cursor lands on the body."""
    cdef uint64_t frame, key, ver
    cdef int64_t start = c.pos, key_at
    if rd_uvar(c, &frame, "frame") < 0:
        return -1
    if frame != FRAME_VERSION:
        c.err.a = <int64_t>frame
        return fail(c, start, "frame", "metadata record frame version {a}; only 1 is known")
    key_at = c.pos
    if rd_uvar(c, &key, "apiKey") < 0 or rd_uvar(c, &ver, "version") < 0:
        return -1
    if key > INT16_MAX or ver > INT16_MAX:
        return fail(c, key_at, "apiKey", "apiKey or version exceeds int16")
    api_key[0] = <int64_t>key
    version[0] = <int64_t>ver
    return 0


cdef inline int read_record(Cur *c, int64_t *offset_delta, int64_t *value_at, int64_t *value_n) noexcept nogil:
    """One record of a records section (layout in the module docstring); the cursor moves past it."""
    cdef int64_t start = c.pos, length, skip, headers, i, outer_end = c.end
    if rd_svar(c, &length, VARINT_MAX_BYTES, "record length") < 0:
        return -1
    if length < 0 or length > c.end - c.pos:
        c.err.a = length
        return fail(c, start, "record length", "record length {a} does not fit in the batch")
    c.end = c.pos + length  # the record's own bytes from here on
    if need(c, 1, "record attributes") < 0:
        return -1
    c.pos += 1
    if rd_svar(c, &skip, VARLONG_MAX_BYTES, "timestampDelta") < 0:
        return -1
    if rd_svar(c, offset_delta, VARINT_MAX_BYTES, "offsetDelta") < 0:
        return -1
    if rd_svar(c, &skip, VARINT_MAX_BYTES, "key length") < 0:
        return -1
    if skip < -1 or skip > c.end - c.pos:
        return fail(c, c.pos, "key", "record key length is invalid")
    if skip > 0:
        c.pos += skip
    if rd_svar(c, value_n, VARINT_MAX_BYTES, "value length") < 0:
        return -1
    if value_n[0] < 0:
        return fail(c, c.pos, "value", "metadata record has a null or negative-length value")
    if value_n[0] > c.end - c.pos:
        return fail(c, c.pos, "value", "record value runs past the end of the record")
    value_at[0] = c.pos
    c.pos += value_n[0]
    if rd_svar(c, &headers, VARINT_MAX_BYTES, "header count") < 0:
        return -1
    if headers < 0 or headers > c.end - c.pos:
        return fail(c, c.pos, "headers", "record header count is invalid")
    for i in range(headers):
        if rd_svar(c, &skip, VARINT_MAX_BYTES, "header key length") < 0:
            return -1
        if skip < 0 or skip > c.end - c.pos:
            return fail(c, c.pos, "headers", "record header key length is invalid")
        c.pos += skip
        if rd_svar(c, &skip, VARINT_MAX_BYTES, "header value length") < 0:
            return -1
        if skip < -1 or skip > c.end - c.pos:
            return fail(c, c.pos, "headers", "record header value length is invalid")
        if skip > 0:
            c.pos += skip
    if c.pos != c.end:
        c.err.a = c.end - c.pos
        return fail(c, c.pos, "record length", "{a} byte(s) left over inside the record")
    c.end = outer_end
    return 0


cdef int pass1(Ctx *x, const uint8_t *p, const int64_t *sec, int64_t nsec, Err *err) noexcept nogil:
    cdef int64_t s, base, expect, found, delta, value_at, value_n, api_key, version, i, body, rec_at
    cdef int kind
    cdef Cur c, v
    c.p = p
    c.err = err
    v.p = p
    v.err = err
    for s in range(nsec):
        if sec[s * S_COLS + S_CONTROL]:
            continue
        err.section = s
        c.pos = sec[s * S_COLS + S_START]
        c.end = sec[s * S_COLS + S_END]
        base = sec[s * S_COLS + S_BASE_OFFSET]
        expect = sec[s * S_COLS + S_RECORD_COUNT]
        found = 0
        while c.pos < c.end:
            err.offset = -1
            err.api_key = -1
            if found == expect or x.n >= x.cap:
                err.a = expect
                return fail(&c, c.pos, "", "more records than the batch's recordCount {a}")
            rec_at = c.pos
            if read_record(&c, &delta, &value_at, &value_n) < 0:
                return -1
            if (delta > 0 and base > INT64_MAX - delta) or (delta < 0 and base < INT64_MIN - delta):
                return fail(&c, rec_at, "offsetDelta", "record offset overflows int64")
            i = x.n
            err.offset = base + delta
            v.pos = value_at
            v.end = value_at + value_n
            if read_frame(&v, &api_key, &version) < 0:
                return -1
            body = v.pos
            x.offsets[i] = base + delta
            x.api_keys[i] = <int16_t>api_key
            x.versions[i] = <int16_t>version
            x.value_pos[i] = value_at
            x.value_len[i] = <int32_t>value_n
            kind = kind_of(api_key, version)
            x.kinds[i] = <uint8_t>kind
            x.kind_rows[i] = <int32_t>x.counts[kind]
            x.counts[kind] += 1
            x.blob_bytes[kind] += value_n
            if kind == K_PARTITION:
                size_partition(x, p, body, v.end)
            elif kind == K_CHANGE:
                size_change(x, p, body, v.end, version)
            x.n += 1
            found += 1
        if found != expect:
            err.offset = -1
            err.api_key = -1
            err.a = expect
            err.b = found
            return fail(&c, sec[s * S_COLS + S_START], "",
                        "the batch's recordCount is {a} but its records section holds {b}")
    return 0


# ---- pass 2: one decoder per hot record type -------------------------------------------------------

cdef int body_topic(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # TopicRecord v0: Name string, TopicId uuid, tags (none known)
    cdef int64_t n, at
    cdef uint64_t count, tag, i
    cdef Cur sub
    cdef uint8_t extras = 0
    if rd_string(c, &n, &at, False, "Name") < 0 or blob_put(c, &x.t_name, row, at, n) < 0:
        return -1
    if rd_uuid(c, x.t_id + 2 * row, "TopicId") < 0 or rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        if rd_tag(c, &sub, &tag) < 0:
            return -1
        extras = 1
    x.t_extras[row] = extras
    return 0


cdef int body_partition(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # PartitionRecord v0-2: PartitionId int32, TopicId uuid, Replicas []int32, Isr []int32,
    # RemovingReplicas []int32, AddingReplicas []int32, Leader int32, LeaderEpoch int32,
    # PartitionEpoch int32, Directories []uuid (v1+); tags: 0 LeaderRecoveryState int8,
    # 1 EligibleLeaderReplicas []int32? (v2+), 2 LastKnownElr []int32? (v2+)
    cdef int64_t n, tag_at, replica_count
    cdef uint64_t count, tag, i
    cdef Cur sub
    cdef uint8_t extras = 0
    if rd_i32(c, x.p_pid + row, "PartitionId") < 0 or rd_uuid(c, x.p_tid + 2 * row, "TopicId") < 0:
        return -1
    if rd_array(c, &n, 4, False, "Replicas") < 0:
        return -1
    replica_count = n
    if n > x.p_rep_w:
        if n <= LIST_COLUMN_MAX_WIDTH:
            return fail(c, c.pos, "Replicas", "list wider than sized (the buffer changed while decoding)")
        extras = 1
    put_list(x.p_rep + row * x.p_rep_w, x.p_rep_w, c.p + c.pos - 4 * n, n)
    x.p_rep_n[row] = clip16(n)
    if rd_array(c, &n, 4, False, "Isr") < 0:
        return -1
    if n > x.p_isr_w:
        if n <= LIST_COLUMN_MAX_WIDTH:
            return fail(c, c.pos, "Isr", "list wider than sized (the buffer changed while decoding)")
        extras = 1
    put_list(x.p_isr + row * x.p_isr_w, x.p_isr_w, c.p + c.pos - 4 * n, n)
    x.p_isr_n[row] = clip16(n)
    if rd_array(c, &n, 4, False, "RemovingReplicas") < 0:
        return -1
    if n > 0:
        extras = 1
    if rd_array(c, &n, 4, False, "AddingReplicas") < 0:
        return -1
    if n > 0:
        extras = 1
    if rd_i32(c, x.p_leader + row, "Leader") < 0 or rd_i32(c, x.p_lepoch + row, "LeaderEpoch") < 0 \
            or rd_i32(c, x.p_pepoch + row, "PartitionEpoch") < 0:
        return -1
    x.p_dir_n[row] = 0
    if version >= 1:
        if rd_array(c, &n, 16, False, "Directories") < 0:
            return -1
        if any_nonzero(c.p + c.pos - 16 * n, 16 * n):  # DirectoryId.MIGRATING is the zero UUID
            if n != replica_count or n > x.p_rep_w:
                extras = 1  # the generic path refuses the record (or holds the wide list)
            else:
                memcpy(x.p_dir + row * x.p_rep_w * 16, c.p + c.pos - 16 * n, 16 * n)
                x.p_dir_n[row] = clip16(n)
    x.p_lrs[row] = 0
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        tag_at = c.pos
        if rd_tag(c, &sub, &tag) < 0:
            return -1
        if tag == 0:
            if rd_i8(&sub, x.p_lrs + row, "LeaderRecoveryState") < 0 or tag_done(&sub, tag_at, tag) < 0:
                return -1
        elif (tag == 1 or tag == 2) and version >= 2:
            if rd_array(&sub, &n, 4, True, "EligibleLeaderReplicas" if tag == 1 else "LastKnownElr") < 0 \
                    or tag_done(&sub, tag_at, tag) < 0:
                return -1
            if n >= 0:
                extras = 1
        else:
            extras = 1
    x.p_extras[row] = extras
    return 0


cdef int change_list(Cur *sub, int32_t *dst, int16_t *count_out, int64_t width, const char *field,
                     uint8_t *extras) noexcept nogil:
    """A nullable int32 list of a PartitionChangeRecord tag into a -1 padded row (count -1: null)."""
    cdef int64_t n
    if rd_array(sub, &n, 4, True, field) < 0:
        return -1
    if n < 0:
        put_list(dst, width, sub.p, 0)
        count_out[0] = -1
        return 0
    if n > width:
        if n <= LIST_COLUMN_MAX_WIDTH:
            return fail(sub, sub.pos, field, "list wider than sized (the buffer changed while decoding)")
        extras[0] = 1
    put_list(dst, width, sub.p + sub.pos - 4 * n, n)
    count_out[0] = clip16(n)
    return 0


cdef int body_change(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # PartitionChangeRecord v0-2: PartitionId int32, TopicId uuid; tags: 0 Isr []int32?,
    # 1 Leader int32 (-2 = unchanged), 2 Replicas []int32?, 3 RemovingReplicas []int32?,
    # 4 AddingReplicas []int32?, 5 LeaderRecoveryState int8 (-1 = unchanged), 8 Directories []uuid?
    # (v1+), 6 EligibleLeaderReplicas []int32? (v2+), 7 LastKnownElr []int32? (v2+). Every list but
    # Directories goes in a column (a null one: count -1); a record with Directories has extras.
    cdef int64_t n, tag_at, j
    cdef uint64_t count, tag, i
    cdef Cur sub
    cdef uint8_t extras = 0
    cdef int32_t *isr = x.c_isr + row * x.c_isr_w
    cdef int32_t *rep = x.c_rep + row * x.c_rep_w
    if rd_i32(c, x.c_pid + row, "PartitionId") < 0 or rd_uuid(c, x.c_tid + 2 * row, "TopicId") < 0:
        return -1
    x.c_leader[row] = -2
    x.c_lrs[row] = -1
    put_list(isr, x.c_isr_w, c.p, 0)
    put_list(rep, x.c_rep_w, c.p, 0)
    x.c_isr_n[row] = -1
    x.c_rep_n[row] = -1
    for j in range(N_MORE_LISTS):
        if x.c_more_on[j]:  # else the count column is a shared -1 (no record carries the list)
            put_list(x.c_more[j] + row * x.c_more_w[j], x.c_more_w[j], c.p, 0)
            x.c_more_n[j][row] = -1
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        tag_at = c.pos
        if rd_tag(c, &sub, &tag) < 0:
            return -1
        if tag == 0:
            if change_list(&sub, isr, x.c_isr_n + row, x.c_isr_w, "Isr", &extras) < 0:
                return -1
        elif tag == 1:
            if rd_i32(&sub, x.c_leader + row, "Leader") < 0:
                return -1
        elif tag == 2:
            if change_list(&sub, rep, x.c_rep_n + row, x.c_rep_w, "Replicas", &extras) < 0:
                return -1
        elif tag == 3 or tag == 4 or ((tag == 6 or tag == 7) and version >= 2):
            j = more_list(tag)
            if x.c_more_on[j]:
                if change_list(&sub, x.c_more[j] + row * x.c_more_w[j], x.c_more_n[j] + row, x.c_more_w[j],
                               change_field(tag), &extras) < 0:
                    return -1
            else:  # pass 1 saw no such list: a null one (anything else means the buffer changed)
                if rd_array(&sub, &n, 4, True, change_field(tag)) < 0:
                    return -1
                if n >= 0:
                    return fail(&sub, sub.pos, change_field(tag), "list not sized (the buffer changed while decoding)")
        elif tag == 8 and version >= 1:
            if rd_array(&sub, &n, 16, True, "Directories") < 0:
                return -1
            if n >= 0:
                extras = 1
        elif tag == 5:
            if rd_i8(&sub, x.c_lrs + row, "LeaderRecoveryState") < 0:
                return -1
        else:
            extras = 1
            continue
        if tag_done(&sub, tag_at, tag) < 0:
            return -1
    x.c_extras[row] = extras
    return 0


# The change lists past ISR and replicas, by their PartitionChangeRecord tag, in column order:
# RemovingReplicas 3, AddingReplicas 4, EligibleLeaderReplicas 6, LastKnownElr 7.
MORE_LIST_COLUMNS = ("removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")


cdef inline int64_t more_list(uint64_t tag) noexcept nogil:
    return 0 if tag == 3 else 1 if tag == 4 else 2 if tag == 6 else 3


cdef inline const char *change_field(uint64_t tag) noexcept nogil:
    if tag == 3:
        return "RemovingReplicas"
    if tag == 4:
        return "AddingReplicas"
    if tag == 6:
        return "EligibleLeaderReplicas"
    if tag == 7:
        return "LastKnownElr"
    return "Directories"


cdef int plain_tags(Cur *c, uint8_t *extras) noexcept nogil:
    """The tag section of a record with no tagged fields in its schema: any tag sets extras."""
    cdef uint64_t count, tag, i
    cdef Cur sub
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        if rd_tag(c, &sub, &tag) < 0:
            return -1
    extras[0] = 1 if count > 0 else 0
    return 0


cdef int body_remove(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # RemoveTopicRecord v0: TopicId uuid
    if rd_uuid(c, x.r_tid + 2 * row, "TopicId") < 0:
        return -1
    return plain_tags(c, x.r_extras + row)


cdef int body_config(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # ConfigRecord v0: ResourceType int8, ResourceName string, Name string, Value string?
    cdef int64_t n, at
    if rd_i8(c, x.g_rtype + row, "ResourceType") < 0:
        return -1
    if rd_string(c, &n, &at, False, "ResourceName") < 0 or blob_put(c, &x.g_rname, row, at, n) < 0:
        return -1
    if rd_string(c, &n, &at, False, "Name") < 0 or blob_put(c, &x.g_name, row, at, n) < 0:
        return -1
    if rd_string(c, &n, &at, True, "Value") < 0 or blob_put(c, &x.g_value, row, at, n) < 0:
        return -1
    x.g_value_null[row] = 1 if n < 0 else 0
    return plain_tags(c, x.g_extras + row)


cdef int body_feature(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # FeatureLevelRecord v0: Name string, FeatureLevel int16
    cdef int64_t n, at
    if rd_string(c, &n, &at, False, "Name") < 0 or blob_put(c, &x.f_name, row, at, n) < 0:
        return -1
    if rd_i16(c, x.f_level + row, "FeatureLevel") < 0:
        return -1
    return plain_tags(c, x.f_extras + row)


cdef int body_fence(Ctx *x, Cur *c, int64_t row, bint fenced) noexcept nogil:
    # FenceBrokerRecord / UnfenceBrokerRecord v0: Id int32, Epoch int64
    if rd_i32(c, x.e_broker + row, "Id") < 0 or rd_i64(c, x.e_epoch + row, "Epoch") < 0:
        return -1
    x.e_fenced[row] = fenced
    return plain_tags(c, x.e_extras + row)


cdef int body_producer_ids(Ctx *x, Cur *c, int64_t row) noexcept nogil:
    # ProducerIdsRecord v0: BrokerId int32, BrokerEpoch int64, NextProducerId int64
    if rd_i32(c, x.pi_broker + row, "BrokerId") < 0 or rd_i64(c, x.pi_epoch + row, "BrokerEpoch") < 0:
        return -1
    if rd_i64(c, x.pi_next + row, "NextProducerId") < 0:
        return -1
    return plain_tags(c, x.pi_extras + row)


cdef int body_acl(Ctx *x, Cur *c, int64_t row, bint removed) noexcept nogil:
    # AccessControlEntryRecord v0: Id uuid, ResourceType int8, ResourceName string, PatternType int8,
    # Principal string, Host string, Operation int8, PermissionType int8.
    # RemoveAccessControlEntryRecord v0: Id uuid (its other columns: 0 and empty strings)
    cdef int64_t n, at
    x.ac_removed[row] = removed
    if rd_uuid(c, x.ac_id + 2 * row, "Id") < 0:
        return -1
    if removed:
        x.ac_rtype[row] = x.ac_pattern[row] = x.ac_op[row] = x.ac_perm[row] = 0
        if blob_put(c, &x.ac_rname, row, 0, 0) < 0 or blob_put(c, &x.ac_principal, row, 0, 0) < 0:
            return -1
        if blob_put(c, &x.ac_host, row, 0, 0) < 0:
            return -1
        return plain_tags(c, x.ac_extras + row)
    if rd_i8(c, x.ac_rtype + row, "ResourceType") < 0:
        return -1
    if rd_string(c, &n, &at, False, "ResourceName") < 0 or blob_put(c, &x.ac_rname, row, at, n) < 0:
        return -1
    if rd_i8(c, x.ac_pattern + row, "PatternType") < 0:
        return -1
    if rd_string(c, &n, &at, False, "Principal") < 0 or blob_put(c, &x.ac_principal, row, at, n) < 0:
        return -1
    if rd_string(c, &n, &at, False, "Host") < 0 or blob_put(c, &x.ac_host, row, at, n) < 0:
        return -1
    if rd_i8(c, x.ac_op + row, "Operation") < 0 or rd_i8(c, x.ac_perm + row, "PermissionType") < 0:
        return -1
    return plain_tags(c, x.ac_extras + row)


cdef int body_quota(Ctx *x, Cur *c, int64_t row) noexcept nogil:
    # ClientQuotaRecord v0: Entity [](EntityType string, EntityName string?), Key string,
    # Value float64, Remove bool
    cdef int64_t n, at, count, k, e
    cdef int8_t b
    cdef uint8_t entity_tags, extras = 0
    if rd_array(c, &count, 0, False, "Entity") < 0:
        return -1
    for k in range(count):
        e = x.cq_entities
        if e >= x.cq_entity_cap:  # only when the bytes changed between the two passes
            return fail(c, c.pos, "Entity", "entity overflow (the buffer changed while decoding)")
        if rd_string(c, &n, &at, False, "EntityType") < 0 or blob_put(c, &x.cq_etype, e, at, n) < 0:
            return -1
        if rd_string(c, &n, &at, True, "EntityName") < 0 or blob_put(c, &x.cq_ename, e, at, n) < 0:
            return -1
        x.cq_ename_null[e] = 1 if n < 0 else 0
        if plain_tags(c, &entity_tags) < 0:
            return -1
        extras |= entity_tags
        x.cq_entities += 1
    x.cq_entity_end[row] = x.cq_entities
    if rd_string(c, &n, &at, False, "Key") < 0 or blob_put(c, &x.cq_key, row, at, n) < 0:
        return -1
    if rd_i64(c, x.cq_value + row, "Value") < 0 or rd_i8(c, &b, "Remove") < 0:
        return -1
    x.cq_remove[row] = b != 0
    if plain_tags(c, x.cq_extras + row) < 0:
        return -1
    x.cq_extras[row] |= extras
    return 0


cdef int body_scram(Ctx *x, Cur *c, int64_t row, bint removed) noexcept nogil:
    # UserScramCredentialRecord v0: Name string, Mechanism int8, Salt bytes, StoredKey bytes,
    # ServerKey bytes, Iterations int32. RemoveUserScramCredentialRecord v0: Name, Mechanism only
    cdef int64_t n, at
    x.sc_removed[row] = removed
    if rd_string(c, &n, &at, False, "Name") < 0 or blob_put(c, &x.sc_name, row, at, n) < 0:
        return -1
    if rd_i8(c, x.sc_mechanism + row, "Mechanism") < 0:
        return -1
    if removed:
        x.sc_iterations[row] = 0
        if blob_put(c, &x.sc_salt, row, 0, 0) < 0 or blob_put(c, &x.sc_stored, row, 0, 0) < 0:
            return -1
        if blob_put(c, &x.sc_server, row, 0, 0) < 0:
            return -1
        return plain_tags(c, x.sc_extras + row)
    if rd_bytes(c, &n, &at, "Salt") < 0 or blob_put(c, &x.sc_salt, row, at, n) < 0:
        return -1
    if rd_bytes(c, &n, &at, "StoredKey") < 0 or blob_put(c, &x.sc_stored, row, at, n) < 0:
        return -1
    if rd_bytes(c, &n, &at, "ServerKey") < 0 or blob_put(c, &x.sc_server, row, at, n) < 0:
        return -1
    if rd_i32(c, x.sc_iterations + row, "Iterations") < 0:
        return -1
    return plain_tags(c, x.sc_extras + row)


cdef int body_token(Ctx *x, Cur *c, int64_t row, bint removed) noexcept nogil:
    # DelegationTokenRecord v0: Owner string, Requester string, Renewers []string, IssueTimestamp,
    # MaxTimestamp, ExpirationTimestamp int64, TokenId string.
    # RemoveDelegationTokenRecord v0: TokenId string (its other columns: 0 and empty)
    cdef int64_t n, at, count, k
    x.dt_removed[row] = removed
    if removed:
        x.dt_issue[row] = x.dt_max[row] = x.dt_expiration[row] = 0
        if blob_put(c, &x.dt_owner, row, 0, 0) < 0 or blob_put(c, &x.dt_requester, row, 0, 0) < 0:
            return -1
        x.dt_renewer_end[row] = x.dt_renewers
    else:
        if rd_string(c, &n, &at, False, "Owner") < 0 or blob_put(c, &x.dt_owner, row, at, n) < 0:
            return -1
        if rd_string(c, &n, &at, False, "Requester") < 0 or blob_put(c, &x.dt_requester, row, at, n) < 0:
            return -1
        if rd_array(c, &count, 0, False, "Renewers") < 0:
            return -1
        for k in range(count):
            if x.dt_renewers >= x.dt_renewer_cap:  # only when the bytes changed between the two passes
                return fail(c, c.pos, "Renewers", "renewer overflow (the buffer changed while decoding)")
            if rd_string(c, &n, &at, False, "Renewers") < 0 or blob_put(c, &x.dt_renewer, x.dt_renewers, at, n) < 0:
                return -1
            x.dt_renewers += 1
        x.dt_renewer_end[row] = x.dt_renewers
        if rd_i64(c, x.dt_issue + row, "IssueTimestamp") < 0 or rd_i64(c, x.dt_max + row, "MaxTimestamp") < 0:
            return -1
        if rd_i64(c, x.dt_expiration + row, "ExpirationTimestamp") < 0:
            return -1
    if rd_string(c, &n, &at, False, "TokenId") < 0 or blob_put(c, &x.dt_token_id, row, at, n) < 0:
        return -1
    return plain_tags(c, x.dt_extras + row)


cdef int body_broker_change(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # BrokerRegistrationChangeRecord v0-2: BrokerId int32, BrokerEpoch int64; tags: 0 Fenced int8
    # (1 fence, 0 no change, -1 unfence), 1 InControlledShutdown int8 (v1+; 1 yes, 0 no change),
    # 2 LogDirs []uuid (v2+). Columns: fenced -1 none / 0 unfence / 1 fence; in_controlled_shutdown
    # -1 none / 1; a value outside those sets extras.
    cdef int64_t n, tag_at
    cdef uint64_t count, tag, i
    cdef int8_t b
    cdef Cur sub
    cdef uint8_t extras = 0
    if rd_i32(c, x.bc_broker + row, "BrokerId") < 0 or rd_i64(c, x.bc_epoch + row, "BrokerEpoch") < 0:
        return -1
    x.bc_fenced[row] = -1
    x.bc_ics[row] = -1
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        tag_at = c.pos
        if rd_tag(c, &sub, &tag) < 0:
            return -1
        if tag == 0:
            if rd_i8(&sub, &b, "Fenced") < 0:
                return -1
            if b == 1:
                x.bc_fenced[row] = 1
            elif b == -1:
                x.bc_fenced[row] = 0
            elif b == 0:
                x.bc_fenced[row] = -1
            else:
                x.bc_fenced[row] = -1
                extras = 1
        elif tag == 1 and version >= 1:
            if rd_i8(&sub, &b, "InControlledShutdown") < 0:
                return -1
            x.bc_ics[row] = 1 if b == 1 else -1
            if b != 0 and b != 1:
                extras = 1
        elif tag == 2 and version >= 2:
            if rd_array(&sub, &n, 16, False, "LogDirs") < 0:
                return -1
            extras = 1
        else:
            extras = 1
            continue
        if tag_done(&sub, tag_at, tag) < 0:
            return -1
    x.bc_extras[row] = extras
    return 0


cdef int register_endpoints(Ctx *x, Cur *c, uint8_t *extras) noexcept nogil:
    # RegisterBrokerRecord EndPoints []BrokerEndpoint: Name string, Host string, Port uint16,
    # SecurityProtocol int16, tags (none known: any sets extras)
    cdef int64_t n, at, count, k, e
    cdef uint8_t tags
    if rd_array(c, &count, 0, False, "EndPoints") < 0:
        return -1
    for k in range(count):
        e = x.rg_endpoints
        if e >= x.rg_endpoint_cap:  # only when the bytes changed between the two passes
            return fail(c, c.pos, "EndPoints", "endpoint overflow (the buffer changed while decoding)")
        if rd_string(c, &n, &at, False, "EndPoints.Name") < 0 or blob_put(c, &x.rg_ep_name, e, at, n) < 0:
            return -1
        if rd_string(c, &n, &at, False, "EndPoints.Host") < 0 or blob_put(c, &x.rg_ep_host, e, at, n) < 0:
            return -1
        if rd_u16(c, x.rg_ep_port + e, "EndPoints.Port") < 0:
            return -1
        if rd_i16(c, x.rg_ep_protocol + e, "EndPoints.SecurityProtocol") < 0 or plain_tags(c, &tags) < 0:
            return -1
        extras[0] |= tags
        x.rg_endpoints += 1
    return 0


cdef int register_features(Ctx *x, Cur *c, uint8_t *extras) noexcept nogil:
    # RegisterBrokerRecord Features []BrokerFeature: Name string, MinSupportedVersion int16,
    # MaxSupportedVersion int16, tags (none known)
    cdef int64_t n, at, count, k, f
    cdef uint8_t tags
    if rd_array(c, &count, 0, False, "Features") < 0:
        return -1
    for k in range(count):
        f = x.rg_features
        if f >= x.rg_feature_cap:  # only when the bytes changed between the two passes
            return fail(c, c.pos, "Features", "feature overflow (the buffer changed while decoding)")
        if rd_string(c, &n, &at, False, "Features.Name") < 0 or blob_put(c, &x.rg_ft_name, f, at, n) < 0:
            return -1
        if rd_i16(c, x.rg_ft_min + f, "Features.MinSupportedVersion") < 0:
            return -1
        if rd_i16(c, x.rg_ft_max + f, "Features.MaxSupportedVersion") < 0 or plain_tags(c, &tags) < 0:
            return -1
        extras[0] |= tags
        x.rg_features += 1
    return 0


cdef int register_log_dirs(Ctx *x, Cur *sub, int64_t first, int64_t tag_at, uint64_t tag) noexcept nogil:
    """Tag 0 LogDirs []uuid (v3+) as the row's log dirs from ``first`` on: a tag repeated replaces
    them (the generic codec keeps the last occurrence too)."""
    cdef int64_t n, k
    cdef const uint8_t *src
    if rd_array(sub, &n, 16, False, "LogDirs") < 0 or tag_done(sub, tag_at, tag) < 0:
        return -1
    if first + n > x.rg_log_dir_cap:  # only when the bytes changed between the two passes
        return fail(sub, tag_at, "LogDirs", "log dir overflow (the buffer changed while decoding)")
    src = sub.p + sub.pos - 16 * n
    for k in range(n):
        x.rg_log_dir[2 * (first + k)] = kl_load_be64(src + 16 * k)
        x.rg_log_dir[2 * (first + k) + 1] = kl_load_be64(src + 16 * k + 8)
    x.rg_log_dirs = first + n
    return 0


cdef int body_register(Ctx *x, Cur *c, int64_t row, int64_t version) noexcept nogil:
    # RegisterBrokerRecord v0-3: BrokerId int32, IsMigratingZkBroker bool (v2+), IncarnationId uuid,
    # BrokerEpoch int64, EndPoints []BrokerEndpoint, Features []BrokerFeature, Rack string?,
    # Fenced bool, InControlledShutdown bool (v1+); tags: 0 LogDirs []uuid (v3+). A bool is one
    # byte, true when not 0 (Kafka's readByte() != 0). Unknown tags, here or in an endpoint or a
    # feature, set extras.
    cdef int64_t n, at, tag_at, first_dir = x.rg_log_dirs
    cdef uint64_t count, tag, i
    cdef int8_t b
    cdef Cur sub
    cdef uint8_t extras = 0
    if rd_i32(c, x.rg_broker + row, "BrokerId") < 0:
        return -1
    x.rg_zk[row] = 0
    if version >= 2:
        if rd_i8(c, &b, "IsMigratingZkBroker") < 0:
            return -1
        x.rg_zk[row] = b != 0
    if rd_uuid(c, x.rg_inc + 2 * row, "IncarnationId") < 0 or rd_i64(c, x.rg_epoch + row, "BrokerEpoch") < 0:
        return -1
    if register_endpoints(x, c, &extras) < 0:
        return -1
    x.rg_endpoint_end[row] = x.rg_endpoints
    if register_features(x, c, &extras) < 0:
        return -1
    x.rg_feature_end[row] = x.rg_features
    if rd_string(c, &n, &at, True, "Rack") < 0 or blob_put(c, &x.rg_rack, row, at, n) < 0:
        return -1
    x.rg_rack_null[row] = 1 if n < 0 else 0
    if rd_i8(c, &b, "Fenced") < 0:
        return -1
    x.rg_fenced[row] = b != 0
    x.rg_ics[row] = 0
    if version >= 1:
        if rd_i8(c, &b, "InControlledShutdown") < 0:
            return -1
        x.rg_ics[row] = b != 0
    if rd_tag_count(c, &count) < 0:
        return -1
    for i in range(count):
        tag_at = c.pos
        if rd_tag(c, &sub, &tag) < 0:
            return -1
        if tag == 0 and version >= 3:
            if register_log_dirs(x, &sub, first_dir, tag_at, tag) < 0:
                return -1
        else:
            extras = 1
    x.rg_log_dir_end[row] = x.rg_log_dirs
    x.rg_extras[row] = extras
    return 0


cdef int pass2(Ctx *x, const uint8_t *p, Err *err) noexcept nogil:
    cdef int64_t i, row, api_key, version
    cdef int kind, rc
    cdef Cur c
    c.p = p
    c.err = err
    err.section = -1
    for i in range(x.n):
        kind = x.kinds[i]
        row = x.kind_rows[i]
        if kind == K_OTHER:
            x.o_rec[row] = <int32_t>i
            continue
        err.offset = x.offsets[i]
        err.api_key = x.api_keys[i]
        err.version = x.versions[i]
        c.pos = x.value_pos[i]
        c.end = c.pos + x.value_len[i]
        if read_frame(&c, &api_key, &version) < 0:
            return -1
        if kind == K_PARTITION:
            x.p_rec[row] = <int32_t>i
            rc = body_partition(x, &c, row, version)
        elif kind == K_TOPIC:
            x.t_rec[row] = <int32_t>i
            rc = body_topic(x, &c, row, version)
        elif kind == K_CHANGE:
            x.c_rec[row] = <int32_t>i
            rc = body_change(x, &c, row, version)
        elif kind == K_REMOVE:
            x.r_rec[row] = <int32_t>i
            rc = body_remove(x, &c, row, version)
        elif kind == K_CONFIG:
            x.g_rec[row] = <int32_t>i
            rc = body_config(x, &c, row, version)
        elif kind == K_FEATURE:
            x.f_rec[row] = <int32_t>i
            rc = body_feature(x, &c, row, version)
        elif kind == K_FENCE:
            x.e_rec[row] = <int32_t>i
            rc = body_fence(x, &c, row, api_key == 7)
        elif kind == K_BROKER_CHANGE:
            x.bc_rec[row] = <int32_t>i
            rc = body_broker_change(x, &c, row, version)
        elif kind == K_PRODUCER_IDS:
            x.pi_rec[row] = <int32_t>i
            rc = body_producer_ids(x, &c, row)
        elif kind == K_ACL:
            x.ac_rec[row] = <int32_t>i
            rc = body_acl(x, &c, row, api_key == 19)
        elif kind == K_QUOTA:
            x.cq_rec[row] = <int32_t>i
            rc = body_quota(x, &c, row)
        elif kind == K_SCRAM:
            x.sc_rec[row] = <int32_t>i
            rc = body_scram(x, &c, row, api_key == 22)
        elif kind == K_TOKEN:
            x.dt_rec[row] = <int32_t>i
            rc = body_token(x, &c, row, api_key == 26)
        else:
            x.rg_rec[row] = <int32_t>i
            rc = body_register(x, &c, row, version)
        if rc < 0:
            return -1
        if c.pos != c.end:
            err.a = c.end - c.pos
            return fail(&c, c.pos, "", "{a} byte(s) of garbage after the record body")
    return 0


# ---- Python level: allocation, pointers, errors ----------------------------------------------------

cdef const uint8_t *bytes_ptr(const uint8_t[::1] view):
    return &view[0] if view.shape[0] else NULL


# Each array's data pointer. An empty array (most tables of a small region) gives NULL without
# acquiring a typed memoryview (about a microsecond each, dozens per decode_sections call).
cdef int32_t *p_i32(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef int32_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef int16_t *p_i16(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef int16_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef int64_t *p_i64(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef int64_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef uint64_t *p_u64(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef uint64_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef uint16_t *p_u16(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef uint16_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef int8_t *p_i8(arr) except? NULL:
    if not arr.size:
        return NULL
    cdef int8_t[::1] v = arr.reshape(-1)
    return &v[0] if v.shape[0] else NULL


cdef uint8_t *p_u8(arr) except? NULL:
    """Also for numpy bool arrays (viewed as uint8: same bytes, 0 or 1)."""
    if not arr.size:
        return NULL
    cdef uint8_t[::1] v = arr.reshape(-1).view(np.uint8)
    return &v[0] if v.shape[0] else NULL


cdef dict new_blob(Blob *b, int64_t rows, int64_t cap, str prefix):
    offsets = np.zeros(rows + 1, dtype=np.int64)
    buf = np.empty(max(cap, 1), dtype=np.uint8)
    b.offsets = p_i64(offsets)
    b.buf = p_u8(buf)
    b.cap = cap
    b.used = 0
    return {prefix + "_offsets": offsets, "_" + prefix + "_buf": buf}


cdef int raise_error(Err *err, object path) except -1:
    exc = CorruptRecordError(message_of(err), position=err.pos, path=path)
    exc.section = err.section  # lets the caller re-state a position of a gathered buffer
    raise exc


cdef str header_problem(const uint8_t *p, int64_t avail, int code, int64_t size):
    """The text walk_batches raises for a header problem (metadata_columns_pure words it the same)."""
    if code == KL_BATCH_TRUNCATED_HEADER:
        return f"truncated batch header: {avail} of {KL_HEADER_SIZE} bytes"
    if code == KL_BATCH_BAD_MAGIC:
        return f"unsupported batch magic {<int8_t>p[KL_MAGIC_AT]}"
    if code == KL_BATCH_SHORT_LENGTH:
        return f"batch length {<int32_t>kl_load_be32(p + KL_LENGTH_AT)} is smaller than a header"
    if code == KL_BATCH_NEGATIVE:
        return "negative lastOffsetDelta or recordCount"
    if code == KL_BATCH_OFFSET_OVERFLOW:
        return "batch offsets overflow int64"
    return f"truncated batch: {avail} of {size} bytes"


def walk_batches(buf, Py_ssize_t start=0, end=None, bint verify_crc=True, path=None):
    """Header of every batch in buf[start:end] as int64[b, 8]: position, size, baseOffset,
    lastOffsetDelta, partitionLeaderEpoch, maxTimestamp, attributes, recordCount.

    Checks each header with the one header check (batch_header.h: what layout.parse_header checks,
    offsets that fit int64, the batch whole inside the region) and (verify_crc) its CRC-32C.
    Raises CorruptRecordError at the first bad batch.
    """
    cdef const uint8_t[::1] view = buf
    cdef const uint8_t *p = bytes_ptr(view)
    cdef int64_t stop = view.shape[0] if end is None else end
    cdef int64_t pos, size, nb = 0, k, bad = -1
    cdef int code
    cdef uint32_t stored
    if not 0 <= start <= stop <= view.shape[0]:
        raise ValueError(f"region [{start}, {stop}) is outside the buffer of {view.shape[0]} bytes")
    pos = start
    while pos < stop:
        code = kl_check_batch_header(p + pos, stop - pos, True, &size)
        if code != KL_BATCH_OK:
            raise CorruptRecordError(header_problem(p + pos, stop - pos, code, size), position=pos, path=path)
        pos += size
        nb += 1
    table = np.empty((nb, B_COLS), dtype=np.int64)
    cdef int64_t[:, ::1] t = table
    pos = start
    for k in range(nb):
        t[k, B_POS] = pos
        t[k, B_SIZE] = KL_LOG_OVERHEAD + <int32_t>kl_load_be32(p + pos + KL_LENGTH_AT)
        t[k, B_BASE_OFFSET] = <int64_t>kl_load_be64(p + pos + KL_BASE_OFFSET_AT)
        t[k, B_LAST_OFFSET_DELTA] = <int32_t>kl_load_be32(p + pos + KL_LAST_OFFSET_DELTA_AT)
        t[k, B_LEADER_EPOCH] = <int32_t>kl_load_be32(p + pos + KL_LEADER_EPOCH_AT)
        t[k, B_MAX_TIMESTAMP] = <int64_t>kl_load_be64(p + pos + KL_MAX_TIMESTAMP_AT)
        t[k, B_ATTRIBUTES] = <int16_t>kl_load_be16(p + pos + KL_ATTRIBUTES_AT)
        t[k, B_RECORD_COUNT] = <int32_t>kl_load_be32(p + pos + KL_RECORD_COUNT_AT)
        pos += t[k, B_SIZE]
    if verify_crc:
        with nogil:
            for k in range(nb):
                pos = t[k, B_POS]
                stored = kl_load_be32(p + pos + KL_CRC_AT)
                if kl_crc32c(0, p + pos + KL_ATTRIBUTES_AT, t[k, B_SIZE] - KL_ATTRIBUTES_AT) != stored:
                    bad = k
                    break
        if bad >= 0:
            pos = t[bad, B_POS]
            computed = kl_crc32c(0, p + pos + KL_ATTRIBUTES_AT, t[bad, B_SIZE] - KL_ATTRIBUTES_AT)
            raise CorruptRecordError(f"batch CRC mismatch: stored {kl_load_be32(p + pos + KL_CRC_AT):#010x}, "
                                     f"computed {computed:#010x}", position=pos, path=path)
    return table


def sections_of(batches):
    """(sections, first_coded) for walk_batches' table: the records section of every batch as
    int64[b, 5] (start, end, baseOffset, recordCount, control flag; positions in the batches'
    buffer), and the index of the first batch whose codec bits are not 0 (control batches
    included), -1 when there is none: then ``sections`` can be decoded from that buffer as it is."""
    cdef const int64_t[:, ::1] t = np.ascontiguousarray(batches, dtype=np.int64).reshape(-1, B_COLS)
    cdef int64_t nb = t.shape[0], k, first_coded = -1, attributes
    out = np.empty((nb, S_COLS), dtype=np.int64)
    cdef int64_t[:, ::1] sec = out
    with nogil:
        for k in range(nb):
            attributes = t[k, B_ATTRIBUTES]
            sec[k, S_START] = t[k, B_POS] + KL_HEADER_SIZE
            sec[k, S_END] = t[k, B_POS] + t[k, B_SIZE]
            sec[k, S_BASE_OFFSET] = t[k, B_BASE_OFFSET]
            sec[k, S_RECORD_COUNT] = t[k, B_RECORD_COUNT]
            sec[k, S_CONTROL] = 1 if attributes & KL_CONTROL_BIT else 0
            if first_coded < 0 and attributes & KL_CODEC_MASK:
                first_coded = k
    return out, first_coded


def decode_sections(data, sections, path=None):
    """Decode the records sections listed in ``sections`` (int64[s, 5]: start, end, baseOffset,
    recordCount, control flag; positions in ``data``) into column arrays.

    Returns a dict: the per-record arrays, "counts" (rows per table) and one dict of arrays per
    table (see kraftlog.engine.records.metadata_columns for the contract). Control sections are
    skipped. Raises CorruptRecordError (position in ``data``) at the first undecodable record.
    """
    cdef const uint8_t[::1] view = data
    cdef const uint8_t *p = bytes_ptr(view)
    cdef const int64_t[:, ::1] sec = np.ascontiguousarray(sections, dtype=np.int64).reshape(-1, S_COLS)
    cdef int64_t nsec = sec.shape[0], s, n_max = 0, length, rc
    cdef Ctx x
    cdef Err err
    for s in range(nsec):
        if not 0 <= sec[s, S_START] <= sec[s, S_END] <= view.shape[0]:
            raise ValueError(f"section {s} lies outside the buffer")
        if not sec[s, S_CONTROL]:
            length = sec[s, S_END] - sec[s, S_START]
            n_max += min(max(sec[s, S_RECORD_COUNT], 0), length // MIN_RECORD_BYTES)
    x.n = 0
    x.cap = n_max
    for s in range(K_COUNT):
        x.counts[s] = 0
        x.blob_bytes[s] = 0
    x.p_rep_w = x.p_isr_w = x.c_rep_w = x.c_isr_w = 1
    for s in range(N_MORE_LISTS):
        x.c_more_w[s] = 0
        x.c_more_on[s] = 0
    rec = {
        "offsets": np.empty(n_max, np.int64), "api_keys": np.empty(n_max, np.int16),
        "versions": np.empty(n_max, np.int16), "kind_rows": np.empty(n_max, np.int32),
        "value_pos": np.empty(n_max, np.int64), "value_len": np.empty(n_max, np.int32),
    }
    kinds = np.empty(n_max, np.uint8)
    x.offsets = p_i64(rec["offsets"])
    x.api_keys = p_i16(rec["api_keys"])
    x.versions = p_i16(rec["versions"])
    x.kind_rows = p_i32(rec["kind_rows"])
    x.value_pos = p_i64(rec["value_pos"])
    x.value_len = p_i32(rec["value_len"])
    x.kinds = p_u8(kinds)
    err.offset = -1
    err.api_key = -1
    err.version = -1
    err.section = -1
    with nogil:
        rc = pass1(&x, p, &sec[0, 0] if nsec else NULL, nsec, &err)
    if rc < 0:
        raise_error(&err, path)
    n = x.n
    out = {name: arr[:n] for name, arr in rec.items()}
    tables = allocate_tables(&x)
    with nogil:
        rc = pass2(&x, p, &err)
    if rc < 0:
        raise_error(&err, path)
    out.update(finish_tables(&x, tables))
    return out


cdef dict allocate_tables(Ctx *x):
    """Exactly sized arrays for every table, and their pointers in ``x``."""
    cdef int64_t k, cap, j
    x.p_rep_w = min(x.p_rep_w, LIST_COLUMN_MAX_WIDTH)
    x.p_isr_w = min(x.p_isr_w, LIST_COLUMN_MAX_WIDTH)
    x.c_rep_w = min(x.c_rep_w, LIST_COLUMN_MAX_WIDTH)
    x.c_isr_w = min(x.c_isr_w, LIST_COLUMN_MAX_WIDTH)

    k = x.counts[K_OTHER]
    other = {"record_index": np.empty(k, np.int32)}
    x.o_rec = p_i32(other["record_index"])

    k = x.counts[K_TOPIC]
    topics = {"record_index": np.empty(k, np.int32), "topic_id": np.empty((k, 2), np.uint64),
              "extras": np.empty(k, np.bool_)}
    topics.update(new_blob(&x.t_name, k, x.blob_bytes[K_TOPIC], "name"))
    x.t_rec = p_i32(topics["record_index"])
    x.t_id = p_u64(topics["topic_id"])
    x.t_extras = p_u8(topics["extras"])

    k = x.counts[K_PARTITION]
    parts = {"record_index": np.empty(k, np.int32), "topic_id": np.empty((k, 2), np.uint64),
             "partition_id": np.empty(k, np.int32), "leader": np.empty(k, np.int32),
             "leader_epoch": np.empty(k, np.int32), "partition_epoch": np.empty(k, np.int32),
             "leader_recovery_state": np.empty(k, np.int8),
             "replicas": np.empty((k, x.p_rep_w), np.int32), "replica_count": np.empty(k, np.int16),
             "isr": np.empty((k, x.p_isr_w), np.int32), "isr_count": np.empty(k, np.int16),
             # zeros: calloc'd, so only the rows that carry directories ever touch memory
             "directories": np.zeros((k, x.p_rep_w * 16), np.uint8), "directory_count": np.empty(k, np.int16),
             "extras": np.empty(k, np.bool_)}
    x.p_rec = p_i32(parts["record_index"])
    x.p_tid = p_u64(parts["topic_id"])
    x.p_pid = p_i32(parts["partition_id"])
    x.p_leader = p_i32(parts["leader"])
    x.p_lepoch = p_i32(parts["leader_epoch"])
    x.p_pepoch = p_i32(parts["partition_epoch"])
    x.p_lrs = p_i8(parts["leader_recovery_state"])
    x.p_rep = p_i32(parts["replicas"])
    x.p_rep_n = p_i16(parts["replica_count"])
    x.p_isr = p_i32(parts["isr"])
    x.p_isr_n = p_i16(parts["isr_count"])
    x.p_dir = p_u8(parts["directories"])
    x.p_dir_n = p_i16(parts["directory_count"])
    x.p_extras = p_u8(parts["extras"])

    k = x.counts[K_CHANGE]
    changes = {"record_index": np.empty(k, np.int32), "topic_id": np.empty((k, 2), np.uint64),
               "partition_id": np.empty(k, np.int32), "leader": np.empty(k, np.int32),
               "leader_recovery_state": np.empty(k, np.int8),
               "isr": np.empty((k, x.c_isr_w), np.int32), "isr_count": np.empty(k, np.int16),
               "replicas": np.empty((k, x.c_rep_w), np.int32), "replica_count": np.empty(k, np.int16),
               "extras": np.empty(k, np.bool_)}
    x.c_rec = p_i32(changes["record_index"])
    x.c_tid = p_u64(changes["topic_id"])
    x.c_pid = p_i32(changes["partition_id"])
    x.c_leader = p_i32(changes["leader"])
    x.c_lrs = p_i8(changes["leader_recovery_state"])
    x.c_isr = p_i32(changes["isr"])
    x.c_isr_n = p_i16(changes["isr_count"])
    x.c_rep = p_i32(changes["replicas"])
    x.c_rep_n = p_i16(changes["replica_count"])
    x.c_extras = p_u8(changes["extras"])
    for j in range(N_MORE_LISTS):
        x.c_more_w[j] = min(x.c_more_w[j], LIST_COLUMN_MAX_WIDTH)
        name = MORE_LIST_COLUMNS[j]
        changes[name] = np.empty((k, x.c_more_w[j]), np.int32)
        if x.c_more_on[j]:
            changes[name + "_count"] = np.empty(k, np.int16)
            x.c_more[j] = p_i32(changes[name])
            x.c_more_n[j] = p_i16(changes[name + "_count"])
        else:  # no record carries the list: every count is -1 (null), in no memory
            changes[name + "_count"] = np.broadcast_to(np.int16(-1), (k,))
            x.c_more[j] = NULL
            x.c_more_n[j] = NULL

    k = x.counts[K_REMOVE]
    removes = {"record_index": np.empty(k, np.int32), "topic_id": np.empty((k, 2), np.uint64),
               "extras": np.empty(k, np.bool_)}
    x.r_rec = p_i32(removes["record_index"])
    x.r_tid = p_u64(removes["topic_id"])
    x.r_extras = p_u8(removes["extras"])

    k = x.counts[K_CONFIG]
    configs = {"record_index": np.empty(k, np.int32), "resource_type": np.empty(k, np.int8),
               "value_null": np.empty(k, np.bool_), "extras": np.empty(k, np.bool_)}
    configs.update(new_blob(&x.g_rname, k, x.blob_bytes[K_CONFIG], "resource_name"))
    configs.update(new_blob(&x.g_name, k, x.blob_bytes[K_CONFIG], "name"))
    configs.update(new_blob(&x.g_value, k, x.blob_bytes[K_CONFIG], "value"))
    x.g_rec = p_i32(configs["record_index"])
    x.g_rtype = p_i8(configs["resource_type"])
    x.g_value_null = p_u8(configs["value_null"])
    x.g_extras = p_u8(configs["extras"])

    k = x.counts[K_FEATURE]
    features = {"record_index": np.empty(k, np.int32), "feature_level": np.empty(k, np.int16),
                "extras": np.empty(k, np.bool_)}
    features.update(new_blob(&x.f_name, k, x.blob_bytes[K_FEATURE], "name"))
    x.f_rec = p_i32(features["record_index"])
    x.f_level = p_i16(features["feature_level"])
    x.f_extras = p_u8(features["extras"])

    k = x.counts[K_FENCE]
    fence = {"record_index": np.empty(k, np.int32), "broker_id": np.empty(k, np.int32),
             "broker_epoch": np.empty(k, np.int64), "fenced": np.empty(k, np.bool_),
             "extras": np.empty(k, np.bool_)}
    x.e_rec = p_i32(fence["record_index"])
    x.e_broker = p_i32(fence["broker_id"])
    x.e_epoch = p_i64(fence["broker_epoch"])
    x.e_fenced = p_u8(fence["fenced"])
    x.e_extras = p_u8(fence["extras"])

    k = x.counts[K_BROKER_CHANGE]
    bchanges = {"record_index": np.empty(k, np.int32), "broker_id": np.empty(k, np.int32),
                "broker_epoch": np.empty(k, np.int64), "fenced": np.empty(k, np.int8),
                "in_controlled_shutdown": np.empty(k, np.int8), "extras": np.empty(k, np.bool_)}
    x.bc_rec = p_i32(bchanges["record_index"])
    x.bc_broker = p_i32(bchanges["broker_id"])
    x.bc_epoch = p_i64(bchanges["broker_epoch"])
    x.bc_fenced = p_i8(bchanges["fenced"])
    x.bc_ics = p_i8(bchanges["in_controlled_shutdown"])
    x.bc_extras = p_u8(bchanges["extras"])

    k = x.counts[K_REGISTER]
    cap = x.blob_bytes[K_REGISTER]
    regs = {"record_index": np.empty(k, np.int32), "broker_id": np.empty(k, np.int32),
            "broker_epoch": np.empty(k, np.int64), "incarnation_id": np.empty((k, 2), np.uint64),
            "fenced": np.empty(k, np.bool_), "in_controlled_shutdown": np.empty(k, np.bool_),
            "is_migrating_zk_broker": np.empty(k, np.bool_), "rack_null": np.empty(k, np.bool_),
            "endpoint_end": np.empty(k, np.int64), "feature_end": np.empty(k, np.int64),
            "log_dir_end": np.empty(k, np.int64), "extras": np.empty(k, np.bool_),
            "endpoint_port": np.empty(cap // 7, np.uint16), "endpoint_security_protocol": np.empty(cap // 7, np.int16),
            "feature_min_version": np.empty(cap // 6, np.int16), "feature_max_version": np.empty(cap // 6, np.int16),
            "log_dirs": np.empty((cap // 16, 2), np.uint64)}
    regs.update(new_blob(&x.rg_rack, k, cap, "rack"))
    regs.update(new_blob(&x.rg_ep_name, cap // 7, cap, "endpoint_name"))
    regs.update(new_blob(&x.rg_ep_host, cap // 7, cap, "endpoint_host"))
    regs.update(new_blob(&x.rg_ft_name, cap // 6, cap, "feature_name"))
    x.rg_rec = p_i32(regs["record_index"])
    x.rg_broker = p_i32(regs["broker_id"])
    x.rg_epoch = p_i64(regs["broker_epoch"])
    x.rg_inc = p_u64(regs["incarnation_id"])
    x.rg_fenced = p_u8(regs["fenced"])
    x.rg_ics = p_u8(regs["in_controlled_shutdown"])
    x.rg_zk = p_u8(regs["is_migrating_zk_broker"])
    x.rg_rack_null = p_u8(regs["rack_null"])
    x.rg_endpoint_end = p_i64(regs["endpoint_end"])
    x.rg_endpoints = 0
    x.rg_endpoint_cap = cap // 7
    x.rg_ep_port = p_u16(regs["endpoint_port"])
    x.rg_ep_protocol = p_i16(regs["endpoint_security_protocol"])
    x.rg_feature_end = p_i64(regs["feature_end"])
    x.rg_features = 0
    x.rg_feature_cap = cap // 6
    x.rg_ft_min = p_i16(regs["feature_min_version"])
    x.rg_ft_max = p_i16(regs["feature_max_version"])
    x.rg_log_dir_end = p_i64(regs["log_dir_end"])
    x.rg_log_dirs = 0
    x.rg_log_dir_cap = cap // 16
    x.rg_log_dir = p_u64(regs["log_dirs"])
    x.rg_extras = p_u8(regs["extras"])

    k = x.counts[K_PRODUCER_IDS]
    pids = {"record_index": np.empty(k, np.int32), "broker_id": np.empty(k, np.int32),
            "broker_epoch": np.empty(k, np.int64), "next_producer_id": np.empty(k, np.int64),
            "extras": np.empty(k, np.bool_)}
    x.pi_rec = p_i32(pids["record_index"])
    x.pi_broker = p_i32(pids["broker_id"])
    x.pi_epoch = p_i64(pids["broker_epoch"])
    x.pi_next = p_i64(pids["next_producer_id"])
    x.pi_extras = p_u8(pids["extras"])

    k = x.counts[K_ACL]
    acls = {"record_index": np.empty(k, np.int32), "acl_id": np.empty((k, 2), np.uint64),
            "removed": np.empty(k, np.bool_), "resource_type": np.empty(k, np.int8),
            "pattern_type": np.empty(k, np.int8), "operation": np.empty(k, np.int8),
            "permission_type": np.empty(k, np.int8), "extras": np.empty(k, np.bool_)}
    acls.update(new_blob(&x.ac_rname, k, x.blob_bytes[K_ACL], "resource_name"))
    acls.update(new_blob(&x.ac_principal, k, x.blob_bytes[K_ACL], "principal"))
    acls.update(new_blob(&x.ac_host, k, x.blob_bytes[K_ACL], "host"))
    x.ac_rec = p_i32(acls["record_index"])
    x.ac_id = p_u64(acls["acl_id"])
    x.ac_removed = p_u8(acls["removed"])
    x.ac_rtype = p_i8(acls["resource_type"])
    x.ac_pattern = p_i8(acls["pattern_type"])
    x.ac_op = p_i8(acls["operation"])
    x.ac_perm = p_i8(acls["permission_type"])
    x.ac_extras = p_u8(acls["extras"])

    k = x.counts[K_QUOTA]
    cap = x.blob_bytes[K_QUOTA] // 3
    quotas = {"record_index": np.empty(k, np.int32), "value": np.empty(k, np.float64),
              "remove": np.empty(k, np.bool_), "entity_end": np.empty(k, np.int64),
              "extras": np.empty(k, np.bool_), "entity_name_null": np.empty(cap, np.bool_)}
    quotas.update(new_blob(&x.cq_key, k, x.blob_bytes[K_QUOTA], "key"))
    quotas.update(new_blob(&x.cq_etype, cap, x.blob_bytes[K_QUOTA], "entity_type"))
    quotas.update(new_blob(&x.cq_ename, cap, x.blob_bytes[K_QUOTA], "entity_name"))
    x.cq_rec = p_i32(quotas["record_index"])
    x.cq_value = p_i64(quotas["value"].view(np.int64))
    x.cq_remove = p_u8(quotas["remove"])
    x.cq_entity_end = p_i64(quotas["entity_end"])
    x.cq_entities = 0
    x.cq_entity_cap = cap
    x.cq_ename_null = p_u8(quotas["entity_name_null"])
    x.cq_extras = p_u8(quotas["extras"])

    k = x.counts[K_SCRAM]
    scram = {"record_index": np.empty(k, np.int32), "removed": np.empty(k, np.bool_),
             "mechanism": np.empty(k, np.int8), "iterations": np.empty(k, np.int32),
             "extras": np.empty(k, np.bool_)}
    scram.update(new_blob(&x.sc_name, k, x.blob_bytes[K_SCRAM], "name"))
    scram.update(new_blob(&x.sc_salt, k, x.blob_bytes[K_SCRAM], "salt"))
    scram.update(new_blob(&x.sc_stored, k, x.blob_bytes[K_SCRAM], "stored_key"))
    scram.update(new_blob(&x.sc_server, k, x.blob_bytes[K_SCRAM], "server_key"))
    x.sc_rec = p_i32(scram["record_index"])
    x.sc_removed = p_u8(scram["removed"])
    x.sc_mechanism = p_i8(scram["mechanism"])
    x.sc_iterations = p_i32(scram["iterations"])
    x.sc_extras = p_u8(scram["extras"])

    k = x.counts[K_TOKEN]
    cap = x.blob_bytes[K_TOKEN]  # a renewer takes at least one byte
    tokens = {"record_index": np.empty(k, np.int32), "removed": np.empty(k, np.bool_),
              "issue_timestamp_ms": np.empty(k, np.int64), "max_timestamp_ms": np.empty(k, np.int64),
              "expiration_timestamp_ms": np.empty(k, np.int64), "renewer_end": np.empty(k, np.int64),
              "extras": np.empty(k, np.bool_)}
    tokens.update(new_blob(&x.dt_owner, k, x.blob_bytes[K_TOKEN], "owner"))
    tokens.update(new_blob(&x.dt_requester, k, x.blob_bytes[K_TOKEN], "requester"))
    tokens.update(new_blob(&x.dt_token_id, k, x.blob_bytes[K_TOKEN], "token_id"))
    tokens.update(new_blob(&x.dt_renewer, cap, x.blob_bytes[K_TOKEN], "renewer"))
    x.dt_rec = p_i32(tokens["record_index"])
    x.dt_removed = p_u8(tokens["removed"])
    x.dt_issue = p_i64(tokens["issue_timestamp_ms"])
    x.dt_max = p_i64(tokens["max_timestamp_ms"])
    x.dt_expiration = p_i64(tokens["expiration_timestamp_ms"])
    x.dt_renewer_end = p_i64(tokens["renewer_end"])
    x.dt_renewers = 0
    x.dt_renewer_cap = cap
    x.dt_extras = p_u8(tokens["extras"])

    return {"other": other, "topics": topics, "partitions": parts, "partition_changes": changes,
            "remove_topics": removes, "configs": configs, "features": features, "fence": fence,
            "broker_changes": bchanges, "broker_registrations": regs, "producer_ids": pids,
            "acls": acls, "client_quotas": quotas, "scram": scram,
            "delegation_tokens": tokens}


cdef dict finish_tables(Ctx *x, dict tables):
    """Trim the string blobs to what was written; the three config strings share one blob."""
    t = tables["topics"]
    t["name_blob"] = t.pop("_name_buf")[:x.t_name.used].tobytes()
    f = tables["features"]
    f["feature_blob"] = f.pop("_name_buf")[:x.f_name.used].tobytes()
    r = tables["broker_registrations"]
    for name, used in (("endpoint_port", x.rg_endpoints), ("endpoint_security_protocol", x.rg_endpoints),
                       ("feature_min_version", x.rg_features), ("feature_max_version", x.rg_features),
                       ("log_dirs", x.rg_log_dirs)):
        r[name] = r[name][:used]
    r["endpoint_name_offsets"] = r["endpoint_name_offsets"][:x.rg_endpoints + 1]
    r["endpoint_host_offsets"] = r["endpoint_host_offsets"][:x.rg_endpoints + 1]
    r["feature_name_offsets"] = r["feature_name_offsets"][:x.rg_features + 1]
    at = 0
    parts = []
    for prefix, used in (("rack", x.rg_rack.used), ("endpoint_name", x.rg_ep_name.used),
                         ("endpoint_host", x.rg_ep_host.used), ("feature_name", x.rg_ft_name.used)):
        parts.append(r.pop("_" + prefix + "_buf")[:used].tobytes())
        if at:
            r[prefix + "_offsets"] += at
        at += used
    r["broker_blob"] = b"".join(parts)
    g = tables["configs"]
    a, b, c = x.g_rname.used, x.g_name.used, x.g_value.used
    g["config_blob"] = (g.pop("_resource_name_buf")[:a].tobytes() + g.pop("_name_buf")[:b].tobytes()
                        + g.pop("_value_buf")[:c].tobytes())
    g["name_offsets"] += a
    g["value_offsets"] += a + b
    acl = tables["acls"]
    a, b, c = x.ac_rname.used, x.ac_principal.used, x.ac_host.used
    acl["acl_blob"] = (acl.pop("_resource_name_buf")[:a].tobytes() + acl.pop("_principal_buf")[:b].tobytes()
                       + acl.pop("_host_buf")[:c].tobytes())
    acl["principal_offsets"] += a
    acl["host_offsets"] += a + b
    q = tables["client_quotas"]
    e = x.cq_entities
    q["key_blob"] = q.pop("_key_buf")[:x.cq_key.used].tobytes()
    a, b = x.cq_etype.used, x.cq_ename.used
    q["entity_blob"] = q.pop("_entity_type_buf")[:a].tobytes() + q.pop("_entity_name_buf")[:b].tobytes()
    q["entity_type_offsets"] = q["entity_type_offsets"][:e + 1]
    q["entity_name_offsets"] = q["entity_name_offsets"][:e + 1] + a
    q["entity_name_null"] = q["entity_name_null"][:e]
    sc = tables["scram"]
    at = 0
    parts = []
    for prefix, used in (("name", x.sc_name.used), ("salt", x.sc_salt.used), ("stored_key", x.sc_stored.used),
                         ("server_key", x.sc_server.used)):
        parts.append(sc.pop("_" + prefix + "_buf")[:used].tobytes())
        sc[prefix + "_offsets"] += at
        at += used
    sc["scram_blob"] = b"".join(parts)
    dt = tables["delegation_tokens"]
    dt["renewer_offsets"] = dt["renewer_offsets"][:x.dt_renewers + 1]
    at = 0
    parts = []
    for prefix, used in (("owner", x.dt_owner.used), ("requester", x.dt_requester.used),
                         ("token_id", x.dt_token_id.used), ("renewer", x.dt_renewer.used)):
        parts.append(dt.pop("_" + prefix + "_buf")[:used].tobytes())
        dt[prefix + "_offsets"] += at
        at += used
    dt["token_blob"] = b"".join(parts)
    return tables
