"""A compressed trace that a kill cannot spoil: CSV in zstd, one independent zstd frame per flush
(`trace.csv.zst`). Concatenated frames are one ordinary zstd file (`zstd -d`, pyarrow and
pandas read it); a writer killed mid-frame leaves a cut last frame, which `FrameReader` drops
(every row of an earlier flush stays readable), where a plain zstd decoder would fail on the
whole file. Only pyarrow is needed (its zstd codec); it is imported inside the functions."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

from .names import ContractError

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


def _frame_end(fh: io.BufferedReader, pos: int, end: int) -> tuple[int, int] | None:
    """(end offset, content size or -1) of the frame starting at `pos`, or None if it runs past
    `end` (cut by a kill) or is not a zstd frame."""
    fh.seek(pos)
    head = fh.read(18)
    if len(head) < 8:
        return None
    magic = struct.unpack_from("<I", head)[0]
    if magic & 0xFFFFFFF0 == _SKIPPABLE:
        stop = pos + 8 + struct.unpack_from("<I", head, 4)[0]
        return (stop, 0) if stop <= end else None
    if magic != _MAGIC:
        return None
    hlen, size = _frame_header(head)
    p = pos + hlen
    checksum = (head[4] >> 2) & 1
    while True:
        fh.seek(p)
        b = fh.read(3)
        if len(b) < 3:
            return None
        h = int.from_bytes(b, "little")
        btype, bsize = (h >> 1) & 3, h >> 3
        p += 3 + (1 if btype == 1 else bsize)
        if h & 1:
            break
    p += 4 * checksum
    return (p, size) if p <= end else None


class FrameReader(io.RawIOBase):
    """The decompressed bytes of a `.zst` file, frame by frame, without a cut last frame (a
    killed writer's); `cut_bytes` says how many compressed bytes were left out."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._fh = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        self._end = os.fstat(self._fh.fileno()).st_size
        self._pos = 0
        self._buf = b""
        self.cut_bytes = 0

    def readable(self) -> bool:
        return True

    def _next_frame(self) -> bytes | None:
        import pyarrow as pa

        if self._pos >= self._end:
            return None
        found = _frame_end(self._fh, self._pos, self._end)
        if found is None:
            self.cut_bytes = self._end - self._pos
            self._pos = self._end
            return None
        stop, size = found
        self._fh.seek(self._pos)
        raw = self._fh.read(stop - self._pos)
        self._pos = stop
        if size == 0 and raw[:4] != struct.pack("<I", _MAGIC):
            return b""  # a skippable frame
        try:
            if size >= 0:
                return bytes(pa.decompress(raw, decompressed_size=size, codec="zstd",
                                           asbytes=True))
            return pa.input_stream(pa.BufferReader(raw), compression="zstd").read()
        except (OSError, ValueError) as exc:
            raise ContractError(f"{self.path}: zstd frame at byte {stop - len(raw)} is not "
                                f"readable ({exc})") from None

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        parts = [self._buf]
        have = len(self._buf)
        while have < len(b):  # whole frames until the request is filled (or the end)
            frame = self._next_frame()
            if frame is None:
                break
            parts.append(frame)
            have += len(frame)
        self._buf = b"".join(parts)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

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
