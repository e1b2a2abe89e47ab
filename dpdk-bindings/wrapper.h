/* Debian's pkg-config cflags pass rte_config.h with -include; the pkg-config
 * crate drops that, so include it first ourselves. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_cycles.h>
#include <rte_hash.h>
#include <rte_ip.h>
#include <rte_udp.h>
#include <rte_telemetry.h>
#include <rte_malloc.h>
#include <rte_pause.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_version.h>
#include <rte_pdump.h>
