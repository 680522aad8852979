# tollgate developer tasks. `make help` lists them.
#
# Tools are pinned and built from the Go module proxy into bin/ (git-ignored).

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

LOCALBIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN := $(LOCALBIN)/controller-gen-$(CONTROLLER_GEN_VERSION)

# The release version: the VERSION file is its one source (the binary embeds
# it, the chart's appVersion must equal it, the image tag defaults to it).
VERSION := $(shell cat VERSION)
# Stamped into the binary (tollgate version, tollgate_build_info). The build
# date is the commit's date, so that a rebuild of one commit is identical.
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell git log -1 --format=%cI 2>/dev/null)
# The image `make image` builds (and pushes with PUSH=1).
IMG ?= ghcr.io/tollgate-dev/tollgate:$(VERSION)

# Static build flags shared with the Dockerfile (which passes COMMIT and
# BUILD_DATE as build arguments).
GO_BUILD_FLAGS := -trimpath -ldflags "-s -w -X github.com/tollgate-dev/tollgate/internal/version.commit=$(COMMIT) -X github.com/tollgate-dev/tollgate/internal/version.buildDate=$(BUILD_DATE)"

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Run

.PHONY: demo
demo: ## The main job: a local demo (Redis, gateway, echo upstream, sample rules).
	bash hack/demo.sh

##@ Develop

.PHONY: build
build: ## Build bin/tollgate (static, as in the image).
	CGO_ENABLED=0 go build $(GO_BUILD_FLAGS) -o $(LOCALBIN)/tollgate .

# The image's platform (the binary is cross-compiled; no emulation needed).
IMAGE_OS ?= linux
IMAGE_ARCH ?= $(shell go env GOARCH)
IMAGE_BINARY := dist/$(IMAGE_OS)-$(IMAGE_ARCH)/tollgate

.PHONY: image
image: ## Build the image without Docker: dist/image (OCI layout), dist/tollgate-image.tar; PUSH=1 pushes IMG.
	CGO_ENABLED=0 GOOS=$(IMAGE_OS) GOARCH=$(IMAGE_ARCH) go build $(GO_BUILD_FLAGS) -o $(IMAGE_BINARY) .
	cd hack/image && go run . -binary $(CURDIR)/$(IMAGE_BINARY) -platform $(IMAGE_OS)/$(IMAGE_ARCH) \
		-ref $(IMG) -version $(VERSION) -revision "$(COMMIT)" -created "$(BUILD_DATE)" \
		-oci-layout $(CURDIR)/dist/image -tarball $(CURDIR)/dist/tollgate-image.tar $(if $(filter 1,$(PUSH)),-push)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC under config/ from the Go markers.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=tollgate-controller paths="./controllers/..." output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml charts/tollgate/crds/

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify
verify: manifests generate ## Fail if generated files are out of date.
	git diff --exit-code -- config/crd config/rbac api/ charts/tollgate/crds

##@ Test

.PHONY: test
test: ## Everything: install what tests need, vet, gofmt, all tests with -race.
	bash hack/test.sh

.PHONY: test-unit
test-unit: ## Fast tests only (no API server, no Redis).
	go test -race -count=1 -short ./pkg/... ./api/... ./dataplane/routes/...

.PHONY: envtest
envtest: ## Provide kube-apiserver, etcd and kubectl for tests (prints their directory).
	bash hack/envtest.sh

.PHONY: bench-publish
bench-publish: ## Controller snapshot publish time at 20,000 and 100,000 rules.
	go test -run '^$$' -bench Publish -benchtime 3x ./controllers/

.PHONY: bench
bench: ## Benchmark report of the default scenarios (about 12 min): .bench/report.md, results.json, plots; a summary of the targets at the end.
	@# nginx is only a reference: without it the report says it was skipped.
	-bash hack/install-deps.sh nginx
	go run ./hack/bench -out .bench

.PHONY: bench-all
bench-all: ## Every scenario, http2, regions and scale-out too (about 18 min): .bench/report.md, results.json, plots.
	-bash hack/install-deps.sh nginx
	go run ./hack/bench -all -out .bench

.PHONY: bench-report
bench-report: bench-all ## Every scenario, then its report into BENCHMARKS.md and its plots into docs/bench/.
	mkdir -p docs/bench && cp .bench/*.png docs/bench/
	sed 's|](\([a-z0-9-]*\.png\))|](docs/bench/\1)|' .bench/report.md > BENCHMARKS.md

.PHONY: bench-quick
bench-quick: ## Every benchmark scenario briefly (about 3 min): checks the harness.
	go run ./hack/bench -quick -all -out .bench/quick

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(LOCALBIN)/controller-gen $@
