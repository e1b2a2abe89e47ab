/* What bindgen cannot reach: rte_errno is a per-lcore TLS macro. */
#include <rte_config.h>
#include <rte_errno.h>

int udpdemux_rte_errno(void) { return rte_errno; }
