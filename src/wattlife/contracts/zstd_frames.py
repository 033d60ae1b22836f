"""A compressed trace that a kill cannot spoil: CSV in zstd, one independent zstd frame per flush
(`trace.csv.zst`). Concatenated frames are one ordinary zstd file (`zstd -d`, pyarrow and
pandas read it); a writer killed mid-frame leaves a cut last frame, which `FrameReader` drops
(every row of an earlier flush stays readable), where a plain zstd decoder would fail on the
whole file. Only pyarrow is needed (its zstd codec); it is imported inside the functions."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from pathlib import Path

from ..errors import ContractError

ZSTD_SUFFIX = ".zst"
ZSTD_LEVEL = 3
_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # 0x184D2A50..0x184D2A5F: skippable frames (4-byte length follows)


def compress_frame(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    """One complete zstd frame holding `data` (with its content size, so it decodes alone)."""
    import pyarrow as pa

    return bytes(pa.Codec("zstd", compression_level=level).compress(data, asbytes=True))


def _frame_header(head: bytes) -> tuple[int, int]:
    """(header length, content size or -1) of a zstd frame from its first up to 18 bytes."""
    fhd = head[4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    did = (0, 1, 2, 4)[fhd & 3]
    fcs = (1 if single else 0, 2, 4, 8)[fcs_flag]
    n = 5 + (0 if single else 1) + did
    if fcs == 0:
        return n + fcs, -1
    size = int.from_bytes(head[n:n + fcs], "little") + (256 if fcs == 2 else 0)
    return n + fcs, size


_NOT_ZSTD = (-1, -1)


def _frame_span(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(end offset, content size or -1) of the frame starting at `pos` of `buf`; None when
    `buf` ends before the frame does; `_NOT_ZSTD` when no frame starts there (read as cut by a
    kill). Works on bytes in memory: a trace holds one frame per 0.5 s, 170 k a day."""
    if len(buf) - pos < 8:
        return None
    magic = struct.unpack_from("<I", buf, pos)[0]
    if magic & 0xFFFFFFF0 == _SKIPPABLE:
        stop = pos + 8 + struct.unpack_from("<I", buf, pos + 4)[0]
        return (stop, 0) if stop <= len(buf) else None
    if magic != _MAGIC:
        return _NOT_ZSTD
    head = buf[pos:pos + 18]
    hlen, size = _frame_header(head)
    if len(head) < hlen:
        return None
    p = pos + hlen
    checksum = (head[4] >> 2) & 1
    while True:
        if p + 3 > len(buf):
            return None
        h = int.from_bytes(buf[p:p + 3], "little")
        p += 3 + (1 if (h >> 1) & 3 == 1 else h >> 3)
        if h & 1:
            break
    p += 4 * checksum
    return (p, size) if p <= len(buf) else None


class FrameReader(io.RawIOBase):
    """The decompressed bytes of a `.zst` file, frame by frame, without a cut last frame (a
    killed writer's); `cut_bytes` says how many compressed bytes were left out. Reads the file
    in blocks of `READ_BYTES`, finds the whole frames in memory and decompresses a run of them
    in one call (one call per 0.5 s frame cost a day's trace ~15 s)."""

    READ_BYTES = 1 << 22

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._fh = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        self._cbuf = b""  # compressed bytes read, from the next frame on
        self._cpos = 0  # offset of `_cbuf[0]` in the file
        self._eof = False
        self._done = False  # every whole frame read (the rest, if any, in `cut_bytes`)
        self._buf = b""
        self.cut_bytes = 0

    def readable(self) -> bool:
        return True

    def _frames(self, want: int) -> list[tuple[int, int, int]]:
        """(start, end, content size) in `_cbuf` of whole frames holding about `want`
        decompressed bytes (all the whole frames left, at the end); reads the file as needed
        and sets `cut_bytes` once only a cut frame is left."""
        out: list[tuple[int, int, int]] = []
        pos, have = 0, 0
        while have < want:
            found = _frame_span(self._cbuf, pos)
            if found is None or found == _NOT_ZSTD:
                if self._eof or found == _NOT_ZSTD:
                    self.cut_bytes, self._done = len(self._cbuf) - pos, True
                    break
                more = self._fh.read(max(self.READ_BYTES, want // 4))
                self._eof = not more
                self._cbuf += more
                continue
            stop, size = found
            out.append((pos, stop, size))
            have += size if size >= 0 else want  # an unknown size: decoded alone
            pos = stop
        return out

    def _decode(self, frames: list[tuple[int, int, int]]) -> bytes:
        """The frames' content: in one call when every size is known, else frame by frame."""
        import pyarrow as pa

        sizes = [size for _, _, size in frames]
        if frames and min(sizes) >= 0:
            try:
                return bytes(pa.decompress(self._cbuf[frames[0][0]:frames[-1][1]],
                                           decompressed_size=sum(sizes), codec="zstd",
                                           asbytes=True))
            except (OSError, ValueError):
                pass  # find the frame that is not readable, and say so
        return b"".join(self._one(a, b, size) for a, b, size in frames)

    def _one(self, a: int, b: int, size: int) -> bytes:
        import pyarrow as pa

        raw = self._cbuf[a:b]
        if size == 0 and raw[:4] != struct.pack("<I", _MAGIC):
            return b""  # a skippable frame
        try:
            if size >= 0:
                return bytes(pa.decompress(raw, decompressed_size=size, codec="zstd",
                                           asbytes=True))
            result: bytes = pa.input_stream(pa.BufferReader(raw), compression="zstd").read()
            return result
        except (OSError, ValueError) as exc:
            raise ContractError(f"{self.path}: zstd frame at byte {self._cpos + a} is not "
                                f"readable ({exc})") from None

    def _next_run(self, want: int) -> bytes | None:
        """The content of the next whole frames (about `want` bytes); None once all are read."""
        if self._done:
            return None
        frames = self._frames(max(want, 1))
        data = self._decode(frames)
        stop = len(self._cbuf) if self._done else frames[-1][1]
        self._cbuf, self._cpos = self._cbuf[stop:], self._cpos + stop
        return data

    def runs(self, want: int) -> Iterator[bytes]:
        """The file's content as runs of whole frames of about `want` bytes each (a run holds a
        frame's bytes as written: whole lines only where the writer flushed whole lines)."""
        while (data := self._next_run(want)) is not None:
            if data:
                yield data

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        if len(self._buf) < len(b):
            data = self._next_run(len(b) - len(self._buf)) or b""
            self._buf = self._buf + data if self._buf else data
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def readall(self) -> bytes:
        """Every whole frame's content, decoded in runs of 16 MiB (not 8 KiB reads)."""
        parts = []
        while chunk := self.read(1 << 24):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self._fh.close()
        super().close()


class FrameWriter:
    """Appends text to a `.zst` file, one zstd frame per `flush` (what the sampler's 0.5 s flush
    writes): a kill loses at most the rows not flushed yet."""

    def __init__(self, fh: io.BufferedWriter | io.FileIO, level: int = ZSTD_LEVEL) -> None:
        self._fh = fh
        self._level = level
        self._pending: list[bytes] = []

    def write(self, text: str) -> None:
        self._pending.append(text.encode())

    def flush(self) -> None:
        if self._pending:
            self._fh.write(compress_frame(b"".join(self._pending), self._level))
            self._pending.clear()
        self._fh.flush()

    def close(self) -> None:
        self.flush()
        self._fh.close()
