/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by Kafka record batches v2.
 *
 * kl_crc32c(crc, data, n) continues a running CRC: start with crc = 0, feed chunks in order.
 * The pre/post inversion is done inside, so kl_crc32c(kl_crc32c(0, a), b) == kl_crc32c(0, a+b),
 * which is the convention of the `crc32c` Python package and of java.util.zip.CRC32C.
 */
#ifndef KRAFTLOG_CRC32C_H
#define KRAFTLOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n);
/* 1 when the SSE4.2 crc32 instruction is used, 0 for the portable table path. */
int kl_crc32c_hardware(void);

#endif
