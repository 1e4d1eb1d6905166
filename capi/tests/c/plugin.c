/* A plugin for semantics.c's dlopen check: allocates in its constructor and destructor,
 * has thread-local storage (so dlopen raises the TLS generation), and hands out blocks that
 * outlive it. */
#include <stdlib.h>
#include <string.h>

static __thread char tls_buf[256];
static void *ctor_block;

__attribute__((constructor)) static void plugin_init(void) { ctor_block = malloc(777); }
__attribute__((destructor)) static void plugin_fini(void) { free(ctor_block); }

void *plugin_make(size_t n) {
    unsigned char *p = malloc(n);
    if (!p) return NULL;
    memset(tls_buf, 1, sizeof tls_buf);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(42 + i * 7 + tls_buf[0] - 1);
    return p;
}
