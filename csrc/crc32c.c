/* CRC-32C with a run-time choice between carry-less-multiply folding (PCLMULQDQ, or VPCLMULQDQ on
 * 512-bit registers), the SSE4.2 `crc32` instruction, and slicing-by-8 tables.
 *
 * Why our own: the record-batch codec checks one CRC per batch from C; calling the `crc32c`
 * Python package there would cost a Python call per batch. The path is chosen once, by asking the
 * CPU (never by build flags), so one wheel runs on every x86-64 and elsewhere; each path's
 * function carries its own `target` attribute. KRAFTLOG_CRC32C_PATH (see crc32c.h) forces one.
 *
 * The `crc32` path runs three independent CRC streams over three equal blocks and merges them
 * with precomputed shift tables: the instruction has a latency of 3 cycles but a throughput of 1,
 * so three streams keep the unit busy (the technique of Intel's paper "Fast CRC Computation for
 * iSCSI Polynomial Using CRC32 Instruction"; the arithmetic below is our own).
 *
 * The folding paths (the technique of Intel's paper "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ Instruction"; constants derived below, at init) keep the message in 128-bit
 * lanes and push each lane forward over the bytes that follow it with two 64x32-bit carry-less
 * multiplies, which never carry, so many lanes run in parallel and the multiplier, not a latency
 * chain, sets the pace. At the end one 128-bit lane is left; the `crc32` instruction reduces it to
 * 32 bits, and the tail (< 16 bytes) goes through the `crc32` path.
 */
#include "crc32c.h"

#include <stdlib.h>
#include <string.h>

#define POLY 0x82F63B78u

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KL_X86 1
#else
#define KL_X86 0
#endif

/* The paths, slowest first: a forced path the CPU lacks falls back to the automatic choice. */
enum { PATH_TABLE, PATH_SSE42, PATH_PCLMUL, PATH_VPCLMUL, PATH_COUNT };
static const char *const path_names[PATH_COUNT] = {"table", "sse42", "pclmul", "vpclmul"};

static uint32_t table[8][256];
static int initialised = 0;
static int path = PATH_TABLE;

#define BLOCK 4096u  /* bytes per stream in one three-way round */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1) sum ^= mat[i];
    return sum;
}

/* In place is allowed: the result goes through a temporary. */
static void gf2_square(uint32_t *square, const uint32_t *mat) {
    uint32_t tmp[32];
    for (int n = 0; n < 32; n++) tmp[n] = gf2_times(mat, mat[n]);
    memcpy(square, tmp, sizeof(tmp));
}

/* Matrices over GF(2) as 32 columns: mat[i] is the image of state bit i. */
static void gf2_compose(uint32_t *out, const uint32_t *outer, const uint32_t *inner) {
    uint32_t tmp[32];
    for (int n = 0; n < 32; n++) tmp[n] = gf2_times(outer, inner[n]);
    memcpy(out, tmp, sizeof(tmp));
}

/* The operator that advances a raw (non-inverted) CRC state over one zero bit: state >> 1, xor
 * POLY when bit 0 was set. In polynomial terms it multiplies the state by x modulo P. */
static void one_zero_bit(uint32_t *op) {
    op[0] = POLY;
    for (int n = 1; n < 32; n++) op[n] = 1u << (n - 1);
}

/* zeros_op(op, bits): the operator that advances a raw CRC state over `bits` zero bits. */
static void zeros_op_bits(uint32_t *op, uint64_t bits) {
    uint32_t power[32];
    one_zero_bit(power);
    for (int n = 0; n < 32; n++) op[n] = 1u << n;                  /* identity */
    for (; bits; bits >>= 1) {
        if (bits & 1) gf2_compose(op, power, op);
        gf2_square(power, power);
    }
}

static void zeros_op(uint32_t *op, size_t len) { zeros_op_bits(op, 8 * (uint64_t)len); }

/* x^k mod P, bit-reflected like the CRC state (bit 31 is x^0, bit 0 is x^31): the zero-bit
 * operator applied k times to the state that holds the polynomial 1. */
static uint32_t xpow_mod(uint64_t k) {
    uint32_t op[32];
    zeros_op_bits(op, k);
    return gf2_times(op, 0x80000000u);
}

/* shift[i][b]: apply the `BLOCK zero bytes` operator to the state byte b placed at byte i. */
static uint32_t shift_block[4][256];
static uint32_t shift_block2[4][256];
#define SHORT_BLOCK 256u  /* bytes per stream in the three-way rounds for what BLOCK rounds leave */
static uint32_t shift_short[4][256];
static uint32_t shift_short2[4][256];

static void build_shift(uint32_t tab[4][256], size_t len) {
    uint32_t op[32];
    zeros_op(op, len);
    for (int i = 0; i < 4; i++)
        for (uint32_t b = 0; b < 256; b++) tab[i][b] = gf2_times(op, b << (8 * i));
}

static inline uint32_t apply_shift(uint32_t tab[4][256], uint32_t crc) {
    return tab[0][crc & 0xff] ^ tab[1][(crc >> 8) & 0xff] ^ tab[2][(crc >> 16) & 0xff] ^ tab[3][crc >> 24];
}

/* Folding constants. A 128-bit lane loaded little-endian from the message holds, in bit m, the
 * coefficient of x^(127-m) of that 16-byte piece (the reflected order of the CRC): its low 64
 * bits are H, the high-degree half, its high 64 bits L, so the lane is H*x^64 + L. Moving the lane
 * forward over D bytes multiplies it by x^(8D); modulo P that is
 *     H * (x^(8D+64) mod P) + L * (x^(8D) mod P),
 * two 64x32-bit carry-less products that fit a 128-bit lane again. A reflected carry-less multiply
 * of a 64-bit h by a 32-bit constant c (c in the low 32 bits, bit i = x^(31-i)) yields, read as a
 * 128-bit lane, h*c*x^33 (x^32 because c sits in the low half of a 64-bit operand, x^1 because the
 * 127-bit product lands one bit low in the 128-bit lane). So the constants are x^(8D+31) mod P for
 * H and x^(8D-33) mod P for L, and a fold of `a` over D bytes onto `b` is
 *     clmul(a.lo64, k.lo64) ^ clmul(a.hi64, k.hi64) ^ b      with k = {lo: x^(8D+31), hi: x^(8D-33)}.
 * fold_k[D] holds that pair for each distance the code uses. */
#define FOLD_DISTANCES 6
static const uint32_t fold_bytes[FOLD_DISTANCES] = {16, 32, 48, 64, 128, 256};
enum { K16, K32, K48, K64, K128, K256 };
static uint64_t fold_k[FOLD_DISTANCES][2];

static void build_fold_constants(void) {
    for (int i = 0; i < FOLD_DISTANCES; i++) {
        uint64_t bits = 8 * (uint64_t)fold_bytes[i];
        fold_k[i][0] = xpow_mod(bits + 31);
        fold_k[i][1] = xpow_mod(bits - 33);
    }
}

static uint32_t sw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint32_t lo = (uint32_t)w ^ crc, hi = (uint32_t)(w >> 32);
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
              table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8; n -= 8;
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if KL_X86
#include <immintrin.h>

__attribute__((target("sse4.2")))
static uint32_t hw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = _mm_crc32_u8(crc, *p++); n--; }
    /* Three streams over three consecutive BLOCK-byte blocks, merged by the shift tables. */
    while (n >= 3 * BLOCK) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        const unsigned char *end = p + BLOCK;
        while (p < end) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8); memcpy(&w1, p + BLOCK, 8); memcpy(&w2, p + 2 * BLOCK, 8);
            c0 = _mm_crc32_u64(c0, w0); c1 = _mm_crc32_u64(c1, w1); c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        }
        /* state(a|b|c) = shift2(c0) ^ shift1(c1) ^ c2 for raw, non-inverted states */
        crc = apply_shift(shift_block2, (uint32_t)c0) ^ apply_shift(shift_block, (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * BLOCK;
        n -= 3 * BLOCK;
    }
    while (n >= 3 * SHORT_BLOCK) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        const unsigned char *end = p + SHORT_BLOCK;
        while (p < end) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8); memcpy(&w1, p + SHORT_BLOCK, 8); memcpy(&w2, p + 2 * SHORT_BLOCK, 8);
            c0 = _mm_crc32_u64(c0, w0); c1 = _mm_crc32_u64(c1, w1); c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        }
        crc = apply_shift(shift_short2, (uint32_t)c0) ^ apply_shift(shift_short, (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * SHORT_BLOCK;
        n -= 3 * SHORT_BLOCK;
    }
    uint64_t c = crc;
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = _mm_crc32_u64(c, w); p += 8; n -= 8; }
    crc = (uint32_t)c;
    while (n--) crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

#define FOLD_TARGET "sse4.2,pclmul"

/* Fold the 128-bit lane `a` forward over the distance of `k` onto `b` (see build_fold_constants). */
__attribute__((target(FOLD_TARGET)))
static inline __m128i fold128(__m128i a, __m128i k, __m128i b) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), b);
}

__attribute__((target(FOLD_TARGET)))
static inline __m128i fold_const128(int which) {
    return _mm_set_epi64x((long long)fold_k[which][1], (long long)fold_k[which][0]);
}

/* The lane that holds the last 16 bytes folded so far is H*x^64 + L; the raw CRC of it, from a
 * zero state, is (H*x^64 + L)*x^32 mod P: exactly two `crc32` steps over its two halves. Then the
 * tail goes through the `crc32` path. */
__attribute__((target(FOLD_TARGET)))
static inline uint32_t finish128(__m128i acc, const unsigned char *p, size_t n) {
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(acc));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(acc, 1));
    return hw_raw((uint32_t)c, p, n);
}

/* The 128-bit lanes beat one `crc32` stream from 256 bytes (one round of eight lanes), but not the
 * three interleaved streams, which the `crc32` path runs from 768 bytes on: measured on a Zen 4,
 * where PCLMULQDQ issues once every two cycles, 14.8 GB/s against 25-28 GB/s. */
#define PCLMUL_MIN_BYTES 256u
#define PCLMUL_MAX_BYTES (3 * SHORT_BLOCK)

#define LOAD128(q) _mm_loadu_si128((const __m128i *)(q))

/* Eight 128-bit lanes over 128-byte rounds: the multiplier has a latency of several cycles, so
 * eight independent lanes keep it busy (named variables, not an array, so that they stay in
 * registers). The CRC state enters as an xor into the first 4 bytes (the definition of a CRC
 * with a non-zero start); n >= PCLMUL_MIN_BYTES. */
__attribute__((target(FOLD_TARGET)))
static uint32_t pclmul_raw(uint32_t crc, const unsigned char *p, size_t n) {
    __m128i x0 = _mm_xor_si128(LOAD128(p), _mm_cvtsi32_si128((int)crc)), x1 = LOAD128(p + 16);
    __m128i x2 = LOAD128(p + 32), x3 = LOAD128(p + 48), x4 = LOAD128(p + 64), x5 = LOAD128(p + 80);
    __m128i x6 = LOAD128(p + 96), x7 = LOAD128(p + 112);
    p += 128; n -= 128;
    const __m128i k128 = fold_const128(K128);  /* each lane moves forward over one round */
    while (n >= 128) {
        x0 = fold128(x0, k128, LOAD128(p));
        x1 = fold128(x1, k128, LOAD128(p + 16));
        x2 = fold128(x2, k128, LOAD128(p + 32));
        x3 = fold128(x3, k128, LOAD128(p + 48));
        x4 = fold128(x4, k128, LOAD128(p + 64));
        x5 = fold128(x5, k128, LOAD128(p + 80));
        x6 = fold128(x6, k128, LOAD128(p + 96));
        x7 = fold128(x7, k128, LOAD128(p + 112));
        p += 128; n -= 128;
    }
    /* Eight lanes to one: lanes 0..3 move over 64 bytes onto 4..7, then 4, 5 over 32, then 6 over 16. */
    const __m128i k64 = fold_const128(K64), k32 = fold_const128(K32), k16 = fold_const128(K16);
    x4 = fold128(x0, k64, x4); x5 = fold128(x1, k64, x5); x6 = fold128(x2, k64, x6); x7 = fold128(x3, k64, x7);
    x6 = fold128(x4, k32, x6); x7 = fold128(x5, k32, x7);
    __m128i acc = fold128(x6, k16, x7);
    while (n >= 16) { acc = fold128(acc, k16, LOAD128(p)); p += 16; n -= 16; }
    return finish128(acc, p, n);
}

#define VPCLMUL_TARGET "sse4.2,pclmul,avx512f,avx512vl,avx512bw,vpclmulqdq"
/* n >= 319 leaves one 256-byte round after the alignment head; measured on a Zen 4, this path
 * overtakes the 128-bit lanes from about 384 bytes. */
#ifndef VPCLMUL_MIN_BYTES
#define VPCLMUL_MIN_BYTES 384u
#endif

/* fold128 on the four 128-bit lanes of a 512-bit register at once; 0x96 is a three-way xor. */
__attribute__((target(VPCLMUL_TARGET)))
static inline __m512i fold512(__m512i a, __m512i k, __m512i b) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11), b,
                                     0x96);
}

/* Four 512-bit registers (sixteen 128-bit lanes) over 256-byte rounds, loads aligned to 64
 * bytes (the head before that goes through the `crc32` path); n >= VPCLMUL_MIN_BYTES. */
__attribute__((target(VPCLMUL_TARGET)))
static uint32_t vpclmul_raw(uint32_t crc, const unsigned char *p, size_t n) {
    size_t head = (size_t)(-(uintptr_t)p & 63);
    if (head) { crc = hw_raw(crc, p, head); p += head; n -= head; }
    const __m512i *v = (const __m512i *)p;
    __m512i x0 = _mm512_load_si512(v), x1 = _mm512_load_si512(v + 1);
    __m512i x2 = _mm512_load_si512(v + 2), x3 = _mm512_load_si512(v + 3);
    x0 = _mm512_xor_si512(x0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)crc)));
    v += 4; n -= 256;
    const __m512i k256 = _mm512_broadcast_i32x4(fold_const128(K256));  /* one round: 256 bytes */
    while (n >= 256) {
        x0 = fold512(x0, k256, _mm512_load_si512(v));
        x1 = fold512(x1, k256, _mm512_load_si512(v + 1));
        x2 = fold512(x2, k256, _mm512_load_si512(v + 2));
        x3 = fold512(x3, k256, _mm512_load_si512(v + 3));
        v += 4; n -= 256;
    }
    const __m512i k64 = _mm512_broadcast_i32x4(fold_const128(K64));
    x1 = fold512(x0, k64, x1);
    x2 = fold512(x1, k64, x2);
    x3 = fold512(x2, k64, x3);
    while (n >= 64) { x3 = fold512(x3, k64, _mm512_load_si512(v)); v++; n -= 64; }
    /* Four lanes to one: lanes 0, 1, 2 move over 48, 32, 16 bytes onto lane 3, which stays. */
    const __m512i kr = _mm512_set_epi64(0, 0, (long long)fold_k[K16][1], (long long)fold_k[K16][0],
                                        (long long)fold_k[K32][1], (long long)fold_k[K32][0],
                                        (long long)fold_k[K48][1], (long long)fold_k[K48][0]);
    __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(x3, kr, 0x00), _mm512_clmulepi64_epi128(x3, kr, 0x11));
    t = _mm512_mask_mov_epi64(t, 0xC0, x3);  /* lane 3 (64-bit elements 6, 7) as it is */
    __m128i acc = _mm_xor_si128(_mm_xor_si128(_mm512_castsi512_si128(t), _mm512_extracti32x4_epi32(t, 1)),
                                _mm_xor_si128(_mm512_extracti32x4_epi32(t, 2), _mm512_extracti32x4_epi32(t, 3)));
    p = (const unsigned char *)v;
    const __m128i k16 = fold_const128(K16);
    while (n >= 16) { acc = fold128(acc, k16, _mm_loadu_si128((const __m128i *)p)); p += 16; n -= 16; }
    return finish128(acc, p, n);
}
#endif

static int cpu_has(int which) {
#if KL_X86
    switch (which) {
    case PATH_SSE42: return __builtin_cpu_supports("sse4.2");
    case PATH_PCLMUL: return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
    case PATH_VPCLMUL:
        return cpu_has(PATH_PCLMUL) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq");
    }
#endif
    return which == PATH_TABLE;
}

static int choose_path(void) {
#if KL_X86
    __builtin_cpu_init();
#endif
    const char *forced = getenv("KRAFTLOG_CRC32C_PATH");
    for (int i = 0; forced && i < PATH_COUNT; i++)
        if (strcmp(forced, path_names[i]) == 0 && cpu_has(i)) return i;
    for (int i = PATH_COUNT - 1; i > PATH_TABLE; i--)
        if (cpu_has(i)) return i;
    return PATH_TABLE;
}

static void init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) { c = table[0][c & 0xff] ^ (c >> 8); table[k][n] = c; }
    }
    build_shift(shift_block, BLOCK);
    build_shift(shift_block2, 2 * BLOCK);
    build_shift(shift_short, SHORT_BLOCK);
    build_shift(shift_short2, 2 * SHORT_BLOCK);
    build_fold_constants();
    path = choose_path();
    initialised = 1;
}

/* At load, so that threads never race on the first call; the check in kl_crc32c stays for
 * compilers without constructors. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor)) static void init_at_load(void) { if (!initialised) init(); }
#endif

uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) {
    if (!initialised) init();
    crc = ~crc;
#if KL_X86
    switch (path) {
    case PATH_VPCLMUL:
        if (n >= VPCLMUL_MIN_BYTES) return ~vpclmul_raw(crc, data, n);
        if (n >= PCLMUL_MIN_BYTES) return ~pclmul_raw(crc, data, n);
        return ~hw_raw(crc, data, n);
    case PATH_PCLMUL:
        if (n >= PCLMUL_MIN_BYTES && n < PCLMUL_MAX_BYTES) return ~pclmul_raw(crc, data, n);
        /* fall through */
    case PATH_SSE42:
        return ~hw_raw(crc, data, n);
    }
#endif
    return ~sw_raw(crc, data, n);
}

int kl_crc32c_hardware(void) {
    if (!initialised) init();
    return path != PATH_TABLE;
}

const char *kl_crc32c_path(void) {
    if (!initialised) init();
    return path_names[path];
}
