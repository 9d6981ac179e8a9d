#!/usr/bin/env bash
# Installs everything hostctl needs on a Debian 12 host, as root. Idempotent:
# the second run only checks and returns in about a second.
#   - Debian packages: iproute2, python3-bpfcc (bcc), bpftool, iperf3, nftables (the NAT tests), kernel headers,
#     python3-venv, gcc (tests/unit/test_bpf_layout.py compiles a probe of hc_pace.c's struct layout)
#   - the kernel-headers link bcc looks for (/lib/modules/$(uname -r)/{build,source})
#   - a venv at .venv (with system site-packages, so Debian's bcc imports) with hostctl installed
#     with the dev (tests) extra, and the lab (lab/: testbed, benchmarks, workloads, fluid models,
#     plots; the distribution hostctl-lab), with its torch extra when the CPU wheel of torch 2.13.0
#     is on local disk. Both editable.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages and links kernel headers)" >&2
  exit 1
fi

pkgs=(iproute2 python3-bpfcc bpftool iperf3 nftables python3-venv linux-headers-amd64 gcc)
command -v systemd-analyze >/dev/null 2>&1 || pkgs+=(systemd)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bcc compiles BPF C at run time against the kernel headers under /lib/modules/$(uname -r).
# When the running kernel has no headers package (a custom kernel), link Debian's generic ones.
kdir=/lib/modules/$(uname -r)
if [ ! -e "$kdir/build/include/linux/kconfig.h" ] && [ ! -e "$kdir/source/include/linux/kconfig.h" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$hdr" ]; then
    echo "setup.sh: no kernel headers found under /usr/src; install linux-headers-\$(uname -r)" >&2
    exit 1
  fi
  mkdir -p "$kdir"
  ln -sfn "$hdr" "$kdir/build"
  ln -sfn "${hdr%-amd64}-common" "$kdir/source"
  echo "setup.sh: linked $hdr as the headers of $(uname -r)"
fi

# The venv: Debian's python (bcc's python package lives in its dist-packages).
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
# The torch extra (a real PyTorch workload for the testbed) only where pip finds the
# CPU build of torch 2.13.0 on local disk: elsewhere PyPI's torch is a CUDA build of
# several GB. HOSTCTL_TORCH=0 skips it, HOSTCTL_TORCH=1 insists. Without it, the
# PyTorch tests are skipped with a reason. The fast extra (numba: the cluster simulator's compiled
# rate kernel) always.
lab="./lab[fast]"
torch_wheel=$(ls ${PIP_FIND_LINKS:-/opt/wheels}/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n 1 || true)
if [ "${HOSTCTL_TORCH:-auto}" = 1 ] || { [ "${HOSTCTL_TORCH:-auto}" = auto ] && [ -n "$torch_wheel" ]; }; then
  lab="./lab[torch,fast]"
fi
stamp=.venv/.hostctl-installed
want="$(sha256sum pyproject.toml lab/pyproject.toml | cut -d' ' -f1 | tr '\n' ' ')$lab"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e ".[dev]" -e "$lab"
  echo "$want" > "$stamp"
fi
