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

.PHONY: all build test vet nocgo unit fuzz e2e demo gpu-bundle clean package systemd-verify test-packaging

all: build

# mps-daemon links go-nvml (cgo, dlopens libnvidia-ml.so.1 at run time); the
# inventory and mpsctl are pure Go and static.
build:
	CGO_ENABLED=1 $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)' -o $(BIN)/mps-daemon ./cmd/mps-daemon
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mps-inventory ./cmd/mps-inventory
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mpsctl ./cmd/mpsctl

test: vet nocgo unit fuzz

vet:
	$(GO) vet ./...

# cgo stays in pkg/gpu/nvml and pkg/gpu/nvmlsim: the whole module must build
# and vet without it.
nocgo:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# The config parsers under go's fuzzer, FUZZTIME per target (go test runs
# only one -fuzz target per invocation). The seed corpus is
# pkg/config/testdata/fuzz, which `unit` runs too; an input that fails is
# written there, so the failure can be re-run with plain `go test`.
FUZZTIME ?= 5s
FUZZ_TARGETS := FuzzParseHostConf FuzzParseDevices
fuzz:
	for f in $(FUZZ_TARGETS); do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./pkg/config || exit 1; \
	done

demo: build
	BIN=$(BIN) ./scripts/demo.sh

# What tests/gpu/run.sh needs on the GPU machine (which has no Go): the
# binaries and the MPS contract test, built here for x86-64.
gpu-bundle: build
	rm -rf .gpu-bundle && mkdir -p .gpu-bundle
	cp $(BIN)/mps-daemon $(BIN)/mps-inventory $(BIN)/mpsctl .gpu-bundle/
	CGO_ENABLED=0 $(GO) test -c -o .gpu-bundle/mps.test ./pkg/mps
	CGO_ENABLED=1 $(GO) test -c -o .gpu-bundle/nvml.test ./pkg/gpu/nvml

# .deb and .rpm of yunion-mps-daemon and yunion-mps-inventory in $(DIST),
# versioned from git (packaging/version.sh); nfpm comes from the tools module
# (tools/go.mod), never from the main one. See docs/packaging.md.
NFPM ?= $(GO) tool -modfile=tools/go.mod nfpm
DIST ?= dist
package: build
	GO='$(GO)' NFPM='$(NFPM)' BIN='$(BIN)' DIST='$(DIST)' ./packaging/package.sh

# systemd-analyze verify on systemd/*.service; any output fails.
systemd-verify: build
	./tests/packaging/systemd-verify.sh $(BIN)

# The packages installed, upgraded and removed in a booted Debian 12
# (systemd-nspawn): needs root, debootstrap, systemd-nspawn, rpm, lintian,
# rpmlint. Not part of `make test`; .ci/run runs it after.
test-packaging:
	GO='$(GO)' ./tests/packaging/run.sh

clean:
	rm -rf $(BIN) .gpu-bundle $(DIST)

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
