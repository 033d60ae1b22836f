"""The oracle of an allocation (`analysis.allocation`): the split of a power budget that maximises
the workload's total throughput, exact on the concave envelopes (time-sharing between two
measured caps) or, with `exact=True`, as a mixed-integer program without time-sharing."""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from .allocation_library import JobLibrary, eval_curves


def oracle(lib: JobLibrary, idx: np.ndarray, budget: np.ndarray, exact: bool = False
           ) -> tuple[np.ndarray, np.ndarray, int]:
    """Best split of `budget` (n,) over the jobs idx (n, m): (power, total throughput, count).

    Default: the exact optimum on the concave envelopes (time-sharing between two measured caps
    allowed), vectorised; count = workloads where a job time-shares across a non-concave dip.
    exact=True: those workloads solved as a MILP without time-sharing; count = MILPs solved."""
    n, m = idx.shape
    avail = budget - lib.pmin[idx].sum(1)
    dp = lib.hull_dp[idx].reshape(n, -1)
    slope = lib.hull_slope[idx].reshape(n, -1)
    take_ok = (slope > 0) & (dp > 0)
    key = np.where(take_ok, -slope, np.inf)
    order = np.argsort(key, axis=1, kind="stable")
    dps = np.take_along_axis(np.where(take_ok, dp, 0.0), order, 1)
    cum = np.cumsum(dps, 1)
    before = cum - dps
    got = np.clip(avail[:, None] - before, 0.0, dps)  # power given to each sorted segment
    alloc = np.zeros_like(dp)
    np.put_along_axis(alloc, order, got, 1)
    S = lib.hull_dp.shape[1]
    power = lib.pmin[idx] + alloc.reshape(n, m, S).sum(-1)
    t_min = lib.T[idx, 0]  # the lowest-power point is always on the envelope
    thr = t_min.sum(1) + (alloc * slope).sum(1)
    partial = (alloc > 1e-9) & (alloc < dp - 1e-9)
    bridged = lib.hull_bridged[idx].reshape(n, -1)
    timeshared = (partial & bridged).any(1)
    if not exact:
        return power, thr, int(timeshared.sum())
    for r in np.flatnonzero(timeshared):
        power[r] = _oracle_milp(lib, idx[r], budget[r])
        # HiGHS meets the budget row to its feasibility tolerance (~1e-7 relative); take any
        # excess off the job with the most room above its minimum so the budget holds exactly
        excess = power[r].sum() - budget[r]
        if excess > 0:
            jj = int(np.argmax(power[r] - lib.pmin[idx[r]]))
            power[r, jj] -= excess
        thr[r] = eval_curves(lib, idx[r][None], power[r][None]).sum()
    return power, thr, int(timeshared.sum())


def _oracle_milp(lib: JobLibrary, jobs: np.ndarray, budget: float) -> np.ndarray:
    """One instance as a small MILP over job *types* (identical jobs are interchangeable).

    Fixing every job's active segment leaves an LP with one coupling constraint, whose basic
    optimum has at most one job strictly between breakpoints. So: integers n_jk = how many jobs of
    type j sit at breakpoint k, plus one fractional job (type binary f_j, segment binaries z_js,
    weights lam_jk). Exact, and small enough to be fast."""
    types, counts = np.unique(jobs, return_counts=True)
    P, T = lib.P[types], lib.T[types]
    J, K = P.shape
    S = K - 1
    # variable layout: n (J*K) | lam (J*K) | f (J) | z (J*S)
    o_n, o_l, o_f, o_z = 0, J * K, 2 * J * K, 2 * J * K + J
    nv = o_z + J * S
    c = np.zeros(nv)
    c[o_n:o_l] = -T.ravel()
    c[o_l:o_f] = -T.ravel()
    A, lo, hi = [], [], []

    def add(coefs: dict[int, float], lb: float, ub: float) -> None:
        r = np.zeros(nv)
        for i, v in coefs.items():
            r[i] = v
        A.append(r)
        lo.append(lb)
        hi.append(ub)

    for j in range(J):
        add({**{o_n + j * K + k: 1.0 for k in range(K)}, o_f + j: 1.0}, counts[j], counts[j])
        add({**{o_l + j * K + k: 1.0 for k in range(K)}, o_f + j: -1.0}, 0, 0)
        add({**{o_z + j * S + s_: 1.0 for s_ in range(S)}, o_f + j: -1.0}, 0, 0)
        for k in range(K):
            co = {o_l + j * K + k: 1.0}
            if k >= 1:
                co[o_z + j * S + k - 1] = -1.0
            if k < S:
                co[o_z + j * S + k] = -1.0
            add(co, -np.inf, 0)
    add({o_f + j: 1.0 for j in range(J)}, 0, 1)
    add({**{o_n + i: v for i, v in enumerate(P.ravel())},
         **{o_l + i: v for i, v in enumerate(P.ravel())}}, -np.inf, budget)
    ub = np.concatenate([np.repeat(counts, K).astype(float), np.ones(J * K + J + J * S)])
    integ = np.concatenate([np.ones(J * K), np.zeros(J * K), np.ones(J + J * S)])
    res = milp(c, constraints=LinearConstraint(np.array(A), lo, hi), integrality=integ,
               bounds=Bounds(0, ub),
               options={"mip_rel_gap": 1e-9, "disp": False, "presolve": False})
    if res.x is None:
        raise RuntimeError(f"oracle MILP failed: {res.message}")
    n = np.round(res.x[o_n:o_l]).reshape(J, K).astype(int)
    lam = res.x[o_l:o_f].reshape(J, K)
    f = np.round(res.x[o_f:o_z]).astype(int)
    # hand the per-type powers back to the jobs of the instance (order does not matter)
    power = np.empty(len(jobs))
    for j, t in enumerate(types):
        pos = np.flatnonzero(jobs == t)
        vals = np.repeat(P[j], n[j])
        if f[j]:
            vals = np.append(vals, (lam[j] * P[j]).sum())
        power[pos] = vals
    return power
