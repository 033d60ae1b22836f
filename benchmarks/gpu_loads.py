"""Synthetic GPU loads with known structure, marked with wattlife's GPU-timeline markers.

--mode varying  : >= 60 s of load whose intensity changes every few seconds (accuracy check)
--mode square   : matmul ON for --on-ms, idle for --off-ms, repeated (resolution check)
--mode long     : phase kinds (--kinds), each >= 1 s, in a new random order every round
                  (ground truth; no kind always follows the same one)
--mode short    : the same kinds interleaved in random 5-20 ms phases (deconvolution check),
                  in 2 s `block` phases whose mix of kinds differs, so block-level energies
                  (where the sensor window does not matter) give a second, window-free estimate
                  per kind
--mode step     : per kind, 1.5 s of GPU idle then 3 s of the kind (step response: does the
                  kind's power depend on how long it has run?)
Kinds: `matmul` (bf16 8192^3, random data: at the power limit in steady state), `matmul_low` (the
same matmul on constant data: fewer bit toggles, below the limit), `matmul_narrow` (bf16, random
data, 256 x 8192 x 8192), `matmul_half` / `matmul_quarter` (bf16 8192^3, random data, through
cuBLASLt told to use 1/2 or 1/4 of the SMs: PyTorch's SM carve-out, a library setting of this
process, not a GPU setting), `copy_quarter` (1 GiB copied by a Triton kernel of 1/4 as many thread
blocks as SMs: memory-bound on part of the GPU), `copy` (1 GiB device
copies), `wait` (GPU idle, host sleeping), `wait_spin` (the GPU waits inside a spinning kernel, as
a collective waits for its peers: the GPU stays in its active state).
--phase-ms sets the long phases' length (default 1500); --zeus-csv wraps each long phase in a Zeus
window as well (the side-by-side of peers_zeus.py) and writes each window's energy.
--clocks CSV polls the SM clock, the clock-event (throttle) reasons and the temperature every 5 ms.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from wattlife import markers
from wattlife.markers import phase

KINDS = ["matmul", "matmul_low", "matmul_narrow", "matmul_half", "matmul_quarter", "copy",
         "copy_quarter", "wait", "wait_spin"]


class Kinds:
    """Tensor-core matmul, memory-bound copy, and idle wait, each sized in milliseconds."""

    def __init__(self) -> None:
        d = torch.device("cuda")
        self.a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
        self.b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
        self.c = torch.empty(8192, 8192, device=d, dtype=torch.bfloat16)
        self.a_low = torch.full((8192, 8192), 0.5, device=d, dtype=torch.bfloat16)
        self.b_low = torch.full((8192, 8192), 0.25, device=d, dtype=torch.bfloat16)
        self.a_nar = torch.randn(256, 8192, device=d, dtype=torch.bfloat16)
        self.c_nar = torch.empty(256, 8192, device=d, dtype=torch.bfloat16)
        self.src = torch.empty(256 * 2**20, device=d, dtype=torch.float32)  # 1 GiB
        self.dst = torch.empty_like(self.src)
        self.mm_ms = self._time(lambda: torch.matmul(self.a, self.b, out=self.c))
        self.cp_ms = self._time(lambda: self.dst.copy_(self.src))
        self.nar_ms = self._time(lambda: torch.matmul(self.a_nar, self.b, out=self.c_nar), n=200)
        self.spin_cycles_per_ms = 1e6 / self._time(
            lambda: torch.cuda._sleep(1_000_000))  # type: ignore[no-untyped-call]
        self.n_sm = torch.cuda.get_device_properties(0).multi_processor_count
        self.part_ms = {f: self._time(lambda f=f: self._matmul_part(f), n=10) for f in (2, 4)}
        self._copy_kernel = _strided_copy_kernel()
        self.cpq_ms = self._time(self._copy_part, n=10)

    @staticmethod
    def _repeat(fn: Any, unit_ms: float, ms: float) -> None:
        """Call `fn` (one launch of about `unit_ms`) often enough to fill `ms`, at least once."""
        for _ in range(max(1, round(ms / unit_ms))):
            fn()

    @staticmethod
    def _time(fn: Any, n: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e3

    def matmul(self, ms: float) -> None:
        self._repeat(lambda: torch.matmul(self.a, self.b, out=self.c), self.mm_ms, ms)

    def matmul_low(self, ms: float) -> None:
        self._repeat(lambda: torch.matmul(self.a_low, self.b_low, out=self.c), self.mm_ms, ms)

    def matmul_narrow(self, ms: float) -> None:
        self._repeat(lambda: torch.matmul(self.a_nar, self.b, out=self.c_nar), self.nar_ms, ms)

    def _matmul_part(self, fraction: int) -> None:
        torch.backends.cuda.preferred_blas_library("cublaslt")
        torch._C._set_sm_carveout_experimental(self.n_sm - self.n_sm // fraction)
        try:
            torch.matmul(self.a, self.b, out=self.c)
        finally:
            torch._C._set_sm_carveout_experimental(None)
            torch.backends.cuda.preferred_blas_library("default")

    def _copy_part(self) -> None:
        self._copy_kernel[(self.n_sm // 4,)](self.src, self.dst, self.src.numel(), BLOCK=4096,
                                             num_warps=8)

    def copy_quarter(self, ms: float) -> None:
        self._repeat(self._copy_part, self.cpq_ms, ms)

    def matmul_half(self, ms: float) -> None:
        self._repeat(lambda: self._matmul_part(2), self.part_ms[2], ms)

    def matmul_quarter(self, ms: float) -> None:
        self._repeat(lambda: self._matmul_part(4), self.part_ms[4], ms)

    def wait_spin(self, ms: float) -> None:
        torch.cuda._sleep(int(ms * self.spin_cycles_per_ms))  # type: ignore[no-untyped-call]

    def copy(self, ms: float) -> None:
        n_el = self.src.numel()
        full = int(ms // self.cp_ms)
        for _ in range(full):
            self.dst.copy_(self.src)
        rest = int(n_el * (ms - full * self.cp_ms) / self.cp_ms)
        if rest > 1024:
            self.dst[:rest].copy_(self.src[:rest])

    def wait(self, ms: float) -> None:
        torch.cuda.synchronize()  # the GPU goes idle; the host sleeps
        time.sleep(ms / 1e3)

    def run(self, kind: str, ms: float) -> None:
        getattr(self, kind)(ms)


def _strided_copy_kernel() -> Any:
    """A grid-stride copy kernel (Triton): each of the launched programs copies every
    n-th block, so the number of programs sets how many SMs take part."""
    import triton
    import triton.language as tl

    # Triton reads a kernel's annotations (tl.constexpr), so its other parameters carry none
    @triton.jit  # type: ignore[untyped-decorator]
    def strided_copy(src, dst, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        step = tl.num_programs(0) * BLOCK
        for start in range(tl.program_id(0) * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

    return strided_copy


class ClockPoller:
    """SM clock, clock-event reasons and temperature every `period_s`, in a thread -> CSV."""

    def __init__(self, path: str, period_s: float = 0.005) -> None:
        import threading

        import pynvml

        pynvml.nvmlInit()
        self.nv, self.h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.path, self.period_s = path, period_s
        self.rows: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        nv, h = self.nv, self.h
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self.stop.wait(self.period_s):
            self.rows.append((time.time_ns(), nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                              reasons(h),
                              nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        import pandas as pd

        pd.DataFrame(self.rows, columns=["t_ns", "sm_clock_mhz", "event_reasons", "temp_c"]).to_csv(
            self.path, index=False)


def _options() -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=["varying", "square", "long", "short", "step"], required=True)
    ap.add_argument("--kinds", default="matmul,matmul_low,copy,wait",
                    help=f"comma-separated phase kinds for long/short/step, of {KINDS}")
    ap.add_argument("--clocks", help="CSV to write SM clock / event reasons / temperature to")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--on-ms", type=float, default=40)
    ap.add_argument("--off-ms", type=float, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase-ms", type=float, default=1500,
                    help="long phases' length (default 1500)")
    ap.add_argument("--zeus-csv",
                    help="long mode: a Zeus window around each phase too, written here")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    if unknown := set(kinds) - set(KINDS):
        ap.error(f"--kinds: unknown {sorted(unknown)}; expected some of {KINDS}")
    return a, kinds


def mode_varying(k: Kinds, a: Any, kinds: list[str], rng: Any, t_end: float) -> None:
    """Segments of 2-6 s of matmul or copy at a random duty cycle."""
    while time.monotonic() < t_end:
        duty = rng.uniform(0.1, 1.0)
        kind = rng.choice(["matmul", "copy"])
        seg_end = time.monotonic() + rng.uniform(2, 6)
        with phase(f"varying_{kind}"):
            while time.monotonic() < seg_end:
                k.run(kind, 50 * duty)
                k.wait(50 * (1 - duty))


def mode_square(k: Kinds, a: Any, kinds: list[str], rng: Any, t_end: float) -> None:
    """`on` (matmul) and `off` (wait) phases of --on-ms / --off-ms."""
    while time.monotonic() < t_end:
        with phase("on"):
            k.matmul(a.on_ms)
            torch.cuda.synchronize()
        with phase("off"):
            k.wait(a.off_ms)


def mode_long(k: Kinds, a: Any, kinds: list[str], rng: Any, t_end: float) -> None:
    """Each kind for --phase-ms in random order; with --zeus-csv a Zeus window around each."""
    mon, windows = None, []
    if a.zeus_csv:
        from zeus.monitor import ZeusMonitor

        mon = ZeusMonitor(gpu_indices=[0])
    while time.monotonic() < t_end:
        for kind in rng.permutation(kinds):
            with phase(str(kind)):
                if mon:
                    mon.begin_window(str(kind))  # synchronises, reads the energy counter
                k.run(str(kind), a.phase_ms)
                if mon:
                    m = mon.end_window(str(kind))
                    windows.append((str(kind), m.time, float(sum(m.gpu_energy.values()))))
    if mon:
        import pandas as pd

        pd.DataFrame(windows, columns=["phase", "time_s", "energy_j"]).to_csv(a.zeus_csv,
                                                                              index=False)


def mode_step(k: Kinds, a: Any, kinds: list[str], rng: Any, t_end: float) -> None:
    """Per kind, 1.5 s idle then 3 s of it (a step response)."""
    for kind in kinds:
        with phase(f"idle_before_{kind}"):
            k.wait(1500)
        with phase(kind):
            k.run(kind, 3000)


def mode_short(k: Kinds, a: Any, kinds: list[str], rng: Any, t_end: float) -> None:
    """2 s blocks of 5-20 ms phases of the kinds in a random mix."""
    while time.monotonic() < t_end:
        mix = rng.dirichlet(np.ones(len(kinds)))
        block_end = time.monotonic() + 2.0
        with phase("block"):
            while time.monotonic() < block_end:
                kind = kinds[rng.choice(len(kinds), p=mix)]
                with phase(kind):
                    k.run(kind, rng.uniform(5, 20))


MODES = {"varying": mode_varying, "square": mode_square, "long": mode_long, "step": mode_step,
         "short": mode_short}


def main() -> None:
    a, kinds = _options()
    markers.configure(gpu_timeline=True)
    k = Kinds()
    print(f"matmul {k.mm_ms:.3f} ms (1/2 SMs {k.part_ms[2]:.3f}, "
          f"1/4 SMs {k.part_ms[4]:.3f}), narrow "
          f"matmul {k.nar_ms:.3f} ms, 1 GiB copy {k.cp_ms:.3f} ms (1/4 SMs {k.cpq_ms:.3f}), "
          f"spin {k.spin_cycles_per_ms:.0f} cycles/ms", flush=True)
    poller = ClockPoller(a.clocks) if a.clocks else None
    rng = np.random.default_rng(a.seed)
    MODES[a.mode](k, a, kinds, rng, time.monotonic() + a.seconds)
    torch.cuda.synchronize()
    markers.reset()
    if poller:
        poller.close()


if __name__ == "__main__":
    main()
