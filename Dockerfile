# One image for every process; docker-compose.yml picks the command:
#   node apps/gateway/dist/main.js | node apps/worker/dist/main.js | node apps/launcher/dist/main.js --help
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
RUN npm run build

# Only what `node apps/*/dist/main.js` needs: no dev dependencies, sources, build caches, or the
# ONNX Runtime binaries of other platforms (about 220 MB of darwin/win32/other-arch libraries).
RUN npm prune --omit=dev --no-audit --no-fund \
 && rm -rf .turbo apps/*/.turbo packages/*/.turbo apps/*/src packages/*/src \
           apps/*/tsconfig*.json packages/*/tsconfig*.json apps/*/dist/.tsbuildinfo packages/*/dist/.tsbuildinfo \
 && ORT_BIN=node_modules/onnxruntime-node/bin/napi-v6 \
 && KEEP="$(node -p 'process.platform + "/" + process.arch')" \
 && test -e "$ORT_BIN/$KEEP/onnxruntime_binding.node" \
 && mv "$ORT_BIN/$KEEP" /tmp/ort-keep && rm -rf "$ORT_BIN"/* \
 && mkdir -p "$ORT_BIN/$(dirname "$KEEP")" && mv /tmp/ort-keep "$ORT_BIN/$KEEP"


FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app

# Owned by root and so read-only to the service user: a compromised process cannot alter the code.
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/packages packages
COPY --from=build /app/apps apps

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

# The base image's `node` user, by number so that runtimes can check it is not root.
USER 1000:1000
EXPOSE 8000
CMD ["node", "apps/gateway/dist/main.js"]
