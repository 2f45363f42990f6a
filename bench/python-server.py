"""The server our users would otherwise write: the Hugging Face "pipelines for a webserver" guide's
Starlette server, written well. One process; `POST /` takes a text as its whole body and answers what
a transformers `pipeline(text)` of a text classifier answers, `[{"label", "score"}]`. Requests are
gathered into batches with a 1 ms deadline, as the guide's dynamic batching does; a batch is
tokenized with Hugging Face `tokenizers` (Rust) and run with onnxruntime on the model's own
`onnx/model_quantized.onnx`, in a thread beside the event loop, so that requests keep arriving while
the model runs. uvicorn serves it with uvloop and httptools, its access log off.

    python3 bench/python-server.py <model folder> <port> [threads]

Needs starlette, uvicorn, uvloop, httptools, onnxruntime, tokenizers and numpy. bench/python.ts runs
it beside tserve.
"""
import asyncio
import contextlib
import json
import os
import sys

import numpy as np
import onnxruntime as ort
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from onnx_feed import feed_of
from tokenizers import Tokenizer

model_dir, port = sys.argv[1], int(sys.argv[2])
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 0  # 0: onnxruntime's own choice, every core
DEADLINE_S = 0.001
MAX_BATCH = 32

config = json.load(open(os.path.join(model_dir, "config.json")))
labels = {int(k): v for k, v in config["id2label"].items()}
tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
tokenizer.enable_truncation(min(512, config.get("max_position_embeddings", 512)))
tokenizer.enable_padding()
options = ort.SessionOptions()
options.intra_op_num_threads = threads
session = ort.InferenceSession(
    os.path.join(model_dir, "onnx", "model_quantized.onnx"), options, providers=["CPUExecutionProvider"]
)
inputs = {i.name for i in session.get_inputs()}


def classify(texts: list[str]) -> list[list[dict]]:
    (logits,) = session.run(["logits"], feed_of(tokenizer, texts, inputs))
    if logits.shape[1] == 1:
        scores = 1 / (1 + np.exp(-logits))
    else:
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores = shifted / shifted.sum(axis=1, keepdims=True)
    best = scores.argmax(axis=1)
    return [[{"label": labels[int(b)], "score": float(s[b])}] for b, s in zip(best, scores)]


async def batches(queue: asyncio.Queue) -> None:
    loop = asyncio.get_running_loop()
    while True:
        first = await queue.get()
        batch = [first]
        until = loop.time() + DEADLINE_S
        while len(batch) < MAX_BATCH:
            left = until - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), left))
            except asyncio.TimeoutError:
                break
        try:
            answers = await loop.run_in_executor(None, classify, [text for text, _ in batch])
            for (_, answered), answer in zip(batch, answers):
                answered.set_result(answer)
        except Exception as err:  # a failed batch fails its requests, never the loop
            for _, answered in batch:
                answered.set_exception(err)


async def classify_route(request: Request) -> JSONResponse:
    text = (await request.body()).decode("utf-8")
    answered = asyncio.get_running_loop().create_future()
    await request.app.state.queue.put((text, answered))
    return JSONResponse(await answered)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette):
    app.state.queue = asyncio.Queue()
    task = asyncio.create_task(batches(app.state.queue))
    yield
    task.cancel()


app = Starlette(routes=[Route("/", classify_route, methods=["POST"])], lifespan=lifespan)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False)
