/*
 * DPDK peer for Sluice's GSO benchmark (crates/sluice-offload/benches/gso.rs): times
 * rte_gso_segment() on one TCP/IPv4 super-packet (64 000 payload bytes, MSS 1448, 45 segments),
 * freeing the segments after each call, as a datapath would after transmit.
 *
 *   dpdk_gso           rte_gso_segment() alone: header mbuf + indirect payload mbuf per segment;
 *                      DPDK computes no checksum (the IPv4 header checksum is not updated either).
 *   dpdk_gso_cksum     the same plus, per segment, rte_ipv4_cksum() and
 *                      rte_ipv4_udptcp_cksum_mbuf() (full software checksums).
 *
 * Output, one line per measurement: <name> <segments> <median ns per super-packet> <segments/s>
 *
 * Usage: gso_bench [rounds]   (EAL arguments are built in: --no-huge --no-pci -m 1024
 *                              --no-shconf -l 0 --no-telemetry)
 */
#define ALLOW_EXPERIMENTAL_API 1
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_gso.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#define PAYLOAD 64000
#define MSS 1448
#define HDR (14 + 20 + 20)
#define MAX_SEGS 64

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

static struct rte_mbuf *build(struct rte_mempool *pool)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
	if (m == NULL)
		return NULL;
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, HDR + PAYLOAD);
	if (p == NULL)
		return NULL;
	memset(p, 0, HDR);
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)p;
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(p + 14);
	ip->version_ihl = 0x45;
	ip->total_length = rte_cpu_to_be_16(20 + 20 + PAYLOAD);
	ip->packet_id = rte_cpu_to_be_16(0x1234);
	ip->fragment_offset = rte_cpu_to_be_16(0x4000);
	ip->time_to_live = 64;
	ip->next_proto_id = 6;
	ip->src_addr = rte_cpu_to_be_32(0xc0000201);
	ip->dst_addr = rte_cpu_to_be_32(0xc6336402);
	struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(p + 34);
	tcp->src_port = rte_cpu_to_be_16(40000);
	tcp->dst_port = rte_cpu_to_be_16(80);
	tcp->sent_seq = rte_cpu_to_be_32(1);
	tcp->data_off = 0x50;
	tcp->tcp_flags = 0x18;
	tcp->rx_win = rte_cpu_to_be_16(0xfaf0);
	for (int i = 0; i < PAYLOAD; i++)
		p[HDR + i] = (uint8_t)(i * 31 + 7);
	m->l2_len = 14;
	m->l3_len = 20;
	m->l4_len = 20;
	m->tso_segsz = MSS;
	return m;
}

__attribute__((noinline)) static int segment_once(struct rte_mbuf *m, struct rte_gso_ctx *ctx, int cksum)
{
	struct rte_mbuf *out[MAX_SEGS];
	m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
	int n = rte_gso_segment(m, ctx, out, MAX_SEGS);
	if (n <= 0)
		return n;
	if (cksum) {
		for (int i = 0; i < n; i++) {
			struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(out[i], struct rte_ipv4_hdr *, 14);
			struct rte_tcp_hdr *tcp = rte_pktmbuf_mtod_offset(out[i], struct rte_tcp_hdr *, 34);
			ip->hdr_checksum = 0;
			ip->hdr_checksum = rte_ipv4_cksum(ip);
			tcp->cksum = 0;
			tcp->cksum = rte_ipv4_udptcp_cksum_mbuf(out[i], ip, 34);
		}
	}
	for (int i = 0; i < n; i++)
		rte_pktmbuf_free(out[i]);
	return n;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	char *eal[] = {"gso_bench", "--no-huge", "--no-pci", "-m", "1024", "--no-shconf", "-l", "0",
		       "--no-telemetry", "--log-level", "error"};
	if (rte_eal_init(sizeof(eal) / sizeof(eal[0]), eal) < 0) {
		fprintf(stderr, "rte_eal_init failed\n");
		return 1;
	}
	struct rte_mempool *big = rte_pktmbuf_pool_create("big", 64, 0, 0,
							  RTE_PKTMBUF_HEADROOM + HDR + PAYLOAD + 64, 0);
	struct rte_mempool *direct = rte_pktmbuf_pool_create("direct", 1024, 256, 0,
							     RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	struct rte_mempool *indirect = rte_pktmbuf_pool_create("indirect", 1024, 256, 0, 0, 0);
	if (big == NULL || direct == NULL || indirect == NULL) {
		fprintf(stderr, "mempool creation failed\n");
		return 1;
	}
	struct rte_mbuf *m = build(big);
	if (m == NULL) {
		fprintf(stderr, "cannot build the super-packet\n");
		return 1;
	}
	struct rte_gso_ctx ctx = {
		.direct_pool = direct,
		.indirect_pool = indirect,
		.flag = 0,
		.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO,
		.gso_size = HDR + MSS,
	};
	const char *names[2] = {"dpdk_gso", "dpdk_gso_cksum"};
	double *samples = calloc(rounds, sizeof(double));
	for (int mode = 0; mode < 2; mode++) {
		int n = segment_once(m, &ctx, mode);
		if (n <= 0) {
			fprintf(stderr, "rte_gso_segment failed: %d\n", n);
			return 1;
		}
		size_t iters = 20000;
		for (size_t i = 0; i < iters / 10; i++)
			segment_once(m, &ctx, mode);
		for (int r = 0; r < rounds; r++) {
			double t0 = now_ns();
			for (size_t i = 0; i < iters; i++)
				segment_once(m, &ctx, mode);
			samples[r] = (now_ns() - t0) / (double)iters;
		}
		qsort(samples, rounds, sizeof(double), cmp_double);
		double med = samples[rounds / 2];
		printf("%s %d %.1f %.0f\n", names[mode], n, med, (double)n * 1e9 / med);
	}
	/* Correctness check of the checksummed path: verify segment 0's TCP checksum. */
	{
		struct rte_mbuf *out[MAX_SEGS];
		m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
		int n = rte_gso_segment(m, &ctx, out, MAX_SEGS);
		struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(out[0], struct rte_ipv4_hdr *, 14);
		struct rte_tcp_hdr *tcp = rte_pktmbuf_mtod_offset(out[0], struct rte_tcp_hdr *, 34);
		tcp->cksum = 0;
		tcp->cksum = rte_ipv4_udptcp_cksum_mbuf(out[0], ip, 34);
		printf("check dpdk_seg0_tcp_cksum 0x%04x segs %d\n", rte_be_to_cpu_16(tcp->cksum), n);
		for (int i = 0; i < n; i++)
			rte_pktmbuf_free(out[i]);
	}
	free(samples);
	rte_pktmbuf_free(m);
	rte_eal_cleanup();
	return 0;
}
