/*
 * DPDK peer for Sluice's checksum benchmark: times rte_raw_cksum() (an inline function from
 * rte_ip.h, so no EAL initialisation is needed) and memcpy() on 64-byte-aligned buffers.
 *
 * Output matches crates/sluice-checksum/examples/cksum_bench.rs, one line per measurement:
 *   <name> <size> <median ns/op> <GB/s>
 * plus "check <size> <sum>" with the big-endian folded sum so the compare script can verify
 * both programs summed the same bytes to the same value.
 *
 * Usage: cksum_bench [rounds [sizes...]]   (default 15 rounds, sizes 64 1500 65536)
 *        cksum_bench count SIZE CALLS        (CALLS calls of the out-of-line dpdk_cksum(), for
 *                                             callgrind --toggle-collect=dpdk_cksum)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_byteorder.h>
#include <rte_ip.h>

/* Make the compiler assume `p`'s memory may have changed, so each call really re-reads it. */
#define CLOBBER(p) __asm__ volatile("" : : "r"(p) : "memory")
#define SINK(v) __asm__ volatile("" : : "r"(v))

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Same per-round budget as the Rust harness: ~256 MiB of data, at least 1000 calls. */
static size_t iterations(size_t size)
{
	size_t n = (256u << 20) / size;
	return n < 1000 ? 1000 : n;
}

static uint8_t *aligned_pattern(size_t size)
{
	uint8_t *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
	if (p == NULL) {
		perror("aligned_alloc");
		exit(1);
	}
	for (size_t i = 0; i < size; i++)
		p[i] = (uint8_t)(i * 131 + 7);
	return p;
}

static void report(const char *name, size_t size, double ns)
{
	printf("%s %zu %.2f %.2f\n", name, size, ns, (double)size / ns);
}

static double time_cksum(const uint8_t *buf, size_t size, int rounds, double *samples)
{
	size_t iters = iterations(size);
	for (size_t i = 0; i < iters / 10; i++) {
		CLOBBER(buf);
		SINK(rte_raw_cksum(buf, size));
	}
	for (int r = 0; r < rounds; r++) {
		double t0 = now_ns();
		for (size_t i = 0; i < iters; i++) {
			CLOBBER(buf);
			SINK(rte_raw_cksum(buf, size));
		}
		samples[r] = (now_ns() - t0) / (double)iters;
	}
	qsort(samples, rounds, sizeof(double), cmp_double);
	return samples[rounds / 2];
}

static double time_memcpy(uint8_t *dst, const uint8_t *src, size_t size, int rounds,
			  double *samples)
{
	size_t iters = iterations(size);
	for (size_t i = 0; i < iters / 10; i++) {
		memcpy(dst, src, size);
		CLOBBER(dst);
	}
	for (int r = 0; r < rounds; r++) {
		double t0 = now_ns();
		for (size_t i = 0; i < iters; i++) {
			CLOBBER(src);
			memcpy(dst, src, size);
			CLOBBER(dst);
		}
		samples[r] = (now_ns() - t0) / (double)iters;
	}
	qsort(samples, rounds, sizeof(double), cmp_double);
	return samples[rounds / 2];
}

/* Out-of-line wrapper so callgrind can count the instructions of exactly one call. */
__attribute__((noinline)) uint16_t dpdk_cksum(const void *buf, size_t len)
{
	return rte_raw_cksum(buf, len);
}

static int count_mode(size_t size, long calls)
{
	uint8_t *buf = aligned_pattern(size);
	uint16_t acc = 0;
	for (long i = 0; i < calls; i++) {
		CLOBBER(buf);
		acc ^= dpdk_cksum(buf, size);
	}
	printf("count %zu %ld %04x\n", size, calls, acc);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "count") == 0)
		return count_mode(strtoul(argv[2], NULL, 10), atol(argv[3]));

	static const size_t default_sizes[] = {64, 1500, 65536};
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	if (rounds < 1)
		rounds = 1;
	size_t nsizes = argc > 2 ? (size_t)(argc - 2) : 3;
	double *samples = calloc((size_t)rounds, sizeof(double));
	if (samples == NULL)
		return 1;

	for (size_t s = 0; s < nsizes; s++) {
		size_t size = argc > 2 ? strtoul(argv[2 + s], NULL, 10) : default_sizes[s];
		if (size == 0)
			continue;
		uint8_t *src = aligned_pattern(size);
		uint8_t *dst = aligned_pattern(size);
		/* rte_raw_cksum sums host-order (little-endian) words; swap to the wire order. */
		printf("check %zu %04x\n", size, rte_bswap16(rte_raw_cksum(src, size)));
		report("dpdk", size, time_cksum(src, size, rounds, samples));
		report("memcpy", size, time_memcpy(dst, src, size, rounds, samples));
		free(src);
		free(dst);
	}
	free(samples);
	return 0;
}
