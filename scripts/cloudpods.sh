#!/usr/bin/env bash
# scripts/cloudpods.sh: a throwaway Cloudpods control plane for the live
# tests (make test-cloudpods; docs/cloudpods.md, "Live tests"): MariaDB,
# Cloudpods' keystone and region, on 127.0.0.1 only, from binaries the
# caller brings. Nothing of Cloudpods is in this repository: BIN holds
# keystone, region and climc built from Cloudpods' public source (plain,
# or internal/testsupport/cloudpods unpacks them from .xz first).
#
#   scripts/cloudpods.sh up WORK BIN     start; WORK/cloudpods.env says where
#   scripts/cloudpods.sh down WORK [--purge]
#
# up, in order: a MariaDB of its own under WORK (its socket and datadir
# there; a MariaDB of the machine is not touched), its two databases and
# users; keystone, which makes the admin user sysadmin (project system) on
# its first start; a policy that lets that user do anything, the keystone
# region, the catalog (identity; compute_v2 and compute, both the region);
# the region; a zone, wire and network for 127.0.0.0/24 hosts; and, unless
# CP_CREATE_HOST=0, a host record of host_type container as Cloudpods' host
# agent registers one. Ports and names come from the environment (below);
# the internal tests pick free ports. A failed step stops what up started.
#
#   CP_DB_PORT CP_KEYSTONE_PORT CP_KEYSTONE_ADMIN_PORT CP_REGION_PORT
#       the ports clients use (defaults 33306 35000 35357 38888)
#   CP_KEYSTONE_LISTEN CP_REGION_LISTEN
#       where keystone and the region listen, when something else (the
#       tests' recording proxies) serves the ports clients use
#   CP_REGION_NAME (region0)  CP_ADMIN_PASSWORD (random)
#   CP_CREATE_HOST (1)  CP_HOST_NAME (gpuhost0)  CP_HOST_IP (127.0.0.1)
#   CP_HOST_MAC (02:00:00:00:00:01)  CP_WAIT (180: seconds per service)
#
# Needs root (MariaDB runs as root here), mariadb-server and curl.
set -euo pipefail

usage() { echo "usage: $0 up WORK BIN | down WORK [--purge]" >&2; exit 2; }
say() { echo "cloudpods.sh: $*" >&2; }

# pid files: WORK/run/<name>.pid; a pid is only trusted while the process
# still runs the program it was started as.
running() { # name program
	local f=$W/run/$1.pid pid
	[ -s "$f" ] || return 1
	pid=$(<"$f")
	[ -r /proc/"$pid"/cmdline ] && tr '\0' ' ' </proc/"$pid"/cmdline | grep -qF -- "$2"
}

halt() { # name program seconds
	local pid i
	running "$1" "$2" || { rm -f "$W/run/$1.pid"; return 0; }
	pid=$(<"$W/run/$1.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < $3 * 10; i++)); do
		[ -d /proc/"$pid" ] || break
		sleep 0.1
	done
	[ -d /proc/"$pid" ] && { kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; }
	[ -d /proc/"$pid" ] && { say "$1 (pid $pid) did not stop"; return 1; }
	rm -f "$W/run/$1.pid"
}

down() {
	local ok=0
	halt region "$W/bin/region" 20 || ok=1
	halt keystone "$W/bin/keystone" 20 || ok=1
	halt mariadb mariadbd 60 || ok=1
	return $ok
}

spawn() { # name log program args...
	local name=$1 log=$2
	shift 2
	setsid "$@" >>"$log" 2>&1 </dev/null &
	echo $! >"$W/run/$name.pid"
	say "$name started (pid $!)"
}

# await: run a check until it passes, while the service runs, CP_WAIT at most.
await() { # name program check...
	local name=$1 prog=$2 until=$((SECONDS + ${CP_WAIT:-180}))
	shift 2
	until "$@" >/dev/null 2>&1; do
		running "$name" "$prog" || { say "$name exited (logs in $W/log)"; return 1; }
		((SECONDS < until)) || { say "$name: no answer in ${CP_WAIT:-180}s (logs in $W/log)"; return 1; }
		sleep 0.3
	done
}

[ $# -ge 2 ] || usage
cmd=$1
mkdir -p "$2"
W=$(cd "$2" && pwd)
case $cmd in
down)
	down || exit 1
	[ "${3:-}" = --purge ] && rm -rf -- "$W"
	exit 0
	;;
up) [ $# -eq 3 ] || usage ;;
*) usage ;;
esac
[ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }
B=$(cd "$3" && pwd)
for p in keystone region climc; do
	[ -x "$B/$p" ] || { say "no executable $p in $B"; exit 1; }
done
command -v mariadb-install-db >/dev/null && command -v curl >/dev/null ||
	{ say "needs mariadb-server and curl (apt-get install mariadb-server curl)"; exit 1; }
trap 'rc=$?; if [ $rc != 0 ]; then say "failed; stopping what was started"; down || true; fi' EXIT

mkdir -p "$W"/{bin,etc,log,run,tmp,mysql/data,mysql/run}
for p in keystone region climc; do ln -sf "$B/$p" "$W/bin/$p"; done
secret() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
DB_PORT=${CP_DB_PORT:-33306}
KS_PORT=${CP_KEYSTONE_PORT:-35000} KS_ADMIN_PORT=${CP_KEYSTONE_ADMIN_PORT:-35357}
REGION_PORT=${CP_REGION_PORT:-38888}
KS_LISTEN=${CP_KEYSTONE_LISTEN:-$KS_PORT} REGION_LISTEN=${CP_REGION_LISTEN:-$REGION_PORT}
REGION_NAME=${CP_REGION_NAME:-region0}
ADMIN_PASSWORD=${CP_ADMIN_PASSWORD:-Mps$(secret)}
KS_DB=ks$(secret) RG_DB=rg$(secret)
KS_URL=http://127.0.0.1:$KS_PORT/v3
REGION_URL=http://127.0.0.1:$REGION_PORT
SOCK=$W/mysql/run/mysqld.sock

# MariaDB
mariadb-install-db --no-defaults --user=root --datadir="$W/mysql/data" --skip-test-db \
	--auth-root-authentication-method=normal >"$W/log/mariadb-install-db.log" 2>&1
spawn mariadb "$W/log/mariadb.log" "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --no-defaults \
	--user=root --datadir="$W/mysql/data" --socket="$SOCK" --bind-address=127.0.0.1 --port="$DB_PORT" \
	--pid-file="$W/mysql/run/mysqld.pid" --skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=128M \
	--character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci
await mariadb mariadbd mariadb-admin --no-defaults -S "$SOCK" -uroot ping
mariadb --no-defaults -S "$SOCK" -uroot <<SQL
CREATE DATABASE keystone CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE DATABASE yunioncloud CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER 'keystone'@'127.0.0.1' IDENTIFIED BY '$KS_DB';
CREATE USER 'region'@'127.0.0.1' IDENTIFIED BY '$RG_DB';
GRANT ALL PRIVILEGES ON keystone.* TO 'keystone'@'127.0.0.1';
GRANT ALL PRIVILEGES ON yunioncloud.* TO 'region'@'127.0.0.1';
SQL

# keystone: its options as YAML (Cloudpods' services read YAML or key = value)
umask 077
cat >"$W/etc/keystone.conf" <<CONF
address: 127.0.0.1
port: $KS_LISTEN
admin_port: $KS_ADMIN_PORT
region: $REGION_NAME
sql_connection: mysql+pymysql://keystone:$KS_DB@127.0.0.1:$DB_PORT/keystone?charset=utf8
auto_sync_table: true
bootstrap_admin_user_password: $ADMIN_PASSWORD
key_repository: $W/fernet-keys
temp_path: $W/tmp
rbac_policy_refresh_interval_seconds: 5
log_level: info
CONF
umask 022
spawn keystone "$W/log/keystone.log" "$W/bin/keystone" --config "$W/etc/keystone.conf"
login() { # prints the HTTP status of a login as the admin user
	curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$KS_URL/auth/tokens" -d @- <<JSON
{"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "sysadmin",
 "domain": {"name": "Default"}, "password": "$ADMIN_PASSWORD"}}},
 "scope": {"project": {"name": "system", "domain": {"name": "Default"}}}}}
JSON
}
login_ok() { [ "$(login)" = 200 ]; }
await keystone "$W/bin/keystone" login_ok

export OS_AUTH_URL=$KS_URL OS_USERNAME=sysadmin OS_PASSWORD=$ADMIN_PASSWORD OS_PROJECT_NAME=system \
	OS_REGION_NAME=$REGION_NAME OS_DOMAIN_NAME=Default OS_PROJECT_DOMAIN=Default
climc() { "$W/bin/climc" "$@" >>"$W/log/climc.log" 2>&1; }
# The admin user may do anything: a system policy allowing all, bound to
# its role. Policies are cached for rbac_policy_refresh_interval_seconds.
printf 'policy:\n  "*": allow\n' >"$W/etc/allow-all.yaml"
climc policy-create --scope system --enabled --is-system sysadmin "$W/etc/allow-all.yaml"
climc policy-bind-role --role-id admin --project-id system sysadmin
await keystone "$W/bin/keystone" climc region-list
climc region-create "$REGION_NAME"
climc service-create --enabled identity keystone
climc service-create --enabled compute_v2 region2 # what Cloudpods' clients resolve the region by
climc service-create --enabled compute region
for itf in internal public; do
	climc endpoint-create --enabled keystone "$REGION_NAME" $itf "$KS_URL"
	climc endpoint-create --enabled region2 "$REGION_NAME" $itf "$REGION_URL"
	climc endpoint-create --enabled region "$REGION_NAME" $itf "$REGION_URL"
done
climc endpoint-create --enabled keystone "$REGION_NAME" admin "http://127.0.0.1:$KS_ADMIN_PORT/v3"

# the region; it reaches keystone directly (its own calls are not the tests')
umask 077
cat >"$W/etc/region.conf" <<CONF
address: 127.0.0.1
port: $REGION_LISTEN
region: $REGION_NAME
auth_url: http://127.0.0.1:$KS_LISTEN/v3
admin_user: sysadmin
admin_password: $ADMIN_PASSWORD
admin_project: system
sql_connection: mysql+pymysql://region:$RG_DB@127.0.0.1:$DB_PORT/yunioncloud?charset=utf8
auto_sync_table: true
temp_path: $W/tmp
log_level: info
CONF
umask 022
spawn region "$W/log/region.log" "$W/bin/region" --config "$W/etc/region.conf"
# /ping answers Cloudpods' own user agents only
await region "$W/bin/region" curl -sf -A kube-probe "$REGION_URL/ping"
await region "$W/bin/region" climc cloud-region-list

ZONE_ID="" HOST_ID=""
if [ "${CP_CREATE_HOST:-1}" = 1 ]; then
	HOST_NAME=${CP_HOST_NAME:-gpuhost0} HOST_IP=${CP_HOST_IP:-127.0.0.1} HOST_MAC=${CP_HOST_MAC:-02:00:00:00:00:01}
	climc zone-create --region default zone0
	climc wire-create --vpc default zone0 wire0 1000
	# Cloudpods' host agent finds its zone by the network of its address
	climc network-create --server-type baremetal wire0 hostnet0 "${HOST_IP%.*}.1" "${HOST_IP%.*}.254" 24
	field() { "$W/bin/climc" --output-format kv "$1" "$2" 2>/dev/null | sed -n "s/^ *id: //p" | head -1; }
	ZONE_ID=$(field zone-show zone0)
	TOKEN=$(curl -s -D - -o /dev/null -H 'Content-Type: application/json' "$KS_URL/auth/tokens" -d @- <<JSON | tr -d '\r' | sed -n 's/^[Xx]-[Ss]ubject-[Tt]oken: //p'
{"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "sysadmin",
 "domain": {"name": "Default"}, "password": "$ADMIN_PASSWORD"}}},
 "scope": {"project": {"name": "system", "domain": {"name": "Default"}}}}}
JSON
	)
	# the host record as the host agent makes it at its first start
	curl -sf -o "$W/log/host-create.json" -X POST -A yunioncloud-go/201708 -H "X-Auth-Token: $TOKEN" \
		-H 'Content-Type: application/json' "$REGION_URL/zones/$ZONE_ID/hosts" -d @- <<JSON
{"host": {"name": "$HOST_NAME", "hostname": "$HOST_NAME", "access_ip": "$HOST_IP", "access_mac": "$HOST_MAC",
 "manager_uri": "http://$HOST_IP:8885", "host_type": "container", "cpu_count": 16, "node_count": 1,
 "cpu_desc": "test cpu", "cpu_mhz": 2400, "cpu_cache": "32768", "mem_size": "131072", "mem_reserved": "4096",
 "page_size_kb": 4, "storage_driver": "Linux", "storage_type": "rotate", "storage_size": 1048576,
 "sys_info": {}, "version": "mps-daemon-tests"}}
JSON
	HOST_ID=$(field host-show "$HOST_NAME")
	[ -n "$HOST_ID" ] || { say "the host record was not made (see $W/log/host-create.json)"; exit 1; }
fi

umask 077
cat >"$W/cloudpods.env" <<ENV
export OS_AUTH_URL=$KS_URL
export OS_USERNAME=sysadmin
export OS_PASSWORD=$ADMIN_PASSWORD
export OS_PROJECT_NAME=system
export OS_REGION_NAME=$REGION_NAME
export OS_DOMAIN_NAME=Default
export OS_PROJECT_DOMAIN=Default
export CLOUDPODS_REGION_URL=$REGION_URL
export CLOUDPODS_ZONE_ID=$ZONE_ID
export CLOUDPODS_HOST_ID=$HOST_ID
export CLOUDPODS_CLIMC=$W/bin/climc
ENV
say "ready: $W/cloudpods.env"
