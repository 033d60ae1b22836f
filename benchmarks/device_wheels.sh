#!/usr/bin/env bash
# The wheels the GPU host needs and cannot download (it reaches no package registry): snakemake
# with its dependencies (benchmarks/workflow_run.sh) and nvImageCodec + nvJPEG for
# `decode: gpu` (benchmarks/decode_rates.py), for the host's Python (3.12, manylinux x86_64).
# Every version is the lock's (requirements/lock.txt, requirements/gpu-lock.txt: `make lock`),
# the same make and CI install.
#   bash benchmarks/device_wheels.sh [DIR (default .whl)]
# then pass DIR in the device tool's `carry`. Pure-Python wheels are built or fetched here
# (`pip wheel`, some dependencies are sdists only); every wheel with compiled code is replaced by
# the cp312 manylinux build of the same version (`pip download --only-binary`).
set -euo pipefail
DIR=${1:-.whl}
PY=${PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCKS=(-c "$ROOT/requirements/lock.txt" -c "$ROOT/requirements/gpu-lock.txt")
PLAT=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux_2_28_x86_64 --python-version 3.12 --implementation cp)
mkdir -p "$DIR"
"$PY" -m pip wheel -q -w "$DIR" "${LOCKS[@]}" snakemake
for whl in "$DIR"/*.whl; do
  name=$(basename "$whl")
  case "$name" in *-py3-none-any.whl|*-py2.py3-none-any.whl) continue ;; esac
  IFS=- read -r dist version _ <<< "$name"
  rm "$whl"
  "$PY" -m pip download -q --no-deps --only-binary=:all: "${PLAT[@]}" -d "$DIR" "$dist==$version"
done
"$PY" -m pip download -q --no-deps --only-binary=:all: "${PLAT[@]}" -d "$DIR" "${LOCKS[@]}" \
  nvidia-nvimgcodec-cu13 nvidia-nvjpeg
# pytest for the GPU-marked tests (python3 -m pytest -m gpu tests/...)
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DIR" "${LOCKS[@]}" pytest pluggy \
  iniconfig
# pulp bundles CBC for six platforms (16 MB); the host needs only linux/i64: the device tool carries
# at most 64 MiB with the working tree. The other binaries and their RECORD lines are dropped.
"$PY" - "$DIR"/pulp-*.whl <<'PYEOF'
import sys, zipfile, os
path = sys.argv[1]
keep = lambda n: "/solverdir/cbc/" not in n or "/cbc/linux/i64/" in n
tmp = path + ".tmp"
with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        if not keep(info.filename):
            continue
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if keep(line.split(",")[0])).encode()
        dst.writestr(info, data)
os.replace(tmp, path)
PYEOF
echo "$(ls "$DIR" | wc -l) wheels in $DIR ($(du -sh "$DIR" | cut -f1))"
