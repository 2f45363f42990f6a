"""The single-process peer's best case: one Python process, one onnxruntime session of THREADS
threads, tokenizing and running batches of 32 back to back, with no HTTP and no queue. It is what a
Starlette server with a batching deadline could answer at most, the figure bench:scale's target
compares with (bench/README.md, "Workers of one model").

    python3 bench/peer.py <model folder with onnx/model_quantized.onnx> THREADS [START]

START (epoch seconds) lets several copies started at once measure the same windows: 16 tokens in
[START, START + 4), 128 tokens in [START + 6, START + 10). bench/host.sh runs N copies that way to
show what the host itself gives N busy processes, with no server involved.
"""
import os
import sys
import time

import onnxruntime as ort
from onnx_feed import feed_of
from tokenizers import Tokenizer

model_dir, threads = sys.argv[1], int(sys.argv[2])
start = float(sys.argv[3]) if len(sys.argv) > 3 else None
tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(
    os.path.join(model_dir, "onnx", "model_quantized.onnx"), options, providers=["CPUExecutionProvider"]
)
inputs = {i.name for i in session.get_inputs()}
words = "the quick brown fox jumps over the lazy dog and keeps running far away".split()

for tokens in (16, 128):
    tokenizer.enable_truncation(tokens)
    tokenizer.enable_padding()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(tokens)) for i in range(32)]

    def batch() -> None:
        session.run(None, feed_of(tokenizer, texts, inputs))

    for _ in range(3):
        batch()
    if start is not None:
        while time.time() < start + (0 if tokens == 16 else 6):
            batch()
    sequences, began = 0, time.perf_counter()
    while time.perf_counter() - began < 4:
        batch()
        sequences += 32
    rate = sequences / (time.perf_counter() - began)
    print(f"peer: onnxruntime {ort.__version__}, {threads} threads, batches of 32 at {tokens} tokens: {rate:.0f} seq/s", flush=True)
