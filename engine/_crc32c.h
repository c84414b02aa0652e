/*
 * CRC-32C (Castagnoli), the checksum of a Kafka RecordBatch v2 header: SSE4.2's crc32
 * instruction where the CPU has it, else a table eight bytes a step. Shared by the C paths
 * that write or check batches (engine/_scan.c, gateway/formats/_producejson.c); each calls
 * crc32c_setup() once, in its module's exec slot, before any crc32c().
 *
 * PORTABLE_CRC32C leaves the instruction out, so that the table (what machines without SSE4.2
 * run) is what a build checks (tests/fuzz/sanitizers.py builds so).
 */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PORTABLE_CRC32C)
#define HAVE_SSE42_CRC32C 1
#include <nmmintrin.h>
#endif

static uint32_t crc_table[8][256];

static void
crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
        }
        crc_table[0][i] = crc;
    }
    for (int t = 1; t < 8; t++) {
        for (int i = 0; i < 256; i++) {
            uint32_t prev = crc_table[t - 1][i];
            crc_table[t][i] = (prev >> 8) ^ crc_table[0][prev & 0xff];
        }
    }
}

/* Eight bytes a step through the tables above. */
static uint32_t
crc32c_portable(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    }
    return ~crc;
}

#ifdef HAVE_SSE42_CRC32C
static int have_sse42;

/* SSE4.2's crc32 instruction computes the same polynomial, eight bytes an instruction. */
__attribute__((target("sse4.2"))) static uint32_t
crc32c_sse42(const unsigned char *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        n -= 8;
    }
    uint32_t small = (uint32_t)crc;
    while (n--) {
        small = _mm_crc32_u8(small, *p++);
    }
    return ~small;
}
#endif

static uint32_t
crc32c(const unsigned char *p, size_t n)
{
#ifdef HAVE_SSE42_CRC32C
    if (have_sse42) {
        return crc32c_sse42(p, n);
    }
#endif
    return crc32c_portable(p, n);
}

/* The table, and whether the CPU has the instruction: once, before any crc32c(). */
static void
crc32c_setup(void)
{
    crc32c_init();
#ifdef HAVE_SSE42_CRC32C
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

#endif
