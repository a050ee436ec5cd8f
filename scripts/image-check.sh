#!/usr/bin/env bash
# image-check.sh IMAGE [CONFIG] checks the sheba container image without
# running a container (this kind of machine cannot): it reads what the image
# declares, unpacks its file system, and runs the binaries found inside as
# Kubernetes would run them: the image's sheba serves with CONFIG (default
# deploy/kubernetes/config.yaml, the ConfigMap's file) on the Postgres of
# SHEBA_TEST_DATABASE_URL, and the image's grpc_health_probe must see it
# SERVING, then NOT_SERVING while it drains after SIGTERM, and sheba must
# exit 0.
#
#   bash scripts/pg.sh test -- bash scripts/image-check.sh localhost/sheba:TAG
#
# `make image-check` builds the image and runs this.
set -euo pipefail

log() { printf 'image-check: %s\n' "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}

(($# >= 1)) || fail 'usage: image-check.sh IMAGE [CONFIG]'
image=$1
config=${2:-deploy/kubernetes/config.yaml}
: "${SHEBA_TEST_DATABASE_URL:?run under scripts/pg.sh test, which sets it}"
engine=${CONTAINER:-podman}

work=$(mktemp -d)
pid=""
cleanup() {
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# ---- what the image declares
inspect() { "$engine" image inspect --format "$1" "$image"; }
user=$(inspect '{{.Config.User}}')
[[ "$user" =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "user is '$user', want a numeric uid other than 0"
cmdline=$(inspect '{{json .Config.Entrypoint}} {{json .Config.Cmd}}')
[[ "$cmdline" == '["/usr/local/bin/sheba"] ["serve"]' ]] || fail "entrypoint and cmd are $cmdline, want sheba serve"
# Read whole before grep -q, which stops reading at its match and would
# fail the pipeline (pipefail) on the writer's SIGPIPE.
env=$(inspect '{{range .Config.Env}}{{println .}}{{end}}')
grep -qx 'SHEBA_CONFIG=/etc/sheba/config.yaml' <<<"$env" || fail "SHEBA_CONFIG is not /etc/sheba/config.yaml: $env"
log "$image: user $user, runs $cmdline, $(inspect '{{.Size}}') bytes"

# ---- its file system
root=$work/rootfs
mkdir "$root"
cid=$("$engine" create "$image")
"$engine" export "$cid" | tar -x -C "$root"
"$engine" rm "$cid" >/dev/null
files=$(cd "$root" && find . -type f | sort | tr '\n' ' ')
want='./etc/ssl/certs/ca-certificates.crt ./usr/local/bin/grpc_health_probe ./usr/local/bin/sheba '
[[ "$files" == "$want" ]] || fail "files are: $files; want: $want"
sheba=$root/usr/local/bin/sheba
probe=$root/usr/local/bin/grpc_health_probe
for bin in "$sheba" "$probe"; do
	# A scratch image has no libc: the binaries must not need one.
	info=$(go version -m "$bin")
	grep -q 'build[[:space:]]CGO_ENABLED=0' <<<"$info" || fail "$bin is not built with CGO_ENABLED=0"
done
version=$("$sheba" version)
[[ "$version" != "sheba dev "* ]] || fail "the version is not stamped: $version"
log "$version"

# ---- run it
export SHEBA_CONFIG=$config DATABASE_URL=$SHEBA_TEST_DATABASE_URL
"$sheba" migrate up
# Port 0: the kernel picks free ports, and sheba logs which.
SHEBA_HTTP_ADDR=127.0.0.1:0 SHEBA_GRPC_ADDR=127.0.0.1:0 SHEBA_LOG_FORMAT=json SHEBA_SHUTDOWN_DRAIN_DELAY=3s \
	"$sheba" serve 2>"$work/sheba.log" &
pid=$!

grpc_addr=""
for _ in $(seq 100); do
	grpc_addr=$(grep -o '"grpc_addr":"[^"]*"' "$work/sheba.log" | head -n 1 | cut -d'"' -f4) || true
	[[ -z "$grpc_addr" ]] || break
	kill -0 "$pid" 2>/dev/null || fail "sheba exited: $(cat "$work/sheba.log")"
	sleep 0.1
done
[[ -n "$grpc_addr" ]] || fail "sheba did not log its gRPC address; log: $(cat "$work/sheba.log")"

status=""
for _ in $(seq 100); do
	if status=$("$probe" -addr="$grpc_addr" 2>&1); then
		break
	fi
	kill -0 "$pid" 2>/dev/null || fail "sheba exited: $(cat "$work/sheba.log")"
	sleep 0.2
done
[[ "$status" == "status: SERVING" ]] || fail "grpc_health_probe said: $status; sheba log: $(cat "$work/sheba.log")"
log "grpc_health_probe -addr=$grpc_addr: $status"

kill -TERM "$pid"
sleep 0.5
code=0
status=$("$probe" -addr="$grpc_addr" 2>&1) || code=$?
# Exit status 4 is grpc_health_probe's "unhealthy": the server answered
# NOT_SERVING, as readiness must while sheba drains.
[[ "$code" == 4 ]] || fail "during the drain grpc_health_probe exited $code ($status), want 4 (NOT_SERVING)"
log "after SIGTERM: $status"
code=0
wait "$pid" || code=$?
pid=""
[[ "$code" == 0 ]] || fail "sheba exited $code after SIGTERM, want 0; log: $(cat "$work/sheba.log")"
log "sheba exited 0 after SIGTERM"

# ---- with TLS and the operator port: the image's probe checks both
tlsdir=$work/tls
mkdir "$tlsdir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca \
	-keyout "$tlsdir/ca.key" -out "$tlsdir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=sheba \
	-keyout "$tlsdir/tls.key" -out "$tlsdir/tls.csr" 2>/dev/null
openssl x509 -req -in "$tlsdir/tls.csr" -CA "$tlsdir/ca.crt" -CAkey "$tlsdir/ca.key" -CAcreateserial -days 1 \
	-extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n') \
	-out "$tlsdir/tls.crt" 2>/dev/null
SHEBA_HTTP_ADDR=127.0.0.1:0 SHEBA_GRPC_ADDR=127.0.0.1:0 SHEBA_OPERATOR_ADDR=127.0.0.1:0 SHEBA_LOG_FORMAT=json \
	SHEBA_TLS_CERT_FILE=$tlsdir/tls.crt SHEBA_TLS_KEY_FILE=$tlsdir/tls.key \
	"$sheba" serve 2>"$work/sheba-tls.log" &
pid=$!
grpc_addr="" operator_addr=""
for _ in $(seq 100); do
	grpc_addr=$(grep -o '"grpc_addr":"[^"]*"' "$work/sheba-tls.log" | head -n 1 | cut -d'"' -f4) || true
	operator_addr=$(grep -o '"operator_addr":"[^"]*"' "$work/sheba-tls.log" | head -n 1 | cut -d'"' -f4) || true
	[[ -z "$grpc_addr" ]] || break
	kill -0 "$pid" 2>/dev/null || fail "sheba (TLS) exited: $(cat "$work/sheba-tls.log")"
	sleep 0.1
done
[[ -n "$grpc_addr" && -n "$operator_addr" ]] || fail "sheba (TLS) did not log its addresses; log: $(cat "$work/sheba-tls.log")"
for args in "-addr=$grpc_addr -tls -tls-ca-cert=$tlsdir/ca.crt" "-addr=$operator_addr"; do
	status=""
	for _ in $(seq 100); do
		# shellcheck disable=SC2086 # the arguments are words
		if status=$("$probe" $args 2>&1); then
			break
		fi
		sleep 0.2
	done
	[[ "$status" == "status: SERVING" ]] || fail "grpc_health_probe $args said: $status; sheba log: $(cat "$work/sheba-tls.log")"
	log "grpc_health_probe $args: $status"
done
if "$probe" -addr="$grpc_addr" >/dev/null 2>&1; then
	fail "a plaintext grpc_health_probe got an answer from the TLS grpc.addr"
fi
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=""
[[ "$code" == 0 ]] || fail "sheba (TLS) exited $code after SIGTERM, want 0; log: $(cat "$work/sheba-tls.log")"
log "ok"
