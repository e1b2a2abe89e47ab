/*
 * recv.c: client/examples/recv.rs in C, on libudpdemux (include/udpdemux.h).
 * Attach to a running engine, open some of its sockets, receive, close.
 *
 *     recv PREFIX [--secs S] [--idle-ms N] NAME[=EXPECT]...
 *
 * Opens every NAME (one line each: `open NAME id=ID`, or `open-error NAME:
 * ...` and goes on), then receives from the sockets it opened: for S
 * seconds with --secs, else until every NAME=EXPECT has its EXPECT
 * datagrams and nothing more came for N ms (default 300), or 30 s passed.
 * Then one line per socket, as recv.rs prints it:
 * `socket NAME received N bytes B dsts {"ADDR", ...} srcs K tsc_ok BOOL drops D`,
 * `closed NAME`, and `detached cleanup=BOOL`. Errors: one line `error: ...`
 * on stderr, exit status 1.
 *
 * Build: cargo build -p udpdemux-capi, then
 *     cc -Wall -Wextra -Werror -I client/capi/include client/capi/examples/recv.c \
 *        -L target/debug -ludpdemux -Wl,-rpath,$PWD/target/debug -o recv
 * (client/capi/tests/c_example.rs does this and runs it against an engine).
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "udpdemux.h"

/* A set of strings ("ADDR:PORT"): open addressing, grows by doubling. */
struct strset {
    char **slot;
    size_t cap, len;
};

static void die(const char *what, const char *msg) {
    fprintf(stderr, "error: %s%s%s\n", what, what[0] ? ": " : "", msg);
    exit(1);
}

static uint64_t fnv(const char *s) {
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void strset_put(struct strset *set, const char *s);

static void strset_grow(struct strset *set) {
    struct strset bigger = {calloc(set->cap ? set->cap * 2 : 64, sizeof(char *)),
                            set->cap ? set->cap * 2 : 64, 0};
    if (!bigger.slot) die("", "out of memory");
    for (size_t i = 0; i < set->cap; i++)
        if (set->slot[i]) {
            strset_put(&bigger, set->slot[i]);
            free(set->slot[i]);
        }
    free(set->slot);
    *set = bigger;
}

static void strset_put(struct strset *set, const char *s) {
    if (2 * (set->len + 1) > set->cap) strset_grow(set);
    size_t i = fnv(s) & (set->cap - 1);
    while (set->slot[i]) {
        if (strcmp(set->slot[i], s) == 0) return;
        i = (i + 1) & (set->cap - 1);
    }
    set->slot[i] = strdup(s);
    if (!set->slot[i]) die("", "out of memory");
    set->len++;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* `{"a", "b"}`: Rust's Debug of a BTreeSet<String> (sorted bytewise). */
static void strset_print(const struct strset *set) {
    char **v = malloc((set->len + 1) * sizeof(char *));
    size_t n = 0;
    if (!v) die("", "out of memory");
    for (size_t i = 0; i < set->cap; i++)
        if (set->slot[i]) v[n++] = set->slot[i];
    qsort(v, n, sizeof(char *), cmp_str);
    printf("{");
    for (size_t i = 0; i < n; i++) printf("%s\"%s\"", i ? ", " : "", v[i]);
    printf("}");
    free(v);
}

static void strset_free(struct strset *set) {
    for (size_t i = 0; i < set->cap; i++) free(set->slot[i]);
    free(set->slot);
}

/* "1.2.3.4:53" or "[fd00::1]:53", as Rust's SocketAddr displays them. */
static void addr_str(const struct sockaddr_storage *a, char *out, size_t size) {
    char ip[INET6_ADDRSTRLEN];
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
        snprintf(out, size, "%s:%u", ip, ntohs(v4->sin_port));
    } else {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
        snprintf(out, size, "[%s]:%u", ip, ntohs(v6->sin6_port));
    }
}

struct sock {
    udx_socket *s;
    const char *name;
    long long expect; /* -1: none */
    uint64_t n, bytes;
    struct strset dsts, srcs;
    bool tsc_ok;
    uint32_t drops;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *usage =
    "usage: recv PREFIX [--secs S] [--idle-ms N] NAME[=EXPECT]...";

static double num(const char *v) {
    char *end;
    double d;
    if (!v) die("", usage);
    d = strtod(v, &end);
    if (*end || end == v || d < 0) die("", usage);
    return d;
}

/* A udx call that must succeed: else `error: WHAT: MESSAGE`, exit 1. */
static void must(int rc, const char *what) {
    if (rc < 0) die(what, udx_last_error());
}

int main(int argc, char **argv) {
    const char *prefix = NULL;
    double secs = -1, idle_ms = 300;
    struct sock *socks = calloc((size_t)argc, sizeof *socks);
    size_t nsocks = 0;
    if (!socks) die("", "out of memory");
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--secs") == 0) {
            secs = num(a + 1 < argc ? argv[++a] : NULL);
        } else if (strcmp(argv[a], "--idle-ms") == 0) {
            idle_ms = num(a + 1 < argc ? argv[++a] : NULL);
        } else if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
            printf("%s\n", usage);
            return 0;
        } else if (!prefix) {
            prefix = argv[a];
        } else {
            struct sock *k = &socks[nsocks++];
            char *eq = strchr(argv[a], '=');
            k->name = argv[a];
            k->expect = -1;
            k->tsc_ok = true;
            if (eq) {
                *eq = '\0';
                k->expect = (long long)num(eq + 1);
            }
        }
    }
    if (!prefix) die("", usage);

    udx_client *client;
    if (udx_attach(prefix, &client) != UDX_OK) die("", udx_last_error());
    size_t open = 0;
    for (size_t i = 0; i < nsocks; i++) {
        struct sock *k = &socks[i];
        uint32_t id;
        int rc = udx_open(client, k->name, &k->s);
        if (rc != UDX_OK) {
            printf("open-error %s: %s\n", k->name, udx_last_error());
            continue;
        }
        must(udx_socket_id(k->s, &id), "udx_socket_id");
        printf("open %s id=%u\n", udx_socket_name(k->s), id);
        socks[open++] = *k;
    }
    nsocks = open;

    udx_batch *batch;
    must(udx_batch_new(client, &batch), "udx_batch_new");
    double start = now_s(), last_rx = start;
    for (;;) {
        int got = 0;
        for (size_t k = 0; k < nsocks; k++) {
            struct sock *t = &socks[k];
            int n = udx_recv_burst(t->s, batch);
            must(n, "udx_recv_burst");
            got += n;
            uint64_t tsc_now = udx_tsc_now();
            for (int i = 0; i < n; i++) {
                const uint8_t *data;
                size_t len;
                struct sockaddr_storage src, dst;
                socklen_t srclen, dstlen;
                uint64_t tsc;
                uint32_t drops;
                char text[INET6_ADDRSTRLEN + 16];
                must(udx_dgram_payload(batch, (size_t)i, &data, &len), "udx_dgram_payload");
                must(udx_dgram_src(batch, (size_t)i, &src, &srclen), "udx_dgram_src");
                must(udx_dgram_dst(batch, (size_t)i, &dst, &dstlen), "udx_dgram_dst");
                must(udx_dgram_rx_tsc(batch, (size_t)i, &tsc), "udx_dgram_rx_tsc");
                must(udx_dgram_drops(batch, (size_t)i, &drops), "udx_dgram_drops");
                t->n++;
                t->bytes += len;
                addr_str(&dst, text, sizeof text);
                strset_put(&t->dsts, text);
                addr_str(&src, text, sizeof text);
                strset_put(&t->srcs, text);
                t->tsc_ok = t->tsc_ok && tsc > 0 && tsc <= tsc_now;
                if (drops > t->drops) t->drops = drops;
            }
        }
        double now = now_s();
        if (got > 0) last_rx = now;
        bool done;
        if (secs >= 0) {
            done = now - start >= secs;
        } else {
            bool met = true;
            for (size_t k = 0; k < nsocks; k++)
                if (socks[k].expect >= 0 && socks[k].n < (uint64_t)socks[k].expect) met = false;
            done = (met && (now - last_rx) * 1000 >= idle_ms) || now - start >= 30;
        }
        if (done) break;
        if (got == 0) sched_yield();
    }
    /* Give the last datagrams back (their memory to their sockets) before
     * closing the sockets. */
    must(udx_batch_release(batch), "udx_batch_release");
    must(udx_batch_free(batch), "udx_batch_free");
    for (size_t k = 0; k < nsocks; k++) {
        struct sock *t = &socks[k];
        printf("socket %s received %llu bytes %llu dsts ", t->name, (unsigned long long)t->n,
               (unsigned long long)t->bytes);
        strset_print(&t->dsts);
        printf(" srcs %zu tsc_ok %s drops %u\n", t->srcs.len, t->tsc_ok ? "true" : "false",
               t->drops);
        if (udx_close(t->s) == UDX_OK)
            printf("closed %s\n", t->name);
        else
            printf("close-error %s: %s\n", t->name, udx_last_error());
        strset_free(&t->dsts);
        strset_free(&t->srcs);
    }
    free(socks);
    int clean = 0;
    must(udx_detach(client, &clean), "udx_detach");
    printf("detached cleanup=%s\n", clean ? "true" : "false");
    return 0;
}
