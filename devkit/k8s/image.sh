#!/usr/bin/env bash
# Sharelake's container image on this machine, with podman and Debian's packages only (no registry
# is needed): `make image` builds it, `make image-load` hands it to the kubelet's containerd.
#
#   devkit/k8s/image.sh base    the base image localhost/sharelake-base:bookworm: Debian bookworm
#                               (minbase) from the Debian mirror apt uses here, by debootstrap
#   devkit/k8s/image.sh build   the base when missing, then the top-level Dockerfile on it:
#                               localhost/sharelake:<version> (pyproject.toml's version)
#   devkit/k8s/image.sh load    podman save | ctr -n k8s.io images import: the image into containerd,
#                               for pods that name it (imagePullPolicy IfNotPresent or Never)
#   devkit/k8s/image.sh tag     print the image's name
#
# What it owns: the images localhost/sharelake-base:bookworm and localhost/sharelake:<version> in
# podman's store, and the folder $SHARELAKE_K8S_CACHE/image/ (default ~/.cache/sharelake/k8s/image/):
# the base's root file system as a tar (kept, so the base is made once per machine and imported
# again from it when podman's store lost it), and the build logs. Nothing in the checkout but what
# `make dist jars s3` already made (.cache/dist, .cache/jars), which is the build's context.
# Needs root (debootstrap, podman's rootful store, containerd's socket) and the Debian packages
# podman, buildah and debootstrap (installed when missing), and containerd for `load`.
#
# Settings (environment): SHARELAKE_IMAGE (default localhost/sharelake:<version>), SHARELAKE_BASE_IMAGE
# (default localhost/sharelake-base:bookworm), SHARELAKE_DEBIAN_MIRROR (default: the one in
# /etc/apt/sources.list*), SHARELAKE_K8S_CACHE, CONTAINERD_ADDRESS (ctr's socket; ctr's default).
set -euo pipefail
trap 'rc=$?; echo "sharelake: devkit/k8s/image.sh failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")"
image="${SHARELAKE_IMAGE:-localhost/sharelake:$version}"
base_image="${SHARELAKE_BASE_IMAGE:-localhost/sharelake-base:bookworm}"
cache="${SHARELAKE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sharelake/k8s}/image"
base_tar="$cache/bookworm-minbase.tar"
suite=bookworm

say() { echo "[image] $*" >&2; }
die() { echo "sharelake: $*" >&2; exit 2; }

need_tools() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian's ${missing[*]}"
    apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; }
  fi
}

# The Debian mirror apt uses here (the first URI of a suite named bookworm*, not the security one)
debian_mirror() {
  if [ -n "${SHARELAKE_DEBIAN_MIRROR:-}" ]; then echo "$SHARELAKE_DEBIAN_MIRROR"; return; fi
  local m
  m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '(URIs:|^deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' \
    | grep -oE '[a-z]+://[^[:space:]]+' | head -n 1 || true)"
  echo "${m:-http://deb.debian.org/debian}"
}

# The base: Debian bookworm minbase plus what Debian's -slim images add (no docs, man pages or
# locales from later installs), with the same three suites as those images
make_base() {
  if podman image exists "$base_image"; then
    say "base $base_image: present"
    return
  fi
  mkdir -p "$cache"
  if [ ! -s "$base_tar" ]; then
    need_tools debootstrap
    local mirror rootfs start=$SECONDS
    mirror="$(debian_mirror)"
    rootfs="$cache/rootfs"
    rm -rf "$rootfs"
    say "debootstrap --variant=minbase $suite from $mirror (log: $cache/debootstrap.log)"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
      "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
      || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed: $cache/debootstrap.log"; }
    local security="${mirror%/debian}/debian-security"
    case "$mirror" in */debian) ;; *) security=http://deb.debian.org/debian-security ;; esac
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/sharelake-slim" <<'EOF'
# as Debian's -slim images: no documentation, man pages or translations (copyright files stay)
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/man/* \
      "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/* "$rootfs"/tmp/*
    find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
    tar --numeric-owner -C "$rootfs" -cf "$base_tar.part" .
    mv "$base_tar.part" "$base_tar"
    rm -rf "$rootfs"
    say "base root file system made in $((SECONDS - start)) s: $base_tar"
  fi
  podman import -q --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$base_tar" "$base_image" >/dev/null
  say "base $base_image: imported from $base_tar"
}

build() {
  need_tools podman buildah
  local start=$SECONDS
  make_base
  local wheel
  wheel="$(ls "$root"/.cache/dist/sharelake-"$version"-py3-none-any.whl 2>/dev/null || true)"
  [ -n "$wheel" ] || die "no wheel .cache/dist/sharelake-$version-py3-none-any.whl: run 'make dist'"
  ls "$root"/.cache/jars/spark/*.jar >/dev/null 2>&1 || die "no jars in .cache/jars/spark: run 'make jars'"
  ls "$root"/.cache/jars/s3/*.jar >/dev/null 2>&1 || die "no jars in .cache/jars/s3: run 'make s3'"
  # the build's context is the checkout (.dockerignore keeps it to the files the Dockerfile copies);
  # when .cache is a link (a worktree sharing another checkout's), the context is a copy of those
  # files in hard links or copies under the cache instead, since a builder follows no link out of it
  local context="$root"
  if [ -L "$root/.cache" ]; then
    context="$cache/context"
    rm -rf "$context" && mkdir -p "$context/.cache/dist" "$context/.cache/jars/spark" "$context/.cache/jars/s3" \
      "$context/jobs" "$context/devkit/k8s"
    cp "$root/Dockerfile" "$root/.dockerignore" "$root/requirements.txt" "$context/"
    cp "$root"/jobs/*.py "$context/jobs/"
    cp "$root/devkit/k8s/entrypoint.sh" "$context/devkit/k8s/"
    cp -l "$wheel" "$context/.cache/dist/" 2>/dev/null || cp "$wheel" "$context/.cache/dist/"
    for d in spark s3; do
      cp -l "$root"/.cache/jars/$d/*.jar "$context/.cache/jars/$d/" 2>/dev/null \
        || cp "$root"/.cache/jars/$d/*.jar "$context/.cache/jars/$d/"
    done
  fi
  # pip inside the build trusts what this machine trusts (a TLS-intercepting proxy's CA included)
  local secret=()
  local ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
  if [ -s "$ca" ]; then secret=(--secret "id=pip_ca,src=$ca"); fi
  local before
  before="$(podman image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
  say "podman build $image on $base_image (log: $cache/build.log)"
  mkdir -p "$cache"
  podman build --network host --layers --build-arg "BASE=$base_image" ${secret[@]+"${secret[@]}"} \
    -f "$context/Dockerfile" -t "$image" "$context" >"$cache/build.log" 2>&1 \
    || { tail -n 30 "$cache/build.log" >&2; die "podman build failed: $cache/build.log"; }
  # the previous build of this tag, now untagged (its wheel layer): removed, and nothing else
  local now
  now="$(podman image inspect -f '{{.Id}}' "$image")"
  if [ -n "$before" ] && [ "$before" != "$now" ]; then podman rmi "$before" >/dev/null 2>&1 || true; fi
  say "built $image in $((SECONDS - start)) s: $(podman image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
}

# Into the kubelet's containerd (namespace k8s.io, which the CRI plugin serves): pods then find the
# image locally; with imagePullPolicy IfNotPresent (a tag other than latest) nothing is pulled
load() {
  command -v ctr >/dev/null || die "no ctr (Debian's containerd): is containerd installed?"
  ctr version >/dev/null 2>&1 || die "containerd is not answering on ${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}: start it first"
  podman image exists "$image" || die "no image $image: run 'make image' first"
  local start=$SECONDS
  podman save --format docker-archive "$image" | ctr -n k8s.io images import - >&2
  ctr -n k8s.io images ls -q | grep -qx "$image" || ctr -n k8s.io images ls -q | grep -q "sharelake" \
    || die "ctr imported no image named $image"
  say "loaded $image into containerd (namespace k8s.io) in $((SECONDS - start)) s"
}

case "${1:-build}" in
  base) need_tools podman buildah; make_base ;;
  build) build ;;
  load) load ;;
  tag) echo "$image" ;;
  *) die "usage: devkit/k8s/image.sh [base|build|load|tag]" ;;
esac
