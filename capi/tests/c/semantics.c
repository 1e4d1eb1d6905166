/* The C semantics of the malloc family, run by capi/tests/c_abi.rs with libslabcg.so preloaded
 * (and once without, against the C library, for the checks that are not slabcg-specific).
 * Prints "ok <check>" per check; any failure prints "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* C23's sized frees, not in this libc: looked up at run time (plain free without them). */
static void (*free_sized_fn)(void *, size_t);
static void (*free_aligned_sized_fn)(void *, size_t, size_t);

static int is_slabcg;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            printf("FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #cond, errno);        \
            fflush(stdout);                                                                 \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static void ok(const char *what) { printf("ok %s\n", what); fflush(stdout); }

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7)) return 0;
    return 1;
}

static void check_malloc(void) {
    /* malloc(0): a unique pointer free accepts. */
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b);
    free(a);
    free(b);
    free(NULL);
    /* Every size up to 64 KiB by steps, then large ones: aligned, writable, usable >= n. */
    static void *blocks[4096];
    size_t sizes[4096];
    int k = 0;
    for (size_t n = 1; n <= 65536; n += (n < 512 ? 1 : n / 8)) {
        void *p = malloc(n);
        CHECK(p);
        CHECK(((uintptr_t)p % (n > 8 ? 16 : 8)) == 0);
        CHECK(malloc_usable_size(p) >= n);
        fill(p, n, (unsigned)n);
        blocks[k] = p;
        sizes[k++] = n;
    }
    for (size_t n = 128 << 10; n <= (64u << 20); n *= 2) {
        void *p = malloc(n + 1);
        CHECK(p && ((uintptr_t)p % 16) == 0 && malloc_usable_size(p) >= n + 1);
        fill(p, n + 1, 3);
        blocks[k] = p;
        sizes[k++] = n + 1;
    }
    for (int i = 0; i < k; i++) {
        CHECK(same(blocks[i], sizes[i], sizes[i] == 0 ? 0 : (sizes[i] <= 65536 ? (unsigned)sizes[i] : 3)));
        free(blocks[i]);
    }
    CHECK(malloc_usable_size(NULL) == 0);
    ok("malloc");

    errno = 0;
    CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc((size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc(SIZE_MAX - 4096) == NULL && errno == ENOMEM);
    ok("malloc-enomem");
}

static void check_calloc(void) {
    errno = 0;
    CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc((size_t)1 << 32, (size_t)1 << 32) == NULL && errno == ENOMEM);
    /* Reused memory comes back zeroed. */
    for (size_t n = 1; n < 300000; n = n * 3 + 1) {
        for (int r = 0; r < 3; r++) {
            unsigned char *p = malloc(n);
            CHECK(p);
            memset(p, 0xa5, n);
            free(p);
            unsigned char *q = calloc(1, n);
            CHECK(q);
            for (size_t i = 0; i < n; i++) CHECK(q[i] == 0);
            free(q);
        }
    }
    void *z = calloc(0, 10);
    CHECK(z);
    free(z);
    ok("calloc");
}

static void check_realloc(void) {
    unsigned char *p = realloc(NULL, 10);
    CHECK(p);
    fill(p, 10, 1);
    size_t prev = 10;
    size_t steps[] = {20, 100, 1000, 5000, 70000, 200000, 3u << 20, 9u << 20, 150000, 4000, 64, 16, 5};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        size_t n = steps[i];
        unsigned char *q = realloc(p, n);
        CHECK(q);
        CHECK(((uintptr_t)q % (n > 8 ? 16 : 8)) == 0);
        CHECK(malloc_usable_size(q) >= n);
        size_t keep = prev < n ? prev : n;
        CHECK(same(q, keep, 1));
        fill(q, n, 1);
        p = q;
        prev = n;
    }
    /* A failed realloc leaves the block as it was. */
    errno = 0;
    CHECK(realloc(p, SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(realloc(p, (size_t)PTRDIFF_MAX + 10) == NULL && errno == ENOMEM);
    CHECK(same(p, prev, 1));
    /* reallocarray: overflow fails with the block unchanged. */
    errno = 0;
    CHECK(reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
    CHECK(same(p, prev, 1));
    unsigned char *r = reallocarray(p, 100, 40);
    CHECK(r && same(r, prev, 1) && malloc_usable_size(r) >= 4000);
    /* realloc(p, 0) frees p and returns NULL, as glibc does. */
    CHECK(realloc(r, 0) == NULL);
    /* realloc of an aligned block. */
    void *a;
    CHECK(posix_memalign(&a, 1 << 16, 1000) == 0);
    fill(a, 1000, 9);
    unsigned char *b = realloc(a, 300000);
    CHECK(b && same(b, 1000, 9));
    b = realloc(b, 100);
    CHECK(b && same(b, 100, 9));
    free(b);
    /* A large block aligned above the page, grown and shrunk as a large block. */
    CHECK(posix_memalign(&a, 1 << 20, 300000) == 0 && ((uintptr_t)a % (1 << 20)) == 0);
    fill(a, 300000, 5);
    b = realloc(a, 3000000);
    CHECK(b && same(b, 300000, 5) && malloc_usable_size(b) >= 3000000);
    fill(b, 3000000, 6);
    b = realloc(b, 200000);
    CHECK(b && same(b, 200000, 6));
    free(b);
    ok("realloc");
}

static void check_aligned(void) {
    void *p = (void *)1;
    CHECK(posix_memalign(&p, 3, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 4, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 0, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 24, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 64, SIZE_MAX - 100) == ENOMEM && p == (void *)1);
    for (size_t align = 8; align <= (4u << 20); align *= 2) {
        size_t sizes[] = {0, 1, 17, align, 3 * align + 5, 200000};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            void *q;
            CHECK(posix_memalign(&q, align, sizes[i]) == 0);
            CHECK(((uintptr_t)q % align) == 0);
            CHECK(malloc_usable_size(q) >= sizes[i]);
            memset(q, 0x5a, sizes[i]);
            if (i % 2)
                free(q);
            else if (free_aligned_sized_fn)
                free_aligned_sized_fn(q, align, sizes[i]);
            else
                free(q);
        }
    }
    ok("posix_memalign");

    /* Small blocks at alignment 16, kept alive together: the 8-byte class's slots are only
       8 apart, so one freed before the next is asked for (above) can hide a misaligned
       one. */
    {
        void *held[3][64];
        for (int i = 0; i < 64; i++) {
            size_t n = 1 + (size_t)i % 8;
            CHECK(posix_memalign(&held[0][i], 16, n) == 0);
            held[1][i] = aligned_alloc(16, n);
            held[2][i] = memalign(16, n);
            for (int k = 0; k < 3; k++)
                CHECK(held[k][i] && ((uintptr_t)held[k][i] % 16) == 0);
        }
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 64; i++)
                free(held[k][i]);
    }
    ok("alignment 16 of blocks of 8 bytes or less");

    for (size_t align = 1; align <= (1u << 20); align *= 4) {
        void *q = aligned_alloc(align, 100);
        CHECK(q && ((uintptr_t)q % align) == 0);
        free(q);
    }
    if (is_slabcg) {
        /* C17 and glibc 2.38: an alignment that is not a power of two is refused (this
         * machine's glibc 2.36 rounds it up instead). */
        errno = 0;
        CHECK(aligned_alloc(3, 16) == NULL && errno == EINVAL);
        errno = 0;
        CHECK(aligned_alloc(0, 16) == NULL && errno == EINVAL);
    }
    ok("aligned_alloc");

    void *m = memalign(48, 10); /* rounded up to 64 */
    CHECK(m && ((uintptr_t)m % 64) == 0);
    free(m);
    m = memalign(1 << 13, 5);
    CHECK(m && ((uintptr_t)m % (1 << 13)) == 0);
    free(m);
    errno = 0;
    CHECK(memalign(((size_t)1 << 63) + 1, 8) == NULL && errno == EINVAL);
    long page = sysconf(_SC_PAGESIZE);
    void *v = valloc(1);
    CHECK(v && ((uintptr_t)v % page) == 0);
    free(v);
    void *pv = pvalloc(1);
    CHECK(pv && ((uintptr_t)pv % page) == 0 && malloc_usable_size(pv) >= (size_t)page);
    memset(pv, 1, page);
    free(pv);
    pv = pvalloc(0);
    CHECK(pv && (!is_slabcg || malloc_usable_size(pv) >= (size_t)page));
    free(pv);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
    ok("memalign-valloc-pvalloc");

    if (free_sized_fn) {
        void *s = malloc(100);
        free_sized_fn(s, 100);
        s = malloc(5000);
        free_sized_fn(s, 5000);
        ok("free_sized");
    }
}

/* Threads: blocks handed across threads, threads that exit with blocks still live. */
#define NT 4
static void *queue[NT][1000];

static void *producer(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < 1000; i++) {
        size_t n = 1 + (size_t)(i * 37 + t) % 3000;
        queue[t][i] = malloc(n);
        if (!queue[t][i]) abort();
        fill(queue[t][i], n, (unsigned)i);
    }
    return NULL;
}

static void *churn(void *arg) {
    (void)arg;
    void *keep[64] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = i % 64;
        free(keep[k]);
        keep[k] = malloc(1 + (size_t)(i * 13) % 600);
        if (!keep[k]) abort();
    }
    for (int k = 0; k < 64; k++) free(keep[k]);
    return NULL;
}

/* A pthread key destructor that allocates and frees after the allocator's own thread-exit
 * hook ran (its key is older, so glibc runs it first), and leaves a block for main. */
static pthread_key_t late_key;
static void *late_blocks[8];
static void late_dtor(void *arg) {
    int t = (int)(intptr_t)arg - 1;
    for (int i = 0; i < 100; i++) {
        void *p = malloc(32 + (size_t)i * 50);
        if (!p) abort();
        free(p);
    }
    late_blocks[t] = malloc(1000);
    if (!late_blocks[t]) abort();
    fill(late_blocks[t], 1000, (unsigned)t);
}
static void *with_late_dtor(void *arg) {
    void *warm = malloc(100); /* the allocator's thread state exists before the key is set */
    free(warm);
    pthread_setspecific(late_key, (void *)((intptr_t)arg + 1));
    return NULL;
}

static void check_threads(void) {
    CHECK(pthread_key_create(&late_key, late_dtor) == 0);
    pthread_t lt[8];
    for (int t = 0; t < 8; t++) CHECK(pthread_create(&lt[t], NULL, with_late_dtor, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < 8; t++) CHECK(pthread_join(lt[t], NULL) == 0);
    for (int t = 0; t < 8; t++) {
        CHECK(late_blocks[t] && same(late_blocks[t], 1000, (unsigned)t));
        free(late_blocks[t]);
    }
    for (int round = 0; round < 20; round++) {
        pthread_t th[NT];
        for (int t = 0; t < NT; t++) CHECK(pthread_create(&th[t], NULL, producer, (void *)(intptr_t)t) == 0);
        for (int t = 0; t < NT; t++) CHECK(pthread_join(th[t], NULL) == 0);
        /* The producers have exited; their blocks are freed here. */
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < 1000; i++) {
                size_t n = 1 + (size_t)(i * 37 + t) % 3000;
                CHECK(same(queue[t][i], n, (unsigned)i));
                free(queue[t][i]);
            }
    }
    ok("threads-exit");
}

/* fork while other threads allocate: the child must be able to allocate and free. */
static volatile int stop;
static void *busy(void *arg) {
    (void)arg;
    while (!stop) churn(NULL);
    return NULL;
}

static void check_fork(void) {
    pthread_t th[3];
    stop = 0;
    for (int t = 0; t < 3; t++) CHECK(pthread_create(&th[t], NULL, busy, NULL) == 0);
    for (int i = 0; i < 30; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            churn(NULL);
            void *big = malloc(1 << 20);
            if (!big) _exit(2);
            free(big);
            /* A thread in the child too. */
            pthread_t c;
            if (pthread_create(&c, NULL, churn, NULL) != 0) _exit(3);
            pthread_join(c, NULL);
            _exit(0);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ok("fork-from-threads");
    for (int i = 0; i < 10; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            char *argv[] = {"/bin/sh", "-c", "x=$(echo abc | tr a-c A-C); test \"$x\" = ABC", NULL};
            execv("/bin/sh", argv);
            _exit(127);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    stop = 1;
    for (int t = 0; t < 3; t++) CHECK(pthread_join(th[t], NULL) == 0);
    ok("fork-exec");
}

/* dlopen / dlclose of a plugin that allocates in its constructor, keeps thread-local state
 * and hands out blocks that outlive it. */
static void check_dlopen(const char *plugin) {
    void *kept[20];
    for (int i = 0; i < 20; i++) {
        void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
        if (!h) printf("dlopen: %s\n", dlerror());
        CHECK(h);
        void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_make");
        CHECK(make);
        kept[i] = make(100 + (size_t)i * 1000);
        CHECK(kept[i] && same(kept[i], 100 + (size_t)i * 1000, 42));
        CHECK(dlclose(h) == 0);
    }
    for (int i = 0; i < 20; i++) free(kept[i]);
    /* Again while other threads allocate: each dlopen of a module with TLS raises the TLS
     * generation, so the threads' next TLS accesses take __tls_get_addr's slow path. */
    pthread_t th[3];
    stop = 0;
    for (int t = 0; t < 3; t++) CHECK(pthread_create(&th[t], NULL, busy, NULL) == 0);
    for (int i = 0; i < 200; i++) {
        void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
        CHECK(h);
        void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_make");
        void *p = make(64);
        CHECK(p && same(p, 64, 42));
        free(p);
        CHECK(dlclose(h) == 0);
    }
    stop = 1;
    for (int t = 0; t < 3; t++) CHECK(pthread_join(th[t], NULL) == 0);
    ok("dlopen-dlclose");
}

int main(int argc, char **argv) {
    is_slabcg = dlsym(RTLD_DEFAULT, "slabcg_trim") != NULL;
    free_sized_fn = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    free_aligned_sized_fn = (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    printf("allocator %s\n", is_slabcg ? "slabcg" : "libc");
    check_malloc();
    check_calloc();
    check_realloc();
    check_aligned();
    check_threads();
    check_fork();
    if (argc > 1) check_dlopen(argv[1]);
    /* glibc's introspection calls exist in both allocators: the report goes to stderr. */
    void *keep = malloc(100);
    malloc_stats();
    CHECK(malloc_trim(0) == 1 || !is_slabcg);
    free(keep);
    ok("malloc_stats-trim");
    printf("ALL OK\n");
    return 0;
}
