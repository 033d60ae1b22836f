"""`wattlife` commands of preparation and post-execution: fetch, upload, gen-catalogue,
prepare-tables."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .options import sha256_digest


def cmd_fetch(a: argparse.Namespace) -> int:
    from ..contracts import DOWNLOAD_DATASET, DOWNLOAD_MODEL
    from ..prepare.fetch import fetch_artefact
    from ..prepare.serve import loopback_server
    from ..prepare.transfer import measure_transfer, report_transfer

    with loopback_server(a.serve_dir, a.rate_mbps) as srv:
        record = measure_transfer(
            DOWNLOAD_MODEL if a.kind == "model" else DOWNLOAD_DATASET,
            lambda: fetch_artefact(a.output, url=a.url, hf=a.hf, kaggle=a.kaggle, path=a.path,
                                   kind=a.kind, revision=a.revision, endpoint=a.endpoint,
                                   sha256=a.sha256, force=a.force, retries=a.retries,
                                   server_url=srv.url if srv else None),
            name=a.name or Path(a.output).name, kind=a.kind, loopback=bool(a.serve_dir),
            transfers_at_once=a.transfers_at_once)
    report_transfer(record, a.record)
    return 0


def cmd_upload(a: argparse.Namespace) -> int:
    from ..contracts import UPLOAD
    from ..prepare.serve import loopback_server
    from ..prepare.transfer import measure_transfer, report_transfer
    from ..prepare.upload import last_checkpoint, upload_artefact

    src = last_checkpoint(a.from_summary) if a.from_summary else a.src
    if not src:
        raise SystemExit("wattlife upload: give SRC or --from-summary")
    with loopback_server(a.serve_put, a.rate_mbps, upload=True) as srv:
        record = measure_transfer(
            UPLOAD,
            lambda: upload_artefact(src, put=a.put, hf=a.hf, copy=a.copy, endpoint=a.endpoint,
                                    server_url=srv.url if srv else None, force=a.force),
            name=a.name or Path(src).name, kind="model", loopback=bool(a.serve_put),
            transfers_at_once=a.transfers_at_once)
    report_transfer(record, a.record)
    return 0


def cmd_gen_catalogue(a: argparse.Namespace) -> int:
    from ..config import load_config, settings
    from ..prepare.catalogue import checked_catalogue, generate_artefacts

    m = generate_artefacts(checked_catalogue(settings(load_config(a.config)).prepare), a.output)
    print(json.dumps({k: v["size_bytes"] for k, v in m.items()}))
    return 0


def cmd_prepare_tables(a: argparse.Namespace) -> int:
    from ..analysis.downloads import prepare_tables_files
    from ..config import load_config, settings
    from ..prepare.catalogue import checked_catalogue

    prep = settings(load_config(a.config)).prepare
    for path in prepare_tables_files(checked_catalogue(prep), prep.users_per_artefact,
                                     prep.downloads_per_user_per_month, a.records, a.output,
                                     phases=a.phases, phase_summary=a.phase_summary,
                                     cell_summaries=a.cell_summaries, cell_metas=a.cell_metas):
        print(path)
    return 0


def _add_fetch(sub: Any) -> None:
    """The `fetch` command's parser."""
    fe = sub.add_parser("fetch", help="fetch an artefact (HTTP(S) URL, Hugging Face repo, or path)",
                        description="Streamed, resumable, retried; sha256-verified; the file "
                                    "appears at its final path only when complete. Run it under "
                                    "`wattlife run` to measure it as a download_dataset / "
                                    "download_model phase.")
    src = fe.add_mutually_exclusive_group(required=True)
    src.add_argument("--url", help="HTTP(S) URL (with --serve-dir: a path under that folder)")
    src.add_argument("--kaggle", metavar="OWNER/DATASET", help="Kaggle dataset (credentials: the "
                                                               "client's)")
    src.add_argument("--path", help="local or shared-file-system path (file or folder)")
    src.add_argument("--hf", metavar="REPO_ID", help="Hugging Face repository (model or dataset: "
                                                     "--kind)")
    fe.add_argument("--revision", help="Hugging Face revision (default main)")
    fe.add_argument("--endpoint", help="Hugging Face endpoint (default HF_ENDPOINT or the Hub)")
    fe.add_argument("-o", "--output", required=True, help="final path of the artefact")
    fe.add_argument("--sha256", type=sha256_digest,
                    help="expected sha256 of the file (64 hex characters; default: not verified)")
    fe.add_argument("--kind", choices=["dataset", "model"], default="dataset",
                    help="what is fetched: names the phase download_<kind> (default dataset)")
    fe.add_argument("--retries", type=int, default=5,
                    help="retries of a broken HTTP transfer, resumed (default 5)")
    fe.add_argument("--force", action="store_true",
                    help="fetch even if present and verified (default: off)")
    fe.add_argument("--name", help="artefact name for the record (default: the output's name)")
    fe.add_argument("--record", help="write the transfer's JSON record here (bytes, seconds, "
                                     "network bytes) (default: print only)")
    fe.add_argument("--serve-dir", help="demo/offline: serve this folder on a loopback HTTP server "
                                        "and fetch --url from it (the server's CPU time is "
                                        "measured too) (default: none, fetch from the URL)")
    _add_transfer_options(fe)
    fe.set_defaults(fn=cmd_fetch)


def _add_transfer_options(p: Any) -> None:
    """The options `fetch` and `upload` share: the loopback server's rate and the workflow's
    transfers-at-once (written in the record)."""
    p.add_argument("--rate-mbps", type=float,
                   help="rate limit of the loopback server (Mbit/s) (default: unlimited)")
    p.add_argument("--transfers-at-once", type=int,
                   help="how many transfers the workflow lets run at once (0: no limit), written "
                        "in the record (default: not recorded)")


def _add_upload(sub: Any) -> None:
    """The `upload` command's parser."""
    up = sub.add_parser("upload", help="post-execution: send the trained model out (HTTP PUT, "
                                       "Hugging Face, or copy), marked as an `upload` phase")
    up.add_argument("src", nargs="?", help="file or folder to upload")
    up.add_argument("--from-summary", help="upload the last checkpoint a cell's work/summary.json "
                                           "lists (default: SRC)")
    dst = up.add_mutually_exclusive_group(required=True)
    dst.add_argument("--put", metavar="URL", help="HTTP PUT to URL/<file> (with --serve-put: a "
                                                  "path)")
    dst.add_argument("--hf", metavar="REPO_ID", help="Hugging Face model repository")
    dst.add_argument("--copy", metavar="PATH", help="copy to a target path")
    up.add_argument("--endpoint", help="Hugging Face endpoint (default HF_ENDPOINT or the Hub)")
    up.add_argument("--force", action="store_true",
                    help="replace an existing --copy destination that differs (default: kept, "
                         "an error)")
    up.add_argument("--name", help="name for the record (default: the source's name)")
    up.add_argument("--record", help="write the transfer's JSON record here (default: print only)")
    up.add_argument("--serve-put", help="demo/offline: a loopback server storing PUTs in this "
                                        "folder (default: none, PUT to the URL)")
    _add_transfer_options(up)
    up.set_defaults(fn=cmd_upload)


def _add_gen_catalogue(sub: Any) -> None:
    """The `gen-catalogue` command's parser."""
    gc = sub.add_parser("gen-catalogue", help="generate the config's `generated` catalogue "
                                              "artefacts")
    gc.add_argument("config", help="config YAML with prepare.catalogue")
    gc.add_argument("-o", "--output", required=True, help="folder for the files and manifest.json")
    gc.set_defaults(fn=cmd_gen_catalogue)


def _add_prepare_tables(sub: Any) -> None:
    """The `prepare-tables` command's parser."""
    pt = sub.add_parser("prepare-tables", help="download/upload rows, size fit, facility-scale "
                                               "cache estimate and staging break-even")
    pt.add_argument("--config", required=True, help="config YAML (prepare.catalogue, "
                                                    "prepare.facility)")
    pt.add_argument("--records", nargs="+", required=True, help="transfer records (phases.csv "
                                                                "beside each)")
    pt.add_argument("--phase-summary", help="the execution matrix's phase_summary.csv (default: "
                                            "none, no staging break-even table)")
    pt.add_argument("--cell-summaries", nargs="*", default=[],
                    help="cells' work/summary.json (default: none)")
    pt.add_argument("--phases", nargs="*", help="each record's phases.csv, in the order of "
                                                "--records (default: beside each record)")
    pt.add_argument("--cell-metas", nargs="*", help="each cell's meta.json, in the order of "
                                                    "--cell-summaries (default: <cell>/meta.json)")
    pt.add_argument("-o", "--output", required=True, help="tables folder")
    pt.set_defaults(fn=cmd_prepare_tables)


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_fetch(sub)
    _add_upload(sub)
    _add_gen_catalogue(sub)
    _add_prepare_tables(sub)
