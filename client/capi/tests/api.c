/*
 * api.c: every function of udpdemux.h against a running engine, built with
 * -Wall -Wextra -Werror and run by tests/c_example.rs.
 *
 *     api PREFIX NAME EXPECT DST
 *
 * Checks the error codes and messages of bad calls (NULL pointers, a bad
 * prefix, an unknown or busy socket, an index out of range, a call from
 * another thread, a detach with a socket open), then opens NAME, receives
 * until EXPECT datagrams arrived (10 s at most), each through every
 * accessor (its destination must be DST, e.g. "[fd00::2]:5000"), and
 * prints `api NAME received N bytes B ports {P} drops D`; with the batch
 * released, reads the socket's counters (udx_stats: they must hold what
 * it received) and prints `api stats NAME key=value ...`, then `api ok`.
 * A failed check prints `api.c:LINE: check failed: ...` and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "udpdemux.h"

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            printf("api.c:%d: check failed: %s (last error: %s)\n", __LINE__, #cond,      \
                   udx_last_error());                                                     \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* rc is `code` and the last error contains `text`. */
#define CHECK_ERR(rc, code, text)                                                         \
    do {                                                                                  \
        int rc_ = (rc);                                                                   \
        if (rc_ != (code) || !strstr(udx_last_error(), (text))) {                          \
            printf("api.c:%d: %s gave %d (%s), last error \"%s\"; wanted %s and \"%s\"\n", \
                   __LINE__, #rc, rc_, udx_error_name(rc_), udx_last_error(), #code,     \
                   (text));                                                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

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

struct other {
    udx_socket *s;
    udx_batch *b;
    int rc;
    char msg[512];
};

/* udx_recv_burst from a thread that did not attach. */
static void *other_thread(void *arg) {
    struct other *o = arg;
    o->rc = udx_recv_burst(o->s, o->b);
    snprintf(o->msg, sizeof o->msg, "%s", udx_last_error());
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: api PREFIX NAME EXPECT DST\n");
        return 2;
    }
    const char *prefix = argv[1], *name = argv[2], *want_dst = argv[4];
    long expect = strtol(argv[3], NULL, 10);
    udx_client *c = NULL;
    udx_socket *s = NULL, *s2 = NULL;
    udx_batch *b = NULL;

    CHECK(strcmp(udx_last_error(), "") == 0);
    CHECK(strcmp(udx_error_name(UDX_ENOSOCKET), "UDX_ENOSOCKET") == 0);
    CHECK(strcmp(udx_error_name(12345), "UDX_UNKNOWN") == 0);
    CHECK(udx_tsc_now() > 0);

    CHECK_ERR(udx_attach(NULL, &c), UDX_ENULL, "file_prefix is NULL");
    CHECK_ERR(udx_attach(prefix, NULL), UDX_ENULL, "out is NULL");
    CHECK_ERR(udx_attach("a/b", &c), UDX_EINVAL, "is not valid");
    CHECK_ERR(udx_attach("udx-api-no-such-prefix", &c), UDX_ENOENGINE, "start the engine");
    CHECK(c == NULL);
    CHECK(udx_attach(prefix, &c) == UDX_OK && c != NULL);
    CHECK_ERR(udx_attach(prefix, &c), UDX_EATTACH, "already initialised");

    CHECK_ERR(udx_open(NULL, name, &s), UDX_ENULL, "client is NULL");
    CHECK_ERR(udx_open(c, NULL, &s), UDX_ENULL, "name is NULL");
    CHECK_ERR(udx_open(c, name, NULL), UDX_ENULL, "out is NULL");
    CHECK_ERR(udx_open(c, "nosuch", &s), UDX_ENOSOCKET, "no socket named \"nosuch\"");
    CHECK(udx_open(c, name, &s) == UDX_OK && s != NULL);
    CHECK_ERR(udx_open(c, name, &s2), UDX_EBUSY, "is already open by client pid");
    CHECK(s2 == NULL);

    uint32_t id = 12345;
    CHECK(strcmp(udx_socket_name(s), name) == 0);
    CHECK(udx_socket_name(NULL) == NULL);
    CHECK_ERR(udx_socket_id(s, NULL), UDX_ENULL, "id is NULL");
    CHECK_ERR(udx_socket_id(NULL, &id), UDX_ENULL, "sock is NULL");
    CHECK(udx_socket_id(s, &id) == UDX_OK && id != 12345);

    CHECK_ERR(udx_batch_new(NULL, &b), UDX_ENULL, "client is NULL");
    CHECK_ERR(udx_batch_new(c, NULL), UDX_ENULL, "out is NULL");
    CHECK(udx_batch_new(c, &b) == UDX_OK && b != NULL);
    CHECK(udx_batch_len(b) == 0);
    CHECK_ERR(udx_batch_len(NULL), UDX_ENULL, "batch is NULL");

    const uint8_t *data;
    size_t len;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    uint64_t tsc;
    uint32_t drops;
    uint16_t port;
    CHECK_ERR(udx_dgram_payload(b, 0, &data, &len), UDX_ERANGE, "index 0 is out of range");
    CHECK_ERR(udx_recv_burst(NULL, b), UDX_ENULL, "sock is NULL");
    CHECK_ERR(udx_recv_burst(s, NULL), UDX_ENULL, "batch is NULL");

    /* Another thread is refused, and its error is its own. */
    CHECK(udx_socket_id(NULL, &id) == UDX_ENULL);
    struct other o = {s, b, 0, ""};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, &o) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(o.rc == UDX_ETHREAD);
    CHECK(strstr(o.msg, "another thread") != NULL);
    CHECK(strcmp(udx_last_error(), "sock is NULL") == 0);

    long n = 0;
    unsigned long long bytes = 0;
    uint32_t max_drops = 0;
    int ports_seen = 0;
    uint16_t first_port = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int got = udx_recv_burst(s, b);
        CHECK(got >= 0 && got <= UDX_BATCH);
        CHECK(udx_batch_len(b) == got);
        if (got > 0) {
            /* The accessors refuse NULL outputs and an index past the end. */
            CHECK_ERR(udx_dgram_payload(b, 0, NULL, &len), UDX_ENULL, "data is NULL");
            CHECK_ERR(udx_dgram_payload(b, 0, &data, NULL), UDX_ENULL, "len is NULL");
            CHECK_ERR(udx_dgram_copy_payload(b, 0, NULL, 8, &len), UDX_ENULL, "buf is NULL");
            CHECK_ERR(udx_dgram_src(b, 0, NULL, &addrlen), UDX_ENULL, "addr is NULL");
            CHECK_ERR(udx_dgram_dst(b, 0, &addr, NULL), UDX_ENULL, "addrlen is NULL");
            CHECK_ERR(udx_dgram_rx_tsc(b, 0, NULL), UDX_ENULL, "tsc is NULL");
            CHECK_ERR(udx_dgram_drops(NULL, 0, &drops), UDX_ENULL, "batch is NULL");
            CHECK_ERR(udx_dgram_port(b, (size_t)got, &port), UDX_ERANGE, "out of range");
        }
        uint64_t tsc_now = udx_tsc_now();
        for (int i = 0; i < got; i++) {
            char text[INET6_ADDRSTRLEN + 16];
            CHECK(udx_dgram_payload(b, (size_t)i, &data, &len) == UDX_OK);
            CHECK(len == 0 || data != NULL);
            /* The copying accessor gives the same bytes, and the whole
             * length even when the buffer is short. */
            {
                uint8_t copy[2048];
                size_t clen = 0;
                CHECK(udx_dgram_copy_payload(b, (size_t)i, copy, sizeof copy, &clen) == UDX_OK);
                CHECK(clen == len && (len == 0 || memcmp(copy, data, len) == 0));
                CHECK(udx_dgram_copy_payload(b, (size_t)i, NULL, 0, &clen) == UDX_OK && clen == len);
            }
            CHECK(udx_dgram_dst(b, (size_t)i, &addr, &addrlen) == UDX_OK);
            CHECK(addrlen == (addr.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                        : sizeof(struct sockaddr_in6)));
            addr_str(&addr, text, sizeof text);
            if (strcmp(text, want_dst) != 0) {
                printf("api.c: datagram to %s, not %s\n", text, want_dst);
                return 1;
            }
            CHECK(udx_dgram_src(b, (size_t)i, &addr, &addrlen) == UDX_OK);
            CHECK(addr.ss_family == AF_INET || addr.ss_family == AF_INET6);
            CHECK(udx_dgram_rx_tsc(b, (size_t)i, &tsc) == UDX_OK && tsc > 0 && tsc <= tsc_now);
            CHECK(udx_dgram_drops(b, (size_t)i, &drops) == UDX_OK);
            CHECK(udx_dgram_port(b, (size_t)i, &port) == UDX_OK);
            if (!ports_seen) first_port = port;
            ports_seen |= 1;
            CHECK(port == first_port);
            if (drops > max_drops) max_drops = drops;
            bytes += len;
        }
        n += got;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (n >= expect || now.tv_sec - t0.tv_sec > 10) break;
        if (got == 0) sched_yield();
    }
    /* A little longer: nothing more than EXPECT may come. */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    int more = udx_recv_burst(s, b);
    CHECK(more >= 0);
    n += more;
    for (int i = 0; i < more; i++) {
        CHECK(udx_dgram_payload(b, (size_t)i, &data, &len) == UDX_OK);
        bytes += len;
    }

    /* Children before parents. */
    CHECK_ERR(udx_detach(c, NULL), UDX_EBUSY, "1 socket(s) still open and 1 batch(es)");
    CHECK_ERR(udx_batch_release(NULL), UDX_ENULL, "batch is NULL");
    CHECK(udx_batch_release(b) == UDX_OK && udx_batch_len(b) == 0);

    /* The socket's counters (the engine folds what this client freed in
     * before it answers); an unknown name is refused with the reason. */
    udx_socket_stats st;
    CHECK_ERR(udx_stats(NULL, name, &st), UDX_ENULL, "client is NULL");
    CHECK_ERR(udx_stats(c, NULL, &st), UDX_ENULL, "name is NULL");
    CHECK_ERR(udx_stats(c, name, NULL), UDX_ENULL, "out is NULL");
    CHECK_ERR(udx_stats(c, "nosuch", &st), UDX_ENOSOCKET, "no socket named \"nosuch\"");
    CHECK_ERR(udx_stats(c, "bad name", &st), UDX_EINVAL, "is not valid");
    memset(&st, 0xa5, sizeof st);
    CHECK(udx_stats(c, name, &st) == UDX_OK);
    CHECK(st.id == id && st.client_pid == (uint32_t)getpid());
    CHECK(st.consumed == (uint64_t)n && st.client_consumed == (uint64_t)n);
    CHECK(st.consumed_bytes == bytes && st.rmem == 0 && st.ring_count == 0);
    CHECK(st.ring_size > 0 && st.rcvbuf > 0 && st.rmem_high_water > 0);
    CHECK(st.offered == st.delivered + st.drop_rcvbuf_full + st.drop_rcvbuf_full_at_drain +
                            st.drop_ring_full + st.drop_closed);
    CHECK(strcmp(st.handler, "none") == 0);
    {
        char local[INET6_ADDRSTRLEN + 16];
        CHECK(st.local_len == (st.local.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                             : sizeof(struct sockaddr_in6)));
        addr_str(&st.local, local, sizeof local);
        CHECK(strcmp(local, want_dst) == 0);
    }
    printf("api stats %s delivered=%llu consumed=%llu consumed_bytes=%llu rmem=%llu "
           "rmem_high_water=%llu drop_rcvbuf_full=%llu drop_ring_full=%llu offered=%llu\n",
           name, (unsigned long long)st.delivered, (unsigned long long)st.consumed,
           (unsigned long long)st.consumed_bytes, (unsigned long long)st.rmem,
           (unsigned long long)st.rmem_high_water, (unsigned long long)st.drop_rcvbuf_full,
           (unsigned long long)st.drop_ring_full, (unsigned long long)st.offered);
    CHECK_ERR(udx_batch_free(NULL), UDX_ENULL, "batch is NULL");
    CHECK(udx_batch_free(b) == UDX_OK);
    CHECK_ERR(udx_detach(c, NULL), UDX_EBUSY, "1 socket(s) still open and 0 batch(es)");
    CHECK_ERR(udx_close(NULL), UDX_ENULL, "sock is NULL");
    CHECK(udx_close(s) == UDX_OK);
    CHECK_ERR(udx_detach(NULL, NULL), UDX_ENULL, "client is NULL");
    int clean = -1;
    CHECK(udx_detach(c, &clean) == UDX_OK && clean == 1);

    printf("api %s received %ld bytes %llu ports {%u} drops %u\n", name, n, bytes,
           (unsigned)first_port, max_drops);
    printf("api ok\n");
    return 0;
}
