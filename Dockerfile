# udpdemux on Debian 12 (bookworm) with the distribution's DPDK 22.11.
#
# Build:  docker build -t udpdemux .
# Run (hugepages from the host, NIC bound to vfio-pci on the host):
#   docker run --rm -it --privileged \
#     -v /dev/hugepages:/dev/hugepages -v /sys/bus/pci:/sys/bus/pci -v /dev/vfio:/dev/vfio \
#     -v $PWD/conf:/etc/udpdemux udpdemux run --config /etc/udpdemux/pci.toml
# Instead of --privileged, the least a DPDK process needs is:
#   --cap-add IPC_LOCK --cap-add SYS_ADMIN --cap-add NET_RAW --cap-add SYS_RAWIO
#   --device /dev/vfio/vfio --device /dev/vfio/<group> --ulimit memlock=-1
# Without hugepages (tests, vdevs only), set eal.no_huge = true in the config.
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libdpdk-dev libclang-dev clang pkg-config libpcap-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p udpdemux

FROM debian:bookworm-slim
# dpdk: the EAL and every PMD (loaded from pmds-23/ at start); dpdk-dev adds dpdk-testpmd.
RUN apt-get update \
 && apt-get install -y --no-install-recommends dpdk libpcap0.8 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/udpdemux /usr/local/bin/udpdemux
COPY conf /etc/udpdemux
ENTRYPOINT ["/usr/local/bin/udpdemux"]
CMD ["run", "--config", "/etc/udpdemux/default.toml"]
