/*
 * slabcg.h: per-tenant memory accounting and limits for C and C++ programs.
 *
 * libslabcg.so is a malloc replacement (malloc, free, calloc, realloc, posix_memalign, ...)
 * that charges every allocation to the calling thread's current *tenant*, the way Linux's
 * memory cgroup charges kernel objects to cgroups. Load it with LD_PRELOAD, or link with
 * -lslabcg (before libc), then use this API to give parts of the program their own limits:
 *
 *     slabcg_tenant *t;
 *     slabcg_scope *s;
 *     slabcg_tenant_new(NULL, "customer-42", &t);     // a child of the root tenant
 *     slabcg_tenant_set_max(t, 64 << 20);              // hard limit: 64 MiB
 *     slabcg_enter(t, &s);                             // this thread now allocates for t
 *     char *buf = malloc(1 << 30);                     // refused: NULL, errno == ENOMEM
 *     slabcg_leave(s);                                 // back to the previous tenant
 *     struct slabcg_usage u;
 *     slabcg_tenant_usage(t, &u);                      // u.current, u.peak, u.events_max ...
 *     slabcg_tenant_drop(t);
 *
 * Semantics (the same as the Rust API, slabcg::Tenant):
 * - Tenants form a tree under the root tenant, which is never limited and owns every
 *   allocation made outside any scope. A charge is added to the tenant and all its
 *   ancestors; any of their limits can refuse it.
 * - A block is charged with its usable size (malloc_usable_size) to the tenant the
 *   allocating thread was in, and uncharged from that tenant when freed, by any thread,
 *   even after the tenant was dropped (its parent then carries the charge).
 * - current never exceeds max. At max, with SLABCG_OOM_FAIL (the default) the allocation
 *   fails: malloc returns NULL with errno ENOMEM, slabcg_tenant_charge returns -ENOMEM,
 *   events_max and events_oom count it. With SLABCG_OOM_KILL, a victim in the subtree is
 *   killed and the charge goes through the overdraft; the victim's code sees it at its next
 *   slabcg_checkpoint(). Nothing ever blocks inside malloc.
 * - Exceeding high never fails; it counts events_high.
 * - Per-thread stocks pre-charge bytes in batches of 256 KiB and keep freed objects charged
 *   (up to 128 KiB per size class), so current may read above the bytes in use: by up to
 *   4 MiB per CPU of pre-charged bytes for one tenant, all threads together, plus what
 *   each thread keeps; slabcg_tenant_current_exact drains them first.
 *
 * Errors: every function returning int returns 0 on success or a negative errno value:
 * -EINVAL for a NULL handle or a bad argument, -ENOMEM for a refused charge, -EPERM for a
 * scope left on another thread, -ECANCELED from slabcg_checkpoint in a killed tenant,
 * -ENOSPC when no tenant id is left. No function aborts for bad input; a detected heap
 * corruption (double or invalid free) aborts the process with a message, as glibc does.
 *
 * Handles are thread-safe: any thread may use a slabcg_tenant. A slabcg_scope belongs to
 * the thread that entered it; scopes nest and must be left in reverse order. A thread that
 * exits inside a scope leaks the scope, which keeps its tenant alive.
 */
#ifndef SLABCG_H
#define SLABCG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A handle on a tenant. The tenant lives while any handle, live child or entered scope
 * holds it. */
typedef struct slabcg_tenant slabcg_tenant;

/* A tenant scope entered on one thread (slabcg_enter / slabcg_leave). */
typedef struct slabcg_scope slabcg_scope;

/* No limit (the default max and high). */
#define SLABCG_UNLIMITED UINT64_MAX

/* What happens when a charge would exceed max. */
#define SLABCG_OOM_FAIL 0 /* the allocation fails (NULL, ENOMEM) */
#define SLABCG_OOM_KILL 1 /* a victim in the subtree is killed; the charge goes through */

/* A tenant's counters, as cgroup v2's memory.current, memory.peak, memory.max, memory.high
 * and memory.events (which count the tenant's events and its descendants'). */
struct slabcg_usage {
    uint64_t current;         /* bytes charged, including stock pre-charges */
    uint64_t peak;            /* highest current seen */
    uint64_t max;             /* hard limit, SLABCG_UNLIMITED when none */
    uint64_t high;            /* soft limit, SLABCG_UNLIMITED when none */
    uint64_t events_high;     /* charges that left usage above high */
    uint64_t events_max;      /* charges refused by max (after draining stocks) */
    uint64_t events_oom;      /* allocations and charges that failed */
    uint64_t events_oom_kill; /* times the OOM killer picked this tenant */
};

/* A handle on the root tenant in *out. */
int slabcg_tenant_root(slabcg_tenant **out);

/* A new tenant named name (UTF-8), a child of parent (NULL: of the root), in *out. A child
 * inherits its parent's OOM policy. */
int slabcg_tenant_new(const slabcg_tenant *parent, const char *name, slabcg_tenant **out);

/* Drops a handle (the tenant lives on while other handles, children or scopes hold it). */
int slabcg_tenant_drop(slabcg_tenant *t);

/* Limits. set_max below the current usage refuses later charges until usage drops; it
 * evicts nothing. Either, lowered below the current usage, first drains the bytes that
 * threads' stocks pre-charged. Both are ignored on the root. */
int slabcg_tenant_set_max(const slabcg_tenant *t, uint64_t bytes);
int slabcg_tenant_set_high(const slabcg_tenant *t, uint64_t bytes);
int slabcg_tenant_set_oom_policy(const slabcg_tenant *t, int policy); /* SLABCG_OOM_* */
int slabcg_tenant_set_overdraft(const slabcg_tenant *t, uint64_t bytes);

/* Reads the counters into *out. */
int slabcg_tenant_usage(const slabcg_tenant *t, struct slabcg_usage *out);

/* The exact usage: every thread's stock of the subtree is drained first, so this is the sum
 * of the usable sizes of the subtree's live blocks plus its outstanding charges. */
int slabcg_tenant_current_exact(const slabcg_tenant *t, uint64_t *out);

/* The memory.stat-like report ("current N\npeak N\n...") into buf: at most len bytes,
 * NUL-terminated when len > 0, cut short if needed; its full length (without the NUL) in
 * *needed when needed is not NULL. buf may be NULL when len is 0 (to ask the length). */
int slabcg_tenant_stat(const slabcg_tenant *t, char *buf, size_t len, size_t *needed);

/* The tenant's name (UTF-8, as created; the root's is "root") or its path from the root
 * ("svc/customer-42"; the root's is "root"; a '/' or '%' inside a name written "%2F" or
 * "%25") into buf, snprintf-style: at most len bytes
 * including the NUL, cut short at a UTF-8 character boundary when it does not fit, and
 * NUL-terminated when len > 0 (buf may be NULL when len is 0). Returns the full length in
 * bytes without the NUL (a return >= len means it was cut), or -EINVAL for a NULL handle
 * or a NULL buf with len > 0. */
ptrdiff_t slabcg_tenant_name(const slabcg_tenant *t, char *buf, size_t len);
ptrdiff_t slabcg_tenant_path(const slabcg_tenant *t, char *buf, size_t len);

/* A reclaim callback: t is the tenant whose max refused a charge (lent for the call: do not
 * drop it, do not keep it), bytes the size of the charge, user what was registered. */
typedef void (*slabcg_reclaim_fn)(const slabcg_tenant *t, uint64_t bytes, void *user);

/* Registers fn(t, bytes, user) as the tenant's reclaim callback (the Rust API's
 * Tenant::set_reclaim), replacing an earlier one; a NULL fn replaces it with one that does
 * nothing. When a charge (malloc, slabcg_tenant_charge, ...) would exceed the tenant's max
 * even after every thread's stock was drained, the callback runs once, on the thread whose
 * charge was refused, before the charge fails; it may free memory (free() what the tenant's
 * caches hold), and the charge is tried again: what it freed lets the charge pass. Only
 * max calls it (high never does), and only the refusing tenant's callback runs (the
 * lowest ancestor whose max is passed). It runs outside the allocator's critical sections
 * and is never re-entered on the same thread (a charge refused inside it just fails); what
 * it allocates belongs to the root, so it may malloc while its tenant is full. It may run
 * on any thread, so fn and user must be thread-safe; the library never frees user. It runs
 * inside malloc: a compiler that treats malloc as a builtin may assume the call leaves the
 * program's globals alone, so make what the callback changes volatile (or atomic), or build
 * with -fno-builtin-malloc. */
int slabcg_tenant_set_reclaim(const slabcg_tenant *t, slabcg_reclaim_fn fn, void *user);

/* Charges (or gives back) a non-heap resource, such as socket buffers, to the tenant;
 * slabcg_tenant_charge returns -ENOMEM when a limit refuses. */
int slabcg_tenant_charge(const slabcg_tenant *t, uint64_t bytes);
int slabcg_tenant_uncharge(const slabcg_tenant *t, uint64_t bytes);

/* Kills the tenant and its descendants; their code sees it at slabcg_checkpoint. */
int slabcg_tenant_kill(const slabcg_tenant *t);
/* 1 when the tenant or an ancestor was killed, 0 when not. */
int slabcg_tenant_is_killed(const slabcg_tenant *t);

/* From now on, this thread's allocations are charged to t, until slabcg_leave(*out).
 * Scopes nest: leaving one brings back the one entered before it. */
int slabcg_enter(const slabcg_tenant *t, slabcg_scope **out);
/* Ends a scope, on the thread that entered it (else -EPERM, and the scope stays). */
int slabcg_leave(slabcg_scope *s);

/* A safe point: 0, or -ECANCELED when the current tenant or an ancestor was killed. */
int slabcg_checkpoint(void);

/* Drains every thread's stock back to the counters. */
void slabcg_drain_all_stocks(void);
/* Gives free memory back to the OS now. */
void slabcg_trim(void);

#ifdef __cplusplus
}
#endif

#endif /* SLABCG_H */
