#!/usr/bin/env bash
# site-pki.sh DIR: a site CA and the certificates of one host, made with
# the openssl commands of docs/operations.md ("A site CA and per-host
# certificates"), as an operator pastes them: tests/packaging/run.sh puts
# them behind the packaged inventory and daemon. Keep the two in step.
#
# DIR gets ca.crt and ca.key; inventory.crt/key (server: localhost,
# 127.0.0.1), daemon.crt/key (server: localhost, 127.0.0.1) and host.crt/key
# (client: CN gpu-node-deb).
set -euo pipefail
mkdir -p "$1"
cd "$1"
umask 077

# The site CA.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=yunion-mps site CA" -keyout ca.key -out ca.csr
printf '%s\n' "basicConstraints=critical,CA:true" "keyUsage=critical,keyCertSign,cRLSign" \
	"subjectKeyIdentifier=hash" >ca.ext
openssl x509 -req -in ca.csr -signkey ca.key -days 3650 -extfile ca.ext -out ca.crt

# A server certificate: NAME, the names and addresses clients use.
server_cert() { # NAME SAN
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "/CN=$1" -keyout "$1.key" -out "$1.csr"
	printf '%s\n' "subjectAltName=$2" "extendedKeyUsage=serverAuth" \
		"keyUsage=critical,digitalSignature" "authorityKeyIdentifier=keyid" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
		-days 397 -extfile "$1.ext" -out "$1.crt"
}
# A host's client certificate: its common name is the host's name in the
# inventory (mps_host_name, else its hostname).
client_cert() { # FILE HOSTNAME
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "/CN=$2" -keyout "$1.key" -out "$1.csr"
	printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature" \
		"authorityKeyIdentifier=keyid" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
		-days 397 -extfile "$1.ext" -out "$1.crt"
}
server_cert inventory "DNS:localhost,IP:127.0.0.1"
server_cert daemon "DNS:localhost,IP:127.0.0.1"
client_cert host gpu-node-deb
rm -f ./*.csr ./*.ext
chmod 0644 ./*.crt
