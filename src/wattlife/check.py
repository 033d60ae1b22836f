"""`wattlife check RUN_DIR...`: validate a run directory against the file contracts.

A run directory holds what `wattlife run` and a workload leave behind: `trace.csv` (or
`trace.csv.gz` / `trace.parquet`), `events.csv` (+ per-rank `events.rank<N>.csv`), `meta.json`,
and optionally `phases.csv` (attribution) and `work/summary.json` (the workload's summary).

Every check is a pure function of tables and dicts returning a list of `Finding`s (severity,
code, file, CSV line counted with the header as line 1, message); only `read_csv_lines`,
`_load_json` and `check_run` touch files. Row checks are vectorised (pandas/numpy): traces can have
millions of rows. Repeated findings of one check are capped (`max_rows`) with a count of the rest.

The nesting rule is the attribution's (`attribution.nest`): intervals of one (host, rank) nest,
children inside their parent, siblings never overlap, except overlaps of at most
`attribution.OVERLAP_TOL_NS` (1 ms) that attribution clamps (`attribution.resolve_overlaps`;
reported here as warnings); what passes here attributes.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .attribution import OVERLAP_TOL_NS, nest, resolve_overlaps, timeline
from .contracts import (
    CONCURRENT_PHASES,
    EVENTS_COLUMNS,
    EVENTS_FILE,
    META_FILE,
    META_REQUIRED_KEYS,
    META_SAMPLER_KEYS,
    PHASES_COLUMNS,
    PHASES_FILE,
    PHASES_METHODS,
    SOURCES_MEASURED,
    SOURCES_NOT_MEASURED,
    SUMMARY_FILE,
    TRACE_COLUMNS,
    TRACE_FILE,
    TRACE_FILES,
    ContractError,
    meta_problems,
    read_contract_bytes,
)

ERROR, WARNING = "error", "warning"
#: 2000-01-01T00:00:00Z in epoch ns: anything earlier is not an epoch-ns timestamp of a run
MIN_EPOCH_NS = 946_684_800 * 10**9
#: how far past the checking machine's clock a timestamp may lie (clock skew between machines)
FUTURE_SLACK_NS = 3600 * 10**9
#: phases every run of a workload kind marks at least once (src/wattlife/workloads/)
KIND_PHASES = {
    "image_classification": ["model_load", "step"],
    "causal_lm": ["tokenize", "model_load", "step"],
}
#: phases every `step` of a workload kind contains (workloads/*.py, training_loop.backward_and_step)
KIND_STEP_CHILDREN = {
    "image_classification": ["data_load", "h2d", "forward", "backward", "optimizer"],
    "causal_lm": ["data_load", "h2d", "forward", "backward", "optimizer"],
}
KINDS = ["auto", "none", *KIND_PHASES]
DEVICE_RE = r"^(?:gpu|cpu|dram)\d+$|^node$"


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a run: `line` is the CSV line (header = 1), None for a whole file."""

    severity: str
    code: str
    file: str
    line: int | None
    message: str

    def text(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{self.severity}: {where}: {self.message} [{self.code}]"


def _capped(severity: str, code: str, file: str, lines: Iterable[Any], messages: Iterable[str],
            max_rows: int) -> list[Finding]:
    """One finding per offending row up to `max_rows`, then one saying how many more there are."""
    lines, messages = list(lines), list(messages)
    out = [Finding(severity, code, file, None if ln is None else int(ln), msg)
           for ln, msg in zip(lines[:max_rows], messages[:max_rows], strict=True)]
    if len(lines) > max_rows:
        out.append(Finding(severity, code, file, None,
                           f"... and {len(lines) - max_rows:,} more row(s) like the above"))
    return out


# --------------------------------------------------------------------------- reading (I/O edge)

def read_csv_lines(path: Path, max_rows: int = 5, kinds: dict[str, str] | None = None,
                   allow_empty: Iterable[str] = ()) -> tuple[pd.DataFrame | None, list[Finding]]:
    """Read a contract CSV (plain, .gz, or Parquet) with a `line_no` column; the `kinds`
    columns as int64 ('int') / float64 ('float'), the others as categories.

    A typed parse is tried first (the C parser: fast on millions of rows); if a cell does not
    parse, the file is read as strings and every bad cell reported (`to_numbers`).

    Lines whose field count differs from the header's are reported (error) and left out; a last
    line without its newline (a killed writer) is reported (warning) and left out, as the
    contract readers do. Field counting is vectorised over the raw bytes.
    """
    name = str(path)
    kinds = kinds or {}
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
        df["line_no"] = pd.array([pd.NA] * len(df), dtype="Int64")
        return df, []
    try:
        data = read_contract_bytes(path)
    except ContractError as exc:
        return None, [Finding(ERROR, "file.gzip", name, None, str(exc).removeprefix(f"{name}: "))]
    if not data:
        return None, [Finding(ERROR, "file.empty", name, None, "empty file (no header)")]
    findings: list[Finding] = []
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        n_line = data.count(b"\n") + 1
        if cut < 0:
            return None, [Finding(ERROR, "csv.truncated-header", name, 1,
                                  "header line is truncated")]
        findings.append(Finding(WARNING, "csv.truncated-line", name, n_line,
                                f"truncated last line {data[cut + 1:][:80]!r} (writer killed?); "
                                "readers ignore it"))
        data = data[:cut + 1]
    if b'"' in data:  # quoted fields: leave the parsing to pandas
        try:
            df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        except pd.errors.ParserError as exc:
            return None, findings + [Finding(ERROR, "csv.parse", name, None, str(exc))]
        df["line_no"] = np.arange(2, len(df) + 2)
        df, ff = to_numbers(df, kinds, name, max_rows, allow_empty)
        return df, findings + ff
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == ord("\n"))
    commas = np.flatnonzero(buf == ord(","))
    # fields per line = commas before its newline minus commas before the previous newline, + 1
    per_line = np.diff(np.concatenate([[0], np.searchsorted(commas, nl)])) + 1
    blank = np.diff(np.concatenate([[-1], nl])) == 1
    expected = per_line[0]
    bad = (per_line != expected) & ~blank
    bad[0] = False
    line_no = np.arange(1, len(nl) + 1)
    if bad.any():
        starts = np.concatenate([[0], nl[:-1] + 1])
        idx = np.flatnonzero(bad)
        findings += _capped(
            ERROR, "csv.field-count", name, line_no[idx],
            [f"{per_line[i]} fields, header has {expected}: "
             f"{data[starts[i]:nl[i]][:80].decode('utf-8', 'replace')!r}" for i in idx[:max_rows]],
            max_rows)
        keep = ~bad & ~blank
        keep[0] = True
        text = b"".join(data[starts[i]:nl[i] + 1] for i in np.flatnonzero(keep))
        rows_line = line_no[keep][1:]
    else:
        text = data
        rows_line = line_no[~blank][1:]
    header = pd.read_csv(io.BytesIO(text), nrows=0).columns
    typed = {c: ("int64" if kinds[c] == "int" else "float64") for c in kinds if c in header}
    empty_ok = set(allow_empty)
    try:
        df = pd.read_csv(io.BytesIO(text), keep_default_na=False,
                         na_values={c: [""] for c in typed},
                         dtype={**{c: "category" for c in header if c not in typed}, **typed})
        holes = [c for c in typed if c not in empty_ok and df[c].isna().any()]
        if holes:
            raise ValueError(f"empty cells in {holes}")
    except ValueError:  # a cell that does not parse: find them all on the strings
        df = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False)
        df["line_no"] = rows_line[:len(df)]
        df, ff = to_numbers(df, kinds, name, max_rows, allow_empty)
        return df, findings + ff
    df["line_no"] = rows_line[:len(df)]
    return df, findings


# --------------------------------------------------------------------------- table checks

def check_columns(df: pd.DataFrame, required: list[str], file: str) -> list[Finding]:
    """Required columns of a contract table (extra columns are allowed)."""
    missing = [c for c in required if c not in df.columns]
    if not missing:
        return []
    return [Finding(ERROR, "columns.missing", file, 1,
                    f"missing column(s) {missing}; the contract needs at least {required}")]


def to_numbers(df: pd.DataFrame, kinds: dict[str, str], file: str, max_rows: int = 5,
               allow_empty: Iterable[str] = ()) -> tuple[pd.DataFrame, list[Finding]]:
    """Convert string columns to int64 ('int') / float64 ('float'); bad cells are findings and
    become NaN. Columns in `allow_empty` may be empty (NaN)."""
    out = df.copy()
    findings: list[Finding] = []
    empty_ok = set(allow_empty)
    for col, kind in kinds.items():
        if col not in out.columns:
            continue
        raw = out[col].astype(str).str.strip()
        empty = (raw == "").to_numpy()
        if kind == "int":
            # parsed from the digits (float64 would lose nanoseconds above 2**53); "12.0" passes
            ok = raw.str.fullmatch(r"-?\d+(?:\.0*)?").fillna(False).to_numpy(bool)
            vals = pd.Series(np.nan, index=raw.index, dtype="float64")
            whole = raw[ok].str.replace(r"\.0*$", "", regex=True).astype(np.int64)
            if ok.all():
                vals = whole
            elif ok.any():
                vals = vals.astype(object)
                vals[ok] = whole
        else:
            vals = pd.to_numeric(raw.where(~empty, None), errors="coerce").astype("float64")
            ok = vals.notna().to_numpy()
        bad = ~ok & ~(empty & (col in empty_ok))
        if bad.any():
            what = "an integer" if kind == "int" else "a number"
            findings += _capped(ERROR, "value.type", file, out["line_no"][bad],
                                [f"column '{col}' expects {what}, got {v!r}"
                                 for v in raw[bad].head(max_rows)], max_rows)
        out[col] = vals if vals.dtype == np.int64 else pd.to_numeric(vals, errors="coerce")
    return out, findings


def _unit_guess(v: float) -> str:
    for unit, scale in (("seconds", 1e9), ("milliseconds", 1e6), ("microseconds", 1e3)):
        if MIN_EPOCH_NS / scale <= v <= 4.2e18 / scale:
            return f"; looks like epoch {unit} (the contract is epoch nanoseconds)"
    return ""


def check_clock(t: pd.Series, lines: pd.Series, col: str, file: str, now_ns: int,
                max_rows: int = 5) -> list[Finding]:
    """Epoch-ns sanity: not before 2000 (seconds/ms/µs misread as ns) and not in the future."""
    v = pd.to_numeric(t, errors="coerce")
    findings: list[Finding] = []
    early = (v < MIN_EPOCH_NS).to_numpy()
    if early.any():
        findings += _capped(ERROR, "clock.before-2000", file, lines[early],
                            [f"{col}={int(x)} is before 2000-01-01{_unit_guess(float(x))}"
                             for x in v[early].head(max_rows)], max_rows)
    late = (v > now_ns + FUTURE_SLACK_NS).to_numpy()
    if late.any():
        findings += _capped(ERROR, "clock.future", file, lines[late],
                            [f"{col}={int(x)} is {(x - now_ns) / 3.6e12:.1f} h in the future"
                             for x in v[late].head(max_rows)], max_rows)
    return findings


def check_trace(tr: pd.DataFrame, file: str, now_ns: int, max_rows: int = 5) -> list[Finding]:
    """Trace rows (numbers already converted): clock, finite values, sources, devices,
    time monotone per series (host, device, metric), cumulative energy never falling."""
    f = check_clock(tr["t_ns"], tr["line_no"], "t_ns", file, now_ns, max_rows)
    bad_v = ~np.isfinite(tr["value"].to_numpy(float)) & tr["value"].notna().to_numpy()
    if bad_v.any():
        f += _capped(ERROR, "trace.value", file, tr["line_no"][bad_v],
                     [f"value {x} is not finite" for x in tr["value"][bad_v].head(max_rows)],
                     max_rows)
    known = SOURCES_MEASURED | SOURCES_NOT_MEASURED
    src = tr["source"]
    empty = src.isna().to_numpy() | src.isin([""]).to_numpy()
    if empty.any():
        f += _capped(ERROR, "trace.source-missing", file, tr["line_no"][empty],
                     ["empty source: every reading says whether it is measured, estimated or "
                      "simulated"] * int(empty.sum()), max_rows)
    unknown = sorted(set(map(str, src[~empty].unique())) - known)
    for s in unknown:
        first = int(tr["line_no"][(src == s).to_numpy()].iloc[0])
        f.append(Finding(WARNING, "trace.source-unknown", file, first,
                         f"source {s!r} is not one of {sorted(known)}"))
    devs = pd.Series([str(d) for d in tr["device"].unique()])
    for d in devs[~devs.str.match(DEVICE_RE)]:
        first = int(tr["line_no"][(tr["device"] == d).to_numpy()].iloc[0])
        f.append(Finding(WARNING, "trace.device-name", file, first,
                         f"device {d!r} is not gpuN, cpuN, dramN or node"))
    if not tr["metric"].isin(["power_w", "energy_j"]).any():
        f.append(Finding(ERROR, "trace.no-energy", file, None,
                         "no power_w or energy_j rows: nothing to attribute"))
    keys = ["host", "device", "metric"]
    back = (tr.groupby(keys, sort=False, observed=True)["t_ns"].diff() < 0).to_numpy()
    if back.any():
        f += _capped(ERROR, "clock.not-monotone", file, tr["line_no"][back],
                     [f"t_ns goes back in time within series {r.host}/{r.device}/{r.metric}"
                      for r in tr[back].head(max_rows).itertuples()], max_rows)
    en = tr[tr["metric"] == "energy_j"]
    if len(en):
        fall = (en.groupby(["host", "device"], sort=False, observed=True)["value"].diff()
                < 0).to_numpy()
        if fall.any():
            f += _capped(WARNING, "trace.energy-falls", file, en["line_no"][fall],
                         [f"cumulative energy_j of {r.host}/{r.device} falls to {r.value}"
                          for r in en[fall].head(max_rows).itertuples()], max_rows)
    return f


def nesting(ev: pd.DataFrame, tol_ns: int = OVERLAP_TOL_NS) -> pd.DataFrame:
    """Each interval's depth and parent (an index label of `ev`, -1 at the top) within its
    (host, rank), whether it overlaps its would-be parent without nesting inside it, and
    `clamp_ns`: how far the attribution moves its bounds to resolve an overlap of at most
    `tol_ns` (`attribution.resolve_overlaps`; those are then not overlaps).

    The attribution's rule (`attribution.nest`), collecting every violation instead of the first;
    concurrent phases (`attribution.timeline`) are top-level rows outside it."""
    ev = ev.assign(host_key=ev["host"].astype(str), rank_key=ev["rank"])
    out = pd.DataFrame(index=ev.index, columns=["depth", "parent", "overlap", "clamp_ns"])
    out["depth"], out["parent"], out["overlap"], out["clamp_ns"] = 0, -1, False, 0
    for _, g in timeline(ev).groupby(["host_key", "rank_key"], sort=False):
        s, e, clamp = resolve_overlaps(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), tol_ns)
        order = np.lexsort((-e, s))
        depth, parent, over = nest(s[order], e[order])
        labels = g.index.to_numpy()[order]
        has = parent >= 0
        out.loc[labels, "depth"] = depth
        out.loc[labels, "parent"] = np.where(has, labels[np.maximum(parent, 0)], -1)
        out.loc[labels, "overlap"] = over
        out.loc[g.index, "clamp_ns"] = clamp
    return out.astype({"depth": np.int64, "parent": np.int64, "overlap": bool,
                       "clamp_ns": np.int64}).loc[ev.index]


def check_events(ev: pd.DataFrame, now_ns: int, max_rows: int = 5) -> list[Finding]:
    """Events rows (numbers converted, `file_name` and `line_no` columns): clock, end ≥ start,
    nesting per (host, rank), steps carrying items."""
    f: list[Finding] = []
    for file, g in ev.groupby("file_name", sort=False):
        for col in ("start_ns", "end_ns"):
            f += check_clock(g[col], g["line_no"], col, str(file), now_ns, max_rows)
    neg = (ev["end_ns"] < ev["start_ns"]).to_numpy()
    for file, g in ev[neg].groupby("file_name", sort=False):
        f += _capped(ERROR, "events.end-before-start", str(file), g["line_no"],
                     [f"phase '{r.phase}' ends {(r.start_ns - r.end_ns) / 1e6:.3f} ms before it "
                      "starts" for r in g.head(max_rows).itertuples()], max_rows)
    ok = ev[~neg & ev["start_ns"].notna() & ev["end_ns"].notna()].copy()
    if len(ok):
        ok["start_ns"] = ok["start_ns"].astype(np.int64)
        ok["end_ns"] = ok["end_ns"].astype(np.int64)
        tree = nesting(ok)
        moved = ok[(tree["clamp_ns"] > 0).to_numpy()]
        for file, g in moved.groupby("file_name", sort=False):
            f += _capped(WARNING, "events.overlap-clamped", str(file), g["line_no"],
                         [f"phase '{r.phase}' overlaps a neighbour by "
                          f"{tree.loc[r.Index, 'clamp_ns'] / 1e3:.1f} us (at most "
                          f"{OVERLAP_TOL_NS / 1e6:g} ms: a cross-clock boundary); attribution "
                          "clamps it" for r in g.head(max_rows).itertuples()], max_rows)
        bad = ok[tree["overlap"].to_numpy()]
        for file, g in bad.groupby("file_name", sort=False):
            p = ok.loc[tree.loc[g.index, "parent"]]
            f += _capped(ERROR, "events.overlap", str(file), g["line_no"],
                         [f"phase '{r.phase}' [{r.start_ns}, {r.end_ns}] overlaps '{q.phase}' "
                          f"({q.file_name}:{q.line_no}, [{q.start_ns}, {q.end_ns}]) without "
                          f"nesting inside it (host {r.host}, rank {r.rank})"
                          for r, q in zip(g.head(max_rows).itertuples(),
                                          p.head(max_rows).itertuples(), strict=True)], max_rows)
    f += _concurrent_unfinished(ev, max_rows)
    steps = ev[ev["phase"] == "step"]
    no_items = (steps["items"].isna() | (steps["items"] < 0)).to_numpy()
    for file, g in steps[no_items].groupby("file_name", sort=False):
        f += _capped(ERROR, "events.step-items", str(file), g["line_no"],
                     [f"step {r.step} carries no items (got {r.items}); throughput needs the "
                      "images/tokens of each step: step(items=...)"
                      for r in g.head(max_rows).itertuples()], max_rows)
    for file, g in steps[(steps["items"] == 0).to_numpy()].groupby("file_name", sort=False):
        f += _capped(WARNING, "events.step-zero-items", str(file), g["line_no"],
                     [f"step {r.step} trained 0 items (e.g. every image of its batch was "
                      "corrupt): its time counts in throughput, its items do not"
                      for r in g.head(max_rows).itertuples()], max_rows)
    return f


def _concurrent_unfinished(ev: pd.DataFrame, max_rows: int) -> list[Finding]:
    """A concurrent phase (a background checkpoint write) ending after its rank's last timeline
    phase: the process ended (or stopped marking) before the write it started was complete."""
    conc = ev["phase"].isin(CONCURRENT_PHASES)
    if not conc.any():
        return []
    last = timeline(ev).groupby(["host", "rank"])["end_ns"].max()
    late = ev[conc & (ev["end_ns"] > ev.set_index(["host", "rank"]).index.map(last).to_numpy())]
    return [x for file, g in late.groupby("file_name", sort=False) for x in _capped(
        ERROR, "events.concurrent-unfinished", str(file), g["line_no"],
        [f"'{r.phase}' ends after rank {r.rank}'s last phase: the run did not wait for it"
         for r in g.head(max_rows).itertuples()], max_rows)]


def infer_kind(meta: dict[str, Any] | None, summary: dict[str, Any] | None,
               phases: Iterable[str]) -> str | None:
    """The workload kind of a run: meta's cell `kind`, else the summary's keys (causal_lm writes
    model_type/task, image_classification classes), else a `tokenize` phase; None: unknown."""
    kind = ((meta or {}).get("cell") or {}).get("kind")
    if kind in KIND_PHASES:
        return str(kind)
    if summary:
        if "model_type" in summary or "task" in summary:
            return "causal_lm"
        if "classes" in summary:
            return "image_classification"
    names = set(phases)
    if "tokenize" in names:
        return "causal_lm"
    return None


def check_kind_phases(ev: pd.DataFrame, kind: str, meta: dict[str, Any] | None,
                      max_rows: int = 5) -> list[Finding]:
    """The phases a workload kind marks: each at least once per rank, and inside every step its
    data_load / h2d / forward / backward / optimizer; `stage_copy` when the cell stages
    (storage local)."""
    f: list[Finding] = []
    files = ev.groupby(["host", "rank"], sort=False)["file_name"].first()
    need = list(KIND_PHASES[kind])
    cell = (meta or {}).get("cell") or {}
    if cell.get("storage") == "local":
        need.append("stage_copy")
    have = ev.groupby(["host", "rank"], sort=False)["phase"].agg(set)
    for (host, rank), names in have.items():
        miss = [p for p in need if p not in names]
        if miss:
            f.append(Finding(ERROR, "events.phase-missing", str(files[(host, rank)]), None,
                             f"{kind} run (host {host}, rank {rank}) never marks {miss}"))
    children = KIND_STEP_CHILDREN[kind]
    ok = ev[(ev["end_ns"] >= ev["start_ns"])].copy()
    if not len(ok):
        return f
    ok["start_ns"] = ok["start_ns"].astype(np.int64)
    ok["end_ns"] = ok["end_ns"].astype(np.int64)
    tree = nesting(ok)
    steps = ok[ok["phase"] == "step"]
    if not len(steps):
        return f
    # the nearest enclosing step (a zero-length data_load at the instant h2d starts nests in h2d)
    parent = tree["parent"]
    cur = parent.copy()
    anc = pd.Series(-1, index=ok.index, dtype=np.int64)
    for _ in range(int(tree["depth"].max())):
        live = ((cur >= 0) & (anc < 0)).to_numpy()
        if not live.any():
            break
        up = cur[live]
        hit = (ok["phase"].reindex(up.to_numpy()) == "step").to_numpy()
        anc[up.index[hit]] = up[hit].to_numpy()
        cur[live] = parent.reindex(up.to_numpy()).to_numpy()
    ok["parent_idx"] = anc
    kids = ok[ok["parent_idx"].isin(steps.index) & ok["phase"].isin(children)]
    present = pd.crosstab(kids["parent_idx"], kids["phase"]).reindex(
        index=steps.index, columns=children, fill_value=0) > 0
    lacking = ~present.all(axis=1)
    if lacking.any():
        st = steps[lacking.to_numpy()]
        for file, g in st.groupby("file_name", sort=False):
            miss = present.loc[g.index]
            f += _capped(ERROR, "events.step-children", str(file), g["line_no"],
                         [f"step {r.step} (rank {r.rank}) has no "
                          f"{[c for c in children if not miss.loc[r.Index, c]]} inside it"
                          for r in g.head(max_rows).itertuples()], max_rows)
    return f


def check_span(tr: pd.DataFrame, ev: pd.DataFrame, trace_file: str,
               meta: dict[str, Any] | None, max_rows: int = 5) -> list[Finding]:
    """Every event lies inside its host's trace span (else attribution has no energy for it),
    and inside the workload's window that meta.json records."""
    f: list[Finding] = []
    span = tr.groupby("host", observed=True)["t_ns"].agg(["min", "max"])
    ev = ev.assign(host_key=ev["host"].astype(str))
    hosts = set(span.index.astype(str))
    if len(hosts) == 1:  # one-host run whose trace and events name the host differently
        ev["host_key"] = next(iter(hosts))
    for h in sorted(set(ev["host_key"]) - hosts):
        f.append(Finding(WARNING, "events.host-untraced", str(ev["file_name"].iloc[0]), None,
                         f"host {h!r} has events but no trace rows in {trace_file}"))
    e = ev[ev["host_key"].isin(hosts)]
    lo = e["host_key"].map(span["min"]).astype(np.int64)
    hi = e["host_key"].map(span["max"]).astype(np.int64)
    out = ((e["start_ns"] < lo) | (e["end_ns"] > hi)).to_numpy()
    bad = e[out]
    for file, g in bad.groupby("file_name", sort=False):
        f += _capped(ERROR, "events.outside-trace", str(file), g["line_no"],
                     [f"phase '{r.phase}' [{r.start_ns}, {r.end_ns}] lies outside the trace span "
                      f"[{span.loc[r.host_key, 'min']}, {span.loc[r.host_key, 'max']}] "
                      f"of host {r.host_key}"
                      for r in g.head(max_rows).itertuples()], max_rows)
    w0, w1 = (meta or {}).get("workload_start_ns"), (meta or {}).get("workload_end_ns")
    if isinstance(w0, int) and isinstance(w1, int):
        outw = ((ev["start_ns"] < w0) | (ev["end_ns"] > w1)).to_numpy() & ~np.isin(
            ev.index, bad.index)
        for file, g in ev[outw].groupby("file_name", sort=False):
            f += _capped(WARNING, "events.outside-workload", str(file), g["line_no"],
                         [f"phase '{r.phase}' lies outside meta.json's workload window "
                          f"[{w0}, {w1}]" for r in g.head(max_rows).itertuples()], max_rows)
    return f


def check_meta(meta: dict[str, Any], file: str, now_ns: int) -> list[Finding]:
    """meta.json: the keys `wattlife run` writes, a clean exit, a consistent clock."""
    f: list[Finding] = []
    missing = [k for k in META_REQUIRED_KEYS if k not in meta]
    if missing:
        f.append(Finding(ERROR, "meta.key-missing", file, None, f"missing key(s) {missing}"))
    sampler = meta.get("sampler")
    if isinstance(sampler, dict):
        miss = [k for k in META_SAMPLER_KEYS if k not in sampler]
        if miss:
            f.append(Finding(ERROR, "meta.key-missing", file, None,
                             f"missing key(s) {['sampler.' + k for k in miss]}"))
        if sampler.get("errors"):
            f.append(Finding(WARNING, "meta.sampler-errors", file, None,
                             f"the sampler reported errors: {sampler['errors']}"))
    for key, msg in meta_problems(meta):  # the contract's types (contracts.META_KEY_TYPES)
        code = "meta.schema-version" if key == "schema_version" else "meta.type"
        f.append(Finding(ERROR, code, file, None, msg))
    rc = meta.get("exit_code")
    if "exit_code" in meta and rc != 0:
        f.append(Finding(ERROR, "meta.exit-code", file, None,
                         f"the workload exited with code {rc}: the run is incomplete"))
    times = {k: meta.get(k) for k in ("start_ns", "workload_start_ns", "workload_end_ns", "end_ns")}
    for k, v in times.items():
        if k not in meta:
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            continue  # a meta.type finding above
        if v < MIN_EPOCH_NS:
            f.append(Finding(ERROR, "clock.before-2000", file, None,
                             f"{k}={v} is before 2000-01-01{_unit_guess(float(v))}"))
        elif v > now_ns + FUTURE_SLACK_NS:
            f.append(Finding(ERROR, "clock.future", file, None, f"{k}={v} is in the future"))
    vals = [v for v in times.values() if isinstance(v, int) and not isinstance(v, bool)]
    if len(vals) == 4 and vals != sorted(vals):
        f.append(Finding(ERROR, "meta.clock-order", file, None,
                         "expected start_ns <= workload_start_ns <= workload_end_ns <= end_ns, "
                         f"got {times}"))
    return f


def check_phases_table(ph: pd.DataFrame, file: str, max_rows: int = 5) -> list[Finding]:
    """phases.csv (numbers converted): a source on every row, a known method, energies ordered
    lo <= energy <= hi."""
    f: list[Finding] = []
    empty = (ph["source"].astype(str).str.strip() == "").to_numpy()
    if empty.any():
        f += _capped(ERROR, "phases.source-missing", file, ph["line_no"][empty],
                     ["empty source"] * int(empty.sum()), max_rows)
    meth = ~ph["method"].isin(PHASES_METHODS).to_numpy()
    if meth.any():
        f += _capped(WARNING, "phases.method", file, ph["line_no"][meth],
                     [f"method {m!r} is not one of {sorted(PHASES_METHODS)}"
                      for m in ph["method"][meth].head(max_rows)], max_rows)
    e, lo, hi = (ph[c].to_numpy(float) for c in ("energy_j", "energy_lo_j", "energy_hi_j"))
    with np.errstate(invalid="ignore"):
        tol = 1e-9 * np.maximum(np.abs(e), 1.0)
        order = (lo > e + tol) | (e > hi + tol)
    if order.any():
        f += _capped(WARNING, "phases.interval", file, ph["line_no"][order],
                     [f"energy_j {r.energy_j} outside [{r.energy_lo_j}, {r.energy_hi_j}]"
                      for r in ph[order].head(max_rows).itertuples()], max_rows)
    return f


def check_summary(summary: dict[str, Any], ev: pd.DataFrame, file: str) -> list[Finding]:
    """work/summary.json against the events: its step count equals rank 0's `step` events."""
    f: list[Finding] = []
    for k in ("steps", "throughput", "throughput_unit"):
        if k not in summary:
            f.append(Finding(WARNING, "summary.key-missing", file, None, f"missing key {k!r}"))
    if isinstance(summary.get("steps"), int) and len(ev):
        r0 = ev[ev["rank"] == ev["rank"].min()]
        n = int((r0["phase"] == "step").sum())
        if n != summary["steps"]:
            f.append(Finding(WARNING, "summary.steps", file, None,
                             f"summary counts {summary['steps']} steps, the events of rank "
                             f"{int(ev['rank'].min())} hold {n}"))
    return f


# --------------------------------------------------------------------------- a run directory

def _first(run: Path, names: list[str]) -> Path | None:
    return next((run / n for n in names if (run / n).exists()), None)


def _load_json(path: Path, findings: list[Finding]) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        findings.append(Finding(ERROR, "json.parse", str(path), exc.lineno, exc.msg))
        return None
    if not isinstance(doc, dict):
        findings.append(Finding(ERROR, "json.type", str(path), None, "expected a JSON object"))
        return None
    return doc


def check_run(run_dir: str | Path, kind: str = "auto", now_ns: int | None = None,
              max_rows: int = 5) -> list[Finding]:
    """Every finding for one run directory (see the module docstring)."""
    run = Path(run_dir)
    now_ns = time.time_ns() if now_ns is None else now_ns
    f: list[Finding] = []
    if not run.is_dir():
        return [Finding(ERROR, "run.missing", str(run), None, "not a directory")]

    meta = None
    meta_path = run / META_FILE
    if meta_path.exists():
        meta = _load_json(meta_path, f)
        if meta is not None:
            f += check_meta(meta, str(meta_path), now_ns)
    else:
        f.append(Finding(ERROR, "file.missing", str(meta_path), None, "no meta.json"))

    tr = None
    tr_path = _first(run, list(TRACE_FILES))
    if tr_path is None:
        f.append(Finding(ERROR, "file.missing", str(run / TRACE_FILE), None,
                         "no trace (trace.csv, trace.csv.gz or trace.parquet)"))
    else:
        raw, ff = read_csv_lines(tr_path, max_rows, {"t_ns": "int", "value": "float"})
        f += ff
        if raw is not None:
            cols = check_columns(raw, TRACE_COLUMNS, str(tr_path))
            f += cols
            if not cols:
                tr = raw[raw["t_ns"].notna()]
                tr["t_ns"] = tr["t_ns"].astype(np.int64)
                f += check_trace(tr, str(tr_path), now_ns, max_rows)
                rows = ((meta or {}).get("sampler") or {}).get("rows")
                if isinstance(rows, int) and tr_path.suffix == ".csv" and rows != len(raw):
                    f.append(Finding(WARNING, "trace.rows", str(tr_path), None,
                                     f"{len(raw):,} rows, meta.json's sampler wrote {rows:,}"))

    ev = None
    ev_path = run / EVENTS_FILE
    ev_paths = ([ev_path] if ev_path.exists() else []) + sorted(run.glob("events.rank*.csv"))
    if not ev_paths:
        f.append(Finding(ERROR, "file.missing", str(ev_path), None, "no events.csv"))
    frames = []
    for p in ev_paths:
        df, ff = read_csv_lines(p, max_rows, {"start_ns": "int", "end_ns": "int", "rank": "int",
                                              "items": "float", "step": "float", "depth": "float"},
                                allow_empty=("items", "step", "depth"))
        f += ff
        if df is None:
            continue
        cols = check_columns(df, EVENTS_COLUMNS, str(p))
        f += cols
        if not cols:
            frames.append(df.assign(file_name=str(p)))
    if frames:
        ev = pd.concat(frames, ignore_index=True)
        ev = ev[ev["start_ns"].notna() & ev["end_ns"].notna() & ev["rank"].notna()]
        ev = ev.astype({"start_ns": np.int64, "end_ns": np.int64, "rank": np.int64})
        ev["phase"] = ev["phase"].astype(str)
        ev["host"] = ev["host"].astype(str)
        f += check_events(ev, now_ns, max_rows)
        if tr is not None and len(tr):
            f += check_span(tr, ev, str(tr_path), meta, max_rows)

    summary = None
    sum_path = run / SUMMARY_FILE
    if sum_path.exists():
        summary = _load_json(sum_path, f)
        if summary is not None and ev is not None:
            f += check_summary(summary, ev, str(sum_path))
    if ev is not None:
        from .check_steady import steady_findings

        f += [Finding(sev, code, file, None, msg) for sev, code, file, msg in
              steady_findings(ev, summary, str(ev_paths[0]), str(sum_path))]

    if ev is not None:
        k = infer_kind(meta, summary, ev["phase"]) if kind == "auto" else (
            None if kind == "none" else kind)
        if k is not None:
            f += check_kind_phases(ev, k, meta, max_rows)
        elif kind == "auto":
            f.append(Finding(WARNING, "kind.unknown", str(run), None,
                             "workload kind unknown (no cell kind, summary or tokenize phase): "
                             "required phases not checked; give --kind"))

    ph_path = run / PHASES_FILE
    if ph_path.exists():
        ph, ff = read_csv_lines(ph_path, max_rows, {c: "float" for c in (
            "energy_j", "energy_lo_j", "energy_hi_j", "time_s", "count", "mean_power_w")},
            allow_empty=("energy_lo_j", "energy_hi_j", "mean_power_w"))
        f += ff
        if ph is not None:
            cols = check_columns(ph, PHASES_COLUMNS, str(ph_path))
            f += cols
            if not cols:
                f += check_phases_table(ph, str(ph_path), max_rows)
    return f


def format_text(results: dict[str, list[Finding]]) -> str:
    """Human-readable report: findings by run, then one line of counts per run."""
    lines = []
    for run, findings in results.items():
        lines += [x.text() for x in findings]
        n_err = sum(x.severity == ERROR for x in findings)
        n_warn = sum(x.severity == WARNING for x in findings)
        lines.append(f"{run}: {'FAIL' if n_err else 'ok'} ({n_err} error(s), {n_warn} warning(s))")
    return "\n".join(lines)


def format_json(results: dict[str, list[Finding]]) -> str:
    return json.dumps([{"run_dir": run, **asdict(x)} for run, findings in results.items()
                       for x in findings], indent=2)


def check_runs(run_dirs: Iterable[str | Path], kind: str = "auto", as_json: bool = False,
               max_rows: int = 5) -> tuple[int, str]:
    """Exit code (1 if any error, else 0) and the report for several run directories."""
    results = {str(r): check_run(r, kind=kind, max_rows=max_rows) for r in run_dirs}
    errors = any(x.severity == ERROR for fs in results.values() for x in fs)
    return int(errors), format_json(results) if as_json else format_text(results)
