#!/usr/bin/env bash
# Installs what memvisor needs on a Debian 12 host: QEMU (the peer every comparison runs
# against), libclang (bindgen for the userfaultfd bindings), Chromium (the live page's test),
# Prometheus (a test scrapes a host's metrics with it), and checks the Rust toolchain and KVM.
set -euo pipefail

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v cc >/dev/null || need+=(build-essential)
# The pager test that makes its swap disk fail mid-run uses a loop device with ext4.
command -v losetup >/dev/null || need+=(mount)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
# scripts/shrink-latency.sh reads GET /stats with jq.
command -v jq >/dev/null || need+=(jq)
# The benchmarks' plots (SVG and PNG) measure and draw their text with this font.
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# The host's live page is tested in a headless browser.
command -v chromium >/dev/null || need+=(chromium)
# crates/memvisor/tests/metrics.rs runs its own Prometheus server against a host.
[ -x /usr/bin/prometheus ] || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Install without starting the packages' services (Debian's prometheus would start a server
  # of its own on port 9090); the tests start what they need. Docker images already say so.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: no Rust toolchain (cargo) on PATH; install a stable Rust >= 1.85 with rustup first" >&2
  exit 1
fi
for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "setup: cargo $tool is missing; the tests need it: rustup component add ${tool/fmt/rustfmt}" >&2
    exit 1
  fi
done
if [ ! -w /dev/kvm ]; then
  echo "setup: /dev/kvm is missing or not writable for $(id -un); memvisor needs KVM" >&2
  exit 1
fi
