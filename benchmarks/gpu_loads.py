"""Synthetic GPU loads with known structure, marked with wattlife's GPU-timeline markers.

--mode varying  : >= 60 s of load whose intensity changes every few seconds (accuracy check)
--mode square   : matmul ON for --on-ms, idle for --off-ms, repeated (resolution check)
--mode long     : three phase kinds (matmul, copy, wait), each >= 1 s, repeated (ground truth)
--mode short    : the same kinds interleaved in random 5-20 ms phases (deconvolution check),
                  in 2 s `block` phases whose mix of kinds differs, so block-level energies (where the
                  sensor window does not matter) give a second, window-free estimate per kind
Kinds: `matmul` (bf16, random data: at the power limit in steady state), `matmul_low` (the same
matmul on constant data: fewer bit toggles, below the limit), `copy` (1 GiB device copies),
`wait` (GPU idle, host sleeping).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from wattlife import markers
from wattlife.markers import phase


KINDS = ["matmul", "matmul_low", "copy", "wait"]


class Kinds:
    """Tensor-core matmul, memory-bound copy, and idle wait, each sized in milliseconds."""

    def __init__(self) -> None:
        d = torch.device("cuda")
        self.a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
        self.b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
        self.c = torch.empty(8192, 8192, device=d, dtype=torch.bfloat16)
        self.a_low = torch.full((8192, 8192), 0.5, device=d, dtype=torch.bfloat16)
        self.b_low = torch.full((8192, 8192), 0.25, device=d, dtype=torch.bfloat16)
        self.src = torch.empty(256 * 2**20, device=d, dtype=torch.float32)  # 1 GiB
        self.dst = torch.empty_like(self.src)
        self.mm_ms = self._time(lambda: torch.matmul(self.a, self.b, out=self.c))
        self.cp_ms = self._time(lambda: self.dst.copy_(self.src))

    @staticmethod
    def _time(fn, n: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e3

    def matmul(self, ms: float) -> None:
        for _ in range(max(1, round(ms / self.mm_ms))):
            torch.matmul(self.a, self.b, out=self.c)

    def matmul_low(self, ms: float) -> None:
        for _ in range(max(1, round(ms / self.mm_ms))):
            torch.matmul(self.a_low, self.b_low, out=self.c)

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=["varying", "square", "long", "short"], required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--on-ms", type=float, default=40)
    ap.add_argument("--off-ms", type=float, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    markers.configure(gpu_timeline=True)
    k = Kinds()
    print(f"matmul {k.mm_ms:.3f} ms, 1 GiB copy {k.cp_ms:.3f} ms", flush=True)
    rng = np.random.default_rng(a.seed)
    t_end = time.monotonic() + a.seconds
    if a.mode == "varying":
        while time.monotonic() < t_end:
            duty = rng.uniform(0.1, 1.0)
            kind = rng.choice(["matmul", "copy"])
            seg_end = time.monotonic() + rng.uniform(2, 6)
            with phase(f"varying_{kind}"):
                while time.monotonic() < seg_end:
                    k.run(kind, 50 * duty)
                    k.wait(50 * (1 - duty))
    elif a.mode == "square":
        while time.monotonic() < t_end:
            with phase("on"):
                k.matmul(a.on_ms)
                torch.cuda.synchronize()
            with phase("off"):
                k.wait(a.off_ms)
    elif a.mode == "long":
        while time.monotonic() < t_end:
            for kind in KINDS:
                with phase(kind):
                    k.run(kind, 1500)
    else:
        while time.monotonic() < t_end:
            mix = rng.dirichlet(np.ones(len(KINDS)))
            block_end = time.monotonic() + 2.0
            with phase("block"):
                while time.monotonic() < block_end:
                    kind = KINDS[rng.choice(len(KINDS), p=mix)]
                    with phase(kind):
                        k.run(kind, rng.uniform(5, 20))
    torch.cuda.synchronize()
    markers.reset()


if __name__ == "__main__":
    main()
