#!/usr/bin/env python3
"""Soak: a `memvisor host` of N VMs at 2x overcommit with every mechanism on, running the
integrity workload and the papers' workloads in a loop for a given time (docs/soak.md).

Run through scripts/soak.sh, which builds memvisor first:
    scripts/soak.sh [DURATION] [--vms N] [--out DIR]
DURATION is seconds or 90s / 10m / 1h (default 1h). Each slot runs one VM at a time; when it
ends, its result is read (exit status, the guest's final RESULT line, the VMM's final stats) and
the slot starts the next workload. Every 5 s the host and every VMM are sampled (RSS, state).
When the time is up no new VM starts and the running ones finish. The report (stdout and
OUT/soak.json) gives the runs, pages moved (Tesseract's indirections among them), faults, pauses, mismatches, hangs, OOM kills and
memvisor's RSS over time; the exit status is 0 only if every run passed with 0 mismatches,
nothing hung, nothing was OOM-killed and the host stayed up.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
VM_MEM = 320 * MIB
OVERHEAD = 24 * MIB
# Longest a single workload may take before it counts as hung (they take 10-90 s here).
HANG_S = 600

# The rotation: (workload, cmdline). Every other run is `integrity`, which checks every byte.
INTEGRITY = ("integrity", "anon_mb=160 file_mb=16 rounds=3 compressible=50 report_order=2")
OTHERS = [
    ("kv", "records=80000 ops=300000 mix=a"),
    ("gcchurn", "heap_mb=160 gen_mb=16 gens=100 live_pct=10"),
    ("mapreduce", "input=src input_mb=16 vocab=50000 mappers=4"),
    ("alloc", "mb=128 rounds=10"),
    ("compile", "jobs=400 src=src src_mb=16"),
    ("memhog", "mb=200 secs=15"),
    ("seqread", "file=seq file_mb=32 passes=2"),
]


def duration(text):
    m = re.fullmatch(r"(\d+)(s|m|h)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration: give 600, 90s, 10m or 1h")
    return int(m.group(1)) * {"s": 1, None: 1, "m": 60, "h": 3600}[m.group(2)]


def call(sock, method, path, body=None):
    """One request on the host API's Unix socket; returns (status, parsed JSON or text)."""
    data = b"" if body is None else json.dumps(body).encode()
    req = (
        f"{method} {path} HTTP/1.1\r\nHost: memvisor\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(sock)
        s.sendall(req)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    head, _, payload = out.partition(b"\r\n\r\n")
    words = head.split()
    if len(words) < 2 or not words[1].isdigit():
        # A VMM whose VM ended as it took the connection closes it unanswered.
        raise ConnectionError(f"{sock}: no answer to {method} {path}")
    status = int(words[1])
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def vmm_pid(pid):
    """The process that runs a VM the host reports as `pid`: a jailed VMM is the one child of
    the process the host started, which waits outside its PID namespace (docs/security.md)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return pid
    return int(children[0]) if len(children) == 1 else pid


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def oom_kills():
    """OOM kills the kernel has logged so far (dmesg; None if it cannot be read)."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return len(re.findall(r"Out of memory: Killed process|oom-kill:", out.stdout))


def final_result(log_path):
    """The guest's final RESULT line (phase=done) in a VMM's log, if any."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [l for l in f if l.startswith("RESULT ") and " phase=done" in l]
    except OSError:
        return None
    return lines[-1].strip() if lines else None


def mib(b):
    return None if b is None else round(b / MIB, 1)


def words(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("duration", nargs="?", type=duration, default=3600)
    ap.add_argument("--vms", type=int, default=6, help="VMs running at once (4-8; default 6)")
    ap.add_argument("--out", help="directory for the host's state and the report (default: a new one under /tmp)")
    ap.add_argument("--keep", type=duration, default=600,
                    help="the host's keep: how long it remembers ticks, events and exited VMs (default 10m)")
    ap.add_argument("--memvisor", default="target/release/memvisor")
    a = ap.parse_args()
    if not 1 <= a.vms <= 8:
        ap.error("--vms must be 1 to 8")
    mv = os.path.abspath(a.memvisor)
    out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="memvisor-soak-"))
    os.makedirs(out, exist_ok=True)
    state = os.path.join(out, "state")
    # A state directory left by an earlier soak in the same place would hold its sockets and logs.
    shutil.rmtree(state, ignore_errors=True)

    # 2x overcommit: the budget holds half of the guests' memory, plus each VMM's overhead.
    budget = a.vms * VM_MEM // 2 + a.vms * OVERHEAD
    pool = budget // 8
    disks = []
    for i in range(a.vms):
        img = os.path.join(out, f"slot{i}.img")
        subprocess.run(
            [mv, "mkdisk", "data", "--out", img, "--size", "128M", "--files", "src:16M,seq:32M",
             "--seed", str(i + 1), "--force"],
            check=True, stdout=subprocess.DEVNULL,
        )
        disks.append(img)
    config = os.path.join(out, "host.toml")
    with open(config, "w") as f:
        f.write(
            f'[host]\nmemory = "{budget}"\nstate_dir = "{state}"\ntick = "1s"\n'
            f'sample_period = "5s"\npool = "{pool}"\npool_compress = "lz4"\nkeep = "{a.keep}s"\n'
        )
    print(f"soak: {a.vms} VMs of {VM_MEM // MIB} MiB, budget {budget // MIB} MiB "
          f"(pool {pool // MIB} MiB, lz4), {a.duration} s, in {out}", flush=True)

    ooms_before = oom_kills()
    host = subprocess.Popen([mv, "host", "--config", config],
                            stdout=open(os.path.join(out, "host.log"), "w"), stderr=subprocess.STDOUT)
    sock = os.path.join(state, "host.sock")
    t0 = time.time()
    while not os.path.exists(sock):
        if host.poll() is not None or time.time() - t0 > 30:
            sys.exit(f"soak: the host did not start (see {out}/host.log)")
        time.sleep(0.1)

    runs = []          # finished runs
    running = {}       # slot -> (name, workload, started)
    gen = [0] * a.vms
    rss = []           # (seconds, host RSS, VMMs' RSS beyond guest memory)
    problems = []
    totals = {}

    def start(slot):
        g = gen[slot]
        gen[slot] += 1
        wl, cmd = INTEGRITY if g % 2 == 0 else OTHERS[(g // 2 + slot) % len(OTHERS)]
        name = f"s{slot}g{g}"
        spec = {"name": name, "mem": VM_MEM, "workload": wl, "cmdline": cmd,
                "disks": [f"{disks[slot]},id=data"], "balloon": True, "mapper": True,
                "preventer": True, "tesseract": True,
                # Generations take turns through Tesseract's defragmentations and the victim
                # cache, so every mix meets the balloon, the pool and the others' pressure.
                "tesseract_defrag": (None, "guest", "store")[g % 3],
                "victim_cache": (0, 10)[g // 3 % 2]}
        st, body = call(sock, "POST", "/vms", spec)
        if st != 200:
            problems.append(f"{name}: POST /vms answered {st}: {body}")
            return
        running[slot] = (name, wl, time.time())

    def finish(slot, vm):
        name, wl, started = running.pop(slot)
        result = final_result(vm["log"])
        stats_path = os.path.join(state, name, "stats.json")
        try:
            with open(stats_path) as f:
                stats = json.load(f)
        except (OSError, ValueError):
            stats = {}
        c = (stats.get("pager") or {})
        pool_c = c.get("pool") or {}
        for k in ("swap_bytes_written", "swap_bytes_read", "faults_zero", "faults_swap",
                  "faults_image", "faults_released", "write_faults", "reclaimed_written",
                  "reclaimed_clean", "reclaimed_zero", "reclaimed_mirrored", "pauses",
                  "proactive_swap_ins", "preventer_completed", "ballooned", "reported",
                  "victim_cache_hits", "victim_cache_caught"):
            totals[k] = totals.get(k, 0) + int(c.get(k) or 0)
        for k in ("pooled_pages", "hit_pages", "spilled_pages"):
            totals["pool_" + k] = totals.get("pool_" + k, 0) + int(pool_c.get(k) or 0)
        ind_c = c.get("indirections") or {}
        for k in ("elided_pages", "split_reads", "disentangled", "defragmented", "regrouped"):
            totals["indirections_" + k] = totals.get("indirections_" + k, 0) + int(ind_c.get(k) or 0)
        w = words(result) if result else {}
        ok = vm.get("exit_status") == 1 and w.get("ok") == "1" and w.get("mismatches", "0") == "0"
        runs.append({"name": name, "workload": wl, "seconds": round(time.time() - started, 1),
                     "exit_status": vm.get("exit_status"), "why": vm.get("why"),
                     "ok": ok, "mismatches": int(w.get("mismatches", 0)), "result": result})
        # Done with it: the host may forget it (it would after `keep` anyway).
        st, body = call(sock, "DELETE", f"/vms/{name}")
        if st != 200:
            problems.append(f"{name}: DELETE /vms/{name} answered {st}: {body}")
        mark = "ok" if ok else "FAILED"
        print(f"soak: {time.time() - t0:7.0f}s {name:8} {wl:10} {runs[-1]['seconds']:6.1f}s {mark}"
              + ("" if ok else f" (exit {vm.get('exit_status')}, {vm.get('why')}, {result})"), flush=True)
        if not ok:
            problems.append(f"{name} ({wl}) failed: exit {vm.get('exit_status')}, {vm.get('why')}, {result}")

    for slot in range(a.vms):
        start(slot)
    last_sample = 0.0
    while running:
        now = time.time()
        if host.poll() is not None:
            problems.append(f"the host exited with {host.returncode}")
            break
        st, vms = call(sock, "GET", "/vms")
        if st != 200:
            problems.append(f"GET /vms answered {st}")
            break
        by_name = {v["name"]: v for v in vms}
        for slot, (name, wl, started) in list(running.items()):
            vm = by_name.get(name)
            if vm is None:
                continue
            if vm["state"] in ("exited", "refused"):
                finish(slot, vm)
                if now - t0 < a.duration:
                    start(slot)
            elif now - started > HANG_S:
                problems.append(f"{name} ({wl}) hung: {vm['state']} for {now - started:.0f} s")
                call(sock, "PUT", f"/vms/{name}/stop")
                running.pop(slot)
        if now - last_sample >= 5:
            last_sample = now
            # Per VMM: RSS beyond its guest memory and pool (the VMM's own memory), the most of
            # any VMM in this sample.
            over = 0
            for v in vms:
                if v.get("pid") and v["state"] not in ("exited", "refused"):
                    r = rss_bytes(vmm_pid(v["pid"]))
                    try:
                        st, vs = call(v["api_sock"], "GET", "/stats")
                    except OSError:
                        continue
                    pager = vs.get("pager") if st == 200 and isinstance(vs, dict) else None
                    if r is not None and pager:
                        resident = pager["resident_pages"] * 4096
                        pool_mapped = (pager.get("pool") or {}).get("mapped_bytes", 0)
                        over = max(over, r - resident - pool_mapped)
            rss.append((round(now - t0), rss_bytes(host.pid), over))
        time.sleep(1)

    host.send_signal(signal.SIGTERM)
    try:
        host.wait(timeout=120)
    except subprocess.TimeoutExpired:
        problems.append("the host did not stop within 120 s of SIGTERM")
        host.kill()
    ooms_after = oom_kills()
    ooms = None if ooms_before is None or ooms_after is None else ooms_after - ooms_before
    if ooms:
        problems.append(f"{ooms} OOM kills during the soak")

    def ends(values):
        """The most in the first and in the last tenth of the samples."""
        values = [v for v in values if v]
        if not values:
            return None, None
        k = max(1, len(values) // 10)
        return max(values[:k]), max(values[-k:])

    host_first, host_last = ends(r[1] for r in rss)
    # The host's RSS once it holds `keep` of history and events (the first sample after the keep
    # mark plus a tenth of the rest), against the end: what it holds no longer grows after that.
    later = [r for r in rss if r[0] >= a.keep and r[1]]
    k = max(1, len(later) // 10)
    host_kept = max(r[1] for r in later[:k]) if later else None
    # Flat means flat: a soak at least twice `keep` long fails if the host grew by more than
    # 1 MiB after it held `keep` of history (an hour at the default `keep` of an earlier build
    # grew 5.5 MiB; this one grows nothing measurable).
    if host_kept and host_last and a.duration >= 2 * a.keep and host_last - host_kept > MIB:
        problems.append(f"the host's RSS grew from {mib(host_kept)} to {mib(host_last)} MiB "
                        f"after it held {a.keep} s of history")
    # Every 10 minutes, for the report.
    timeline = [(r[0], r[1], r[2]) for r in rss if r[0] % 600 < 5]
    vmm_first, vmm_last = ends(r[2] for r in rss)
    report = {
        "vms": a.vms, "duration_s": a.duration, "elapsed_s": round(time.time() - t0),
        "budget_bytes": budget, "pool_bytes": pool,
        "runs": len(runs), "failed_runs": sum(not r["ok"] for r in runs),
        "mismatches": sum(r["mismatches"] for r in runs),
        "runs_by_workload": {w: sum(r["workload"] == w for r in runs) for w in sorted({r["workload"] for r in runs})},
        "totals": totals, "oom_kills": ooms,
        "host_rss_first_bytes": host_first, "host_rss_last_bytes": host_last,
        "keep_s": a.keep, "host_rss_after_keep_bytes": host_kept, "rss_every_10_min": timeline,
        "vmm_own_rss_first_bytes": vmm_first, "vmm_own_rss_last_bytes": vmm_last,
        "rss_samples": rss, "problems": problems, "run_list": runs,
    }
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(report, f, indent=1)
    moved = totals.get("swap_bytes_written", 0) + totals.get("swap_bytes_read", 0)
    faults = sum(totals.get(k, 0) for k in ("faults_zero", "faults_swap", "faults_image", "faults_released", "write_faults"))
    print(f"soak: {len(runs)} runs ({report['runs_by_workload']}), {report['failed_runs']} failed, "
          f"{report['mismatches']} mismatches")
    print(f"soak: pages moved: {moved // 4096} through the swap file, "
          f"{totals.get('pool_pooled_pages', 0)} into pools ({totals.get('pool_hit_pages', 0)} pool hits, "
          f"{totals.get('pool_spilled_pages', 0)} spilled), {totals.get('reclaimed_mirrored', 0)} dropped as mirrors, "
          f"{totals.get('proactive_swap_ins', 0)} swapped in proactively; Tesseract: "
          f"{totals.get('indirections_elided_pages', 0)} pages of guest writes became indirections, "
          f"{totals.get('indirections_split_reads', 0)} split reads, "
          f"{totals.get('indirections_disentangled', 0)} blocks put back at the VMs' ends, "
          f"{totals.get('indirections_defragmented', 0)} copied back and "
          f"{totals.get('indirections_regrouped', 0)} regrouped by defragmentation; victim cache: "
          f"{totals.get('victim_cache_hits', 0)} hits, {totals.get('victim_cache_caught', 0)} caught")
    print(f"soak: faults {faults}, pauses {totals.get('pauses', 0)}, OOM kills {ooms}, "
          f"host RSS {mib(host_first)} -> {mib(host_last)} MiB, a VMM's own RSS (beyond guest "
          f"memory and pool) {mib(vmm_first)} -> {mib(vmm_last)} MiB (first and last tenth)")
    if host_kept:
        print(f"soak: host RSS once it holds {a.keep} s of history: {mib(host_kept)} MiB, "
              f"at the end {mib(host_last)} MiB")
    for t, h, v in timeline:
        print(f"soak: at {t:5d} s host RSS {mib(h)} MiB, VMM own RSS {mib(v)} MiB")
    for p in problems:
        print(f"soak: PROBLEM: {p}")
    print(f"soak: report in {out}/soak.json")
    sys.exit(1 if problems or not runs else 0)


if __name__ == "__main__":
    main()
