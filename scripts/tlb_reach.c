/*
 * What a lookup in a big table costs this machine, without the engine: the
 * reference program for issue 13's million-binding goal (scripts/bench.sh
 * builds and runs it on the RX lcore's CPU).
 *
 * A lookup here is one load of a random line among HOT lines, asked for
 * AHEAD lookups before (as `rx::LOOKUP_AHEAD` does for the flow table's
 * slots), the lines either spread over a TABLE_MB mapping (where a big
 * table's hash puts them) or packed into the first HOT * 64 bytes of it (the
 * same number of lines, few pages). Each lookup may also copy two lines of
 * a packet-sized element of a STREAM_MB source, as `net_pcap`'s infinite_rx
 * copies each replayed frame (its header and data lines). Every mapping is
 * 2 MiB-aligned and advised MADV_HUGEPAGE, as the flow table's are.
 *
 * Spread against packed, with and without the stream, tells what the
 * table's size alone costs: the TLB's reach and the page walks, which no
 * table layout avoids once a million entries leave more pages than the TLB
 * holds.
 *
 *   cc -O2 -o tlb_reach scripts/tlb_reach.c
 *   taskset -c 1 ./tlb_reach [TABLE_MB HOT AHEAD STREAM_MB LOOKUPS]
 *
 * Prints one line per case: "CASE ns_per_lookup".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE (2UL << 20)
#define ELEM 2048UL

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A zeroed-then-touched, 2 MiB-aligned mapping advised for huge pages. */
static char *map(size_t len)
{
	char *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("tlb_reach: mmap");
		exit(1);
	}
	p = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	madvise(p, len, MADV_HUGEPAGE);
	memset(p, 1, len);
	return p;
}

/* xorshift64: the same sequence every run. */
static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	size_t table_mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 128;
	size_t hot = argc > 2 ? strtoul(argv[2], NULL, 10) : 4096;
	size_t ahead = argc > 3 ? strtoul(argv[3], NULL, 10) : 8;
	size_t stream_mb = argc > 4 ? strtoul(argv[4], NULL, 10) : 16;
	long n = argc > 5 ? strtol(argv[5], NULL, 10) : 40000000;
	size_t len = table_mb << 20, lines = len / 64, seq_len = 1 << 20;
	if (hot == 0 || hot > lines || stream_mb == 0 || n <= 0) {
		fprintf(stderr, "tlb_reach: usage: tlb_reach [TABLE_MB HOT AHEAD STREAM_MB LOOKUPS]\n");
		return 2;
	}
	char *table = map(len);
	char *src = map(stream_mb << 20);
	char *dst = map(HUGE);
	size_t elems = (stream_mb << 20) / ELEM;
	uint64_t *spread = malloc(hot * sizeof *spread), *packed = malloc(hot * sizeof *packed);
	uint32_t *seq = malloc(seq_len * sizeof *seq);
	if (!spread || !packed || !seq) {
		fprintf(stderr, "tlb_reach: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < hot; i++) {
		spread[i] = (next() % lines) * 64;
		packed[i] = i * 64;
	}
	for (size_t i = 0; i < seq_len; i++)
		seq[i] = (uint32_t)(next() % hot);
	static const struct {
		const char *name;
		int spread, stream;
	} cases[] = {
		{"packed", 0, 0}, {"spread", 1, 0}, {"packed+stream", 0, 1}, {"spread+stream", 1, 1},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const uint64_t *at = cases[c].spread ? spread : packed;
		uint64_t sum = 0;
		size_t e = 0;
		double t0 = now();
		for (long i = 0; i < n; i++) {
			if (cases[c].stream) {
				/* A frame's header line and its data line, into a
				 * recycled buffer (the mbufs the PMD fills). */
				const char *f = src + e * ELEM;
				char *d = dst + ((size_t)i & 511) * ELEM;
				memcpy(d, f, 64);
				memcpy(d + 256, f + 256, 64);
				if (++e == elems)
					e = 0;
			}
			if (ahead)
				__builtin_prefetch(table + at[seq[(i + ahead) & (seq_len - 1)]]);
			sum += *(volatile uint64_t *)(table + at[seq[i & (seq_len - 1)]]);
		}
		double t = now() - t0;
		printf("%s %.2f\n", cases[c].name, t * 1e9 / (double)n);
		if (sum == 42)
			puts("");
	}
	return 0;
}
