"""Reads the records of an offline W&B run file (`run-<id>.wandb`): wandb 0.31 has no Python
reader (its core is in Go). The format is LevelDB's log: a 7-byte header, then 32 KiB blocks of
chunks (4-byte CRC, 2-byte length, 1-byte type: full / first / middle / last)."""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK, HEADER, CHUNK_HEADER = 32768, 7, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    out, buf, pos = [], b"", HEADER
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind in (FULL, FIRST):
            buf = chunk
        elif kind in (MIDDLE, LAST):
            buf += chunk
        else:  # zero padding
            continue
        if kind in (FULL, LAST):
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
    return out
