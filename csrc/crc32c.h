/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by Kafka record batches v2.
 *
 * kl_crc32c(crc, data, n) continues a running CRC: start with crc = 0, feed chunks in order.
 * The pre/post inversion is done inside, so kl_crc32c(kl_crc32c(0, a), b) == kl_crc32c(0, a+b),
 * which is the convention of the `crc32c` Python package and of java.util.zip.CRC32C.
 *
 * The implementation is chosen once, when the library loads, from what the CPU offers (never from
 * build flags); every path gives the same result:
 *     vpclmul  carry-less-multiply folding on 512-bit registers (AVX-512 + VPCLMULQDQ) from 384
 *              bytes, the pclmul lanes from 256
 *     pclmul   carry-less-multiply folding on eight 128-bit lanes (PCLMULQDQ) for 256..767 bytes,
 *              where it beats one `crc32` stream; longer buffers go to the three sse42 streams
 *     sse42    the SSE4.2 `crc32` instruction, three interleaved streams (also the short buffers
 *              and the tails of the two above)
 *     table    slicing-by-8 tables, any CPU
 * The environment variable KRAFTLOG_CRC32C_PATH=vpclmul|pclmul|sse42|table, read at load, forces
 * one (for tests and measurements); a path the CPU lacks, or another value, leaves the automatic
 * choice (the fastest the CPU has).
 */
#ifndef KRAFTLOG_CRC32C_H
#define KRAFTLOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n);
/* 1 when a CPU instruction path is used (sse42, pclmul or vpclmul), 0 for the table path. */
int kl_crc32c_hardware(void);
/* The chosen path's name: "vpclmul", "pclmul", "sse42" or "table" (a static string). */
const char *kl_crc32c_path(void);

#endif
