#!/usr/bin/env python3
"""Crash test of Tesseract's indirections (docs/tesseract.md): memvisor is killed with SIGKILL
while the guest writes, and a fresh boot checks that every write the guest saw acknowledged is
on its disk.

Run through scripts/crashtest.sh, which builds memvisor first:
    scripts/crashtest.sh [--kills N] [--out DIR] [--seed S]
Each round: fresh data and swap disks; `memvisor run --tesseract` (with the Swap Mapper and the
Preventer, under a limit that makes the pager swap; rounds take turns with the log synced per
write or per flush, no defragmentation, the guest disk's or the swap file's, and without and with
a victim cache) runs the guest kit's `crashwrite` workload, which writes generations of sequence-numbered pages to a file on the data disk while its own
memory churns through its swap disk, printing `ACK gen=G page=I` after each sync; at a random
moment memvisor gets SIGKILL. Then a fresh boot of the same disks (which first puts the logged
indirections back into the images, as every start does) runs `crashwrite check=1` with the last
ACK seen: every page must be whole and no older than acknowledged. After it no indirection log
may remain and the killed run's swap file must be gone (nothing leaked). Exit status 0 only if
every round holds.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

VM = ["--mem", "48M", "--mem-limit", "24M", "--tesseract", "--mapper", "--preventer"]
WRITE = "mb=16 anon_mb=48 batch=128"
PUT_BACK = re.compile(r"disk (\w+): (\d+) blocks put back")


def stats(sock):
    """GET /stats on a VM's API socket, or None."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(sock)
            s.sendall(b"GET /stats HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def one_round(memvisor, work, k, seed, rng):
    d = os.path.join(work, f"round{k}")
    os.makedirs(d)
    data, swap = os.path.join(d, "data.img"), os.path.join(d, "swap.img")
    shutil.copy(os.path.join(work, "data.img"), data)
    shutil.copy(os.path.join(work, "swap.img"), swap)
    store, sock = os.path.join(d, "store.swap"), os.path.join(d, "api.sock")
    disks = ["--disk", f"{data},id=data", "--disk", f"{swap},id=swap"]
    # Every 12 rounds take every mix of log sync (write, flush), defragmentation (none, guest
    # disk, swap file) and victim cache (off, 10 %).
    mode = ["--tesseract-sync", ("write", "flush")[k % 2]]
    mode += ([], ["--tesseract-defrag", "guest"], ["--tesseract-defrag", "store"])[k % 3]
    mode += ["--victim-cache", "10"] if k % 4 in (1, 2) else []
    run = [memvisor, "run", *VM, *mode, "--swap", store, "--api-sock", sock, *disks,
           "--workload", "crashwrite", "--cmdline", f"{WRITE} seed={seed}"]
    p = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acks = []

    def read():
        for line in p.stdout:
            m = re.match(r"ACK gen=(\d+) page=(\d+)", line)
            if m:
                acks.append((int(m.group(1)), int(m.group(2))))

    t = threading.Thread(target=read)
    t.start()
    delay = rng.uniform(1.0, 8.0)
    deadline = time.monotonic() + delay
    last = None
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
        last = stats(sock) or last
    if p.poll() is not None:
        raise RuntimeError(f"round {k}: memvisor ended by itself (status {p.returncode}) before the kill")
    p.send_signal(signal.SIGKILL)
    p.wait()
    t.join()
    live = ((last or {}).get("pager") or {}).get("indirections") or {}
    logs_left = [f for f in os.listdir(d) if f.endswith(".indirections")]
    gen, page = acks[-1] if acks else (0, 0)
    check = [memvisor, "run", "--mem", "48M", *disks, "--workload", "crashwrite",
             "--cmdline", f"mb=16 seed={seed} check=1 gen={gen} page={page}"]
    c = subprocess.run(check, capture_output=True, text=True, timeout=600)
    result = next((l for l in c.stdout.splitlines() if l.startswith("RESULT workload=crashwrite phase=check")), "")
    fields = dict(w.split("=", 1) for w in result.split()[1:] if "=" in w)
    put_back = {m.group(1): int(m.group(2)) for m in PUT_BACK.finditer(c.stderr)}
    leaked = [f for f in os.listdir(d) if f.endswith(".indirections")] + ([store] if os.path.exists(store) else [])
    r = {
        "round": k,
        "mode": " ".join(mode),
        "killed_after_s": round(delay, 2),
        "acks": len(acks),
        "acked": [gen, page],
        "indirections_live_before_kill": live.get("live", 0),
        "elided_pages_before_kill": live.get("elided_pages", 0),
        "logs_at_kill": len(logs_left),
        "blocks_put_back": put_back,
        "check_status": c.returncode,
        "check_ok": fields.get("ok") == "1",
        "lost": int(fields.get("lost", -1)),
        "torn": int(fields.get("torn", -1)),
        "leaked": leaked,
    }
    r["pass"] = r["check_ok"] and c.returncode == 1 and r["lost"] == 0 and r["torn"] == 0 and not leaked
    if not r["pass"]:
        r["check_output"] = c.stdout[-2000:] + c.stderr[-2000:]
    else:
        shutil.rmtree(d)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--out", default="target/crashtest")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--memvisor", default="target/release/memvisor")
    a = ap.parse_args()
    if a.kills < 1:
        sys.exit("crashtest: --kills must be at least 1")
    memvisor = os.path.abspath(a.memvisor)
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="crashtest-", dir=a.out)
    for kind, extra in (("data", ["--files", "crash:16M", "--seed", "3"]), ("swap", [])):
        subprocess.run([memvisor, "mkdisk", kind, "--out", os.path.join(work, f"{kind}.img"),
                        "--size", "64M", *extra], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(a.seed)
    print(f"crashtest: {a.kills} kills, seed {a.seed}, in {work}", flush=True)
    rounds = []
    for k in range(a.kills):
        r = one_round(memvisor, work, k, a.seed + k, rng)
        rounds.append(r)
        print(f"crashtest: round {k} ({r['mode']}): killed after {r['killed_after_s']} s, {r['acks']} acks (last gen {r['acked'][0]} page {r['acked'][1]}), "
              f"{r['indirections_live_before_kill']} indirections live, put back {r['blocks_put_back']}, "
              f"lost {r['lost']}, torn {r['torn']}, leaked {len(r['leaked'])} -> {'ok' if r['pass'] else 'FAILED'}", flush=True)
        if not r["pass"]:
            print(r.get("check_output", ""), flush=True)
    failed = [r for r in rounds if not r["pass"]]
    total = {
        "kills": len(rounds),
        "failed": len(failed),
        "acks": sum(r["acks"] for r in rounds),
        "lost": sum(max(r["lost"], 0) for r in rounds),
        "torn": sum(max(r["torn"], 0) for r in rounds),
        "leaked": sum(len(r["leaked"]) for r in rounds),
        "kills_with_live_indirections": sum(1 for r in rounds if r["indirections_live_before_kill"] > 0),
        "blocks_put_back": sum(sum(r["blocks_put_back"].values()) for r in rounds),
    }
    with open(os.path.join(a.out, "crashtest.json"), "w") as f:
        json.dump({"seed": a.seed, "total": total, "rounds": rounds}, f, indent=1)
    print(f"crashtest: {total['kills']} kills, {total['failed']} failed; {total['acks']} acknowledged syncs checked, "
          f"{total['lost']} lost and {total['torn']} torn pages, {total['leaked']} leaked logs or swap files; "
          f"{total['kills_with_live_indirections']} kills with indirections live, {total['blocks_put_back']} blocks put back at the next start")
    if not failed:
        shutil.rmtree(work)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
