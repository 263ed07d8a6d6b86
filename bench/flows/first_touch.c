/* The memory floor of loading rules: how long the first write to N MiB of fresh anonymous
 * memory takes (the page faults and zeroing every new table page costs), on 1 or more threads,
 * with 4 KiB pages or with transparent huge pages asked for (MADV_HUGEPAGE), then a second pass
 * over the same memory (no faults) for comparison. `sluice bench flows` grows its resident memory
 * by ~174-217 bytes per rule, so a 1M-rule insert touches ~174-217 MiB for the first time.
 *
 *   bench/flows/first_touch.sh [MIB]      (builds this with cc and runs the four cases 3 times)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct part { char *p; size_t n; };

static void *fill(void *a) {
    struct part *x = a;
    memset(x->p, 1, x->n);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: first_touch MIB THREADS [huge]\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 20;
    int threads = atoi(argv[2]);
    int huge = argc > 3;
    if (threads < 1 || threads > 16 || n == 0) {
        fprintf(stderr, "first_touch: 1-16 threads and a size above 0\n");
        return 2;
    }
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    if (huge && madvise(p, n, MADV_HUGEPAGE) != 0) perror("madvise");
    pthread_t t[16];
    struct part parts[16];
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        parts[i].p = p + n / threads * i;
        parts[i].n = n / threads;
        pthread_create(&t[i], NULL, fill, &parts[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double t1 = now();
    memset(p, 2, n);
    double t2 = now();
    printf("%s MiB, %d thread(s), %s: first touch %.1f ms, second pass %.1f ms\n", argv[1], threads,
           huge ? "huge pages asked for" : "4 KiB pages", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    munmap(p, n);
    return 0;
}
