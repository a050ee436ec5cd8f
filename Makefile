# sheba: see README.md. Every target works offline once the Go module cache
# is warm (and, for make generate, make test and the browser targets, the
# npm cache: npm ci installs from it); buf and the Go protoc plugins are Go tools
# pinned in tools/go.mod, the TypeScript ones npm packages pinned in
# tools/ts/package-lock.json.

SHELL := /bin/bash
GO ?= go
TOOL := GOWORK=off $(GO) tool -modfile=tools/go.mod
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN := bin/sheba
# Packages under test: the service's module (./... leaves out the nested
# modules: tools/, the manifest checker, deploy/kubecheck, the tests of
# faults between sheba and Postgres, e2e/faults, and the bench's peer
# frameworks, bench/peers, whose tests run beside).
PKGS := ./...
KUBECHECK := GOWORK=off $(GO) -C deploy/kubecheck
PEERS := GOWORK=off $(GO) -C bench/peers
# (env: scripts/pg.sh runs it as a command.)
FAULTS := env GOWORK=off $(GO) -C e2e/faults
TESTFLAGS ?= -shuffle=on -count=1

.PHONY: all build run test test-race fuzz generate generate-check lint vulncheck bench bench-limits clean dev-db-stop

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sheba

# Serve with config/dev.yaml. Without DATABASE_URL a dev Postgres under .data/
# is started (or reused) first: scripts/pg.sh installs the Postgres server when
# it is missing and we are root, and keeps the cluster under /var/tmp when the
# postgres user cannot reach this clone (root's 0700 home).
run: build
	@if [ -z "$$DATABASE_URL" ]; then \
		url=$$(bash scripts/pg.sh dev) || exit 1; \
		export DATABASE_URL="$$url"; \
	fi; \
	exec ./$(BIN) serve --config config/dev.yaml --migrate

# The npm tools (tools/ts/package.json): protoc-gen-es for make generate,
# esbuild and tsc for the example page, Redocly CLI and Stoplight Prism for
# make test (the OpenAPI 3.1 document). npm ci installs exactly what
# tools/ts/package-lock.json pins, again whenever the lockfile changes;
# scripts/need.sh installs Debian's nodejs and npm first when they are
# missing and we are root (protoc-gen-es wants Node.js 20 or later).
NPM_TOOLS := tools/ts/node_modules/.package-lock.json
NPM_BIN := tools/ts/node_modules/.bin
# (Defined before the first rule that names them: make expands a rule's
# prerequisites as it reads the rule.)

# The server programs the tests start besides Postgres (PROGRAM=PACKAGE):
# scripts/need.sh installs the missing ones first when we are root, and
# otherwise names what to install. Debian's prometheus package has both
# prometheus (e2e's TestPrometheusRules) and promtool (the rules' tests in
# deploy/prometheus, e2e's TestDashboard).
TEST_PROGRAMS := redis-server=redis-server prometheus=prometheus promtool=prometheus

# Every test, against a throwaway Postgres that scripts/pg.sh starts and removes
# (installing the server first when it is missing and we are root). The npm
# tools come first: Redocly lints the OpenAPI 3.1 document, and the tests of
# build tag prism (e2e/prism_test.go) run the REST flow through Stoplight
# Prism. The tools' own tests (tools/, a module of its own) run beside, and
# so do the tests of faults between sheba and Postgres (e2e/faults, a
# module of its own for Toxiproxy), on a throwaway Postgres of their own,
# and those of the bench's peer frameworks (bench/peers: each serves the
# ping on 127.0.0.1).
test: $(NPM_TOOLS)
	bash scripts/need.sh $(TEST_PROGRAMS)
	$(REDOCLY) lint --extends=recommended --format=stylish gen/openapiv3/sheba.openapi.json
	bash scripts/pg.sh test -- $(GO) test -tags prism $(TESTFLAGS) $(PKGS)
	bash scripts/pg.sh test -- $(FAULTS) test $(TESTFLAGS) ./...
	GOWORK=off $(GO) -C tools test $(TESTFLAGS) ./...
	$(KUBECHECK) test $(TESTFLAGS) ./...
	@# Without TESTFLAGS' -race (CI passes it): that would build Kratos's
	@# and go-zero's dependencies once more with the race detector (about
	@# 3 minutes cold) for three ping servers; make test-race has them.
	$(PEERS) test -shuffle=on -count=1 ./...

test-race: $(NPM_TOOLS)
	bash scripts/need.sh $(TEST_PROGRAMS)
	bash scripts/pg.sh test -- $(GO) test -tags prism -race $(TESTFLAGS) $(PKGS)
	bash scripts/pg.sh test -- $(FAULTS) test -race $(TESTFLAGS) ./...
	GOWORK=off $(GO) -C tools test -race $(TESTFLAGS) ./...
	$(KUBECHECK) test -race $(TESTFLAGS) ./...
	$(PEERS) test -race $(TESTFLAGS) ./...

# Every fuzz target for FUZZTIME each (default 30s), on the throwaway Postgres
# (scripts/fuzz.sh). make test already runs their seed corpora.
FUZZTIME ?= 30s
fuzz:
	bash scripts/need.sh $(TEST_PROGRAMS)
	bash scripts/pg.sh test -- bash scripts/fuzz.sh $(FUZZTIME)

# Redocly CLI's recommended rules (make test: no error; warnings are
# listed), with its telemetry and its update check off: it asks nothing of
# the network.
REDOCLY := REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(NPM_BIN)/redocly

$(NPM_TOOLS): tools/ts/package.json tools/ts/package-lock.json
	bash scripts/need.sh node=nodejs npm=npm
	cd tools/ts && npm ci --no-audit --no-fund
	@touch $@

# Regenerate gen/ and the TypeScript client (clients/ts/gen) from proto/.
# The OpenAPI 3.1 document is made in three steps: protoc-gen-openapiv3
# writes one document per proto file (buf generate, into .build/openapiv3),
# openapiv3-merge merges them, and tools/openapiv3-sheba completes the
# merged one from the protos' descriptors: the policies, the buf.validate
# rules, the error answers. Those descriptors are gen/sheba.binpb (buf
# build), the descriptor set of proto/ and of every file it imports
# (buf/validate/validate.proto among them; without source info), written
# after buf generate, which empties gen/ first: server's
# TestValidateProtoIsTheRuntimes reads it too. Then the files that are ours to
# write: the Go files that embed the OpenAPI documents, so the binary can
# serve them, and clients/ts/index.ts, which exports every generated
# TypeScript module. scripts/docsassets.sh writes gen/docs, the reference
# page's scripts and styles from a pinned npm package.
OPENAPIV3 := .build/openapiv3
generate: $(NPM_TOOLS)
	bash scripts/protodeps.sh
	$(TOOL) buf generate
	bash scripts/docsassets.sh
	$(TOOL) buf build proto --exclude-source-info -o gen/sheba.binpb
	$(TOOL) openapiv3-merge $$(find $(OPENAPIV3) -name '*.openapi.json' | LC_ALL=C sort) > $(OPENAPIV3)/merged.json
	mkdir -p gen/openapiv3
	GOWORK=off $(GO) -C tools run ./openapiv3-sheba -descriptors $(CURDIR)/gen/sheba.binpb \
		-options $(CURDIR)/proto/sheba/v1/sheba.openapi.yaml < $(OPENAPIV3)/merged.json > gen/openapiv3/sheba.openapi.json
	@printf '%s\n' \
		'// Code generated by make generate. DO NOT EDIT.' '' \
		'// Package openapiv2 embeds the OpenAPI 2 document that buf generate' \
		'// produced from proto/.' \
		'package openapiv2' '' \
		'import _ "embed"' '' \
		'// Document is the merged OpenAPI 2 (Swagger) document of the sheba API.' \
		'//' \
		'//go:embed sheba.swagger.json' \
		'var Document string' > gen/openapiv2/openapiv2.go
	@printf '%s\n' \
		'// Code generated by make generate. DO NOT EDIT.' '' \
		'// Package openapiv3 embeds the OpenAPI 3.1 document that make generate' \
		'// produced from proto/ (protoc-gen-openapiv3, openapiv3-merge and' \
		'// tools/openapiv3-sheba).' \
		'package openapiv3' '' \
		'import _ "embed"' '' \
		'// Document is the OpenAPI 3.1 document of the sheba API.' \
		'//' \
		'//go:embed sheba.openapi.json' \
		'var Document string' > gen/openapiv3/openapiv3.go
	@{ printf '%s\n' \
		'// Code generated by make generate. DO NOT EDIT.' '' \
		'// The sheba API client: every module protoc-gen-es generated from proto/.'; \
		cd clients/ts && find gen/sheba -name '*_pb.ts' | LC_ALL=C sort | \
			sed -e 's|\.ts$$|.js|' -e 's|.*|export * from "./&";|'; \
	} > clients/ts/index.ts

# Fails when gen/ or clients/ts is not what make generate produces from
# proto/.
GENERATED := gen clients/ts
generate-check: generate
	@git add -N $(GENERATED) >/dev/null 2>&1 || true
	@if ! git diff --quiet -- $(GENERATED); then \
		echo "$(GENERATED) out of date with proto/: run 'make generate' and commit the result" >&2; \
		git diff --stat -- $(GENERATED) >&2; exit 1; \
	fi

lint: $(NPM_TOOLS)
	bash scripts/protodeps.sh
	$(TOOL) buf lint proto
	$(GO) vet -tags prism $(PKGS)
	GOWORK=off $(GO) -C tools vet ./...
	$(KUBECHECK) vet ./...
	$(FAULTS) vet ./...
	$(PEERS) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

# Known vulnerabilities in what the service calls: govulncheck (pinned in
# tools/go.mod) over the service's module, against the Go vulnerability
# database at VULNDB_VERSION, a version of the module golang.org/x/vulndb:
# it comes from the Go module proxy like any module, carries every report
# as an OSV file (data/osv), and its own cmd/indexdb, built from the same
# version, turns them into the database govulncheck reads (-db file://), so
# vuln.go.dev is never asked. Bump VULNDB_VERSION to take newer reports
# (`go list -m golang.org/x/vulndb@latest` names the newest). What fails:
# scripts/vulngate (a called vulnerability that a go get, or the Go of
# go.mod's toolchain line, would fix; one fixed only in a newer Go is
# listed and waits for it).
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB := bin/vulndb/$(VULNDB_VERSION)
TOOLCHAIN = $(shell sed -n 's/^toolchain //p' go.mod)

$(VULNDB)/index/db.json:
	rm -rf $(VULNDB)
	GOWORK=off $(GO) mod download golang.org/x/vulndb@$(VULNDB_VERSION)
	GOWORK=off $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) \
		-vulns "$$($(GO) env GOMODCACHE)/golang.org/x/vulndb@$(VULNDB_VERSION)/data/osv" -out $(VULNDB)

vulncheck: $(VULNDB)/index/db.json
	$(TOOL) govulncheck -db file://$(CURDIR)/$(VULNDB) -format json $(PKGS) > bin/vulncheck.json
	$(GO) run ./scripts/vulngate -toolchain "$(TOOLCHAIN)" < bin/vulncheck.json

# Load benchmarks (bench/README.md): sheba beside bare baselines and the
# peer frameworks of bench/peers; SCENARIO=ping-rest (or a comma list, such
# as peer-rest,peer-grpc for the peer rows) runs only those, and
# BENCHFLAGS passes other flags (e.g. BENCHFLAGS="-pairs 5 -d 10s"). The
# driver runs on the throwaway Postgres of scripts/pg.sh, like the tests.
bench:
	bash scripts/pg.sh test -- $(GO) run ./bench/cmd/sheba-bench -go "$(GO)" $(if $(SCENARIO),-scenario "$(SCENARIO)") $(BENCHFLAGS)
	$(if $(SCENARIO),,$(MAKE) bench-limits)

# The limits' own measurements (bench/README.md): the cost of one rate-limit
# decision in Redis beside the in-process bucket, and the adaptive
# concurrency limit under overload (about 45 s). make bench runs it after
# the table.
bench-limits:
	bash scripts/need.sh $(TEST_PROGRAMS)
	$(GO) test -run '^$$' -bench BenchmarkAllow -benchtime 2s ./interceptors/ratelimit/redislimit
	SHEBA_OVERLOAD=1 bash scripts/pg.sh test -- $(GO) test -count=1 -run '^TestAdaptiveOverload$$' -v ./e2e

# Stops the dev Postgres of make run (in .data/, or its folder under /var/tmp).
dev-db-stop:
	bash scripts/pg.sh dev-stop

clean:
	rm -rf bin

# ---------------------------------------------------------------- deployment
# docs/deployment.md: the container image, the Kubernetes manifests and the
# rolling-restart test.

CONTAINER ?= podman
IMAGE ?= localhost/sheba
IMAGE_DIR := bin/image

.PHONY: image image-check deploy-check test-deploy

# The image: static sheba (version stamped) and grpc_health_probe, the CA
# bundle of this machine, deploy/Containerfile; tagged $(IMAGE):$(VERSION)
# and :latest in the local image store.
image:
	@if ! command -v $(CONTAINER) >/dev/null 2>&1; then \
		if [ "$(CONTAINER)" = podman ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "image: podman is missing, installing it with apt-get"; \
			apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman >/dev/null || exit 1; \
		else \
			echo "image: $(CONTAINER) not found: install podman (Debian: apt-get install podman) or set CONTAINER=docker" >&2; exit 1; \
		fi; \
	fi
	@test -r /etc/ssl/certs/ca-certificates.crt || { echo "image: /etc/ssl/certs/ca-certificates.crt missing (Debian: apt-get install ca-certificates)" >&2; exit 1; }
	rm -rf $(IMAGE_DIR) && mkdir -p $(IMAGE_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(IMAGE_DIR)/sheba ./cmd/sheba
	CGO_ENABLED=0 GOWORK=off $(GO) build -modfile=tools/go.mod -trimpath -o $(IMAGE_DIR)/grpc_health_probe github.com/grpc-ecosystem/grpc-health-probe
	cp /etc/ssl/certs/ca-certificates.crt $(IMAGE_DIR)/
	$(CONTAINER) build -f deploy/Containerfile -t $(IMAGE):$(VERSION) -t $(IMAGE):latest $(IMAGE_DIR)
	@$(CONTAINER) images $(IMAGE):$(VERSION)

# Unpacks the image and runs what is inside: its sheba on a throwaway
# Postgres, its grpc_health_probe against that sheba (SERVING, then
# NOT_SERVING while it drains).
image-check: image
	bash scripts/pg.sh test -- bash scripts/image-check.sh $(IMAGE):$(VERSION)

# Renders deploy/kubernetes (and its documented variants: the exec
# readiness probe, TLS and mTLS) with the pinned kustomize and checks every
# object offline (deploy/kubecheck, a module of its own: its k8s.io
# dependencies are not the service's), then proves the check fails on each
# broken overlay in deploy/kubecheck/testdata.
DEPLOY_VARIANTS := $(addprefix deploy/kubecheck/testdata/,ok-exec-readiness ok-tls ok-mtls)
deploy-check: build
	$(KUBECHECK) build -o $(CURDIR)/bin/kubecheck .
	bin/kubecheck -sheba $(BIN) deploy/kubernetes $(DEPLOY_VARIANTS)
	$(KUBECHECK) test -count=1 ./...

# The rolling-restart test (deploy/rollout_test.go, build tag rollout): two
# replicas behind HAProxy, each restarted in turn under load on REST and
# gRPC; 0 failed requests. Needs haproxy (Debian: apt-get install haproxy).
test-deploy:
	$(GO) vet -tags rollout ./deploy
	bash scripts/pg.sh test -- $(GO) test -tags rollout -count=1 -v -run TestRollingRestart ./deploy

# ------------------------------------------------------------------ browser
# docs/browser.md: the example page of examples/browser, which calls sheba
# through the generated TypeScript client (clients/ts), and its test in
# headless Chromium.

BROWSER_DIR := bin/browser
# The page's own origin, other than make run's http.addr (:8080);
# config/dev.yaml allows it in http.cors.allowed_origins.
EXAMPLE_ADDR ?= 127.0.0.1:8081
# esbuild finds the npm packages of the page and of clients/ts in the
# tools' node_modules (NODE_PATH: neither folder has its own).
ESBUILD := NODE_PATH=$(CURDIR)/tools/ts/node_modules $(NPM_BIN)/esbuild examples/browser/main.ts \
	--bundle --minify --format=esm --target=es2022 --sourcemap --log-level=warning --outfile=$(BROWSER_DIR)/main.js

.PHONY: example-browser-build example-browser test-browser

# The page in bin/browser: type-checked with the client, bundled by
# esbuild from node_modules (offline once npm ci has run).
example-browser-build: $(NPM_TOOLS)
	$(NPM_BIN)/tsc -p examples/browser
	rm -rf $(BROWSER_DIR) && mkdir -p $(BROWSER_DIR)
	cp examples/browser/index.html $(BROWSER_DIR)/
	$(ESBUILD)

# Builds the page and serves bin/browser on EXAMPLE_ADDR with esbuild's
# file server, for a sheba that make run serves in another terminal; run
# it again after a change to main.ts. (esbuild's serve mode, which bundles
# on each request, ignores NODE_PATH, so it cannot find the packages.)
example-browser: example-browser-build
	@echo "example-browser: open http://$(EXAMPLE_ADDR)/ (sheba: make run in another terminal)"
	$(NPM_BIN)/esbuild --servedir=$(BROWSER_DIR) --serve=$(EXAMPLE_ADDR)

# The page in headless Chromium (e2e/browserpage_test.go, build tag browser,
# which make test leaves out) against sheba on a throwaway Postgres: the
# pong and the list from an allowed origin, the failure from another. And
# the API reference page at /docs (e2e/docspage_test.go): every operation
# shown, no request but to sheba, no CSP violation.
# Installs Debian's chromium when it is missing and we are root.
test-browser: example-browser-build
	bash scripts/need.sh chromium=chromium
	$(GO) vet -tags browser ./e2e
	bash scripts/pg.sh test -- $(GO) test -tags browser -count=1 -v -run '^(TestBrowserPage|TestDocsPage$$)' ./e2e
