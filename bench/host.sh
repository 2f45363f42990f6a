#!/usr/bin/env bash
# The big-host run (bench/README.md, "From the release archive"): on a host with no npm, from an
# unpacked release archive, everything the scale-out and GPU targets are judged on, in one command:
#   TSERVE=/opt/tserve/bin/tserve bash bench/host.sh [OUT_DIR]
# 1. fp32 and fp16 replicas of MiniLM-L6 and DistilBERT built with ../shared/gpu/gen_model.py, and a
#    q8 MiniLM-L6 from the fp32 one (scripts/q8-from-fp32.py), since the replicas' weights are large;
# 2. the single-process peer's best (bench/peer.py at all cores and at half), and what the host
#    gives N copies of it run at once (k = 2 and k = 1): the host's own scaling, with no server;
# 3. bench-scale at k = 2 and k = 1 (THREADS="2 1"), N = 1, 2, 4 … (JSON into OUT_DIR);
# 4. where nvidia-smi finds a GPU and NO_GPU is unset, the GPU bench (bench/gpu.sh, --quick).
# Needs redis-server on PATH, python3 with torch, transformers, onnx, onnxruntime and tokenizers, the
# replicas' configs and tokenizers (SHARED_MODELS, default ../shared/models) and, for the GPU, the
# Vulkan loader (docs/operations.md, "GPU workers").
set -euo pipefail
cd "$(dirname "$0")/.."
export TSERVE="${TSERVE:?TSERVE must name bin/tserve in an unpacked release archive}"
OUT_DIR="${1:-/tmp/tserve-host}"
SRC="${SHARED_MODELS:-../shared/models}"
GEN="${GEN_MODEL:-../shared/gpu/gen_model.py}"
FLOAT=/tmp/tserve-gpu-models Q8=/tmp/tserve-q8-models
MINILM=replica/MiniLM-L6-H384-uncased-sst2
DISTILBERT=replica/distilbert-base-uncased-finetuned-sst-2-english
CORES=$(nproc)
mkdir -p "$OUT_DIR"

builds=()
for model in $MINILM $DISTILBERT; do
  python3 "$GEN" "$SRC/$model" "$FLOAT/$model" fp32,fp16 > "$OUT_DIR/build-${model#replica/}.log" 2>&1 &
  builds+=($!)
done
wait "${builds[@]}"
grep -h -E '^(fp32|fp16):' "$OUT_DIR"/build-*.log
mkdir -p "$Q8/$MINILM/onnx"
cp "$SRC/$MINILM"/*.json "$Q8/$MINILM/"
python3 scripts/q8-from-fp32.py "$FLOAT/$MINILM/onnx/model.onnx" "$Q8/$MINILM/onnx/model_quantized.onnx" 2>&1 | grep '^q8:'

echo "== the single-process peer's best, then N copies at once (k threads each)"
python3 bench/peer.py "$Q8/$MINILM" "$CORES"
python3 bench/peer.py "$Q8/$MINILM" $((CORES / 2))
for kn in "2 1" "2 $((CORES / 4))" "2 $((CORES / 2))" "1 1" "1 $((CORES / 2))" "1 $CORES"; do
  read -r k n <<< "$kn"
  [ "$n" -ge 1 ] || continue
  start=$(($(date +%s) + 4)) copies=()
  for i in $(seq "$n"); do
    python3 bench/peer.py "$Q8/$MINILM" "$k" "$start" > "/tmp/tserve-peer.$i" &
    copies+=($!)
  done
  wait "${copies[@]}"
  for tokens in 16 128; do
    cat /tmp/tserve-peer.* | awk -v k="$k" -v n="$n" -v t="$tokens" '$0 ~ " " t " tokens" { s += $(NF - 1) }
      END { printf "peer x %d at once, %d thread(s) each, %d tokens: %.0f seq/s in all\n", n, k, t, s }'
  done
  rm -f /tmp/tserve-peer.*
done

echo "== bench-scale"
for k in ${THREADS:-2 1}; do
  MODEL_DIR="$Q8" "$TSERVE" bench-scale --threads "$k" --json "$OUT_DIR/scale-k$k.json"
done

if [ -z "${NO_GPU:-}" ] && nvidia-smi -L > /dev/null 2>&1; then
  echo "== GPU"
  nvidia-smi -L
  bash bench/gpu.sh "$FLOAT" --quick --skip mixed,soak,varied
  cp bench/results/gpu/latest.json "$OUT_DIR/gpu.json"
fi
