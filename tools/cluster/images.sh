#!/usr/bin/env bash
# Build (once; cached in $CACHE) the images of the real single-node cluster:
#   pause   registry.k8s.io/pause:3.10          a static Go program (pause/main.go)
#   kaniko  nbv.local/kaniko-executor:v1.24.0   the executor of tools/testbin/build-node.sh
#   venvs   nbv.local/base:venvs                Debian minbase, slim (no docs, manual pages or
#           translations), + python3 + two venvs:
#           /opt/nbv-kernel (the kernel's interpreter, with ipykernel and its dependencies only, as
#           in a Jupyter base image: a build's `pip install` finds the kernel there and adds the
#           notebook's requirements) and /opt/nbv-runner (nbclient,
#           nbformat); the host's CA bundle and pip settings, so pip in a Pod reaches the
#           package index as the host does. runner-image.sh layers the checkout's package on it.
# Each image is an OCI layout tag in $CACHE/oci plus a docker-archive in $CACHE/tars for
# `ctr images import`. A stamp (hash of the recipe and its inputs) decides a rebuild.
# Usage: tools/cluster/images.sh [pause|kaniko|venvs]...   (default: all)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OCI="$CACHE/oci"
TARS="$CACHE/tars"
mkdir -p "$CACHE/bin" "$TARS"
[[ -d "$OCI" ]] || umoci init --layout "$OCI"
exec 8>"$CACHE/.images.lock"; flock 8

stamp_ok() { [[ -f "$CACHE/.$1.stamp" && "$(cat "$CACHE/.$1.stamp")" == "$2" && -f "$TARS/$1.tar" ]]; }
finish() { # name ref want
  rm -f "$TARS/$1.tar"
  skopeo copy --quiet "oci:$OCI:$1" "docker-archive:$TARS/$1.tar:$2" >/dev/null
  echo "$3" > "$CACHE/.$1.stamp"
}
fresh_tag() { umoci rm --image "$OCI:$1" 2>/dev/null || true; umoci new --image "$OCI:$1"; }

pip_conf() { # the host's pip settings that make sense inside an image (no local paths)
  echo "[global]"
  echo "cert = /etc/ssl/certs/ca-certificates.crt"
  echo "disable-pip-version-check = true"
  [[ -n "${PIP_DEFAULT_TIMEOUT:-}" ]] && echo "timeout = $PIP_DEFAULT_TIMEOUT"
  [[ -n "${PIP_INDEX_URL:-}" ]] && echo "index-url = $PIP_INDEX_URL"
  [[ -n "${PIP_EXTRA_INDEX_URL:-}" ]] && echo "extra-index-url = $PIP_EXTRA_INDEX_URL"
  [[ -n "${PIP_TRUSTED_HOST:-}" ]] && echo "trusted-host = $PIP_TRUSTED_HOST"
  # and whatever the host's own config files say (index-url, trusted-host...), except local paths
  local f
  for f in /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
    [[ -f "$f" ]] && grep -E '^\s*(index-url|extra-index-url|trusted-host|timeout|retries)\s*=' "$f" || true
  done
}
HOST_CA=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[[ -f "$HOST_CA" ]] || HOST_CA=/etc/ssl/certs/ca-certificates.crt

build_pause() {
  local want; want="$(cat "$CLUSTER_SRC/pause/main.go" "$CLUSTER_SRC/pause/go.mod" "$0" | sha256sum | cut -c1-16)"
  stamp_ok pause "$want" && { log "image pause: cached"; return; }
  log "image pause: building"
  ( cd "$CLUSTER_SRC/pause" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags '-s -w' -o "$CACHE/bin/pause" . )
  local d; d="$(mktemp -d)"; install -m 0755 "$CACHE/bin/pause" "$d/pause"
  fresh_tag pause
  umoci insert --image "$OCI:pause" "$d/pause" /pause >/dev/null
  umoci config --image "$OCI:pause" --config.entrypoint /pause >/dev/null
  rm -rf "$d"
  finish pause "$PAUSE_REF" "$want"
}

build_kaniko() {
  local exe="$TESTBIN/kaniko-executor"
  [[ -x "$exe" ]] || die "missing $exe (run tools/testbin/build-node.sh)"
  local want; want="$( { sha256sum "$exe" "$HOST_CA"; cat "$0"; } | sha256sum | cut -c1-16)"
  stamp_ok kaniko "$want" && { log "image kaniko: cached"; return; }
  log "image kaniko: building"
  local d; d="$(mktemp -d)"
  mkdir -p "$d/kaniko/ssl/certs" "$d/kaniko/.docker" "$d/workspace" "$d/etc/ssl/certs" "$d/root" "$d/tmp"
  chmod 1777 "$d/tmp"
  install -m 0755 "$exe" "$d/kaniko/executor"
  cp "$HOST_CA" "$d/kaniko/ssl/certs/ca-certificates.crt"
  cp "$HOST_CA" "$d/etc/ssl/certs/ca-certificates.crt"
  fresh_tag kaniko
  umoci insert --image "$OCI:kaniko" "$d" / >/dev/null
  umoci config --image "$OCI:kaniko" --config.entrypoint /kaniko/executor \
    --config.env PATH=/usr/local/bin:/kaniko --config.env HOME=/root --config.env USER=root \
    --config.env SSL_CERT_DIR=/kaniko/ssl/certs --config.env DOCKER_CONFIG=/kaniko/.docker/ \
    --config.workingdir /workspace >/dev/null
  rm -rf "$d"
  finish kaniko "$KANIKO_REF" "$want"
}

build_venvs() {
  local want; want="$( { cat "$0" "$HOST_CA"; pip_conf; echo "$SUITE"; } | sha256sum | cut -c1-16)"
  stamp_ok venvs "$want" && { log "image venvs: cached"; return; }
  log "image venvs: debootstrap $SUITE minbase + python3 (minutes)"
  local r; r="$(mktemp -d /var/tmp/nbv-rootfs.XXXXXX)"
  local mirror; mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$r" "${mirror:-http://deb.debian.org/debian}" > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  # slim, as Debian's and Python's -slim images are: no documentation (but the copyright files),
  # manual pages or translations, now or in what apt-get installs later (a repository's apt.txt).
  # A kaniko build unpacks and snapshots the whole base image each time: 2 300 files fewer.
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
    'path-include /usr/share/locale/locale.alias' > "$r/etc/dpkg/dpkg.cfg.d/nbv-slim"
  find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
  find "$r/usr/share/locale" -mindepth 1 ! -type d ! -name locale.alias -delete
  find "$r/usr/share/locale" -mindepth 1 -depth -type d -empty -delete
  rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/*
  cp "$HOST_CA" "$r/etc/ssl/certs/ca-certificates.crt"
  pip_conf > "$r/etc/pip.conf"
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  chroot "$r" /usr/bin/python3 -m venv /opt/nbv-kernel
  chroot "$r" /usr/bin/python3 -m venv /opt/nbv-runner
  chroot "$r" env -i PATH=/usr/bin:/bin HOME=/root /opt/nbv-runner/bin/python -m pip install -q --no-cache-dir nbclient nbformat \
    || die "pip install nbclient nbformat into the image's runner venv failed"
  chroot "$r" /opt/nbv-runner/bin/python -c 'import nbclient, nbformat'
  chroot "$r" env -i PATH=/usr/bin:/bin HOME=/root /opt/nbv-kernel/bin/python -m pip install -q --no-cache-dir ipykernel \
    || die "pip install ipykernel into the image's kernel venv failed"
  chroot "$r" /opt/nbv-kernel/bin/python -c 'import ipykernel_launcher'
  : > "$r/etc/resolv.conf"
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/* "$r"/root/.cache
  find "$r/dev" -mindepth 1 -delete 2>/dev/null || true
  fresh_tag venvs
  umoci insert --image "$OCI:venvs" "$r" / >/dev/null
  umoci config --image "$OCI:venvs" \
    --config.env PATH=/opt/nbv-kernel/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env JUPYTER_PATH=/opt/nbv-kernel/share/jupyter \
    --config.env NBV_KERNEL_PYTHON=/opt/nbv-kernel/bin/python \
    --config.env NBV_RUNNER_PYTHON=/opt/nbv-runner/bin/python \
    --config.env LANG=C.UTF-8 --config.cmd python3 >/dev/null
  rm -rf "$r"
  finish venvs "$VENVS_REF" "$want"
}

parts=("$@"); (( ${#parts[@]} )) || parts=(pause kaniko venvs)
for p in "${parts[@]}"; do
  t0=$SECONDS; "build_$p"; log "image $p: $((SECONDS - t0)) s"
done
