#!/usr/bin/env bash
# The one way a benchmark runs on a GPU host (issue 46), sourced by every device call
# (gpu_call.sh for any command; decode_rates.sh; workflow_run.sh), from the repository root:
#   wl_setup               the carried wheels (.whl/*.whl, bash benchmarks/device_wheels.sh)
#                          installed into /tmp/site (none carried: nothing installed); PYTHONPATH
#                          src, benchmarks, /tmp/site; a `wattlife` command on PATH
#   wl_gpu_info OUT        OUT/gpu.csv: name, driver, power limit and default limit as found
#                          (nothing on the GPU is changed); the library versions printed
#   wl_tests OUT FILES...  the GPU-marked tests of FILES, OUT/tests.log; non-zero if one fails
#   wl_budget DEADLINE [M] seconds left of DEADLINE since the calling script started ($SECONDS),
#                          less M (default 10) for the packing
#   wl_pack OUT SRC NAME [KEEP...]
#                          SRC's results as at most 8 files in OUT (what the device tool brings
#                          back): the KEEP files (paths under SRC) copied beside, every file of
#                          SRC in one archive OUT/NAME (SRC's top-level names as its members),
#                          trace.csv files over 1 MB gzipped first; files matching WL_SKIP (an
#                          array of find(1) tests; default: over 40 MB) left out and listed in
#                          OUT/left_out.txt, written only when something was left out
WL_SITE=/tmp/site

wl_setup() {
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$WL_SITE" .whl/*.whl || return 1
  fi
  export PYTHONPATH=$PWD/src:$PWD/benchmarks:$WL_SITE${PYTHONPATH:+:$PYTHONPATH}
  export PATH=$WL_SITE/bin:$PATH PYTHONUNBUFFERED=1
  if ! command -v wattlife >/dev/null; then  # the package's console script, without installing it
    mkdir -p /tmp/wl-bin
    printf '#!/usr/bin/env python3\nimport sys\nfrom wattlife.cli import main\nsys.exit(main())\n' \
      > /tmp/wl-bin/wattlife
    chmod +x /tmp/wl-bin/wattlife
    export PATH=/tmp/wl-bin:$PATH
  fi
}

wl_gpu_info() {
  mkdir -p "$1"
  nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit --format=csv \
    > "$1/gpu.csv"
  cat "$1/gpu.csv"; nproc
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    2>/dev/null || true
}

wl_tests() {
  local out=$1 rc; shift
  [ $# -gt 0 ] || return 0
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu "$@" > "$out/tests.log" 2>&1
  rc=$?; echo "tests rc=$rc"; tail -3 "$out/tests.log"
  [ $rc -eq 0 ] || tail -40 "$out/tests.log"
  return $rc
}

wl_budget() {
  echo $(( $1 - SECONDS - ${2:-10} ))
}

wl_pack() {
  local out=$1 src=$2 name=$3 f n left; shift 3
  local skip=(-size +40M)
  [ -n "${WL_SKIP+x}" ] && skip=("${WL_SKIP[@]}")
  mkdir -p "$out" && out=$(cd "$out" && pwd)
  for f in "$@"; do [ -f "$src/$f" ] && cp "$src/$f" "$out/"; done
  left=$(mktemp)
  (
    cd "$src" || exit 1
    find . -type f -name trace.csv -size +1M -exec gzip -9 {} +
    find . -type f \( "${skip[@]}" \) -printf '%P %s\n' > "$left"
    find . -type f ! \( "${skip[@]}" \) -printf '%P\0' | tar --null -T - -czf "$out/$name"
  )
  [ -s "$left" ] && cp "$left" "$out/left_out.txt"
  rm -f "$left"
  n=$(find "$out" -maxdepth 1 -type f | wc -l)
  [ "$n" -le 8 ] || echo "wl_pack: $n files in $out, more than the 8 the device tool brings back"
  ls -la "$out"
}
