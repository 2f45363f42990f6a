"""Compact vectors computed with numpy alone, as docs/api/cohere.md defines them, for the tests.

Reads a JSON list of float vectors (argv[1], or stdin when absent); prints each type's vectors as
JSON. binary and ubinary pack the sign bits as sentence-transformers' quantize_embeddings does
(np.packbits of > 0; binary is that less 128, as int8), one vector at a time (axis -1).
"""
import base64
import json
import sys

import numpy as np

vectors = [np.asarray(v, dtype=np.float64) for v in json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())]


def types(v):
    clipped = np.clip(v, -1.0, 1.0)
    ubinary = np.packbits(v > 0, axis=-1)
    return {
        "float": v.tolist(),
        "int8": np.floor(clipped * 127 + 0.5).astype(np.int8).tolist(),
        "uint8": np.floor((clipped + 1) * 127.5 + 0.5).astype(np.uint8).tolist(),
        "ubinary": ubinary.tolist(),
        "binary": (ubinary.astype(np.int16) - 128).astype(np.int8).tolist(),
        "base64": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode(),
    }


each = [types(v) for v in vectors]
print(json.dumps({name: [t[name] for t in each] for name in ("float", "int8", "uint8", "ubinary", "binary", "base64")}))
