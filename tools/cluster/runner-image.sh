#!/usr/bin/env bash
# Push the runner image of a checkout and point its .cluster/env at it:
#   <registry>/nbv/base:r-<hash> = nbv.local/base:venvs (images.sh) + one layer holding the
#   checkout's jupyter_nbvalidation package in /opt/nbv-runner's site-packages.
#   <registry>/nbv/runner:r-<hash> = that image + a .pth in /opt/nbv-kernel's site-packages naming
#   /opt/nbv-runner's: `python` on PATH has the runner and ipykernel, as KubernetesBackend.runner_image
#   (the image of jobs that disable the build) must.
# <hash> covers the package's files (not the labextension), so a code change gives new tags and
# the tests always run the current checkout's runner; an unchanged checkout costs two HEAD requests.
# Usage: tools/cluster/runner-image.sh [CHECKOUT]   (default: this repo; the cluster must be up)
# Writes CHECKOUT/.cluster/env: the cluster's env (this repo's .cluster/env) with NBV_BASE_IMAGE and
# NBV_RUNNER_IMAGE.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CHECKOUT="$(cd "${1:-$REPO}" && pwd)"
ENV_SRC="$REPO/.cluster/env"
[[ -f "$ENV_SRC" ]] || die "no $ENV_SRC: run tools/cluster/up.sh first"
REG_HOST="$(sed -n 's/^NBV_REGISTRY_HOST=//p' "$ENV_SRC")"
[[ -n "$REG_HOST" ]] || die "NBV_REGISTRY_HOST missing in $ENV_SRC"
PKG="$CHECKOUT/jupyter_nbvalidation"
[[ -f "$PKG/__init__.py" ]] || die "$PKG is not the jupyter_nbvalidation package"
OCI="$CACHE/oci"

files() { (cd "$CHECKOUT" && find jupyter_nbvalidation -type f ! -path '*/labextension/*' ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort); }
hash="$( { cat "$CACHE/.venvs.stamp"; files | while read -r f; do printf '%s\0' "$f"; cat "$CHECKOUT/$f"; done; } | sha256sum | cut -c1-16)"
ref="$REG_HOST/nbv/base:r-$hash"
runner_ref="$REG_HOST/nbv/runner:r-$hash"
KERNEL_SITE="${RUNNER_SITE/nbv-runner/nbv-kernel}"

exists() { # repository
  curl -fs -o /dev/null -I -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REG_HOST/v2/nbv/$1/manifests/r-$hash"
}
if ! exists base || ! exists runner; then
  exec 8>"$CACHE/.images.lock"; flock 8
  t0=$SECONDS
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/site"
  (cd "$CHECKOUT" && files | while read -r f; do install -D -m 0644 "$f" "$tmp/site/$f"; done)
  version="$(sed -nE 's/^__version__ *= *["'\'']([^"'\'']+)["'\''].*/\1/p' "$PKG/_version.py" | head -1)"
  di="$tmp/site/jupyter_nbvalidation-${version:-0}.dist-info"
  mkdir -p "$di"
  printf 'Metadata-Version: 2.1\nName: jupyter-nbvalidation\nVersion: %s\n' "${version:-0}" > "$di/METADATA"
  echo "nbv-cluster-runner-image" > "$di/INSTALLER"; : > "$di/RECORD"
  chmod -R a+rX "$tmp/site"
  tag="r-$hash"
  umoci rm --image "$OCI:$tag" 2>/dev/null || true
  umoci tag --image "$OCI:venvs" "$tag"
  umoci insert --image "$OCI:$tag" "$tmp/site" "$RUNNER_SITE" >/dev/null
  umoci config --image "$OCI:$tag" --config.label "dev.nbvalidation.runner-hash=$hash" >/dev/null
  skopeo copy --quiet --dest-tls-verify=false "oci:$OCI:$tag" "docker://$ref" >/dev/null
  echo "$RUNNER_SITE" > "$tmp/nbv-runner.pth"; chmod 0644 "$tmp/nbv-runner.pth"
  umoci insert --image "$OCI:$tag" "$tmp/nbv-runner.pth" "$KERNEL_SITE/nbv-runner.pth" >/dev/null
  skopeo copy --quiet --dest-tls-verify=false "oci:$OCI:$tag" "docker://$runner_ref" >/dev/null
  umoci rm --image "$OCI:$tag"
  log "runner images $ref, $runner_ref pushed in $((SECONDS - t0)) s"
fi
mkdir -p "$CHECKOUT/.cluster"
# a temporary file of this run's own, renamed over the env: two runs at once (two pytest workers
# starting their sessions) each write a whole file, never one the other is reading or writing
env_tmp="$(mktemp "$CHECKOUT/.cluster/env.XXXXXX")"
{ grep -v -e '^NBV_BASE_IMAGE=' -e '^NBV_RUNNER_IMAGE=' "$ENV_SRC"; echo "NBV_BASE_IMAGE=$ref"
  echo "NBV_RUNNER_IMAGE=$runner_ref"; } > "$env_tmp"
chmod 0644 "$env_tmp"
mv -f "$env_tmp" "$CHECKOUT/.cluster/env"
echo "$ref"
