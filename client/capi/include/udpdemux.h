/*
 * udpdemux.h: the C API of udpdemux-client (libudpdemux.so, crate
 * udpdemux-capi). A C or C++ program attaches to a running udpdemux engine
 * as a DPDK secondary process, opens sockets of the engine's config and
 * receives their datagrams without a copy.
 *
 *     udx_client *c;  udx_socket *s;  udx_batch *b;
 *     if (udx_attach("udpdemux", &c) != UDX_OK) die(udx_last_error());
 *     udx_open(c, "dns6", &s);  udx_batch_new(c, &b);
 *     int n = udx_recv_burst(s, b);           (0 .. UDX_BATCH, or < 0)
 *     for (int i = 0; i < n; i++) udx_dgram_payload(b, i, &p, &len); ...
 *     udx_batch_free(b);  udx_close(s);  udx_detach(c, NULL);
 *
 * Build and link: cargo build -p udpdemux-capi (--release), then
 *     cc -I client/capi/include app.c -L target/release -ludpdemux
 *        -Wl,-rpath,$PWD/target/release
 * (DPDK's own libraries are NEEDED by libudpdemux.so; no DPDK header or
 * flag is required to build against this header.)
 *
 * Errors: every function that can fail returns an int, UDX_OK (0) or more
 * on success and one of the negative UDX_E* codes on failure; then
 * udx_last_error() tells why in one line. A NULL pointer where one is
 * required is refused with UDX_ENULL, never dereferenced. Errors are
 * codes, never a crash. A bug inside the library (a Rust panic) never
 * unwinds into C: a debug build catches it and returns UDX_EPANIC; a
 * release build (the workspace's release profile has panic = "abort")
 * aborts the process.
 *
 * Threads: attach once per process (DPDK allows one EAL init per process,
 * even after a detach). The client, its sockets and its batches belong to
 * the thread that called udx_attach (it becomes the EAL's main lcore, and
 * mbufs are freed through that lcore's mempool caches): every function
 * that takes a client, socket or batch and changes something returns
 * UDX_ETHREAD on another thread. The read-only accessors (udx_batch_len,
 * udx_dgram_*, udx_socket_name, udx_socket_id) do not check the thread;
 * do not call them concurrently with a call that changes the same batch.
 *
 * Ownership, parents before children:
 *   udx_client  from udx_attach,    freed by udx_detach (refused with
 *               UDX_EBUSY while any of its sockets is open or batches live)
 *   udx_socket  from udx_open,      freed by udx_close
 *   udx_batch   from udx_batch_new, freed by udx_batch_free
 * Datagrams: udx_recv_burst moves up to UDX_BATCH datagrams from the
 * socket's ring into the batch. They stay the batch's (their mbufs charged
 * to their socket's rcvbuf budget in the engine) until the batch's next
 * udx_recv_burst, udx_batch_release or udx_batch_free, which give them back
 * to the engine. Every pointer an accessor hands out (the payload) is
 * valid until then, and no longer. Release batches promptly: a socket's
 * datagrams held here count against its rcvbuf, and the engine drops
 * what does not fit. Close a socket only after releasing the batches that
 * hold its datagrams (else their memory stays charged until they are).
 */
#ifndef UDPDEMUX_H
#define UDPDEMUX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Success. */
#define UDX_OK 0
/* A pointer argument that must not be NULL was NULL. */
#define UDX_ENULL (-1)
/* An argument is not valid (not UTF-8, a file prefix with '/', ...). */
#define UDX_EINVAL (-2)
/* A datagram index at or past the batch's length. */
#define UDX_ERANGE (-3)
/* Called from another thread than the one that attached. */
#define UDX_ETHREAD (-4)
/* The socket is already open (by this or another client), or detach while
 * sockets are open or batches live. */
#define UDX_EBUSY (-5)
/* No udpdemux engine runs on that file prefix (or it shares no memory:
 * eal.no_huge = true). */
#define UDX_ENOENGINE (-6)
/* The EAL could not attach, or is already initialised in this process. */
#define UDX_EATTACH (-7)
/* The engine has no socket of that name. */
#define UDX_ENOSOCKET (-8)
/* The engine refused the request or did not answer in time. */
#define UDX_EENGINE (-9)
/* An internal error in the library (a panic, caught in a debug build): a
 * bug, please report. */
#define UDX_EPANIC (-10)

/* Datagrams one udx_recv_burst takes at most. */
#define UDX_BATCH 64

/* An attached client (opaque). */
typedef struct udx_client udx_client;
/* One of the engine's sockets, opened by this client (opaque). */
typedef struct udx_socket udx_socket;
/* Datagrams received from a socket, held until released (opaque). */
typedef struct udx_batch udx_batch;

/* The calling thread's last error, one line without a newline; "" if no
 * call on this thread has failed yet. Set by failing calls only (a
 * successful call leaves it as it was). The string stays valid until the
 * next failing call on this thread. Never NULL. */
const char *udx_last_error(void);

/* The name of an error code ("UDX_ENULL", ...; "UDX_UNKNOWN" for any other
 * value): a static string. Never NULL. */
const char *udx_error_name(int code);

/* The TSC now: the clock of udx_dgram_rx_tsc (the CPU's time stamp
 * counter, as DPDK's rte_rdtsc). */
uint64_t udx_tsc_now(void);

/* Attach to the engine that runs with eal.file_prefix = file_prefix (its
 * config's [eal] file_prefix), as a DPDK secondary process that probes and
 * resets none of the engine's devices. On success *out is the client.
 * UDX_EINVAL (bad prefix), UDX_ENOENGINE (no engine there), UDX_EATTACH. */
int udx_attach(const char *file_prefix, udx_client **out);

/* Leave the engine (rte_eal_cleanup here; the engine's ports run on) and
 * free the client. All its sockets must be closed and batches freed first,
 * else UDX_EBUSY and nothing changes. If cleaned_up is not NULL, *cleaned_up
 * is 1 when the EAL cleaned up, 0 when the cleanup was skipped (a port had
 * appeared in this process, which the cleanup would have closed). */
int udx_detach(udx_client *client, int *cleaned_up);

/* Open the engine's configured socket `name` ([[socket]] name = ...): from
 * now on this process alone reads its datagrams. On success *out is the
 * socket. UDX_ENOSOCKET (no such socket: the message lists the engine's
 * sockets), UDX_EBUSY (already open, the message names the client's pid),
 * UDX_EENGINE (refused or no answer), UDX_EINVAL. */
int udx_open(udx_client *client, const char *name, udx_socket **out);

/* Give the socket back to the engine's consumer and free the handle,
 * whatever the result (UDX_EENGINE: the engine refused or did not answer
 * the close; the handle is gone all the same). Only UDX_ENULL and
 * UDX_ETHREAD leave the handle as it was. */
int udx_close(udx_socket *sock);

/* One socket's counters, as the engine's exit JSON (`sockets[]`) and
 * telemetry report them (udpdemux::api::SocketStats field for field).
 * Counters only grow, except rmem, rcvbuf, ring_count and client_pid. The
 * drop reasons keep the engine's names; the kernel counter for the same
 * event, where there is one, is named beside each. */
typedef struct udx_socket_stats {
    /* The engine's socket id. */
    uint32_t id;
    /* The pid of the client that has it open (0: the engine's consumer). */
    uint32_t client_pid;
    /* Datagrams demuxed to it: delivered plus every drop below. */
    uint64_t offered;
    /* Datagrams put into its delivery ring. */
    uint64_t delivered;
    /* Datagrams taken out of the ring and freed by its consumer. */
    uint64_t consumed;
    /* Their UDP payload bytes (counted at consumption, not delivery). */
    uint64_t consumed_bytes;
    /* Of consumed: by out-of-process clients. */
    uint64_t client_consumed;
    /* Left in the ring at a close, unbind or reap, freed unread. */
    uint64_t freed_at_close;
    /* Of freed_at_close: datagrams a dead client held unread. */
    uint64_t reclaimed_from_client;
    /* Of consumed: datagrams a client died while freeing. */
    uint64_t lost_in_client_free;
    /* Over rcvbuf on arrival (kernel: UdpRcvbufErrors). */
    uint64_t drop_rcvbuf_full;
    /* Over rcvbuf when its stage was drained (kernel: UdpMemErrors). */
    uint64_t drop_rcvbuf_full_at_drain;
    /* The delivery ring was full (no kernel counterpart). */
    uint64_t drop_ring_full;
    /* The socket closed while the datagram was on its way. */
    uint64_t drop_closed;
    /* Receive budget, bytes of truesize (SO_RCVBUF). */
    uint64_t rcvbuf;
    /* Bytes of truesize charged now (sk_rmem_alloc). */
    uint64_t rmem;
    /* The most rmem has been. */
    uint64_t rmem_high_water;
    /* Datagrams copied into small buffers under memory pressure. */
    uint64_t condensed;
    /* Datagrams waiting in the delivery ring now. */
    uint64_t ring_count;
    /* Datagrams the delivery ring holds at most. */
    uint64_t ring_size;
    /* The bound address, as udx_dgram_src writes one. */
    struct sockaddr_storage local;
    socklen_t local_len;
    /* "count", "echo", "pcap" or "none", NUL-terminated. */
    char handler[16];
} udx_socket_stats;

/* The counters of the engine's socket `name`, any of its sockets (open by
 * this client or not), into *out. One request to the engine (it answers
 * between two polls); call it on the thread that attached. UDX_ENOSOCKET
 * (no such socket: the message lists the engine's sockets), UDX_EENGINE
 * (no answer), UDX_EINVAL, UDX_ENULL, UDX_ETHREAD. */
int udx_stats(const udx_client *client, const char *name, udx_socket_stats *out);

/* The socket's name, valid until udx_close. NULL (and UDX_ENULL as the
 * last error) if sock is NULL. */
const char *udx_socket_name(const udx_socket *sock);

/* The engine's id of the socket into *id. */
int udx_socket_id(const udx_socket *sock, uint32_t *id);

/* A new, empty batch of the client's into *out. A batch can take
 * datagrams from any of the client's sockets, one socket per
 * udx_recv_burst. */
int udx_batch_new(udx_client *client, udx_batch **out);

/* Release the batch's datagrams (see Ownership above) and free it. */
int udx_batch_free(udx_batch *batch);

/* Release the batch's datagrams; the batch stays, empty. */
int udx_batch_release(udx_batch *batch);

/* Datagrams in the batch now (0 .. UDX_BATCH), or < 0 on error. */
int udx_batch_len(const udx_batch *batch);

/* Release what the batch held, then move up to UDX_BATCH datagrams waiting
 * in the socket's ring into it, without waiting: how many (0 when none
 * waits), or < 0 on error. Datagram i of the batch is then 0 <= i < n. */
int udx_recv_burst(udx_socket *sock, udx_batch *batch);

/* Datagram i's UDP payload: *data points into the engine's mbuf (zero
 * copy), *len bytes; valid until the batch's next udx_recv_burst,
 * udx_batch_release or udx_batch_free. UDX_ERANGE if i >= the batch's
 * length; UDX_EINVAL for a datagram reassembled from IP fragments (its
 * payload spans several buffers: see udx_dgram_copy_payload). */
int udx_dgram_payload(const udx_batch *batch, size_t i, const uint8_t **data, size_t *len);

/* Datagram i's UDP payload copied into buf (cap bytes; buf may be NULL
 * when cap is 0), every segment of it; *len is the payload's whole length
 * (more than cap when the copy was cut). The only way to read a datagram
 * the engine reassembled from IP fragments, whose payload spans several
 * buffers: udx_dgram_payload refuses those with UDX_EINVAL. */
int udx_dgram_copy_payload(const udx_batch *batch, size_t i, uint8_t *buf, size_t cap, size_t *len);

/* Datagram i's source address and port, written into *addr as a struct
 * sockaddr_in (AF_INET) or struct sockaddr_in6 (AF_INET6), network byte
 * order, the rest of *addr zeroed; *addrlen is that struct's size. Ready
 * for getnameinfo/inet_ntop, or for sendto on a kernel socket. */
int udx_dgram_src(const udx_batch *batch, size_t i, struct sockaddr_storage *addr,
                  socklen_t *addrlen);

/* Datagram i's destination address and port (the socket's, or the
 * address a wildcard socket was reached on), as udx_dgram_src. */
int udx_dgram_dst(const udx_batch *batch, size_t i, struct sockaddr_storage *addr,
                  socklen_t *addrlen);

/* The TSC of the RX burst datagram i arrived in (udx_tsc_now's clock). */
int udx_dgram_rx_tsc(const udx_batch *batch, size_t i, uint64_t *tsc);

/* The socket's drop count when datagram i's batch reached the socket's
 * ring (as SO_RXQ_OVFL): a change between two datagrams means datagrams
 * were dropped in between (rcvbuf full). */
int udx_dgram_drops(const udx_batch *batch, size_t i, uint32_t *drops);

/* The DPDK port (of the engine) datagram i arrived on. */
int udx_dgram_port(const udx_batch *batch, size_t i, uint16_t *port);

#ifdef __cplusplus
}
#endif

#endif /* UDPDEMUX_H */
