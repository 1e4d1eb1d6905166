/* The C tenant API at work, and checked: built and run by capi/tests/c_abi.rs.
 *
 *   gcc -O2 -pthread -Icapi/include capi/examples/tenants.c -Ltarget/release -lslabcg \
 *       -Wl,-rpath,$PWD/target/release -o tenants && ./tenants
 *
 * Linked with -lslabcg, libslabcg.so is loaded before libc and its malloc replaces libc's
 * for the whole process. Prints what it sees; exits 1 at the first surprise. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slabcg.h"

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                          \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static uint64_t exact(const slabcg_tenant *t) {
    uint64_t v = 0;
    CHECK(slabcg_tenant_current_exact(t, &v) == 0);
    return v;
}

/* A tenant with a 1 MiB max refuses malloc with NULL + ENOMEM; current and peak are the
 * usable sizes of what it holds. */
static void limit(const slabcg_tenant *svc) {
    slabcg_tenant *t;
    slabcg_scope *s;
    CHECK(slabcg_tenant_new(svc, "customer-a", &t) == 0);
    CHECK(slabcg_tenant_set_max(t, 1 << 20) == 0);
    void *blocks[64];
    size_t held = 0;
    int n = 0;
    CHECK(slabcg_enter(t, &s) == 0);
    for (;;) {
        errno = 0;
        void *p = malloc(100000);
        if (!p) {
            CHECK(errno == ENOMEM);
            break;
        }
        memset(p, 1, 100000);
        CHECK(n < 64);
        held += malloc_usable_size(p);
        blocks[n++] = p;
    }
    /* One block of 64 KiB may still fit under the limit; 1 MiB more may not. */
    errno = 0;
    CHECK(malloc(1 << 20) == NULL && errno == ENOMEM);
    CHECK(slabcg_leave(s) == 0);
    /* Outside the scope the same thread allocates for the root: not limited. */
    void *outside = malloc(4 << 20);
    CHECK(outside);
    free(outside);
    struct slabcg_usage u;
    CHECK(slabcg_tenant_usage(t, &u) == 0);
    uint64_t now = exact(t);
    printf("max 1048576: %d blocks of 100000 B fit (usable %zu B), current_exact %llu, "
           "peak %llu, events.max %llu, events.oom %llu\n",
           n, held, (unsigned long long)now, (unsigned long long)u.peak,
           (unsigned long long)u.events_max, (unsigned long long)u.events_oom);
    CHECK(n >= 8 && n <= 10);
    CHECK(now == held);
    CHECK(u.current <= u.max && u.max == 1 << 20);
    CHECK(u.peak >= held && u.peak <= u.max);
    CHECK(u.events_max >= 2 && u.events_oom >= 2);
    /* The parent carries the child's charges. */
    CHECK(exact(svc) >= held);
    /* Freed on another thread's behalf or not, the bytes come back to the tenant. */
    for (int i = 0; i < n; i++) free(blocks[i]);
    CHECK(exact(t) == 0);
    /* realloc(p, 0) frees p (glibc's choice): its bytes leave the tenant. */
    CHECK(slabcg_enter(t, &s) == 0);
    void *p = malloc(5000);
    CHECK(p && exact(t) == malloc_usable_size(p));
    CHECK(realloc(p, 0) == NULL);
    CHECK(slabcg_leave(s) == 0);
    CHECK(exact(t) == 0);
    CHECK(slabcg_tenant_drop(t) == 0);
    printf("ok limit\n");
}

/* Threads that enter a tenant as their very first act, allocate, and exit; the main thread
 * frees what they left: the tenant ends at 0. */
static slabcg_tenant *shared;
static void *blocks_of[4][200];

static void *worker(void *arg) {
    int w = (int)(size_t)arg;
    slabcg_scope *s;
    if (slabcg_enter(shared, &s) != 0) return (void *)1;
    for (int i = 0; i < 200; i++) {
        blocks_of[w][i] = malloc(16 + (size_t)i * 40);
        if (!blocks_of[w][i]) return (void *)2;
    }
    char *tmp = malloc(300000); /* large, freed on this thread */
    free(tmp);
    if (slabcg_leave(s) != 0) return (void *)3;
    return NULL;
}

static void threads(const slabcg_tenant *svc) {
    CHECK(slabcg_tenant_new(svc, "workers", &shared) == 0);
    pthread_t th[4];
    for (int w = 0; w < 4; w++) CHECK(pthread_create(&th[w], NULL, worker, (void *)(size_t)w) == 0);
    size_t expect = 0;
    for (int w = 0; w < 4; w++) {
        void *r;
        CHECK(pthread_join(th[w], &r) == 0 && r == NULL);
    }
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < 200; i++) expect += malloc_usable_size(blocks_of[w][i]);
    uint64_t got = exact(shared);
    printf("4 threads: current_exact %llu == sum of usable sizes %zu\n", (unsigned long long)got,
           expect);
    CHECK(got == expect);
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < 200; i++) free(blocks_of[w][i]);
    CHECK(exact(shared) == 0);
    printf("ok threads\n");
}

/* high counts events without refusing; the report text; nesting. */
static void high_stat_nesting(const slabcg_tenant *svc) {
    slabcg_tenant *a, *b;
    slabcg_scope *sa, *sb;
    CHECK(slabcg_tenant_new(svc, "a", &a) == 0);
    CHECK(slabcg_tenant_new(a, "b", &b) == 0);
    CHECK(slabcg_tenant_set_high(a, 100000) == 0);
    CHECK(slabcg_enter(a, &sa) == 0);
    CHECK(slabcg_enter(b, &sb) == 0);
    void *in_b = malloc(300000);
    CHECK(slabcg_leave(sb) == 0);
    void *in_a = malloc(200000);
    CHECK(slabcg_leave(sa) == 0);
    CHECK(in_a && in_b);
    struct slabcg_usage ua, ub;
    CHECK(slabcg_tenant_usage(a, &ua) == 0 && slabcg_tenant_usage(b, &ub) == 0);
    CHECK(exact(b) == malloc_usable_size(in_b));
    CHECK(exact(a) == malloc_usable_size(in_a) + malloc_usable_size(in_b));
    CHECK(ua.events_high >= 1 && ua.high == 100000 && ub.events_max == 0);
    size_t need = 0;
    CHECK(slabcg_tenant_stat(a, NULL, 0, &need) == 0 && need > 0);
    char *text = malloc(need + 1);
    CHECK(slabcg_tenant_stat(a, text, need + 1, NULL) == 0);
    CHECK(strlen(text) == need && strstr(text, "current ") && strstr(text, "events.high "));
    char small[8];
    CHECK(slabcg_tenant_stat(a, small, sizeof small, NULL) == 0 && strlen(small) == 7);
    printf("memory.stat of a (first lines):\n%.*s", (int)(strstr(strstr(text, "\n") + 1, "\n") - text + 1), text);
    free(text);
    free(in_a);
    free(in_b);
    /* Dropped with a live block: freeing it later still uncharges (the parent). */
    CHECK(slabcg_enter(b, &sb) == 0);
    void *late = malloc(50000);
    CHECK(slabcg_leave(sb) == 0);
    size_t late_size = malloc_usable_size(late);
    uint64_t before = exact(a);
    CHECK(before == late_size);
    CHECK(slabcg_tenant_drop(b) == 0);
    free(late);
    CHECK(exact(a) == 0);
    CHECK(slabcg_tenant_drop(a) == 0);
    printf("ok high-stat-nesting\n");
}

/* Kill policy: the runaway child is killed at max; its code sees it at a checkpoint. */
static void kill_policy(const slabcg_tenant *svc) {
    slabcg_tenant *cust, *req;
    slabcg_scope *s;
    CHECK(slabcg_tenant_new(svc, "customer-k", &cust) == 0);
    CHECK(slabcg_tenant_set_oom_policy(cust, SLABCG_OOM_KILL) == 0);
    CHECK(slabcg_tenant_set_max(cust, 1 << 20) == 0);
    CHECK(slabcg_tenant_set_overdraft(cust, 4 << 20) == 0);
    CHECK(slabcg_tenant_new(cust, "request", &req) == 0);
    CHECK(slabcg_enter(req, &s) == 0);
    void *kept[200];
    int n = 0, killed = 0;
    while (n < 200) {
        kept[n] = malloc(20000);
        CHECK(kept[n]);
        n++;
        if (slabcg_checkpoint() == -ECANCELED) {
            killed = 1;
            break;
        }
    }
    CHECK(slabcg_leave(s) == 0);
    CHECK(slabcg_checkpoint() == 0);
    struct slabcg_usage u;
    CHECK(slabcg_tenant_usage(cust, &u) == 0);
    printf("kill policy: killed after %d blocks, is_killed %d, events.oom_kill %llu\n", n,
           slabcg_tenant_is_killed(req), (unsigned long long)u.events_oom_kill);
    CHECK(killed && slabcg_tenant_is_killed(req) == 1 && u.events_oom_kill >= 1);
    for (int i = 0; i < n; i++) free(kept[i]);
    CHECK(exact(cust) == 0);
    CHECK(slabcg_tenant_drop(req) == 0 && slabcg_tenant_drop(cust) == 0);
    printf("ok kill\n");
}

/* Name and path getters, snprintf-style: the full length back, the copy cut at a UTF-8
 * character boundary and NUL-terminated. */
static void names(const slabcg_tenant *svc) {
    slabcg_tenant *t, *root;
    char buf[64];
    CHECK(slabcg_tenant_new(svc, "caf\xc3\xa9-42", &t) == 0); /* "café-42": 8 bytes */
    CHECK(slabcg_tenant_name(t, buf, sizeof buf) == 8 && strcmp(buf, "caf\xc3\xa9-42") == 0);
    CHECK(slabcg_tenant_name(t, NULL, 0) == 8);
    CHECK(slabcg_tenant_path(t, NULL, 0) == 12);
    CHECK(slabcg_tenant_path(t, buf, sizeof buf) == 12 && strcmp(buf, "svc/caf\xc3\xa9-42") == 0);
    /* Room for 4 bytes: "caf" + the first byte of the two-byte character would split it. */
    memset(buf, 'x', sizeof buf);
    CHECK(slabcg_tenant_name(t, buf, 5) == 8 && strcmp(buf, "caf") == 0);
    memset(buf, 'x', sizeof buf);
    CHECK(slabcg_tenant_name(t, buf, 6) == 8 && strcmp(buf, "caf\xc3\xa9") == 0);
    CHECK(buf[6] == 'x'); /* nothing written past len */
    memset(buf, 'x', sizeof buf);
    CHECK(slabcg_tenant_path(t, buf, 4) == 12 && strcmp(buf, "svc") == 0);
    buf[0] = 'x';
    CHECK(slabcg_tenant_name(t, buf, 1) == 8 && buf[0] == 0);
    CHECK(slabcg_tenant_name(NULL, buf, sizeof buf) == -EINVAL);
    CHECK(slabcg_tenant_name(t, NULL, 4) == -EINVAL);
    CHECK(slabcg_tenant_path(NULL, NULL, 0) == -EINVAL);
    CHECK(slabcg_tenant_root(&root) == 0);
    CHECK(slabcg_tenant_name(root, buf, sizeof buf) == 4 && strcmp(buf, "root") == 0);
    CHECK(slabcg_tenant_path(root, buf, sizeof buf) == 4 && strcmp(buf, "root") == 0);
    CHECK(slabcg_tenant_drop(root) == 0 && slabcg_tenant_drop(t) == 0);
    printf("ok names\n");
}

/* A reclaim callback: blocks the tenant keeps as a cache are freed by it when a charge hits
 * max, and the charge passes. */
#define POOL 16
/* volatile: the callback changes it from inside malloc, which a compiler that knows malloc
 * as a builtin assumes leaves the program's globals alone (gcc -O1 kept cache.calls in a
 * register across the refused malloc). */
static volatile struct {
    void *blocks[POOL];
    int n;             /* blocks in the pool */
    int calls;         /* callback runs */
    uint64_t asked;    /* bytes asked at the last run */
    int right_tenant;  /* the lent handle named the tenant */
    int magic;         /* user data seen */
} cache;

static void reclaim_cb(const slabcg_tenant *t, uint64_t bytes, void *user) {
    char name[32];
    cache.calls++;
    cache.asked = bytes;
    cache.magic = *(int *)user;
    cache.right_tenant = slabcg_tenant_name(t, name, sizeof name) == 7 && strcmp(name, "reclaim") == 0;
    /* Free two blocks of the pool, if any. */
    for (int i = 0; i < 2 && cache.n > 0; i++) free(cache.blocks[--cache.n]);
}

static void reclaim(const slabcg_tenant *svc) {
    static int magic = 4242;
    slabcg_tenant *t;
    slabcg_scope *s;
    CHECK(slabcg_tenant_new(svc, "reclaim", &t) == 0);
    CHECK(slabcg_tenant_set_max(t, 1 << 20) == 0);
    CHECK(slabcg_tenant_set_reclaim(t, reclaim_cb, &magic) == 0);
    CHECK(slabcg_tenant_set_reclaim(NULL, reclaim_cb, &magic) == -EINVAL);
    /* Below max the callback never runs; high does not call it either. */
    CHECK(slabcg_tenant_set_high(t, 64 << 10) == 0);
    void *held[32];
    int n = 0;
    CHECK(slabcg_enter(t, &s) == 0);
    for (; n < 8; n++) CHECK((held[n] = malloc(100000)) != NULL);
    CHECK(cache.calls == 0);
    /* Fill up to max: the refused malloc ran the callback once, which had nothing to free. */
    for (;;) {
        void *p = malloc(100000);
        if (!p) break;
        CHECK(n < 32);
        held[n++] = p;
    }
    printf("reclaim: %d blocks of %zu B fit under max %d, %d callback run\n", n,
           malloc_usable_size(held[0]), 1 << 20, cache.calls);
    CHECK(cache.calls == 1 && cache.magic == 4242 && cache.right_tenant);
    CHECK(cache.asked == malloc_usable_size(held[0]));
    /* Hand four blocks to the cache: the next mallocs pass because the callback frees them. */
    for (int i = 0; i < 4; i++) cache.blocks[cache.n++] = held[--n];
    int got = 0;
    for (int i = 0; i < 4; i++) {
        void *p = malloc(100000);
        if (p) held[n++] = p, got++;
    }
    CHECK(slabcg_leave(s) == 0);
    printf("reclaim: %d callback runs, %d mallocs passed with what it freed, %d blocks left in "
           "its cache\n", cache.calls, got, cache.n);
    CHECK(got == 4 && cache.n == 0 && cache.calls >= 2 && cache.calls <= 3);
    size_t usable = 0;
    for (int i = 0; i < n; i++) usable += malloc_usable_size(held[i]);
    CHECK(exact(t) == usable);
    /* A non-heap charge refused by max runs it too. */
    int before = cache.calls;
    CHECK(slabcg_tenant_charge(t, 1 << 20) == -ENOMEM && cache.calls == before + 1);
    CHECK(cache.asked == 1 << 20);
    /* NULL: no callback any more (a refusal still fails, nothing runs). */
    CHECK(slabcg_tenant_set_reclaim(t, NULL, NULL) == 0);
    CHECK(slabcg_tenant_charge(t, 1 << 20) == -ENOMEM && cache.calls == before + 1);
    for (int i = 0; i < n; i++) free(held[i]);
    CHECK(exact(t) == 0);
    CHECK(slabcg_tenant_drop(t) == 0);
    printf("ok reclaim\n");
}

/* Bad input is an error code, never an abort. */
static slabcg_scope *main_scope;
static void *leave_elsewhere(void *arg) {
    (void)arg;
    return (void *)(size_t)(slabcg_leave(main_scope) == -EPERM);
}

static void bad_input(const slabcg_tenant *svc) {
    struct slabcg_usage u;
    uint64_t v;
    slabcg_tenant *t;
    slabcg_scope *s;
    CHECK(slabcg_tenant_set_max(NULL, 1) == -EINVAL);
    CHECK(slabcg_tenant_usage(NULL, &u) == -EINVAL);
    CHECK(slabcg_tenant_usage(svc, NULL) == -EINVAL);
    CHECK(slabcg_tenant_current_exact(NULL, &v) == -EINVAL);
    CHECK(slabcg_tenant_new(svc, NULL, &t) == -EINVAL);
    CHECK(slabcg_tenant_new(svc, "\xff\xfe", &t) == -EINVAL);
    CHECK(slabcg_tenant_new(svc, "x", NULL) == -EINVAL);
    CHECK(slabcg_tenant_set_oom_policy(svc, 7) == -EINVAL);
    CHECK(slabcg_tenant_drop(NULL) == -EINVAL);
    CHECK(slabcg_enter(NULL, &s) == -EINVAL);
    CHECK(slabcg_leave(NULL) == -EINVAL);
    CHECK(slabcg_tenant_stat(svc, NULL, 10, NULL) == -EINVAL);
    CHECK(slabcg_tenant_is_killed(NULL) == -EINVAL);
    CHECK(slabcg_tenant_charge(NULL, 1) == -EINVAL);
    /* A scope belongs to its thread. */
    CHECK(slabcg_enter(svc, &main_scope) == 0);
    pthread_t th;
    void *r;
    CHECK(pthread_create(&th, NULL, leave_elsewhere, NULL) == 0 && pthread_join(th, &r) == 0);
    CHECK(r == (void *)1);
    CHECK(slabcg_leave(main_scope) == 0);
    /* Non-heap charges against a limit. */
    CHECK(slabcg_tenant_new(svc, "sock", &t) == 0);
    CHECK(slabcg_tenant_set_max(t, 100000) == 0);
    CHECK(slabcg_tenant_charge(t, 60000) == 0);
    CHECK(slabcg_tenant_charge(t, 60000) == -ENOMEM);
    CHECK(slabcg_tenant_uncharge(t, 60000) == 0);
    CHECK(exact(t) == 0);
    CHECK(slabcg_tenant_drop(t) == 0);
    printf("ok bad-input\n");
}

int main(void) {
    slabcg_tenant *root, *svc;
    CHECK(slabcg_tenant_root(&root) == 0);
    CHECK(slabcg_tenant_new(NULL, "svc", &svc) == 0);
    limit(svc);
    threads(svc);
    high_stat_nesting(svc);
    kill_policy(svc);
    names(svc);
    reclaim(svc);
    bad_input(svc);
    CHECK(exact(svc) == 0);
    CHECK(slabcg_tenant_drop(shared) == 0 && slabcg_tenant_drop(svc) == 0);
    CHECK(slabcg_tenant_drop(root) == 0);
    printf("ALL OK\n");
    return 0;
}
