"""Where the MoE pretrain's step time goes on one GPU (issue 30): a torch-profiler summary.

    PYTHONPATH=src python3 benchmarks/moe_profile.py --out DIR [--steps 20] [--profile-steps 3]

The PFI kind `qwen3-30b-a3b-8l-pretrain` as `pfi_uncapped.py` builds it (Qwen3-30B-A3B reduced
to 8 layers: 128 experts, top-8; sequence 2048, batch 8, bf16, random init, transformers'
`grouped_mm` experts, sdpa attention, fused AdamW, `torch.compile` default mode, vocabulary 3008
as the tokenizer-sized runs), on random tokens already on the GPU (no data loading). After
`--warmup` steps (the first compiles), `--steps` steps are timed with CUDA events (the `step`
basis: tokens over the sum of GPU-timed step durations) and MFU is computed with the workload's
own convention (`workloads.lm_model.flops_per_token`: 6 x active parameters + attention in full;
`mfu_causal` halves attention; peak 989 TFLOPS bf16 dense for the H200). Then `--profile-steps`
steps run under `torch.profiler` (CPU + CUDA) and every CUDA kernel's time is summed into
categories by kernel name. Writes `moe_step.csv` (throughput, MFU, the profiled steps' GPU-busy
share), `moe_steps.csv` (each timed step's seconds: the raw record of the step basis),
`moe_kernels.csv` (every kernel by name), `moe_categories.csv` (time, share of step, and for the
matmul categories the FLOPs they carry and their achieved TFLOPS). Changes no GPU setting.
"""

import argparse
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from outdir import out_dir

ANNOTATION = "annotation (a range, not a kernel)"
CATEGORIES = [  # first match wins; applied to the lower-cased kernel name
    (ANNOTATION, r"#|^profilerstep|^optimizer\."),  # GPU-side user ranges overlap their kernels
    ("memcpy/memset", r"memcpy|memset"),
    ("attention (sdpa)", r"flash|fmha|attention|sdpa|mha|cudnn"),
    ("optimizer (fused AdamW)", r"adam|multi_tensor|fusedoptimizer"),
    ("experts grouped GEMM", r"groupproblem|grouped|group_gemm|ragged"),
    ("dense GEMM (cuBLAS)", r"gemm|xmma|nvjet|sm90_|cutlass|cublas|matmul"),
    ("routing (sort/topk/index/scatter)", r"sort|topk|index|scatter|gather|histc|cumsum|bincount|"
                                          r"radix|unique|nonzero|argsort"),
    ("triton fused elementwise/norm", r"^triton_"),
    ("other", r".*"),
]


def category(name: str) -> str:
    low = name.lower()
    return next(c for c, pat in CATEGORIES if re.search(pat, low))


def categorise(kernels: pd.DataFrame, per_step: int, mean_step_s: float,
               flops: dict[str, float], peak: float, rest_ms: float = 0.0) -> pd.DataFrame:
    """Kernel time per category per profiled step (annotation ranges left out: they overlap their
    kernels), its share of the GPU-timed step, and for the matmul categories the model FLOPs they
    carry and the TFLOPS that implies. `rest_ms`: kernel time outside a truncated kernel list."""
    k = kernels[kernels["category"] != ANNOTATION]
    cat = k.groupby("category", as_index=False)["time_s"].sum()
    cat["ms_per_step"] = cat["time_s"] * 1e3 / per_step
    if rest_ms > 0:
        cat = pd.concat([cat, pd.DataFrame([{"category": "rest (kernels outside the list)",
                                             "ms_per_step": rest_ms}])], ignore_index=True)
    cat["share_of_timed_step"] = cat["ms_per_step"] / 1e3 / mean_step_s
    cat["flops_per_step"] = cat["category"].map(flops)
    cat["achieved_tflops"] = cat["flops_per_step"] / (cat["ms_per_step"] / 1e3) / 1e12
    cat["share_of_peak"] = cat["achieved_tflops"] * 1e12 / peak
    return cat.drop(columns="time_s").sort_values("ms_per_step", ascending=False)


def recategorise(folder: Path) -> pd.DataFrame:
    """Rebuild moe_categories.csv from a run's moe_kernels.csv and moe_step.csv (the committed
    files), without a GPU."""
    kernels = pd.read_csv(folder / "moe_kernels.csv")
    step = pd.read_csv(folder / "moe_step.csv").iloc[0]
    n = int(step["profiled_steps"])
    kernels["category"] = kernels["kernel"].map(category)
    listed = kernels.loc[kernels["category"] != ANNOTATION, "time_s"].sum()
    annot = kernels.loc[kernels["category"] == ANNOTATION, "time_s"].sum()
    rest_ms = max(float(step["kernel_time_per_step_s"]) * n - annot - listed, 0.0) * 1e3 / n
    tokens = float(step["batch"] * step["seq"])
    flops = matmul_flops(tokens, float(step["expert_active_parameters"]),
                         float(step["active_parameters"]), float(step["attention_flops_per_token"]))
    return categorise(kernels, n, float(step["mean_step_s"]), flops, float(step["peak_flops"]),
                      rest_ms)


def matmul_flops(tokens: float, expert_active: float, active: float,
                 attn_per_token: float) -> dict[str, float]:
    """Model FLOPs per step carried by each matmul category (forward + backward = 6 x params)."""
    return {"experts grouped GEMM": 6.0 * expert_active * tokens,
            "dense GEMM (cuBLAS)": 6.0 * (active - expert_active) * tokens,
            "attention (sdpa)": attn_per_token * tokens}


def build(vocab: int, layers: int) -> Any:
    from transformers import AutoModelForCausalLM

    from wattlife.workloads.lm_model import model_config, parameter_counts

    cfg = model_config("qwen3-30b-a3b")
    cfg.num_hidden_layers = layers
    cfg.use_cache = False
    cfg.vocab_size = vocab
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "grouped_mm"
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    return model, model.config, parameter_counts(model, model.config)


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (made first)")
    ap.add_argument("--recategorise", action="store_true",
                    help="no GPU: rebuild --out's moe_categories.csv from its moe_kernels.csv and "
                         "moe_step.csv (default off)")
    ap.add_argument("--warmup", type=int, default=6,
                    help="steps before timing, the first compiles (default 6)")
    ap.add_argument("--steps", type=int, default=20, help="GPU-timed steps (default 20)")
    ap.add_argument("--profile-steps", type=int, default=3, help="profiled steps (default 3)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    ap.add_argument("--seq", type=int, default=2048, help="sequence length (default 2048)")
    return ap.parse_args()


def timed_steps(step: Any, warmup: int, steps: int) -> list[float]:
    """`warmup` steps (the first compiles), then `steps` GPU-timed ones: their seconds."""
    t0 = time.time()
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    print(f"warm-up {warmup} steps (compile included) {time.time() - t0:.1f} s", flush=True)
    ev = [(torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
           torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
          for _ in range(steps)]
    for i, (s, e) in enumerate(ev):
        s.record()
        step(i)
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in ev]


def profiled_kernels(step: Any, n: int) -> tuple[pd.DataFrame, float]:
    """`n` steps under torch.profiler: every CUDA kernel (name, seconds, start/end µs) and the
    profiled wall seconds."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t_prof = time.perf_counter()
        for i in range(n):
            step(i)
        torch.cuda.synchronize()
        prof_wall = time.perf_counter() - t_prof
    cuda = torch.autograd.DeviceType.CUDA  # type: ignore[attr-defined]
    kern = [e for e in prof.events() if e.device_type == cuda]
    kt = pd.DataFrame({"kernel": [e.name for e in kern],
                       "time_s": [e.time_range.elapsed_us() / 1e6 for e in kern],
                       "start_us": [e.time_range.start for e in kern],
                       "end_us": [e.time_range.end for e in kern]})
    return kt, prof_wall


def busy_us(start_us: np.ndarray, end_us: np.ndarray) -> float:
    """The length of the union of intervals [start, end] (µs): the GPU's busy time."""
    if not len(start_us):
        return 0.0
    o = np.argsort(start_us, kind="stable")
    s, e = np.asarray(start_us, float)[o], np.maximum.accumulate(np.asarray(end_us, float)[o])
    new = np.concatenate([[True], s[1:] > e[:-1]])  # a segment starts after all before ended
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return float((e[last] - s[first]).sum())


def kernel_table(kt: pd.DataFrame, per_step: int) -> pd.DataFrame:
    """Every kernel by name and category: total seconds, calls and ms per profiled step."""
    top = (kt.groupby(["kernel", "category"], as_index=False)
           .agg(time_s=("time_s", "sum"), calls=("time_s", "size"))
           .sort_values("time_s", ascending=False))
    top["ms_per_step"] = top["time_s"] * 1e3 / per_step
    return top


def main() -> None:
    a = _options()
    out = out_dir(a.out)
    if a.recategorise:
        cat = recategorise(out)
        cat.to_csv(out / "moe_categories.csv", index=False)
        print(cat.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        return
    from wattlife.workloads.lm_model import attention_flops_per_token, flops_per_token

    vocab, peak = 3008, 989e12
    model, cfg, counts = build(vocab, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    cmodel: Any = torch.compile(model)
    xs = [torch.randint(0, vocab, (a.batch, a.seq), device="cuda") for _ in range(4)]

    def step(i: int) -> None:
        x = xs[i % len(xs)]
        loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step_s = timed_steps(step, a.warmup, a.steps)
    # the raw record the step basis is recomputed from (before issue 46 only its mean was kept)
    pd.DataFrame({"step": range(len(step_s)), "step_s": step_s}).to_csv(out / "moe_steps.csv",
                                                                        index=False)
    tokens = a.batch * a.seq
    fpt = flops_per_token(cfg, counts, a.seq)
    attn = attention_flops_per_token(cfg, a.seq)
    tps = tokens * len(step_s) / sum(step_s)
    kt, prof_wall = profiled_kernels(step, a.profile_steps)
    busy = busy_us(kt["start_us"].to_numpy(), kt["end_us"].to_numpy())
    kt["category"] = kt["kernel"].map(category)
    per_step = a.profile_steps
    kernel_table(kt, per_step).to_csv(out / "moe_kernels.csv", index=False)
    mean_step = sum(step_s) / len(step_s)
    expert_active = sum(p.numel() for n, p in model.named_parameters() if ".experts." in f".{n}")
    expert_active *= counts["experts_per_token"] / counts["experts"]
    flops = matmul_flops(tokens, expert_active, counts["active_parameters"], attn)
    cat = categorise(kt, per_step, mean_step, flops, peak)
    cat.to_csv(out / "moe_categories.csv", index=False)
    row = {"run": "qwen3-30b-a3b-8l-pretrain", "batch": a.batch, "seq": a.seq,
           "timed_steps": len(step_s), "mean_step_s": mean_step, "tokens_per_s": tps,
           "basis": "step (CUDA events around each step)", "flops_per_token": fpt,
           "attention_flops_per_token": attn, "mfu": tps * fpt / peak,
           "mfu_causal": tps * (fpt - attn / 2) / peak, "peak_flops": peak,
           "active_parameters": counts["active_parameters"],
           "expert_active_parameters": int(expert_active),
           "profiled_steps": per_step, "profiled_wall_s": prof_wall,
           "kernel_time_per_step_s": kt.loc[kt["category"] != ANNOTATION, "time_s"].sum()
           / per_step,
           "gpu_busy_share_profiled": busy / 1e6 / prof_wall,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    pd.DataFrame([row]).to_csv(out / "moe_step.csv", index=False)
    pd.set_option("display.width", 200)
    print(pd.DataFrame([row]).T.to_string(header=False))
    print(cat.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
