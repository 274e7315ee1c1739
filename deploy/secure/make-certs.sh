#!/usr/bin/env bash
# Certificates for tmqgate's TLS listeners (SSL, SASL_SSL) and the HTTPS SQL front, with openssl:
# a private CA, the broker's certificate signed by it, and optionally client certificates (for
# mutual TLS on an SSL listener: the principal is User:<subject DN>, see README.md).
#
#   deploy/secure/make-certs.sh DIR BROKER_NAME [EXTRA_NAME_OR_IP ...]
#   deploy/secure/make-certs.sh DIR --client CLIENT_CN        (after the first form, same DIR)
#
# Writes into DIR: ca.pem + ca.key (keep ca.key offline), server.pem + server.key (the broker's
# ssl_certfile / ssl_keyfile; ssl_cafile = ca.pem), and per client CLIENT_CN.pem, CLIENT_CN.key
# and CLIENT_CN-keystore.pem (key + certificate: a Java client's ssl.keystore.type=PEM file).
# Keys are EC P-256, unencrypted, mode 600; certificates last 825 days. Re-run the first form to
# renew the broker's certificate (the CA is kept if present), then `kill -HUP` the broker.
set -euo pipefail
umask 077

if [[ $# -lt 2 ]]; then
    sed -n '2,13p' "$0" >&2
    exit 2
fi
DIR=$1
shift
mkdir -p "$DIR"
cd "$DIR"

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

if [[ ! -f ca.key ]]; then
    new_key ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/O=tmqgate/CN=tmqgate CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out ca.pem
fi

sign() {  # sign NAME SUBJECT EXTFILE
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 825 \
        -extfile "$3" -out "$1.pem"
    rm -f "$1.csr" "$3"
}

if [[ $1 == --client ]]; then
    CN=${2:?--client needs a name}
    new_key "$CN.key"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' > "$CN.ext"
    sign "$CN" "/O=tmqgate/CN=$CN" "$CN.ext"
    cat "$CN.key" "$CN.pem" > "$CN-keystore.pem"
    echo "client certificate: $DIR/$CN.pem (principal User:CN=$CN,O=tmqgate)"
    exit 0
fi

SAN=""
for name in "$@"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then SAN+="IP:$name,"; else SAN+="DNS:$name,"; fi
done
new_key server.key
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "${SAN%,}" > server.ext
sign server "/O=tmqgate/CN=$1" server.ext
chmod 644 ca.pem server.pem
echo "broker certificate: $DIR/server.pem for ${SAN%,}; CA: $DIR/ca.pem"
