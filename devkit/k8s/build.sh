#!/usr/bin/env bash
# Builds the one-node Kubernetes cluster's binaries and its two system images, once per machine,
# into $SHARELAKE_K8S_CACHE (default ~/.cache/sharelake/k8s: outside any checkout, so a later run,
# CI's clean clone included, reuses them). Everything comes from the Go module proxy and Debian:
#   bin/kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#        k8s.io/kubernetes at K8S_VERSION, through a wrapper module that pins each k8s.io staging
#        module to its published v0.x twin (the kubernetes module replaces them with ./staging
#        folders its zip does not hold)
#   bin/etcd       go.etcd.io/etcd/server/v3 at ETCD_VERSION
#   bin/coredns    github.com/coredns/coredns at COREDNS_VERSION (the cluster's DNS)
#   bin/pause      build/pause/linux/pause.c of the kubernetes module, linked statically
#   images/        the pause and CoreDNS images (FROM scratch, buildah), as docker archives for
#                  the kubelet's containerd (devkit/k8s_cluster.py imports them)
# Runtime packages (containerd, runc, the CNI plugins, iptables, conntrack, buildah) come from Debian.
# Each step is skipped when its output is there; `rm -rf "$SHARELAKE_K8S_CACHE"` builds anew.
set -euo pipefail
K8S_VERSION=1.34.4      # fabric8 7.6 (Spark 4.2's Kubernetes client) speaks it; its kubelet still runs on cgroup v1
ETCD_VERSION=3.6.16     # the etcd line Kubernetes 1.34 is tested with
COREDNS_VERSION=1.12.4  # the CoreDNS line Kubernetes 1.34 ships
cache="${SHARELAKE_K8S_CACHE:-$HOME/.cache/sharelake/k8s}"
bin="$cache/bin"
export GOPATH="$cache/go" GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$bin" "$cache/images"
log() { echo "[k8s-build] $*"; }

debian_packages() {
  local missing=()
  for p in containerd runc containernetworking-plugins iptables conntrack buildah; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# a module of our own that requires $1@$2 and builds the packages $3... into bin/ (-o names each by
# its last path element)
wrapper_module() {
  local dir="$cache/src/$1" module="$2" version="$3"
  mkdir -p "$dir"
  printf 'module sharelake.local/%s\n\ngo 1.24\n\nrequire %s %s\n' "$1" "$module" "$version" >"$dir/go.mod"
}

build_kubernetes() {
  local tools=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
  local t missing=0
  for t in "${tools[@]}"; do [ -x "$bin/$t" ] || missing=1; done
  [ "$missing" = 1 ] || return 0
  local dir="$cache/src/kubernetes" v="v$K8S_VERSION" staging="v0.${K8S_VERSION#1.}"
  wrapper_module kubernetes k8s.io/kubernetes "$v"
  (cd "$dir" && go mod download -json "k8s.io/kubernetes@$v" >/dev/null)
  local upstream="$GOPATH/pkg/mod/cache/download/k8s.io/kubernetes/@v/$v.mod"
  {
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$upstream" | awk '/=> \.\/staging/ {print "\t" $1 " => " $1 " '"$staging"'"}'
    echo ")"
  } >>"$dir/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for t in "${tools[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$t"; done
    printf ')\n'
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy)
  local ld="-s -w" p minor
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  log "building Kubernetes $v (${tools[*]}): tens of minutes on 2 cores, once"
  (cd "$dir" && go build -trimpath -ldflags "$ld" -o "$bin/" "${tools[@]/#/k8s.io/kubernetes/cmd/}")
}

build_one() {  # name module version package
  [ -x "$bin/$1" ] && return 0
  local dir="$cache/src/$1"
  wrapper_module "$1" "$2" "v$3"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$4" >"$dir/tools.go"
  (cd "$dir" && go mod tidy)
  log "building $1 v$3"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$bin/$1" "$4")
}

build_pause() {
  [ -x "$bin/pause" ] && return 0
  local src="$GOPATH/pkg/mod/k8s.io/kubernetes@v$K8S_VERSION/build/pause/linux/pause.c"
  log "building pause from $src"
  gcc -Os -Wall -Werror -static -DVERSION="v$K8S_VERSION-sharelake" -o "$bin/pause" "$src"
  strip "$bin/pause"
}

# a FROM-scratch image holding one static binary, saved as a docker archive
scratch_image() {  # name tag binary entrypoint-json
  local archive="$cache/images/$1-$2.tar"
  [ -f "$archive" ] && return 0
  log "image localhost/$1:$2"
  local c
  c=$(buildah from scratch)
  buildah copy "$c" "$bin/$3" "/$3" >/dev/null
  buildah config --entrypoint "$4" --user 65535:65535 "$c"
  buildah commit -q "$c" "localhost/$1:$2" >/dev/null
  buildah rm "$c" >/dev/null
  buildah push -q "localhost/$1:$2" "docker-archive:$archive.part:localhost/$1:$2"
  mv "$archive.part" "$archive"
}

debian_packages
build_kubernetes
build_one etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
build_one coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
build_pause
scratch_image pause 3.10 pause '["/pause"]'
scratch_image coredns "$COREDNS_VERSION" coredns '["/coredns"]'
log "built: $(ls "$bin" | tr '\n' ' ')in $cache"
