#!/usr/bin/env bash
# Installs every Debian package that dsrun's build, tests and benchmarks need.
# Idempotent: prints nothing and touches nothing when all packages are present.
# CUDA and NCCL are not installed here; the build finds them in /usr/local/cuda when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git      # toolchain
  libcli11-dev libfmt-dev nlohmann-json3-dev libssh-dev  # launcher
  libyaml-cpp-dev libgloo-dev                            # runtime (ds_config YAML, Gloo)
  doctest-dev python3 python3-pytest                     # tests
  openssh-server openssh-client procps                   # throwaway sshd in the integration tests
  pdsh                                                   # peer in bench/launch, later a transport
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
