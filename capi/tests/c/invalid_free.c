/* free() of addresses slabcg never handed out, run with libslabcg.so preloaded: each mode
 * must end the process with slabcg's fatal message (capi/tests/c_abi.rs), not a SIGSEGV.
 *
 *   mmap    a page-aligned pointer from a direct mmap, the page below it unmapped (a free
 *           that took it for a large block would read its header there and fault)
 *   middle  a pointer into the middle of a malloc'd block (reported by the hardened build)
 *   large   a page inside a large malloc'd block (page aligned, not the block's start) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    char *p;
    if (strcmp(mode, "mmap") == 0) {
        p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 2;
        munmap(p, 4096);
        p += 4096;
    } else if (strcmp(mode, "middle") == 0) {
        p = malloc(100);
        if (!p) return 2;
        p += 16;
    } else if (strcmp(mode, "large") == 0) {
        p = malloc(1 << 20);
        if (!p) return 2;
        p += 8192;
    } else {
        return 3;
    }
    free(p);
    printf("not detected\n");
    return 0;
}
