# One image for every process, holding the release archive's folder (npm run release) and nothing else;
# docker-compose.yml picks the command: tserve gateway | tserve worker | tserve --help
# CPU build:  docker compose build
# CUDA build: docker compose build --build-arg ONNXRUNTIME_NODE_INSTALL=cuda12
#   (fetches ONNX Runtime's CUDA 12 provider libraries from NuGet at build time; running them also
#   needs CUDA 12 + cuDNN 9 libraries in the runtime image and the NVIDIA container toolkit).

FROM node:20-bookworm-slim AS build
WORKDIR /app
# Builds should not phone home (turbo's anonymous telemetry).
ENV TURBO_TELEMETRY_DISABLED=1

# onnxruntime-node's postinstall downloads the CUDA provider (~hundreds of MB) on linux/x64 unless
# told not to; CPU images skip it, a CUDA build passes cuda12.
ARG ONNXRUNTIME_NODE_INSTALL=skip
ENV ONNXRUNTIME_NODE_INSTALL=${ONNXRUNTIME_NODE_INSTALL}

# Manifests first, so the dependency layer is rebuilt only when a manifest or the lock changes.
# Every workspace's package.json must be here or `npm ci` finds the lock out of sync.
COPY package.json package-lock.json .npmrc ./
COPY packages/config/package.json packages/config/
COPY packages/contract/package.json packages/contract/
COPY packages/queue/package.json packages/queue/
COPY packages/telemetry/package.json packages/telemetry/
COPY apps/gateway/package.json apps/gateway/
COPY apps/worker/package.json apps/worker/
COPY apps/launcher/package.json apps/launcher/
RUN npm ci --no-audit --no-fund

COPY tsconfig.json tsconfig.base.json turbo.json ./
COPY packages packages
COPY apps apps
COPY scripts/release.ts scripts/
COPY scripts/release scripts/release
# The release archive's folder (scripts/release.ts): Node.js, the bundled programs and ONNX Runtime's
# native library for this platform, and nothing of node_modules beyond what cannot be bundled; the
# benches stay out (they are for hosts without Docker: docs/operations.md).
RUN npm run build && node --import tsx scripts/release.ts --unpacked --no-bench


FROM debian:bookworm-slim AS runtime
ENV NODE_ENV=production

# Owned by root and so read-only to the service user: a compromised process cannot alter the code.
COPY --from=build /app/release/tserve /opt/tserve
# tserve, and its node for what runs beside it (the healthcheck, docker compose run worker node -e ...).
ENV PATH=/opt/tserve/bin:/opt/tserve/node/bin:$PATH

# GPU=true: the Vulkan loader that onnxruntime-node's WebGPU execution provider (DEVICE=webgpu|gpu)
# needs to find an NVIDIA GPU; the driver itself comes from the host through the NVIDIA container
# runtime, which must expose its graphics (Vulkan) part too.
ARG GPU=false
RUN if [ "$GPU" = "true" ]; then \
      apt-get update \
   && apt-get install -y --no-install-recommends libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 \
   && rm -rf /var/lib/apt/lists/*; \
    fi
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics

# Workers download hub models into HF_HOME's cache (docs/models.md); the one writable path.
# A named volume mounted here inherits this ownership on first use.
ENV HF_HOME=/cache/huggingface
RUN mkdir -p /cache/huggingface \
 && chown 1000:1000 /cache/huggingface

# A user by number, so that runtimes can check it is not root (the build image's `node` user).
USER 1000:1000
EXPOSE 8000 8001
CMD ["tserve", "gateway"]
