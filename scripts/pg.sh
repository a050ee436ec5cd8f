#!/usr/bin/env bash
# pg.sh runs the Postgres clusters that sheba's tests and local development use.
#
#   scripts/pg.sh test -- CMD ARGS...  start a throwaway cluster, run CMD with
#                                      SHEBA_TEST_DATABASE_URL (its superuser
#                                      URL), SHEBA_TEST_PGDATA (its data folder),
#                                      SHEBA_TEST_PGLOG (its server log) and
#                                      PG_BINDIR (the binaries it runs on)
#                                      exported, then stop the cluster and
#                                      delete it; exits with CMD's status
#   scripts/pg.sh dev                  start (or reuse) the persistent cluster in
#                                      .data/pg, create database "sheba" and print
#                                      its URL on stdout (and nothing else)
#   scripts/pg.sh dev-stop             stop the persistent cluster
#
# Postgres binaries come from $PG_BINDIR, else the newest
# /usr/lib/postgresql/*/bin, else `pg_config --bindir`, else PATH. When there
# are none, root with apt-get installs Debian's "postgresql" package; anyone
# else is told what to install. initdb refuses to run as root, so as root
# every server command runs as the "postgres" user. The dev cluster lives in
# the clone's .data/, unless the postgres user cannot reach that folder (a
# clone under root's 0700 home): then it lives in a folder of its own under
# /var/tmp, named after a hash of the clone's path, so later dev and dev-stop
# calls find it again. The superuser is always named "postgres", so the URLs
# are the same whoever runs the script. Both clusters trust every local
# connection: they are for tests and development only and listen on
# 127.0.0.1.
#
# Sourcing the file defines the functions without running anything.
set -euo pipefail

# apt_install and can_apt.
# shellcheck source=scripts/need.sh
source "$(dirname "${BASH_SOURCE[0]}")/need.sh"

# The one line said when there are no server binaries and we cannot install them.
PG_INSTALL_HINT="Postgres server not found: install it (Debian: $( ((EUID == 0)) || echo 'sudo ')apt-get install postgresql) or set PG_BINDIR to the folder of its initdb, pg_ctl, postgres and psql"
readonly PG_INSTALL_HINT

log() {
	printf 'pg.sh: %s\n' "$*" >&2
}

die() {
	log "$*"
	exit 1
}

# has_server_binaries DIR succeeds when DIR holds what a cluster needs.
has_server_binaries() {
	local dir=$1 bin
	[[ -n "$dir" ]] || return 1
	for bin in initdb pg_ctl postgres psql; do
		[[ -x "$dir/$bin" ]] || return 1
	done
}

# find_bindir prints the directory of the Postgres server binaries, or fails
# quietly.
find_bindir() {
	if [[ -n "${PG_BINDIR:-}" ]]; then
		# An explicit choice that does not work is an error, not a reason to guess.
		has_server_binaries "$PG_BINDIR" || return 1
		printf '%s\n' "$PG_BINDIR"
		return 0
	fi
	local dir
	# Newest major version first: sort -V orders 9.6 before 15.
	while IFS= read -r dir; do
		if has_server_binaries "$dir"; then
			printf '%s\n' "$dir"
			return 0
		fi
	done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)
	if command -v pg_config >/dev/null 2>&1; then
		dir=$(pg_config --bindir 2>/dev/null || true)
		if has_server_binaries "$dir"; then
			printf '%s\n' "$dir"
			return 0
		fi
	fi
	if command -v initdb >/dev/null 2>&1; then
		dir=$(dirname "$(command -v initdb)")
		if has_server_binaries "$dir"; then
			printf '%s\n' "$dir"
			return 0
		fi
	fi
	return 1
}

# install_postgres installs Debian's server package with apt-get
# (scripts/need.sh), saying so on one line.
install_postgres() {
	log 'Postgres server not found: installing it with apt-get (postgresql)'
	apt_install postgresql || die 'apt-get could not install postgresql'
}

# ensure_bindir [--no-install] sets BINDIR, installing the server first when
# it is missing and we are root with apt-get; otherwise it says what to
# install and exits.
ensure_bindir() {
	if BINDIR=$(find_bindir); then
		return 0
	fi
	if [[ -n "${PG_BINDIR:-}" ]]; then
		die "PG_BINDIR=$PG_BINDIR lacks initdb, pg_ctl, postgres or psql: point it at the Postgres server binaries or unset it"
	fi
	if [[ "${1:-}" == --no-install ]] || ! can_apt; then
		die "$PG_INSTALL_HINT"
	fi
	install_postgres
	BINDIR=$(find_bindir) || die "apt-get installed postgresql but its server binaries are still not found: set PG_BINDIR"
}

# as_owner runs a command as the user that owns the clusters: "postgres" when
# we are root (initdb and postgres refuse root), else ourselves. It runs from /
# because the caller's working directory may be closed to that user.
as_owner() {
	if ((EUID == 0)); then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && "$@")
	fi
}

# check_owner fails when we are root and there is no postgres user to run as.
check_owner() {
	if ((EUID == 0)) && ! id -u postgres >/dev/null 2>&1; then
		die 'running as root needs a "postgres" user to own the cluster (initdb refuses root): create it or run as another user'
	fi
}

# give_to_owner hands PATH to the cluster owner when we are root.
give_to_owner() {
	if ((EUID == 0)); then
		chown -R postgres: "$1"
	fi
}

random_port() {
	echo $((20000 + RANDOM % 40001))
}

# port_in_use succeeds when something already listens on 127.0.0.1:PORT.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# init_cluster DATADIR creates a cluster with trust auth on 127.0.0.1 only.
init_cluster() {
	local bindir=$1 datadir=$2
	as_owner "$bindir/initdb" --pgdata="$datadir" --username=postgres \
		--auth=trust --encoding=UTF8 --no-locale --no-instructions \
		>"$datadir.initdb.log" 2>&1 || {
		cat "$datadir.initdb.log" >&2
		die "initdb failed for $datadir"
	}
	rm -f "$datadir.initdb.log"
	# Only these two lines: nothing but local sockets and 127.0.0.1, no passwords.
	as_owner tee "$datadir/pg_hba.conf" >/dev/null <<-'EOF'
		# TYPE  DATABASE  USER  ADDRESS       METHOD
		local   all       all                 trust
		host    all       all   127.0.0.1/32  trust
	EOF
}

# append_conf DATADIR LINES... adds settings to postgresql.conf.
append_conf() {
	local datadir=$1
	shift
	printf '%s\n' "$@" | as_owner tee -a "$datadir/postgresql.conf" >/dev/null
}

# start_cluster BINDIR DATADIR LOGFILE PORT starts the server and waits until
# it accepts connections.
start_cluster() {
	local bindir=$1 datadir=$2 logfile=$3 port=$4
	# 9>&-: the server must not inherit the dev lock, or it would hold it forever.
	as_owner "$bindir/pg_ctl" start --pgdata="$datadir" --log="$logfile" \
		--wait --timeout=60 --silent -o "-p $port" >/dev/null 2>&1 9>&-
}

# ---------------------------------------------------------------- test mode

# test_cleanup stops the throwaway cluster and deletes its folder.
test_cleanup() {
	if [[ -n "${TEST_DIR:-}" && -d "$TEST_DIR" ]]; then
		if [[ -f "$TEST_DIR/data/postmaster.pid" ]]; then
			# Immediate: the data is thrown away, so skip the shutdown checkpoint.
			as_owner "$BINDIR/pg_ctl" stop --pgdata="$TEST_DIR/data" \
				--mode=immediate --wait --silent >/dev/null 2>&1 || true
		fi
		rm -rf "$TEST_DIR"
	fi
}

cmd_test() {
	if [[ "${1:-}" == "--" ]]; then
		shift
	fi
	(($# > 0)) || die 'usage: pg.sh test -- CMD ARGS...'
	ensure_bindir
	check_owner

	TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sheba-pg.XXXXXX")
	trap test_cleanup EXIT
	# Without these, a signal would end the script without the EXIT trap on
	# some shells; exit codes follow the 128+signal convention.
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM

	if ((EUID == 0)); then
		give_to_owner "$TEST_DIR"
		if ! runuser -u postgres -- test -w "$TEST_DIR"; then
			# $TMPDIR is closed to postgres: /tmp is open to everyone.
			rm -rf "$TEST_DIR"
			TEST_DIR=$(mktemp -d /tmp/sheba-pg.XXXXXX)
			give_to_owner "$TEST_DIR"
		fi
	fi
	as_owner mkdir "$TEST_DIR/data" "$TEST_DIR/sock"
	chmod 700 "$TEST_DIR/data"

	init_cluster "$BINDIR" "$TEST_DIR/data"
	# Durability buys nothing for a cluster that is deleted at the end.
	append_conf "$TEST_DIR/data" \
		"listen_addresses = '127.0.0.1'" \
		"unix_socket_directories = '$TEST_DIR/sock'" \
		'max_connections = 300' \
		'fsync = off' \
		'synchronous_commit = off' \
		'full_page_writes = off' \
		"shared_buffers = '128MB'" \
		"log_min_messages = 'warning'"

	local port attempt started=false
	for attempt in 1 2 3 4 5 6 7 8; do
		port=$(random_port)
		port_in_use "$port" && continue
		if start_cluster "$BINDIR" "$TEST_DIR/data" "$TEST_DIR/postgres.log" "$port"; then
			started=true
			break
		fi
		log "start on port $port failed (attempt $attempt), trying another port"
	done
	if ! $started; then
		tail -n 20 "$TEST_DIR/postgres.log" >&2 || true
		die 'could not start the throwaway Postgres'
	fi

	export SHEBA_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	# For commands that drive the cluster themselves (make bench: pgbench,
	# psql, the postmaster's pid and log).
	export PG_BINDIR="$BINDIR" SHEBA_TEST_PGDATA="$TEST_DIR/data" SHEBA_TEST_PGLOG="$TEST_DIR/postgres.log"
	log "throwaway Postgres on 127.0.0.1:$port ($TEST_DIR)"

	local status=0
	"$@" || status=$?
	exit "$status"
}

# ----------------------------------------------------------------- dev mode

repo_root() {
	(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
}

# owner_reaches DIR succeeds when the cluster's owner can open DIR.
owner_reaches() {
	((EUID != 0)) || as_owner test -x "$1" 2>/dev/null
}

# outside_dir prints the folder that holds the dev cluster of this clone when
# the clone is closed to the postgres user: under /var/tmp (kept across
# reboots, like .data/), named after the clone's path so that every call from
# the same clone finds the same folder.
outside_dir() {
	local base=/var/tmp hash
	[[ -d $base ]] || base=/tmp
	hash=$(printf '%s' "$(repo_root)" | sha256sum | cut -c1-16)
	printf '%s/sheba-dev-%s\n' "$base" "$hash"
}

# make_outside_dir DIR creates DIR, or takes it as it is when it is a real
# folder of ours that no one else can write to: the name is predictable and
# the parent open to all, so anything else may have been put there by another
# user.
make_outside_dir() {
	local dir=$1 mode
	mkdir -m 755 "$dir" 2>/dev/null || true
	mode=$(stat -c %A "$dir" 2>/dev/null) || mode=
	if [[ -L $dir || ! -d $dir || ! -O $dir || ${mode:5:1} == w || ${mode:8:1} == w ]]; then
		die "$dir is not a folder that only $(id -un) owns and can write to: remove it and try again"
	fi
}

# set_dev_paths DIR sets DATA_DIR, PG_DIR, PORT_FILE and LOG_FILE.
set_dev_paths() {
	DATA_DIR=$1
	PG_DIR="$DATA_DIR/pg"
	PORT_FILE="$DATA_DIR/pg.port"
	LOG_FILE="$DATA_DIR/pg.log"
}

# dev_paths chooses the dev cluster's folder, creating it: the clone's .data/
# when the cluster's owner can reach it, else outside_dir (said on one line).
dev_paths() {
	local repo
	repo=$(repo_root)
	set_dev_paths "$repo/.data"
	if ((EUID != 0)); then
		mkdir -p "$DATA_DIR"
		return 0
	fi
	if owner_reaches "$repo"; then
		mkdir -p -m 755 "$DATA_DIR"
		owner_reaches "$DATA_DIR" && return 0
	fi
	set_dev_paths "$(outside_dir)"
	make_outside_dir "$DATA_DIR"
	log "the postgres user cannot reach $repo: the dev cluster lives in $DATA_DIR"
}

# dev_running succeeds when the dev cluster's server is up.
dev_running() {
	[[ -f "$PG_DIR/PG_VERSION" ]] &&
		as_owner "$BINDIR/pg_ctl" status --pgdata="$PG_DIR" >/dev/null 2>&1
}

# dev_lock serializes concurrent dev and dev-stop calls on this repo.
dev_lock() {
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$DATA_DIR/pg.lock"
		flock 9
	fi
}

cmd_dev() {
	ensure_bindir
	check_owner
	dev_paths
	dev_lock

	if [[ ! -f "$PG_DIR/PG_VERSION" ]]; then
		log "creating the dev cluster in $PG_DIR"
		rm -rf "$PG_DIR"
		mkdir -m 700 "$PG_DIR"
		give_to_owner "$PG_DIR"
		init_cluster "$BINDIR" "$PG_DIR"
		# No Unix socket: clients use TCP, and a socket path under a deep
		# checkout can exceed the 107-byte limit.
		append_conf "$PG_DIR" \
			"listen_addresses = '127.0.0.1'" \
			"unix_socket_directories = ''" \
			'max_connections = 300'
	fi
	if [[ ! -e "$LOG_FILE" ]]; then
		touch "$LOG_FILE"
		give_to_owner "$LOG_FILE"
	fi

	local port=""
	if [[ -f "$PORT_FILE" ]]; then
		port=$(<"$PORT_FILE")
	fi
	if dev_running; then
		[[ -n "$port" ]] || die "the dev cluster runs but $PORT_FILE is missing: run 'scripts/pg.sh dev-stop' and try again"
		log "reusing the dev Postgres on 127.0.0.1:$port"
	else
		local attempt started=false
		for attempt in 1 2 3 4 5 6 7 8; do
			if [[ -z "$port" ]] || port_in_use "$port"; then
				# First start, or the kept port was taken since: choose again.
				port=$(random_port)
				port_in_use "$port" && continue
			fi
			if start_cluster "$BINDIR" "$PG_DIR" "$LOG_FILE" "$port"; then
				started=true
				break
			fi
			log "start on port $port failed (attempt $attempt), see $LOG_FILE"
			port=""
		done
		$started || die "could not start the dev Postgres: see $LOG_FILE"
		printf '%s\n' "$port" >"$PORT_FILE"
		log "started the dev Postgres on 127.0.0.1:$port"
	fi

	local psql=("$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres)
	if [[ -z "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'sheba'")" ]]; then
		"${psql[@]}" -c 'CREATE DATABASE sheba' >/dev/null
		log 'created database sheba'
	fi
	printf 'postgres://postgres@127.0.0.1:%s/sheba?sslmode=disable\n' "$port"
}

# cmd_dev_stop stops the dev cluster wherever dev may have put it: as root
# both the clone's .data/ and its folder under /var/tmp are looked at, so a
# clone whose permissions changed since still has its server stopped.
cmd_dev_stop() {
	local dir dirs found=false
	dirs=("$(repo_root)/.data")
	if ((EUID == 0)); then
		dirs+=("$(outside_dir)")
	fi
	for dir in "${dirs[@]}"; do
		[[ -f "$dir/pg/PG_VERSION" ]] || continue
		if ! $found; then
			found=true
			# A cluster to stop needs no install: only look for what is there.
			ensure_bindir --no-install
		fi
		set_dev_paths "$dir"
		(
			dev_lock
			if dev_running; then
				as_owner "$BINDIR/pg_ctl" stop --pgdata="$PG_DIR" --mode=fast --wait --silent
				log "stopped the dev Postgres in $PG_DIR"
			else
				log "the dev Postgres in $PG_DIR is not running"
			fi
		)
	done
	$found || log 'no dev cluster'
}

main() {
	case "${1:-}" in
	test)
		shift
		cmd_test "$@"
		;;
	dev) cmd_dev ;;
	dev-stop) cmd_dev_stop ;;
	*)
		printf 'usage: %s test -- CMD ARGS... | dev | dev-stop\n' "$0" >&2
		exit 2
		;;
	esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	main "$@"
fi
