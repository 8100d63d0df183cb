#!/usr/bin/env python3
"""Boot latency and VM exits per virtio-blk request, memvisor vs QEMU microvm, same guest kit ELF.

For each hypervisor, N runs (interleaved) of `memvisor run --workload boot`, timing from process
start to the guest's first serial line and to process exit. Then KVM exits per 4 KiB request:
kvm:kvm_exit tracepoint events of a `selftest req_kb=4` run minus those of a `boot` run, divided
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


def trace_exits(hv, args):
    """KVM exits (all, and those that reached user space) taken by the processes of one run."""
    def w(path, v):
        with open(os.path.join(TRACE, path), "w") as f:
            f.write(v)
    w("tracing_on", "0")
    w("buffer_size_kb", "65536")
    w("trace", "")
    w("set_event", "kvm:kvm_exit kvm:kvm_userspace_exit")
    w("tracing_on", "1")
    _, _, rc, out = timed_run(hv, args)
    w("tracing_on", "0")
    exits = user = 0
    with open(os.path.join(TRACE, "trace")) as f:
        for line in f:
            if "kvm_exit:" in line:
                exits += 1
            elif "kvm_userspace_exit:" in line:
                user += 1
    w("set_event", "")
    w("trace", "")
    return exits, user, out


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
    print("| hypervisor | requests | exits per request | user-space exits per request |")
    print("|---|---|---|---|")
    for hv in res:
        b_exits, b_user, _ = trace_exits(hv, boot)
        s_exits, s_user, out = trace_exits(hv, st)
        m = re.search(r"requests=(\d+)", out)
        reqs = int(m.group(1)) if m else 0
        if reqs:
            print(f"| {hv} | {reqs} | {(s_exits - b_exits) / reqs:.2f} | {(s_user - b_user) / reqs:.2f} |")
        else:
            print(f"| {hv} | ? | selftest printed no requests= | |")
    os.unlink(disk)


if __name__ == "__main__":
    main()
