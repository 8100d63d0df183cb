#!/usr/bin/env python3
"""Boot latency and VM exits per virtio-blk request, memvisor vs QEMU microvm, same guest kit ELF.

For each hypervisor, N runs (interleaved) of `memvisor run --workload boot`, timing from process
start to the guest's first serial line and to process exit. Then KVM exits per 4 KiB request:
KVM tracepoint events of a `selftest req_kb=4` run minus those of a `boot` run, divided
by the requests the guest issued. Needs root (tracefs). Prints a table; asserts nothing.
"""
import os, re, statistics, subprocess, sys, tempfile, time

MEMVISOR = sys.argv[1] if len(sys.argv) > 1 else "target/release/memvisor"
RUNS = int(os.environ.get("RUNS", "10"))
TRACE = "/sys/kernel/tracing"


def timed_run(hv, args):
    t0 = time.perf_counter()
    p = subprocess.Popen([MEMVISOR, "run", "--hypervisor", hv] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.readline()
    first = time.perf_counter() - t0
    out = p.stdout.read().decode()
    p.wait()
    return first, time.perf_counter() - t0, p.returncode, out


EVENTS = ("kvm_mmio", "kvm_pio", "kvm_userspace_exit", "kvm_set_irq", "kvm_emulate_insn")


def traced_events(hv, args):
    """Counts of KVM tracepoint events during one run. kvm_pvm emits no kvm:kvm_exit and its
    debugfs statistics are not readable, so the exits that matter are counted by kind: guest
    MMIO and port accesses (each a trap into KVM), returns to user space, interrupts raised, and
    instructions KVM emulated (ring 0 and the decoding of MMIO/port accesses)."""
    def w(path, v):
        with open(os.path.join(TRACE, path), "w") as f:
            f.write(v)
    if not os.path.exists(os.path.join(TRACE, "tracing_on")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACE], check=True)
    w("tracing_on", "0")
    w("buffer_size_kb", "131072")
    w("trace", "")
    w("set_event", " ".join("kvm:" + e for e in EVENTS))
    w("tracing_on", "1")
    _, _, rc, out = timed_run(hv, args)
    w("tracing_on", "0")
    counts = dict.fromkeys(EVENTS, 0)
    with open(os.path.join(TRACE, "trace")) as f:
        for line in f:
            for e in EVENTS:
                if f" {e}:" in line:
                    counts[e] += 1
    w("set_event", "")
    w("trace", "")
    return counts, out


def main():
    fd, disk = tempfile.mkstemp(suffix=".img")
    os.ftruncate(fd, 64 << 20)
    os.close(fd)
    boot = ["--mem", "512M", "--workload", "boot"]
    res = {"memvisor": [], "qemu": []}
    for _ in range(RUNS):
        for hv in res:
            first, total, rc, _ = timed_run(hv, boot)
            assert rc == 1, f"{hv} boot exited {rc}"
            res[hv].append((first, total))
    print(f"boot workload, 512 MiB, median of {RUNS} runs")
    print("| hypervisor | to first serial line (ms) | to exit (ms) |")
    print("|---|---|---|")
    for hv, r in res.items():
        print(f"| {hv} | {statistics.median(x[0] for x in r) * 1e3:.1f} | {statistics.median(x[1] for x in r) * 1e3:.1f} |")
    mb = 16
    st = ["--mem", "512M", "--disk", f"{disk},id=data", "--workload", "selftest", "--cmdline", f"selftest_mb={mb} req_kb=4"]
    print(f"\nKVM exits per 4 KiB virtio-blk request (selftest {mb} MiB written and read back, minus a boot run)")
    print("| hypervisor | requests | " + " | ".join(EVENTS) + " |")
    print("|---|---|" + "---|" * len(EVENTS))
    for hv in res:
        b, _ = traced_events(hv, boot)
        st_, out = traced_events(hv, st)
        m = re.search(r"requests=(\d+)", out)
        reqs = int(m.group(1)) if m else 0
        if not reqs:
            print(f"| {hv} | ? | selftest printed no requests= |")
            continue
        print(f"| {hv} | {reqs} | " + " | ".join(f"{(st_[e] - b[e]) / reqs:.2f}" for e in EVENTS) + " |")
    os.unlink(disk)


if __name__ == "__main__":
    main()
