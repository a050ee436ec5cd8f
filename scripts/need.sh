#!/usr/bin/env bash
# need.sh makes sure the server programs that sheba's tests start are on
# this machine:
#
#   scripts/need.sh PROGRAM[=PACKAGE]...
#
# A program already on PATH (or in /usr/sbin, where Debian puts some
# servers) is left alone. Root with apt-get installs the missing ones from
# Debian's packages (PACKAGE, else the program's own name), saying so on
# one line each; anyone else is told, on one line, what to install, and the
# script fails. make test runs it before the tests; scripts/pg.sh installs
# the Postgres server the same way.
#
# Sourcing the file defines the functions without running anything.
set -euo pipefail

need_log() {
	printf 'need.sh: %s\n' "$*" >&2
}

# has_program NAME succeeds when NAME can be run.
has_program() {
	command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]
}

# can_apt succeeds when we are root and apt-get can be run.
can_apt() {
	local p
	((EUID == 0)) && p=$(command -v apt-get 2>/dev/null) && [[ -x $p ]]
}

# install_hint PACKAGE... prints what to install.
install_hint() {
	printf 'Debian: %sapt-get install %s' "$( ((EUID == 0)) || echo 'sudo ')" "$*"
}

# apt_install PACKAGE... installs Debian packages, apt's output in a log
# that is shown only when it fails. apt-get update runs once per process.
apt_install() {
	local out status=0
	out=$(mktemp "${TMPDIR:-/tmp}/sheba-apt.XXXXXX")
	{
		if [[ -z "${SHEBA_APT_UPDATED:-}" ]]; then
			apt-get update -q
		fi
		# Only what the tests run: prometheus recommends a node exporter
		# (and smartmontools, ipmitool…), which would be started as
		# services where systemd runs.
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$@"
	} >"$out" 2>&1 </dev/null || status=$?
	if ((status != 0)); then
		tail -n 20 "$out" >&2
		rm -f "$out"
		need_log "apt-get could not install $* (its output is above)"
		return 1
	fi
	rm -f "$out"
	SHEBA_APT_UPDATED=1
}

# need PROGRAM[=PACKAGE]... installs what is missing, or says what to
# install and fails.
need() {
	local spec prog pkg missing=() pkgs=()
	for spec in "$@"; do
		prog=${spec%%=*}
		pkg=${spec#*=}
		has_program "$prog" && continue
		missing+=("$prog")
		pkgs+=("$pkg")
	done
	((${#missing[@]} > 0)) || return 0
	if ! can_apt; then
		need_log "${missing[*]} not found: the tests start it; install it ($(install_hint "${pkgs[@]}"))"
		return 1
	fi
	local i
	for i in "${!missing[@]}"; do
		# A package installed for an earlier program may have brought it.
		has_program "${missing[$i]}" && continue
		need_log "${missing[$i]} not found: installing it with apt-get (${pkgs[$i]})"
		apt_install "${pkgs[$i]}" || return 1
		has_program "${missing[$i]}" || {
			need_log "apt-get installed ${pkgs[$i]} but ${missing[$i]} is still not found"
			return 1
		}
	done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	need "$@"
fi
