# Sourced by the README's two commands. The EAL, hugepages and apt need root:
# as root (a minimal Debian, which has no sudo) this does nothing; as another
# user it re-runs the calling script through sudo, keeping the user's Rust
# toolchain (rustup's PATH and homes), or says what to do when there is no sudo.
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    echo "$(basename "$0"): not root: re-running with sudo" >&2
    exec sudo env "PATH=$PATH" "RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}" "CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}" \
      bash "$0" "$@"
  fi
  echo "$(basename "$0"): error: needs root (DPDK's EAL, hugepages, apt-get) and there is no sudo: run it as root" >&2
  exit 1
fi
