#!/usr/bin/env bash
# The GPU benchmark: `npm run bench:gpu [-- MODELS_DIR]` on a host with an NVIDIA GPU, the Vulkan
# loader (README: GPU workers), Redis and Python with PyTorch. The replicas in ../shared/models are
# q8 only, so this first builds fp16 (and fp32) replicas of MiniLM-L6 and DistilBERT with
# ../shared/gpu/gen_model.py (real configs and tokenizers, random weights) into MODELS_DIR (default
# /tmp/tserve-gpu-models), then measures the whole system on DEVICE=webgpu against in-process
# pipe(list) on the same GPU: 16 and 128 tokens, c=1 and c=256. Device, dtype and batch sizes are in
# bench/results/gpu/latest.json.
# On a host with no npm, TSERVE names an unpacked release archive's bin/tserve (npm run release), which
# runs the same bench: TSERVE=/opt/tserve/bin/tserve bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/tserve-gpu-models}"
SRC="${SHARED_MODELS:-../shared/models}"
GEN="${GEN_MODEL:-../shared/gpu/gen_model.py}"
MODELS=(replica/MiniLM-L6-H384-uncased-sst2 replica/distilbert-base-uncased-finetuned-sst-2-english)
for model in "${MODELS[@]}"; do
  if [ ! -f "$OUT/$model/onnx/model_fp16.onnx" ]; then
    echo "bench:gpu: building $model (fp32, fp16) into $OUT"
    python3 "$GEN" "$SRC/$model" "$OUT/$model" fp32,fp16
  fi
done
export DEVICE="${DEVICE:-webgpu}" DTYPE="${DTYPE:-fp16}"
BENCH=(npm run bench --)
[ -n "${TSERVE:-}" ] && BENCH=("$TSERVE" bench)
exec "${BENCH[@]}" --model-dir "$OUT" --models "$(IFS=,; echo "${MODELS[*]}")" \
  --lengths 16,128 --concurrency 1,256 --skip mixed,soak --out bench/results/gpu "${@:2}"
