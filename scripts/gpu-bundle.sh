#!/usr/bin/env bash
# Packs this machine's CUDA build for a GPU machine that cannot build it (no Debian packages, no network, as
# the GPU machines lent to this project): dsrun, dsworker, gpu_bench and the model plugins, stripped, with the
# shared libraries they load that a CUDA image may lack (Gloo, fmt, yaml-cpp, libssh, OpenBLAS, ...; not glibc's,
# libstdc++, zlib, nor CUDA's and NCCL's, which dsworker opens from the GPU machine's own install). There:
#   mkdir DIR && tar xJf BUNDLE -C DIR && scripts/gpu-check.sh --prebuilt DIR
# Usage: scripts/gpu-bundle.sh [BUNDLE]   (default gpu-bundle.tar.xz; about 10 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-gpu-bundle.tar.xz}")"
if [ ! -e build/kernels/cuda/CMakeFiles/ds_kernels_cuda.dir/launch.cu.o ] || [ ! -x build/bench/gpu_bench ]; then
  echo "gpu-bundle: build/ is not a CUDA build (build where nvcc is: scripts/build.sh)" >&2
  exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/worker" "$stage/build/cli" "$stage/build/bench" "$stage/build/plugins" "$stage/lib"
for b in worker/dsworker cli/dsrun bench/gpu_bench; do strip -o "$stage/build/$b" "build/$b"; done
for p in build/plugins/*.so; do strip -o "$stage/$p" "$p"; done
ldd build/worker/dsworker build/cli/dsrun build/bench/gpu_bench | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so* | libm.so* | libresolv.so* | libgcc_s.so* | libstdc++.so* | libz.so* | ld-linux*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
tar cJf "$out" -C "$stage" build lib
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1)): unpack it on the GPU machine and run scripts/gpu-check.sh --prebuilt DIR"
