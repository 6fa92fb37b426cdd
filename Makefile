# yunion-mps-daemon. `make demo` and `make test` need nothing but Go and gcc.
GO       ?= go
BIN      ?= bin
MODULE   := yunion.io/x/mps-daemon
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X $(MODULE)/pkg/version.Version=$(VERSION)
# Packages that must build without cgo: everything but the NVML packages' cgo files.
export GOFLAGS ?= -buildvcs=false
# go-nvml's header marks some vGPU calls deprecated; we call none of them.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build build-kubernetes test test-quick vet nocgo unit fuzz e2e demo gpu-bundle clean package repo systemd-verify test-packaging print-slow-pkgs test-cloudpods

all: build

# mps-daemon links go-nvml (cgo, dlopens libnvidia-ml.so.1 at run time); the
# inventory and mpsctl are pure Go and static. ARCH (amd64 or arm64) picks
# the target; CC_<arch> its C compiler (Debian's gcc-<triplet> packages).
#
# mps-daemon must run on glibc $(GLIBC_FLOOR) and later (docs/packaging.md):
# cgo's test links resolve against stubs of that glibc's symbol set
# (packaging/glibc/stubs.sh, made from the toolchain's own libc), and Go's
# internal linker writes the versions they chose; no crt1.o of the build
# host's glibc is linked in. netgo/osusergo keep the resolver and user lookups
# in Go. tests/packaging/run.sh checks every shipped binary with objdump -T.
# nethttpomithttp2 leaves net/http's HTTP/2 out of mps-daemon (not of its
# Kubernetes build, whose API client speaks it): everything the daemon
# talks to (mps-inventory, Cloudpods' keystone and region, its scrapers)
# speaks HTTP/1.1, and the daemon's resident memory is mostly its own
# binary's pages (docs/operations.md, "What the daemon costs").
ARCH       ?= $(shell $(GO) env GOARCH)
CC_amd64   ?= x86_64-linux-gnu-gcc
CC_arm64   ?= aarch64-linux-gnu-gcc
BUILD      ?= .build
GLIBC_FLOOR := 2.17
# The stubs' directory names their floor, arch and generator, so that Go's
# build cache (which hashes CGO_LDFLAGS, not the files it names) never mixes
# two sets.
GLIBC_STUBS = $(CURDIR)/$(BUILD)/glibc-$(GLIBC_FLOOR)-$(ARCH)-$(shell sha256sum packaging/glibc/stubs.sh | cut -c1-8)
DAEMON_ENV = CGO_ENABLED=1 GOARCH=$(ARCH) CC=$(CC_$(ARCH)) \
	CGO_LDFLAGS='-L$(GLIBC_STUBS) -Wl,--no-as-needed -lpthread -ldl'

build:
	@[ -n "$(CC_$(ARCH))" ] || { echo "make build: no C compiler known for ARCH=$(ARCH) (CC_$(ARCH))" >&2; exit 1; }
	packaging/glibc/stubs.sh $(GLIBC_STUBS) $(CC_$(ARCH)) $(GLIBC_FLOOR)
	$(DAEMON_ENV) $(GO) build -trimpath -buildmode=pie -tags netgo,osusergo,nethttpomithttp2 \
		-ldflags '$(LDFLAGS) -linkmode=internal' -o $(BIN)/mps-daemon ./cmd/mps-daemon
	CGO_ENABLED=0 GOARCH=$(ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mps-inventory ./cmd/mps-inventory
	CGO_ENABLED=0 GOARCH=$(ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mpsctl ./cmd/mpsctl

# mps-daemon with its Kubernetes mode (`mps-daemon-kubernetes kubernetes`,
# docs/kubernetes.md): the same program built with -tags kubernetes, apart
# because client-go and gRPC make it four times the size.
build-kubernetes:
	packaging/glibc/stubs.sh $(GLIBC_STUBS) $(CC_$(ARCH)) $(GLIBC_FLOOR)
	$(DAEMON_ENV) $(GO) build -trimpath -buildmode=pie -tags netgo,osusergo,kubernetes \
		-ldflags '$(LDFLAGS) -linkmode=internal' -o $(BIN)/mps-daemon-kubernetes ./cmd/mps-daemon

test: vet nocgo unit fuzz test-tenant

# libyunion-mps-view.so, the slice's view of its GPU inside tenants'
# processes (tenant/, docs/containers.md "The view library"): C, linked like
# mps-daemon against the glibc stubs of the floor, for ARCH with
# CC_$(ARCH). Needs only make and a C compiler (the GPU machine builds it
# with `make tenant ARCH=amd64 CC_amd64=gcc`).
.PHONY: tenant test-tenant
tenant:
	@[ -n "$(CC_$(ARCH))" ] || { echo "make tenant: no C compiler known for ARCH=$(ARCH) (CC_$(ARCH))" >&2; exit 1; }
	packaging/glibc/stubs.sh $(GLIBC_STUBS) $(CC_$(ARCH)) $(GLIBC_FLOOR)
	tenant/build.sh $(CC_$(ARCH)) $(GLIBC_STUBS) $(BIN)/libyunion-mps-view.so

# The library for both architectures, then its tests (tenant/test/run.sh:
# root or user namespaces; arm64 under qemu-user where installed).
TENANT_TEST_BIN = $(BUILD)/tenant
test-tenant:
	$(MAKE) --no-print-directory tenant ARCH=amd64 BIN=$(TENANT_TEST_BIN)/amd64
	$(MAKE) --no-print-directory tenant ARCH=arm64 BIN=$(TENANT_TEST_BIN)/arm64
	CC_amd64='$(CC_amd64)' CC_arm64='$(CC_arm64)' tenant/test/run.sh $(TENANT_TEST_BIN)

# -race: vet then type-checks against the dependencies compiled as `make
# unit` compiles them, so a cold build cache compiles the module's ~830
# packages once for both instead of once more without -race (344 s of a
# cold `make test` at load 5; docs/testing.md). No file of ours depends on
# the race build tag, so vet sees the same files.
vet:
	$(GO) vet -race ./...
	$(GO) vet -race -tags kubernetes ./cmd/mps-daemon

# cgo stays in pkg/gpu/nvml and pkg/gpu/nvmlsim: the whole module must build
# and vet without it. The script compiles and vets with CGO_ENABLED=0 every
# package cgo changes and all that depend on them; every other package is
# the same source with cgo on or off, compiled and vetted by `vet` and
# `unit` (the script's comment; docs/testing.md). The tags are the ones
# `make build` ships mps-daemon with (netgo, osusergo): with them cgo
# changes only the NVML packages, and tests/e2e's binaries (built with the
# same tags) reuse these compiles.
nocgo:
	GO='$(GO)' ./scripts/nocgo-check.sh

# The slowest packages first (docs/testing.md): go test runs packages in the
# order it is given them, GOMAXPROCS at a time, so one of them left to the end
# would run alone while the other core idles.
SLOW_PKGS := ./tests/e2e ./pkg/inventory/server ./pkg/inventory/store ./pkg/agent ./pkg/inventory/client
# -timeout: go test's 10 minutes a package is a hang detector that a
# loaded machine trips (tests/regioncompat alone can take that long there).
# -ldflags=-w: the test binaries without DWARF, which nothing here reads
# (stack traces and race reports name files and lines from the binary's own
# tables); a third less CPU per link, and make unit links about 45 of them
# (docs/testing.md, item 10). A debugger wants `go test -c` without it.
# MPS_CLOUDPODS_DIR emptied: make test replays Cloudpods' recorded
# exchanges and never starts a control plane (make test-cloudpods does).
# MPS_CONTAINERD_BIN: tests/e2e's Cloudpods pods run on the containerd
# `make containerd` builds (they skip where it or root is missing, unless
# MPS_REQUIRE_CONTAINERD=1, which CI sets).
unit: containerd
	@echo "unit: Cloudpods is replayed from tests/cloudpods/recordings; its live tests skip (make test-cloudpods runs them)"
	MPS_CLOUDPODS_DIR= MPS_CONTAINERD_BIN=$(CONTAINERD_BIN) $(GO) test -race -count=1 -timeout 30m -ldflags=-w $(SLOW_PKGS) ./...

# Cloudpods' own pods (issue 45, docs/cloudpods.md): a real containerd 2.x,
# its runc shim, ctr and crictl, built by Go from the module proxy at these
# pinned versions (go install; nothing of their source is in this
# repository), static and stripped, for tests/e2e and the GPU bundle.
# Cached under $(BUILD) by version: a cold build is about 2 minutes here.
CONTAINERD_VERSION := v2.2.9
CRI_TOOLS_VERSION := v1.34.0
CONTAINERD_BIN = $(CURDIR)/$(BUILD)/containerd-$(CONTAINERD_VERSION)-crictl-$(CRI_TOOLS_VERSION)
.PHONY: containerd print-containerd-bin
containerd: $(CONTAINERD_BIN)/crictl
$(CONTAINERD_BIN)/crictl:
	mkdir -p $(CONTAINERD_BIN)
	CGO_ENABLED=0 GOBIN=$(CONTAINERD_BIN) $(GO) install -trimpath -ldflags '-s -w' -tags 'no_btrfs no_devmapper no_zfs' \
		github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/ctr@$(CONTAINERD_VERSION)
	CGO_ENABLED=0 GOBIN=$(CONTAINERD_BIN) $(GO) install -trimpath -ldflags '-s -w' sigs.k8s.io/cri-tools/cmd/crictl@$(CRI_TOOLS_VERSION)
print-containerd-bin:
	@echo $(CONTAINERD_BIN)

# scripts/flake-hunt.sh runs the packages in make unit's order.
print-slow-pkgs:
	@echo $(SLOW_PKGS)

# The inner loop: vet, and the tests without -race, from go's test cache
# where nothing changed, and -short: the tests that need a real Cloudpods
# control plane are skipped (unless MPS_REQUIRE_CLOUDPODS=1). CI runs `make
# test`.
test-quick:
	$(GO) vet ./...
	MPS_CLOUDPODS_DIR= $(GO) test -short ./...

# The config parsers under go's fuzzer, FUZZTIME per target (go test runs
# only one -fuzz target per invocation). The seed corpus is
# pkg/config/testdata/fuzz, which `unit` runs too; an input that fails is
# written there, so the failure can be re-run with plain `go test`.
# A count, not a duration: with a duration go1.26's fuzz coordinator can
# fail the target with "context deadline exceeded" at the deadline while a
# worker is mid-input (golang/go#75804, fixed in Go 1.27; seen here once in
# CI's run, no crasher written). 15000 inputs are about 5 s at this
# machine's rate.
FUZZTIME ?= 15000x
FUZZ_TARGETS := FuzzParseHostConf FuzzParseDevices
fuzz:
	for f in $(FUZZ_TARGETS); do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./pkg/config || exit 1; \
	done

demo: build tenant
	BIN=$(BIN) ./scripts/demo.sh

# What tests/gpu/run.sh needs on the GPU machine (which has no Go): the
# binaries, the view's library (tests/gpu/view.sh) and the MPS contract
# test, built here for x86-64. .gpu-bundle/pods is what
# tests/gpu/cloudpods-pod.sh needs alone, xz-compressed to fit a call's
# 64 MiB (about 45 MB; carry it instead of the whole bundle): the daemon,
# the inventory, mpsctl, containerd, its shim, ctr, crictl, Debian's runc
# (it needs only libseccomp.so.2 there), Debian's static busybox (the
# pods' image), and the view's library.
gpu-bundle: build build-kubernetes tenant containerd
	rm -rf .gpu-bundle && mkdir -p .gpu-bundle/pods
	cp $(BIN)/mps-daemon $(BIN)/mps-daemon-kubernetes $(BIN)/mps-inventory $(BIN)/mpsctl $(BIN)/libyunion-mps-view.so .gpu-bundle/
	CGO_ENABLED=0 $(GO) test -c -o .gpu-bundle/mps.test ./pkg/mps
	CGO_ENABLED=1 $(GO) test -c -o .gpu-bundle/nvml.test ./pkg/gpu/nvml
	cp $(BIN)/libyunion-mps-view.so .gpu-bundle/pods/
	for f in $(BIN)/mps-daemon $(BIN)/mps-inventory $(BIN)/mpsctl \
		$(CONTAINERD_BIN)/containerd $(CONTAINERD_BIN)/containerd-shim-runc-v2 $(CONTAINERD_BIN)/ctr $(CONTAINERD_BIN)/crictl \
		$$(command -v runc) /bin/busybox; do xz -9 -T2 -c $$f > .gpu-bundle/pods/$$(basename $$f).xz || exit 1; done

# .deb and .rpm of yunion-mps-daemon, yunion-mps-inventory and
# yunion-mps-daemon-kubernetes (PKG_NAMES: their nfpm configs'
# packaging/nfpm-NAME.yaml) for every architecture in PKG_ARCHES, into
# $(DIST); binaries in $(BIN)/linux_<arch>; one version for all (taken once:
# a commit made meanwhile changes nothing). Versioned from git
# (packaging/version.sh); nfpm comes from the tools module (tools/go.mod),
# never from the main one. See docs/packaging.md.
NFPM ?= $(GO) tool -modfile=tools/go.mod nfpm
DIST ?= dist
PKG_ARCHES ?= amd64 arm64
PKG_NAMES ?= daemon inventory kubernetes
package:
	v=$${PKG_VERSION:-$$(packaging/version.sh)} && for a in $(PKG_ARCHES); do \
		$(MAKE) --no-print-directory build $(if $(filter kubernetes,$(PKG_NAMES)),build-kubernetes) \
			$(if $(filter daemon,$(PKG_NAMES)),tenant) \
			ARCH=$$a BIN=$(BIN)/linux_$$a VERSION='$(VERSION)' && \
		GO='$(GO)' NFPM='$(NFPM)' BIN='$(BIN)/linux_'$$a DIST='$(DIST)' PKG_ARCH=$$a PKG_VERSION=$$v \
			PKG_NAMES='$(PKG_NAMES)' ./packaging/package.sh || exit 1; \
	done

# A signed apt repository and a signed yum/dnf repository of the packages in
# $(DIST), in $(REPO), ready for any static web server at REPO_URL. The key:
# REPO_KEY_FILE (an armored private key; passphrase in REPO_KEY_PASSPHRASE),
# else a throwaway one made under $(BUILD)/repo-key (tests only). See
# docs/packaging.md ("The repository").
REPO ?= repo
REPO_URL ?= https://mps.example.org/yunion-mps
repo:
	REPO='$(REPO)' DIST='$(DIST)' REPO_URL='$(REPO_URL)' BUILD='$(BUILD)' ./packaging/repo.sh

# systemd-analyze verify on systemd/*.service; any output fails.
systemd-verify: build
	./tests/packaging/systemd-verify.sh $(BIN)

# The packages (both arches) and repositories: the glibc floor of every
# binary, installed from the signed repository on Debian 11 (amd64; arm64
# under qemu-user), the rpm repository read by dnf, and installed, upgraded
# and removed in a booted Debian 12 (systemd-nspawn). Needs root and what
# .ci/run installs (tests/packaging/run.sh lists it). Not part of `make test`;
# .ci/run runs it after.
test-packaging:
	GO='$(GO)' ./tests/packaging/run.sh

clean:
	rm -rf $(BIN) .gpu-bundle $(DIST) $(REPO) $(BUILD)

# The Kubernetes DRA driver (mps-daemon kubernetes) against a real
# kube-apiserver with an embedded etcd, the scheduler's allocator, the
# kubelet's gRPC and Podman (tests/k8s, its own module pinning
# k8s.io/kubernetes: a cold build of the API server takes 10-40 min on 2
# cores, cached builds under a minute). Needs root, podman, runc and
# busybox-static as tests/e2e does; MPS_REQUIRE_PODMAN=1 fails instead of
# skipping where they are missing.
.PHONY: test-k8s
test-k8s:
	cd tests/k8s && $(GO) test -count=1 -timeout 40m -v ./...

# The tests against a real Cloudpods keystone and region (docs/cloudpods.md,
# "Live tests"): MPS_CLOUDPODS_DIR names a directory holding keystone, region
# and climc built from Cloudpods' public source (plain or .xz; none is in
# this repository); scripts/cloudpods.sh starts them (as root, with
# mariadb-server and curl). Every exchange is recorded (one file a package,
# in CP_RECORDINGS) and the cassettes under tests/cloudpods/recordings are
# made again from them: review the diff, commit it. One test at a time, so
# that each test's exchanges follow its marker. Without MPS_CLOUDPODS_DIR it
# says so and does nothing.
CP_RECORDINGS ?= $(BUILD)/cloudpods-recordings
CP_PKGS := region:./pkg/region e2e:./tests/e2e regioncompat:./tests/regioncompat cloudpods:./internal/testsupport/cloudpods
test-cloudpods:
	@if [ -z "$$MPS_CLOUDPODS_DIR" ]; then \
		echo "make test-cloudpods: skipped: MPS_CLOUDPODS_DIR names no directory of Cloudpods' keystone, region and climc (docs/cloudpods.md)"; exit 0; fi; \
	rm -rf $(CP_RECORDINGS) && mkdir -p $(CP_RECORDINGS) && \
	for p in $(CP_PKGS); do \
		MPS_REQUIRE_CLOUDPODS=1 MPS_CLOUDPODS_RECORD=$(CURDIR)/$(CP_RECORDINGS)/$${p%%:*}.jsonl \
			$(GO) test -count=1 -p 1 -parallel 1 -timeout 60m -run '$(if $(RUN),$(RUN),.)' $${p#*:} || exit 1; \
	done && \
	$(GO) run ./tests/cloudpods/derive -from $(CP_RECORDINGS) && git status --short tests/cloudpods/recordings
