#!/usr/bin/env python3
"""Page sharing (ESX Fig. 4) on memvisor and on QEMU + KSM, side by side, same guest kit ELF.

For N = 1..MAX_VMS identical VMs (each `memhog mb=MB`: every page numbered the same in every VM,
swept at 1 MiB/s so most pages stay put), run on memvisor with `--sharing off`, memvisor with
`--sharing host` and QEMU with `mem-merge=on` (`--hypervisor qemu --sharing host`), one after
the other, with KSM at one fixed scan budget for all (pages_to_scan 1250, sleep 10 ms,
use_zero_pages 1; the knobs found are put back at the end). Every 2 s, over the guest RAM
mapping of each VM's process (memvisor's VMM, or QEMU itself): its present pages, those mapping
a KSM page (/proc/PID/pagemap and /proc/kpageflags) and its zero pages (/proc/PID/ksm_stat);
and ksmd's CPU. Memory *shared* is the pages mapping a KSM or zero page; *reclaimed* is shared
less the distinct KSM pages they map (each kept once), counted over these VMs only, so other
processes' mergeable memory on the host does not enter. Prints, per run, the steady state (mean
of the last 10 s) as a share of the VMs' present guest memory, when reclaimed first passed half
its steady value, ksmd's CPU, and memvisor's reclaimed against QEMU's. Needs root. Asserts
nothing.

Usage: scripts/measure-sharing.py [MEMVISOR] (env: MAX_VMS=3 MB=160 SECS=60 MEM=256M)
"""
import os, signal, struct, subprocess, sys, time

MEMVISOR = sys.argv[1] if len(sys.argv) > 1 else "target/release/memvisor"
MAX_VMS = int(os.environ.get("MAX_VMS", "3"))
MB = int(os.environ.get("MB", "160"))
SECS = int(os.environ.get("SECS", "60"))
MEM = os.environ.get("MEM", "256M")
KSM = "/sys/kernel/mm/ksm"
KNOBS = {"use_zero_pages": "1", "pages_to_scan": "1250", "sleep_millisecs": "10", "run": "1"}
TICK = os.sysconf("SC_CLK_TCK")


def knob(name, value=None):
    path = os.path.join(KSM, name)
    if value is None:
        with open(path) as f:
            return f.read().strip()
    with open(path, "w") as f:
        f.write(value)


def ksm_stat(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/ksm_stat") as f:
            for line in f:
                k, _, v = line.partition(" ")
                if v.strip().lstrip("-").isdigit():
                    out[k] = int(v)
    except OSError:
        pass
    return out


def rss_pages(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 4
    except OSError:
        pass
    return 0


KPF_KSM = 1 << 21
PAGE = 4096


def ram_mapping(pid):
    """The largest anonymous mapping of `pid` (guest RAM), as (start, end)."""
    best = None
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5:  # named: a file, the heap, a stack
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if best is None or hi - lo > best[1] - best[0]:
                    best = (lo, hi)
    except OSError:
        pass
    return best


def ksm_frames(pid, kpf):
    """(present pages, KSM-mapped pages, the set of their page frames) of `pid`'s guest RAM."""
    m = ram_mapping(pid)
    if m is None:
        return 0, 0, set()
    present, ksm, frames = 0, 0, set()
    try:
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return 0, 0, set()
    try:
        lo, hi = m
        chunk = 512 * 64
        for start in range(lo, hi, chunk * PAGE):
            n = min(chunk, (hi - start) // PAGE)
            data = os.pread(fd, n * 8, (start // PAGE) * 8)
            for (e,) in struct.iter_unpack("<Q", data):
                if e >> 63 & 1:
                    present += 1
                    pfn = e & ((1 << 55) - 1)
                    flags = os.pread(kpf, 8, pfn * 8)
                    if len(flags) == 8 and struct.unpack("<Q", flags)[0] & KPF_KSM:
                        ksm += 1
                        frames.add(pfn)
    finally:
        os.close(fd)
    return present, ksm, frames


def vm_pid(p, hv):
    """The process holding guest RAM: memvisor's VMM itself, or the QEMU it runs."""
    if hv != "qemu":
        return p.pid
    try:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def ksmd_ticks():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "ksmd":
                    continue
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            return int(rest[11]) + int(rest[12])
        except OSError:
            continue
    return 0


def run(mode, n):
    """One run of `n` VMs in `mode`; returns its samples and the VMs' RESULT lines."""
    # Unmerge everything left from the last run, then scan at the fixed budget.
    knob("run", "2")
    for k, v in KNOBS.items():
        knob(k, v)
    hv, sharing = {"memvisor-off": ("memvisor", "off"), "memvisor-host": ("memvisor", "host"),
                   "qemu-merge": ("qemu", "host")}[mode]
    procs = []
    for _ in range(n):
        procs.append(subprocess.Popen(
            [MEMVISOR, "run", "--hypervisor", hv, "--sharing", sharing, "--mem", MEM,
             "--workload", "memhog", "--cmdline", f"mb={MB} secs={SECS} rate_mb_s=1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    t0, cpu0 = time.time(), ksmd_ticks()
    samples = []
    kpf = os.open("/proc/kpageflags", os.O_RDONLY)
    while any(p.poll() is None for p in procs):
        time.sleep(2)
        pids = [vm_pid(p, hv) for p in procs]
        present, ksm, frames, zero = 0, 0, set(), 0
        for pid in pids:
            if pid is None:
                continue
            a, b, f = ksm_frames(pid, kpf)
            present += a
            ksm += b
            frames |= f
            zero += ksm_stat(pid).get("ksm_zero_pages", 0)
        cpu = (ksmd_ticks() - cpu0) / TICK
        samples.append((time.time() - t0, present + zero, ksm + zero, ksm - len(frames) + zero, cpu))
    os.close(kpf)
    results = [p.stdout.read().strip().splitlines()[-1:] for p in procs]
    return samples, results


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    saved_knobs = {k: knob(k) for k in KNOBS}
    rows = []
    try:
        for n in range(1, MAX_VMS + 1):
            for mode in ("memvisor-off", "memvisor-host", "qemu-merge"):
                samples, results = run(mode, n)
                steady = [s for s in samples if s[0] <= SECS][-10:] or samples[-1:]
                rss = sum(s[1] for s in steady) / len(steady)
                shared = sum(s[2] for s in steady) / len(steady)
                saved = sum(s[3] for s in steady) / len(steady)
                half = next((s[0] for s in samples if saved > 0 and s[3] >= saved / 2), None)
                cpu = samples[-1][4] / max(samples[-1][0], 1e-9) if samples else 0.0
                ok = all(r and " ok=1" in r[0] and " errors=0" in r[0] for r in results)
                rows.append((n, mode, rss, shared, saved, half, cpu, ok))
                print(f"n={n} {mode}: guest memory {rss * 4 / 1024:.0f} MiB shared {shared * 4 / 1024:.0f} MiB "
                      f"reclaimed {saved * 4 / 1024:.0f} MiB half at {half} s ksmd {cpu * 100:.1f} % ok={ok}",
                      file=sys.stderr, flush=True)
    finally:
        knob("run", "2")
        for k in ("use_zero_pages", "pages_to_scan", "sleep_millisecs", "run"):
            knob(k, saved_knobs[k])
    print(f"| VMs | run | guest memory present (MiB) | shared | reclaimed | reclaimed at half its steady value | ksmd CPU | reclaimed vs QEMU | guests ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, mode, rss, shared, saved, half, cpu, ok in rows:
        qemu = next((r[4] for r in rows if r[0] == n and r[1] == "qemu-merge"), 0)
        ratio = f"{saved / qemu:.2f}" if qemu and mode != "qemu-merge" else "-"
        pct = lambda x: f"{x * 4 / 1024:.0f} MiB ({100 * x / rss:.0f} %)" if rss else "-"
        print(f"| {n} | {mode} | {rss * 4 / 1024:.0f} | {pct(shared)} | {pct(saved)} | "
              f"{'-' if half is None else f'{half:.0f} s'} | {cpu * 100:.1f} % | {ratio} | {ok} |")


if __name__ == "__main__":
    main()
