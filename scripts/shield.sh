#!/usr/bin/env bash
# Run a command with one CPU kept for it, as `isolcpus=` or `cset shield`
# keep CPUs on a tuned host: for the command's time every other thread that
# may move, every IRQ that may move and the kernel's unbound workqueues go
# to the other CPUs; afterwards each goes back to the mask it had. Per-CPU
# kernel threads (the tick, ksoftirqd, kworker/N) cannot move and stay.
#
#   bash scripts/shield.sh CPU CMD [ARGS...]
#
# The command keeps the affinity it inherits (all CPUs); an engine pins its
# lcores itself. Needs root. Used by scripts/bench.sh for the default-rcvbuf
# runs, where a consumer switched out for more than tens of microseconds
# overflows the socket whatever the engine does; one line on stderr says what
# was moved.
set -u
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/shield.sh CPU CMD [ARGS...]" >&2
  exit 2
fi
cpu=$1
shift
if [ "$(id -u)" -ne 0 ]; then
  echo "shield.sh: needs root (other users' threads, /proc/irq); run it as root" >&2
  exit 1
fi
if ! command -v taskset >/dev/null; then
  echo "shield.sh: taskset not found: apt-get install util-linux" >&2
  exit 1
fi
ncpu=$(nproc --all)
if ! [[ "$cpu" =~ ^[0-9]+$ ]] || [ "$cpu" -ge "$ncpu" ]; then
  echo "shield.sh: CPU $cpu: this machine has CPUs 0-$((ncpu - 1))" >&2
  exit 2
fi
rest=$(( ((1 << ncpu) - 1) & ~(1 << cpu) ))
if [ "$rest" -eq 0 ]; then
  echo "shield.sh: no other CPU to move the rest to" >&2
  exit 1
fi
mask=$(printf '%x' "$rest")

declare -A saved=() irqs=()
wq=/sys/devices/virtual/workqueue/cpumask
wq_saved=""
restore() {
  local tid i
  for tid in "${!saved[@]}"; do taskset -p "${saved[$tid]}" "$tid" >/dev/null 2>&1; done
  for i in "${!irqs[@]}"; do echo "${irqs[$i]}" >"$i" 2>/dev/null; done
  [ -n "$wq_saved" ] && echo "$wq_saved" >"$wq" 2>/dev/null
  saved=() irqs=() wq_saved=""
}
trap restore EXIT
trap 'restore; exit 130' INT TERM

for t in /proc/[0-9]*/task/[0-9]*; do
  pid=${t#/proc/}
  pid=${pid%%/*}
  tid=${t##*/}
  # Not this script (its command inherits its mask).
  [ "$pid" = "$$" ] && continue
  m=$(taskset -p "$tid" 2>/dev/null) || continue
  m=${m##* }
  # Per-CPU kernel threads refuse (EINVAL): they stay.
  if taskset -p "$mask" "$tid" >/dev/null 2>&1; then saved[$tid]=$m; fi
done
for f in /proc/irq/[0-9]*/smp_affinity; do
  old=$(cat "$f" 2>/dev/null) || continue
  if echo "$mask" >"$f" 2>/dev/null; then irqs[$f]=$old; fi
done
if [ -w "$wq" ]; then
  wq_saved=$(cat "$wq")
  echo "$mask" >"$wq" 2>/dev/null || wq_saved=""
fi
echo "shield.sh: CPU $cpu kept for the command: ${#saved[@]} threads, ${#irqs[@]} IRQs${wq_saved:+ and the unbound workqueues} moved to CPU mask $mask until it ends" >&2

"$@"
rc=$?
restore
exit $rc
