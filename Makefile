# cocoonbox — `make help` lists every target.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export PATH := $(CURDIR)/.bin:$(PATH)
GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/loomhand/cocoonbox/internal/buildinfo.Version=$(VERSION)
BENCHTIME ?= 10x
FUZZTIME  ?= 60s
PROTOS  := $(shell find proto -name '*.proto')

.PHONY: help deps image image-base image-desktop build test test-unit test-integration lint gen gate dev bench fuzz clean

help: ## list every target
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## install every system package and tool that is missing (idempotent, fast when present)
	@./scripts/deps.sh

build: ## build bin/cocoonbox
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/cocoonbox ./cmd/cocoonbox

image: image-base image-desktop ## build the box images the engine and its tests run (cached by recipe hash: fast when built)

image-base: deps ## build the base image (shell, procps, Python: the runtime tests)
	./image/build.sh base >/dev/null

image-desktop: deps ## build the desktop image (XFCE, Xvnc, chromium; about 1.5 min cold)
	./image/build.sh desktop >/dev/null

test: deps image ## install what is missing, then run every test (unit and integration)
	$(GO) test -count=1 -timeout 30m ./...

test-unit: ## run the tests that need no embedded services (fast)
	$(GO) test -count=1 -short ./...

lint: ## gofmt, go vet, and the Temporal determinism check of workflows/
	@out="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | grep -v '\.pb\.go$$'))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if [[ -x .bin/workflowcheck ]]; then .bin/workflowcheck ./workflows/...; else echo "lint: run make deps for workflowcheck"; exit 1; fi

gen: ## regenerate protobuf code (committed)
	protoc -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative $(PROTOS)

gate: gen lint ## fail when generated code is stale or lint is not clean
	@if [[ -n "$$(git status --porcelain -- proto)" ]]; then echo "make gen left a diff; commit the generated code:"; git status --porcelain -- proto; exit 1; fi

dev: deps image build ## install what is missing, build, and run the whole system on its embedded defaults
	$(BIN)/cocoonbox dev

bench: deps image ## run the benchmarks (dev stack, local engine on gVisor) and write docs/benchmarks.md
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 90m ./internal/devstack/ ./internal/engine/ ./activities/ | tee bench.out
	./scripts/benchtable.sh < bench.out > docs/benchmarks.md
	@echo "wrote docs/benchmarks.md"

chaos: deps image ## kill each part inside each box operation, CLI command and agent step (TestChaos, TestChaosAPI, TestChaosAgentStep) and write docs/reliability.md
	cd internal/devstack && $(GO) test -count=1 -run '^TestChaos(API|AgentStep)?$$' -timeout 30m . -args -chaos-full -chaos-report=$(CURDIR)/docs/reliability.md
	@echo "wrote docs/reliability.md"

fuzz: ## run every fuzz target (func FuzzXxx) for FUZZTIME (60s) each, one at a time; fails on a crash
	GO='$(GO)' FUZZTIME='$(FUZZTIME)' ./scripts/fuzz.sh

clean: ## remove build outputs (not the data dir)
	rm -rf $(BIN)
