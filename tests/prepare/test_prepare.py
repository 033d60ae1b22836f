"""Preparation and post-execution: Kaggle and upload clients against loopback servers, disk full,
the transfer record, the catalogue, and the download / facility / staging analyses."""

import errno
import io
import json
import os
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loopback import HubServer, LoopbackServer
from wattlife.analysis.downloads import (
    download_fit,
    facility_estimate,
    prepare_tables,
    read_records,
    staging_breakeven,
    staging_inputs,
)
from wattlife.prepare.catalogue import check_catalogue, generate_artefacts
from wattlife.prepare.fetch import FetchError, fetch_artefact, fetch_http, fetch_kaggle, sha256_of
from wattlife.prepare.transfer import transfer_record
from wattlife.prepare.upload import last_checkpoint, upload_artefact, upload_hf, upload_http

ROOT = Path(__file__).resolve().parents[2]


def test_disk_full_keeps_the_partial_file_and_promotes_nothing(tmp_path):
    """A real ENOSPC from the kernel: the partial file is /dev/full."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    dest = tmp_path / "big.bin"
    (tmp_path / "big.bin.part").symlink_to("/dev/full")
    with LoopbackServer({"/big.bin": os.urandom(300_000)}) as srv:
        with pytest.raises(FetchError, match="disk full") as exc:
            fetch_http(srv.url + "/big.bin", dest, retries=3, backoff_s=0.01, progress=False)
    assert isinstance(exc.value.__cause__, OSError) and exc.value.__cause__.errno == errno.ENOSPC
    assert not dest.exists() and len(srv.requests) == 1  # final at once, not retried


class _KaggleApi(BaseHTTPRequestHandler):
    """The one call `dataset_download_files` makes: POST .../DownloadDataset, answered with the
    dataset's zip (or the JSON error the real service sends)."""

    zips: dict[str, bytes] = {}
    seen: list[tuple[str, dict, str | None]] = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.seen.append((self.path, req, self.headers.get("Authorization")))
        body = self.zips.get(f"{req.get('ownerSlug')}/{req.get('datasetSlug')}")
        if body is None:
            body = json.dumps({"code": 404, "message": "Dataset not found"}).encode()
            code, ctype = 404, "application/json"
        else:
            code, ctype = 200, "application/zip"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def kaggle_endpoint(monkeypatch):
    """The real `kaggle` client's local endpoint is http://localhost (port 80)."""
    try:
        httpd = ThreadingHTTPServer(("127.0.0.1", 80), _KaggleApi)
    except OSError as exc:
        pytest.skip(f"cannot serve the Kaggle client's local endpoint on 127.0.0.1:80 ({exc})")
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "LOCALHOST")
    monkeypatch.setenv("KAGGLE_USERNAME", "tester")
    monkeypatch.setenv("KAGGLE_KEY", "not-a-real-key")
    yield _KaggleApi
    httpd.shutdown()
    httpd.server_close()


def test_kaggle_client_end_to_end_against_a_loopback_endpoint(tmp_path, kaggle_endpoint, capsys):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("train.csv", "a,b\n" * 1000)
        z.writestr("images/x.txt", "hello")
    kaggle_endpoint.zips["org/tiny"] = buf.getvalue()
    r = fetch_kaggle("org/tiny", tmp_path / "tiny")
    assert (tmp_path / "tiny" / "train.csv").read_text() == "a,b\n" * 1000
    assert (tmp_path / "tiny" / "images" / "x.txt").read_text() == "hello"
    assert r["bytes"] == 4005 and not (tmp_path / "tiny.part").exists()
    path, req, auth = kaggle_endpoint.seen[-1]
    assert path.endswith("/datasets.DatasetApiService/DownloadDataset")
    assert req == {"ownerSlug": "org", "datasetSlug": "tiny"} and auth  # the client authenticated
    assert "not-a-real-key" not in capsys.readouterr().out  # never logged
    assert fetch_kaggle("org/tiny", tmp_path / "tiny")["skipped"]
    with pytest.raises(FetchError, match="org/nope.*404"):
        fetch_kaggle("org/nope", tmp_path / "nope")
    assert not (tmp_path / "nope").exists() and not (tmp_path / "nope.part").exists()


def test_http_put_upload_of_a_folder(tmp_path):
    src = tmp_path / "model"
    (src / "sub").mkdir(parents=True)
    (src / "model.pt").write_bytes(os.urandom(70_000))
    (src / "sub" / "cfg.json").write_text("{}")
    with LoopbackServer(upload_root=tmp_path / "received") as srv:
        r = upload_http(src, srv.url + "/models/m1")
    got = tmp_path / "received" / "models" / "m1" / "model.pt"
    assert got.read_bytes() == (src / "model.pt").read_bytes()
    assert r["bytes"] == 70_002
    with LoopbackServer() as srv, pytest.raises(FetchError, match="403"):  # accepts no uploads
        upload_http(src / "model.pt", srv.url + "/x")


def test_huggingface_upload_end_to_end_against_a_loopback_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    src = tmp_path / "trained"
    (src / "sub").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(os.urandom(5000))
    (src / "sub" / "config.json").write_text('{"model_type": "qwen3"}')
    with HubServer({}) as hub:
        r = upload_hf(src, "org/trained", endpoint=hub.url)
        got = hub.repos[("model", "org/trained")]
    assert got["model.safetensors"] == (src / "model.safetensors").read_bytes()
    assert got["sub/config.json"] == b'{"model_type": "qwen3"}'
    assert r["files"] == 2 and r["commit"] == HubServer.SHA


def test_fetch_and_upload_commands_record_bytes_and_network_counters(tmp_path, capsys):
    from wattlife import markers
    from wattlife.cli import main
    from wattlife.contracts import read_events

    cat = [{"name": "a", "kind": "model", "source": "generated", "size_bytes": 300_000}]
    man = generate_artefacts(cat, tmp_path / "served")
    markers.configure(tmp_path / "events.csv")
    assert main(["fetch", "--url", "/a.bin", "--serve-dir", str(tmp_path / "served"),
                 "--rate-mbps", "100", "--sha256", man["a"]["sha256"],
                 "-o", str(tmp_path / "got" / "a.bin"), "--kind", "model", "--name", "a",
                 "--record", str(tmp_path / "rec.json")]) == 0
    summ = tmp_path / "summary.json"
    summ.write_text(json.dumps({"checkpoints": [str(tmp_path / "got" / "a.bin")]}))
    assert main(["upload", "--from-summary", str(summ), "--serve-put", str(tmp_path / "out"),
                 "--put", "/models", "--record", str(tmp_path / "up.json")]) == 0
    markers.reset()
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["bytes"] == 300_000 and rec["server"] == "loopback" and rec["client"] == "http"
    assert rec["net_recv_bytes"] >= 300_000  # psutil counters; loopback traffic counts
    # the rate limit held: the server sleeps bytes/rate before sending each chunk, so the
    # download cannot end sooner on any machine (a lower bound; load only makes it longer)
    assert rec["seconds"] >= 300_000 * 8 / 100e6
    assert sha256_of(tmp_path / "got" / "a.bin") == man["a"]["sha256"]
    up = json.loads((tmp_path / "up.json").read_text())
    assert up["direction"] == "upload" and up["bytes"] == 300_000
    assert (tmp_path / "out" / "models" / "a.bin").exists()
    assert read_events(tmp_path / "events.csv")["phase"].tolist() == ["download_model", "upload"]
    summ.write_text(json.dumps({"checkpoints": []}))
    assert main(["upload", "--from-summary", str(summ), "--copy", str(tmp_path / "x")]) != 0
    assert "wrote no checkpoint to upload" in capsys.readouterr().err


def test_catalogue_errors_name_the_entry_and_key():
    ok = {"name": "a", "kind": "dataset", "source": "hf", "id": "org/a", "size_bytes": 10}
    check_catalogue([ok])
    with pytest.raises(ValueError, match=r"prepare.catalogue\[1\].kind"):
        check_catalogue([ok, {**ok, "name": "b", "kind": "weights"}])
    with pytest.raises(ValueError, match=r"\[0\].id: a hf source needs an id"):
        check_catalogue([{**ok, "id": ""}])
    with pytest.raises(ValueError, match="appears twice"):
        check_catalogue([ok, ok])


def test_paper_catalogue_spans_the_studys_range():
    from wattlife.config import load_config

    paper = load_config(ROOT / "config" / "paper.yaml")
    cat = pd.DataFrame(check_catalogue(paper["prepare"]["catalogue"]))
    data, models = cat[cat["kind"] == "dataset"], cat[cat["kind"] == "model"]
    assert len(data) == 7 and len(models) == 5
    assert data["size_bytes"].min() < 1e9 and data["size_bytes"].max() > 5e11
    assert models["params"].min() == 25.6e6 and models["params"].max() >= 27e9
    assert {"hf", "kaggle", "http", "path"} <= set(cat["source"])


def _rows(j_per_gb: float, j0: float, s_per_gb: float) -> pd.DataFrame:
    gb = np.array([0.5, 1.0, 2.0, 4.0])
    return pd.DataFrame({"artefact": list("abcd"), "kind": "dataset", "direction": "download",
                         "bytes": gb * 1e9, "seconds": s_per_gb * gb, "skipped": False,
                         "device_kind": "cpu", "energy_j": j0 + j_per_gb * gb, "source": "rapl"})


def test_download_fit_recovers_a_known_line_and_the_facility_estimate_follows():
    fit = download_fit(_rows(1200.0, 30.0, 8.0))
    r = fit.iloc[0]
    assert r["j_per_gb"] == pytest.approx(1200.0) and r["j_intercept"] == pytest.approx(30.0)
    assert r["s_per_gb"] == pytest.approx(8.0) and r["r2_energy"] == pytest.approx(1.0)
    cat = pd.DataFrame([{"name": "big", "kind": "dataset", "size_bytes": 100e9}])
    fac = facility_estimate(cat, fit, users_per_artefact=50, downloads_per_user_per_month=2).iloc[0]
    per = 30.0 + 1200.0 * 100
    assert fac["energy_per_download_j"] == pytest.approx(per)
    assert fac["avoided_kwh_per_month"] == pytest.approx((100 - 1) * per / 3.6e6)
    assert fac["source"].startswith("estimate")


def test_staging_breakeven_known_answer_and_never():
    rows = []
    for w, dl_shared, dl_local in (("io", 900.0, 300.0), ("gpu", 100.0, 120.0)):
        rows += [{"workload": w, "storage": "local", "checkpoint": "off", "phase": "stage_copy",
                  "energy_j": 240.0, "source": "rapl"},
                 {"workload": w, "storage": "local", "checkpoint": "off", "phase": "data_load",
                  "energy_j": dl_local, "source": "rapl"},
                 {"workload": w, "storage": "shared", "checkpoint": "off", "phase": "data_load",
                  "energy_j": dl_shared, "source": "rapl"}]
    be = staging_breakeven(pd.DataFrame(rows), {"io": 2e9, "gpu": 2e9}, {"io": 2.0, "gpu": 2.0},
                           [1e9, 1e11])
    io = be[be["workload"] == "io"]
    # 240 J / (600 J / 2 epochs)
    assert io["breakeven_epochs"].tolist() == pytest.approx([0.8, 0.8])
    assert io["copy_energy_j"].tolist() == pytest.approx([120.0, 12000.0])
    assert np.isinf(be[be["workload"] == "gpu"]["breakeven_epochs"]).all()


def test_transfer_record_adds_window_network_bytes_and_server():
    r = transfer_record({"bytes": 10, "client": "http"}, 5, 9, {"recv": 100, "sent": 7},
                        {"recv": 160, "sent": 9}, "a.bin", "model", loopback=True,
                        transfers_at_once=0)
    assert r == {"bytes": 10, "client": "http", "start_ns": 5, "end_ns": 9, "name": "a.bin",
                 "kind": "model", "net_recv_bytes": 60, "net_sent_bytes": 2, "server": "loopback",
                 "transfers_at_once": None}  # 0: no limit, recorded as null
    r = transfer_record({}, 0, 1, {"recv": 0, "sent": 0}, {"recv": 0, "sent": 0}, "x", "dataset",
                        loopback=False)
    assert r["server"] == "remote" and "transfers_at_once" not in r


def test_staging_inputs_take_size_from_local_and_epochs_from_shared_cells():
    summaries = [{"dataset_bytes": 2e9, "epochs_run": 3}, {"epochs_run": 2}, {"epochs_run": 0}]
    cells = [{"workload": "io", "storage": "local"}, {"workload": "io", "storage": "shared"},
             {"workload": "gpu", "storage": "shared"}]
    assert staging_inputs(summaries, cells) == ({"io": 2e9}, {"io": 2})
    with pytest.raises(ValueError):
        staging_inputs(summaries, cells[:2])


def test_prepare_tables_without_a_phase_summary_has_no_staging_table():
    recs = [{"name": f"d{i}", "kind": "dataset", "bytes": b, "size_bytes": b, "seconds": b / 1e8,
             "start_ns": 10 * i, "end_ns": 10 * i + 5} for i, b in enumerate([1e9, 2e9, 4e9])]
    phases = [pd.DataFrame({"phase": ["download_dataset"], "device_kind": ["cpu"],
                            "energy_j": [30 + 1200 * r["bytes"] / 1e9], "energy_lo_j": [0.0],
                            "energy_hi_j": [0.0], "time_s": [r["seconds"]], "method": ["integrate"],
                            "source": ["estimate"]}) for r in recs]
    cat = pd.DataFrame([{"name": "big", "kind": "dataset", "size_bytes": 100e9}])
    tables = prepare_tables(recs, phases, cat, 50, 2)
    assert set(tables) == {"downloads.csv", "download_fit.csv", "facility_cache.csv"}
    assert tables["download_fit.csv"]["j_per_gb"].iloc[0] == pytest.approx(1200.0)
    assert (tables["downloads.csv"]["overlapping_transfers"] == 0).all()


def test_a_malformed_record_is_named_with_line_and_column(tmp_path):
    (tmp_path / "r.json").write_text('{"name": "a",\n "bytes": }')
    with pytest.raises(ValueError, match=r"r\.json:2:\d+: not a valid JSON record"):
        read_records([tmp_path / "r.json"])


def test_last_checkpoint_of_a_summary(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"checkpoints": ["c1", "c2"]}))
    assert last_checkpoint(tmp_path / "s.json") == "c2"
    (tmp_path / "e.json").write_text(json.dumps({"checkpoints": []}))
    with pytest.raises(FetchError, match="no checkpoint"):
        last_checkpoint(tmp_path / "e.json")


def test_fetch_and_upload_artefact_by_copy_name_client_and_direction(tmp_path):
    (tmp_path / "src.bin").write_bytes(b"x" * 10)
    r = fetch_artefact(tmp_path / "dl.bin", path=tmp_path / "src.bin")
    assert (r["client"], r["direction"]) == ("copy", "download")
    r = upload_artefact(tmp_path / "dl.bin", copy=tmp_path / "out.bin")
    assert (r["client"], r["direction"]) == ("copy", "upload")
    assert (tmp_path / "out.bin").read_bytes() == b"x" * 10
