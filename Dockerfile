# udpdemux on Debian 12 (bookworm) with the distribution's DPDK 22.11, built
# with the same DPDK package and Rust release the project is tested with
# (scripts/setup.sh prints "setup: DPDK 22.11.11"; rustc 1.95.0).
#
# Build:  docker build -t udpdemux .
# Run: see the README, "Running in a container" (hugepages and the NIC are
# the host's: mount /dev/hugepages, pass the VFIO group, allow memlock).
#
# Pins: Debian keeps only the newest point release of a package in the
# bookworm archives, so when 22.11.11-0+deb12u1 is superseded the build
# stops at apt-get with "version ... not found": either move DPDK_VERSION to
# the version the project tests with then, or build against the archive
# (--build-arg DEBIAN_SNAPSHOT=20260101T000000Z uses snapshot.debian.org).
ARG RUST_VERSION=1.95.0
ARG DPDK_VERSION=22.11.11-0+deb12u1
ARG DEBIAN_SNAPSHOT=

FROM rust:${RUST_VERSION}-bookworm AS build
ARG DPDK_VERSION
ARG DEBIAN_SNAPSHOT
RUN if [ -n "$DEBIAN_SNAPSHOT" ]; then \
      printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\ndeb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
        "$DEBIAN_SNAPSHOT" "$DEBIAN_SNAPSHOT" >/etc/apt/sources.list.d/snapshot.list; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      "libdpdk-dev=${DPDK_VERSION}" "dpdk=${DPDK_VERSION}" \
      libclang-dev clang pkg-config libpcap-dev \
 && rm -rf /var/lib/apt/lists/* \
 && pkg-config --modversion libdpdk \
 && rustc --version
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p udpdemux

FROM debian:bookworm-slim
ARG DPDK_VERSION
ARG DEBIAN_SNAPSHOT
# dpdk: the EAL and every PMD (net_tap for the exception path among them),
# loaded from pmds-23/ at start; the same package version the binary was
# built against (its librte-* dependencies follow it).
RUN if [ -n "$DEBIAN_SNAPSHOT" ]; then \
      printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\ndeb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
        "$DEBIAN_SNAPSHOT" "$DEBIAN_SNAPSHOT" >/etc/apt/sources.list.d/snapshot.list; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends "dpdk=${DPDK_VERSION}" libpcap0.8 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/udpdemux /usr/local/bin/udpdemux
COPY conf /etc/udpdemux
ENTRYPOINT ["/usr/local/bin/udpdemux"]
CMD ["run", "--config", "/etc/udpdemux/default.toml"]
