/*
 * DPDK peer for Sluice's GRO benchmark (crates/sluice-offload/benches/gro.rs): times
 * rte_gro_reassemble_burst() in lightweight mode (RTE_GRO_TCP_IPV4) on bursts of 32 TCP/IPv4
 * segments (1448 payload bytes, DF, incrementing IDs) of FLOWS interleaved flows (1, 4, 64):
 * packet k of a burst belongs to flow k % FLOWS.
 *
 * Each iteration allocates 32 mbufs, copies the template frames in (as a NIC's DMA would fill
 * them), sets packet_type and l2/l3/l4_len (DPDK's GRO needs them from the caller; a NIC's ptype
 * parsing would supply them), runs GRO and frees what comes out:
 *
 *   dpdk_gro_gross   the whole iteration
 *   dpdk_setup       the same iteration without rte_gro_reassemble_burst()
 *   dpdk_gro         gross - setup: the GRO call alone (the number to compare)
 *
 * DPDK neither validates nor updates L4 checksums.
 *
 * Output, one line per measurement: <name> <flows> <median ns per burst> <segments/s>
 * plus "check <flows> <packets out per burst>".
 *
 * Usage: gro_bench [rounds]   (EAL arguments are built in: --no-huge --no-pci -m 1024
 *                              --no-shconf -l 0 --no-telemetry)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#define BURST 32
#define PAYLOAD 1448
#define HDR (14 + 20 + 20)
#define ITERS 20000

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

static uint8_t templ[BURST][HDR + PAYLOAD];

/* The same bytes as the Rust side builds (benches/gro.rs `burst`). */
static void build_templates(int flows)
{
	for (int k = 0; k < BURST; k++) {
		uint8_t *p = templ[k];
		int flow = k % flows, seg = k / flows;
		memset(p, 0, HDR);
		struct rte_ether_hdr *eth = (struct rte_ether_hdr *)p;
		eth->dst_addr.addr_bytes[0] = 0x02;
		eth->dst_addr.addr_bytes[5] = 0x02;
		eth->src_addr.addr_bytes[0] = 0x02;
		eth->src_addr.addr_bytes[5] = 0x01;
		eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(p + 14);
		ip->version_ihl = 0x45;
		ip->total_length = rte_cpu_to_be_16(20 + 20 + PAYLOAD);
		ip->packet_id = rte_cpu_to_be_16((uint16_t)(100 + seg));
		ip->fragment_offset = rte_cpu_to_be_16(0x4000);
		ip->time_to_live = 64;
		ip->next_proto_id = 6;
		ip->src_addr = rte_cpu_to_be_32(0xc0000201);
		ip->dst_addr = rte_cpu_to_be_32(0xc0000202);
		struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(p + 34);
		tcp->src_port = rte_cpu_to_be_16((uint16_t)(40000 + flow));
		tcp->dst_port = rte_cpu_to_be_16(5201);
		tcp->sent_seq = rte_cpu_to_be_32((uint32_t)(1000 + seg * PAYLOAD));
		tcp->recv_ack = rte_cpu_to_be_32(0x10000000);
		tcp->data_off = 0x50;
		tcp->tcp_flags = 0x10;
		tcp->rx_win = rte_cpu_to_be_16(512);
		for (int i = 0; i < PAYLOAD; i++)
			p[HDR + i] = (uint8_t)((seg * PAYLOAD + i) * 31 + flow);
		ip->hdr_checksum = rte_ipv4_cksum(ip);
		tcp->cksum = rte_ipv4_udptcp_cksum(ip, tcp);
	}
}

static int one_burst(struct rte_mempool *pool, int gro, const struct rte_gro_param *param)
{
	struct rte_mbuf *pkts[BURST];
	if (rte_pktmbuf_alloc_bulk(pool, pkts, BURST) != 0)
		return -1;
	for (int k = 0; k < BURST; k++) {
		struct rte_mbuf *m = pkts[k];
		rte_memcpy(rte_pktmbuf_mtod(m, void *), templ[k], HDR + PAYLOAD);
		m->data_len = HDR + PAYLOAD;
		m->pkt_len = HDR + PAYLOAD;
		m->packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_TCP;
		m->l2_len = 14;
		m->l3_len = 20;
		m->l4_len = 20;
	}
	uint16_t n = BURST;
	if (gro)
		n = rte_gro_reassemble_burst(pkts, BURST, param);
	for (int i = 0; i < n; i++)
		rte_pktmbuf_free(pkts[i]);
	return n;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	char *eal[] = {"gro_bench", "--no-huge", "--no-pci", "-m", "1024", "--no-shconf", "-l", "0",
		       "--no-telemetry", "--log-level", "error"};
	if (rte_eal_init(sizeof(eal) / sizeof(eal[0]), eal) < 0) {
		fprintf(stderr, "rte_eal_init failed\n");
		return 1;
	}
	struct rte_mempool *pool = rte_pktmbuf_pool_create("gro", 1024, 256, 0,
							   RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	if (pool == NULL) {
		fprintf(stderr, "mempool creation failed\n");
		return 1;
	}
	if (argc > 3 && strcmp(argv[1], "profile") == 0) {
		/* Untimed: BURSTS bursts of FLOWS interleaved flows through GRO, for callgrind
		 * (bench/dpdk/gro_callgrind.sh counts rte_gro_reassemble_burst alone). */
		int flows = atoi(argv[2]), bursts = atoi(argv[3]);
		build_templates(flows);
		struct rte_gro_param param = {
			.gro_types = RTE_GRO_TCP_IPV4,
			.max_flow_num = 64,
			.max_item_per_flow = BURST,
		};
		long total = 0;
		for (int i = 0; i < bursts; i++)
			total += one_burst(pool, 1, &param);
		printf("check %d %ld\n", flows, total / (bursts ? bursts : 1));
		rte_eal_cleanup();
		return 0;
	}
	double *gross = calloc(rounds, sizeof(double));
	double *setup = calloc(rounds, sizeof(double));
	double *net = calloc(rounds, sizeof(double));
	const int flow_counts[3] = {1, 4, 64};
	for (int f = 0; f < 3; f++) {
		int flows = flow_counts[f];
		build_templates(flows);
		struct rte_gro_param param = {
			.gro_types = RTE_GRO_TCP_IPV4,
			.max_flow_num = 64,
			.max_item_per_flow = BURST,
		};
		int out = one_burst(pool, 1, &param);
		if (out <= 0) {
			fprintf(stderr, "rte_gro_reassemble_burst failed: %d\n", out);
			return 1;
		}
		for (int i = 0; i < ITERS / 10; i++) {
			one_burst(pool, 1, &param);
			one_burst(pool, 0, &param);
		}
		for (int r = 0; r < rounds; r++) {
			double t0 = now_ns();
			for (int i = 0; i < ITERS; i++)
				one_burst(pool, 1, &param);
			double t1 = now_ns();
			for (int i = 0; i < ITERS; i++)
				one_burst(pool, 0, &param);
			double t2 = now_ns();
			gross[r] = (t1 - t0) / ITERS;
			setup[r] = (t2 - t1) / ITERS;
			net[r] = gross[r] - setup[r];
		}
		qsort(gross, rounds, sizeof(double), cmp_double);
		qsort(setup, rounds, sizeof(double), cmp_double);
		qsort(net, rounds, sizeof(double), cmp_double);
		double g = gross[rounds / 2], s = setup[rounds / 2], n = net[rounds / 2];
		printf("dpdk_gro_gross %d %.1f %.0f\n", flows, g, BURST * 1e9 / g);
		printf("dpdk_setup %d %.1f %.0f\n", flows, s, BURST * 1e9 / s);
		printf("dpdk_gro %d %.1f %.0f\n", flows, n, BURST * 1e9 / n);
		printf("check %d %d\n", flows, out);
	}
	free(gross);
	free(setup);
	free(net);
	rte_eal_cleanup();
	return 0;
}
