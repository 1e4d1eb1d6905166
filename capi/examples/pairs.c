/* malloc(32)/free pairs, for instruction counts of the C paths (BENCHMARKS.md section 9):
 *
 *   gcc -O2 -fno-builtin -o pairs capi/examples/pairs.c
 *   for n in 0 250000; do
 *     LD_PRELOAD=$PWD/target/release/libslabcg.so valgrind --tool=callgrind \
 *       --callgrind-out-file=/dev/null ./pairs $n 2>&1 | grep refs
 *   done
 *
 * (the difference of the two counts, divided by 1,000,000, is instructions per pair). */
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    void *p[4];
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) p[k] = malloc(32);
        for (int k = 0; k < 4; k++) free(p[k]);
    }
    return 0;
}
