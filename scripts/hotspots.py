#!/usr/bin/env python3
"""Where one thread's samples land, per instruction address, mapped to source.

Everything on the RX path is inlined into `rx::process_burst`, so `perf
report` by symbol says little and `perf annotate` shows machine code without
the frames it came from. This reads `perf script` output for one thread,
turns each sample's address into an address in the binary (the mapping's
load base, page offset and the text segment's offset, from the mmap event
and the ELF program headers), and reports, as nanoseconds per datagram:

* per function: the innermost inlined frame in the project's own source
  (`addr2line -i`), so a sample in `core::` code inlined into one of ours
  counts for ours;
* per address: the hottest instructions, with that frame and the
  instruction. With cpu-clock sampling a stall shows on the instruction
  after the one that waited (the entry of a function after a call that
  could not push its return address, a use after a load): read a hot
  address together with the instructions before it.

usage: hotspots.py PERF_DATA THREAD_COMM BINARY NS_PER_SAMPLE [TOP_FN [TOP_ADDR]]
(scripts/hotspots.sh records the run and works out NS_PER_SAMPLE)
"""
import collections
import re
import subprocess
import sys


def load_layout(perf_data, binary):
    """The executable mapping's base and the offset that turns a runtime
    address into the binary's virtual address."""
    ev = subprocess.run(["perf", "script", "-i", perf_data, "--show-mmap-events"],
                        capture_output=True, text=True).stdout
    base = pgoff = None
    for line in ev.splitlines():
        if "MMAP" in line and "r-xp" in line and line.rstrip().endswith(binary):
            m = re.search(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) ", line)
            if m:
                base, pgoff = int(m.group(1), 16), int(m.group(3), 16)
                break
    if base is None:
        sys.exit(f"hotspots: no executable mapping of {binary} in {perf_data}")
    hdrs = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True).stdout
    off = vaddr = None
    for line in hdrs.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "LOAD" and "E" in "".join(f[6:-1]):
            off, vaddr = int(f[1], 16), int(f[2], 16)
            break
    if off is None:
        sys.exit(f"hotspots: no executable LOAD segment in {binary}")
    return base, pgoff + vaddr - off


def main():
    perf_data, comm, binary, ns_per_sample = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    top_fn = int(sys.argv[5]) if len(sys.argv) > 5 else 25
    top_addr = int(sys.argv[6]) if len(sys.argv) > 6 else 20
    base, shift = load_layout(perf_data, binary)
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "comm,ip,dso"],
                         capture_output=True, text=True).stdout
    ours = collections.Counter()
    by_dso = collections.Counter()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 3 or f[0] != comm:
            continue
        dso = f[2].strip("()")
        by_dso[dso] += 1
        if dso == binary or dso.endswith("/" + binary.split("/")[-1]):
            ours[int(f[1], 16) - base + shift] += 1
    total = sum(by_dso.values())
    print(f"{comm}: {total} samples, {total * ns_per_sample:.1f} ns per datagram")
    for dso, n in by_dso.most_common(6):
        print(f"{n * ns_per_sample:7.1f}  {dso}")
    addrs = sorted(ours)
    a2l = subprocess.run(["addr2line", "-e", binary, "-a", "-i", "-f", "-C"],
                         input="\n".join(hex(a) for a in addrs), capture_output=True, text=True).stdout
    frames, cur, lines = {}, None, a2l.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            cur = int(lines[i], 16)
            frames[cur] = []
            i += 1
        elif cur is not None and i + 1 < len(lines):
            frames[cur].append((lines[i], lines[i + 1]))
            i += 2
        else:
            i += 1
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()

    def own_frame(a):
        for fn, loc in frames.get(a, []):
            if root and loc.startswith(root + "/") and "/.cargo/" not in loc:
                return fn, loc[len(root) + 1:].split(" ")[0]
        fs = frames.get(a) or [("??", "??")]
        return fs[0][0], fs[0][1].split("/")[-1]

    by_fn = collections.Counter()
    for a, n in ours.items():
        by_fn[own_frame(a)[0][:90]] += n
    print(f"\nper function (innermost frame of our own source), {binary.split('/')[-1]}:")
    for fn, n in by_fn.most_common(top_fn):
        print(f"{n * ns_per_sample:7.2f}  {fn}")
    print("\nper address:")
    for a, n in ours.most_common(top_addr):
        fn, loc = own_frame(a)
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={a:#x}",
                              f"--stop-address={a + 16:#x}", binary], capture_output=True, text=True).stdout
        ins = next((l.split(":", 1)[1].strip() for l in dis.splitlines() if re.match(r"\s+[0-9a-f]+:", l)), "")
        print(f"{n * ns_per_sample:7.2f}  {a:#x}  {loc}  {fn[:50]}  | {ins}")


if __name__ == "__main__":
    main()
