"""Sends an image through the official TypeSafe Python SDK's multipart transport.

Run by tests/live/images.rs as `$SYSTEMONE_PYTHON tests/sdk/image_multipart.py`, with
TYPESAFE_BASE_URL pointing at a systemone service in front of a fake vision backend and
TYPESAFE_API_KEY set (the SDK refuses to start without one). Like any SDK user it puts an
`Image` inside the state; the SDK then sends `multipart/form-data`: a `request` part with
the JSON body (its `assets` map names the part) and an `asset-0` part with the raw bytes,
zstd-compressed as a whole when the body is 1 KiB or more.

It prints one JSON object on stdout: the bytes it sent (base64), the reference string the
SDK put in the state, whether the body was large enough to be compressed, and the answers.
"""

import base64
import json
import random
import struct
import sys
import zlib

from typesafe_sdk import Choice, Image, Noul, RetryPolicy, TypeSafeClient
from typesafe_sdk._core.compression import COMPRESSORS, MIN_COMPRESSED_BODY_LENGTH


def png(width, height, seed):
    """A valid RGB PNG of noise (noise keeps it from compressing below 1 KiB)."""
    rng = random.Random(seed)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    rows = b"".join(b"\0" + bytes(rng.randrange(256) for _ in range(width * 3)) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


data = png(24, 24, seed=5)
photo = Image(data)

with TypeSafeClient(timeout=30.0, retry=RetryPolicy(max_retries=0)) as client:
    r = client.system_one(
        state={"photo": photo, "note": "A customer sent this picture of the parcel."},
        questions={
            "damaged": Noul(instructions="Is the parcel in the picture damaged?"),
            "kind": Choice(
                instructions="What does the picture show?",
                criteria={"parcel": None, "letter": None, "other": None},
            ),
        },
    )
    print(
        json.dumps(
            {
                "image_base64": base64.b64encode(data).decode(),
                "image_bytes": len(data),
                "reference": str(photo),
                "zstd_available": "zstd" in COMPRESSORS,
                "min_compressed": MIN_COMPRESSED_BODY_LENGTH,
                "request_id": r.request_id,
                "model": r.model,
                "noul": r.nouls["damaged"].noul,
                "choice": r.choices["kind"].choice,
                "raw": r.raw_http_response.json(),
            }
        ),
        flush=True,
    )

sys.exit(0)
