import hashlib
import os

import pytest

from loopback import LoopbackServer
from wattlife.prepare.fetch import FetchError, fetch_http, fetch_path

BLOB = os.urandom(3 * 1024 * 1024 + 123)
SHA = hashlib.sha256(BLOB).hexdigest()


def test_download_verifies_and_promotes_atomically(tmp_path):
    with LoopbackServer({"/a.bin": BLOB}) as srv:
        r = fetch_http(srv.url + "/a.bin", tmp_path / "a.bin", sha256=SHA, progress=False)
        assert (tmp_path / "a.bin").read_bytes() == BLOB and r["bytes"] == len(BLOB)
        assert not (tmp_path / "a.bin.part").exists()
        again = fetch_http(srv.url + "/a.bin", tmp_path / "a.bin", sha256=SHA, progress=False)
        assert again["skipped"] and len(srv.requests) == 1  # present and verified: nothing done
        fetch_http(srv.url + "/a.bin", tmp_path / "a.bin", sha256=SHA, force=True, progress=False)
        assert len(srv.requests) == 2


def test_connection_reset_mid_file_resumes_with_range(tmp_path):
    with LoopbackServer({"/b.bin": BLOB}, reset_after={"/b.bin": 1_000_000}) as srv:
        r = fetch_http(srv.url + "/b.bin", tmp_path / "b.bin", sha256=SHA, backoff_s=0.01,
                       progress=False)
        assert r["resumed"] and r["attempts"] == 2
        assert srv.requests[1][1] == "bytes=1000000-"
        assert (tmp_path / "b.bin").read_bytes() == BLOB


def test_checksum_mismatch_is_never_promoted(tmp_path):
    with LoopbackServer({"/c.bin": BLOB}) as srv:
        with pytest.raises(FetchError, match="sha256 mismatch"):
            fetch_http(srv.url + "/c.bin", tmp_path / "c.bin", sha256="0" * 64, progress=False)
    assert not (tmp_path / "c.bin").exists() and not (tmp_path / "c.bin.part").exists()


def test_404_is_final_and_named(tmp_path):
    with LoopbackServer({}) as srv:
        with pytest.raises(FetchError, match=r"/missing.bin: HTTP 404"):
            fetch_http(srv.url + "/missing.bin", tmp_path / "m.bin", progress=False)
        assert len(srv.requests) == 1  # not retried


def test_unreachable_server_gives_up_and_keeps_nothing_promoted(tmp_path):
    with pytest.raises(FetchError, match="gave up after 2 attempts"):
        fetch_http("http://127.0.0.1:9/x", tmp_path / "x", retries=1, backoff_s=0.01,
                   progress=False)
    assert not (tmp_path / "x").exists()


def test_rate_limited_transfer_is_network_bound(tmp_path):
    with LoopbackServer({"/d.bin": BLOB[:512 * 1024]}, rate_bps=2 * 1024 * 1024) as srv:
        r = fetch_http(srv.url + "/d.bin", tmp_path / "d.bin", progress=False)
    assert r["seconds"] >= 0.2  # 512 KiB at 2 MiB/s


def test_local_copy_of_a_folder(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("x" * 100)
    r = fetch_path(src, tmp_path / "dst")
    assert (tmp_path / "dst" / "sub" / "f.txt").read_text() == "x" * 100 and r["bytes"] == 100
    assert fetch_path(src, tmp_path / "dst")["skipped"]
    with pytest.raises(FetchError, match="no such file"):
        fetch_path(tmp_path / "nope", tmp_path / "d2")


def test_fetch_command_marks_a_download_phase(tmp_path, monkeypatch, capsys):
    from wattlife import markers
    from wattlife.cli import main
    from wattlife.contracts import read_events

    markers.configure(tmp_path / "events.csv")
    with LoopbackServer({"/m.bin": BLOB[:1000]}) as srv:
        assert main(["fetch", "--url", srv.url + "/m.bin", "-o", str(tmp_path / "m.bin"),
                     "--kind", "model"]) == 0
    markers.reset()
    assert read_events(tmp_path / "events.csv")["phase"].tolist() == ["download_model"]
    assert '"bytes": 1000' in capsys.readouterr().out


def test_huggingface_client_end_to_end_against_a_loopback_hub(tmp_path, monkeypatch):
    """The real `snapshot_download` against the Hub routes it uses, served on 127.0.0.1."""
    from loopback import HubServer
    from wattlife.prepare.fetch import fetch_hf

    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    model = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": os.urandom(200_000)}
    data = {"train.txt": b"hello world\n" * 1000, "sub/validation.txt": b"bye\n" * 10}
    with HubServer({("model", "org/tiny"): model, ("dataset", "org/text"): data}) as hub:
        r = fetch_hf("org/tiny", tmp_path / "m", endpoint=hub.url)
        assert (tmp_path / "m" / "model.safetensors").read_bytes() == model["model.safetensors"]
        assert r["files"] == 2 and r["size_bytes"] == sum(map(len, model.values()))
        d = fetch_hf("org/text", tmp_path / "d", repo_type="dataset", endpoint=hub.url)
        got = (tmp_path / "d" / "sub" / "validation.txt").read_bytes()
        assert got == data["sub/validation.txt"]
        assert d["files"] == 2
        assert any("/resolve/" in q for q in hub.requests)
        with pytest.raises(FetchError, match="not found"):
            fetch_hf("org/nope", tmp_path / "n", endpoint=hub.url)
