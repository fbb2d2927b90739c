#!/usr/bin/env bash
# Builds deploy/Dockerfile where no Docker daemon runs (this project's 2-core Debian machines):
# with buildah (Debian's package) in chroot isolation on the vfs storage driver, from a
# bookworm base image made with debootstrap from Debian's registry, since Docker Hub may not be
# reachable. Then runs the image's entrypoint on examples/models and checks that it serves.
# CPU only (VRAMD_CUDA=0): the CUDA stage needs NVIDIA's apt repository.
#   bash deploy/build_without_docker.sh            # as root; about 30 min on 2 cores
# Environment: VRAMD_IMAGE (vramd-cpu), VRAMD_CMAKE_ARGS (passed to the build stage).
set -euo pipefail
cd "$(dirname "$0")/.."
image="${VRAMD_IMAGE:-vramd-cpu}"
mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
command -v buildah > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah > /dev/null
command -v debootstrap > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
step() { echo "== $(date -u +%H:%M:%S) $*"; }

# The base images the Dockerfile names, made locally unless present.
if ! buildah images --format '{{.Name}}:{{.Tag}}' | grep -q 'debian:bookworm$'; then
  step "debootstrap bookworm (minbase) from $mirror"
  rootfs="$(mktemp -d)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > /tmp/debootstrap.log 2>&1 \
    || { tail -20 /tmp/debootstrap.log; exit 1; }
  cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/" 2>/dev/null || true
  rm -f "$rootfs/etc/apt/sources.list"
  ctr="$(buildah from scratch)"
  mnt="$(buildah mount "$ctr")"
  cp -a "$rootfs"/. "$mnt"/
  buildah umount "$ctr" > /dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr"
  buildah commit -q "$ctr" docker.io/library/debian:bookworm > /dev/null
  buildah tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
  buildah rm "$ctr" > /dev/null
  rm -rf "$rootfs"
fi

if [ "${VRAMD_SKIP_BUILD:-0}" != 1 ]; then
  step "buildah bud -f deploy/Dockerfile --build-arg VRAMD_CUDA=0 -t $image"
  start=$(date +%s)
  buildah bud --pull=false --layers -f deploy/Dockerfile --build-arg VRAMD_CUDA=0 \
    --build-arg VRAMD_CMAKE_ARGS="${VRAMD_CMAKE_ARGS:-}" -t "$image" . > /tmp/buildah-bud.log 2>&1 \
    || { tail -40 /tmp/buildah-bud.log; exit 1; }
  step "built in $(( $(date +%s) - start )) s"
fi
buildah images "$image"
buildah inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}' "$image"

step "serving examples/models with the image's entrypoint"
ctr="$(buildah from "$image")"
port=18000
# chroot isolation shares the host's network: the server's ports are the host's.
buildah run --user 1000:1000 -v "$PWD/examples/models:/models:ro" "$ctr" -- \
  /usr/local/bin/vramd serve --model-repository /models --http-port "$port" --grpc-port 18001 \
  --metrics-port 18002 > /tmp/buildah-run.log 2>&1 &
server=$!
ok=0
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/v2/health/ready" > /dev/null 2>&1; then ok=1; break; fi
  kill -0 "$server" 2>/dev/null || break
  sleep 0.5
done
if [ "$ok" = 1 ]; then
  curl -fsS -X POST -d '{}' "http://127.0.0.1:$port/v2/repository/index"; echo
  # A Triton client's request to a model of examples/models, answered from inside the image.
  curl -fsS -X POST -H 'Content-Type: application/json' \
    -d '{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]}' \
    "http://127.0.0.1:$port/v2/models/identity_fp32/infer" || ok=0
  echo
fi
[ "$ok" = 1 ] && step "the image serves examples/models"
# SIGTERM to vramd itself, as Kubernetes and `docker stop` send it to PID 1: it must drain and
# exit 0 on its own.
# (The vramd inside the image is the one whose root is not this machine's: buildah's own
# command line names vramd too, and a signal to buildah kills its child outright.)
for pid in $(pgrep -x vramd); do
  [ "$(readlink "/proc/$pid/root")" != / ] && kill -TERM "$pid"
done
code=0
wait "$server" || code=$?
buildah rm "$ctr" > /dev/null
tail -3 /tmp/buildah-run.log
step "vramd in the image exited with status $code after SIGTERM"
[ "$ok" = 1 ] && [ "$code" = 0 ] || { echo "the image did not serve, or did not stop cleanly" >&2; exit 1; }
