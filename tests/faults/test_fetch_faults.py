"""fetch faults: a malformed --sha256 is refused before any byte is requested; a destination that
is an existing directory is an error, not a silent exit 0; a skipped fetch says so."""

import hashlib
import json

import pytest

from wattlife.cli import main
from wattlife.prepare.serve import ArtefactServer

BODY = b"x" * 100_000
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def server():
    with ArtefactServer(files={"/a.bin": BODY}) as srv:
        yield srv


@pytest.mark.parametrize("bad", ["zz", SHA[:-1], SHA + "0", "g" * 64, ""])
def test_a_malformed_sha256_is_refused_before_downloading(tmp_path, server, capsys, bad):
    """Before: noticed only after the whole download."""
    with pytest.raises(SystemExit) as exc:
        main(["fetch", "--url", server.url + "/a.bin", "--sha256", bad, "-o", str(tmp_path / "a")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--sha256: expected 64 hexadecimal characters" in err
    assert server.requests == []  # nothing was requested
    assert list(tmp_path.iterdir()) == []


def test_a_well_formed_sha256_in_capitals_is_accepted(tmp_path, server):
    assert main(["fetch", "--url", server.url + "/a.bin", "--sha256", SHA.upper(), "-o",
                 str(tmp_path / "a"), "--record", str(tmp_path / "r.json")]) == 0
    assert (tmp_path / "a").read_bytes() == BODY
    assert json.loads((tmp_path / "r.json").read_text())["bytes"] == len(BODY)


def test_fetch_onto_an_existing_directory_fails(tmp_path, server, capsys):
    """Before: exit 0 having done nothing (the directory 'existed', so the fetch was skipped)."""
    (tmp_path / "dl").mkdir()
    assert main(["fetch", "--url", server.url + "/a.bin", "-o", str(tmp_path / "dl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{tmp_path / 'dl'}: is a directory; give the file's path, e.g. "
                        f"{tmp_path / 'dl' / 'a.bin'}") and "Traceback" not in err
    assert server.requests == [] and list((tmp_path / "dl").iterdir()) == []


def test_fetch_of_a_file_path_onto_a_directory_fails(tmp_path, capsys):
    (tmp_path / "src.bin").write_bytes(BODY)
    (tmp_path / "dl").mkdir()
    assert main(["fetch", "--path", str(tmp_path / "src.bin"), "-o", str(tmp_path / "dl")]) == 2
    assert "dl: is a directory and" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["path", "upload"])
def test_a_destination_written_as_a_folder_is_one_even_before_it_exists(tmp_path, capsys, how):
    """`out/` (trailing separator, no such folder yet) means a folder: refused with the file
    path to give, as an existing folder is, never written as a file named `out`."""
    (tmp_path / "src.bin").write_bytes(BODY)
    dest = str(tmp_path / "out") + "/"
    args = (["fetch", "--path", str(tmp_path / "src.bin"), "-o", dest] if how == "path" else
            ["upload", str(tmp_path / "src.bin"), "--copy", dest])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "out: is a directory and" in err and str(tmp_path / "out" / "src.bin") in err
    assert not (tmp_path / "out").exists()


def test_a_url_fetch_to_a_path_written_as_a_folder_fails(tmp_path, server, capsys):
    dest = str(tmp_path / "dl") + "/"
    assert main(["fetch", "--url", server.url + "/a.bin", "-o", dest]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'dl' / 'a.bin'}")
    assert server.requests == [] and not (tmp_path / "dl").exists()


def test_a_skipped_fetch_says_so(tmp_path, server, capsys):
    args = ["fetch", "--url", server.url + "/a.bin", "--sha256", SHA, "-o", str(tmp_path / "a")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    assert "already there" in capsys.readouterr().err
    assert len(server.requests) == 1  # the second run verified the file and fetched nothing
