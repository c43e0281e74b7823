#!/bin/sh
# Make the secrets of the SASL_SSL Compose setup (docker-compose.secure.yml), once, on the host:
#   compose/make-secrets.sh [DIR]        # DIR: $ARGUS_COMPOSE_SECRETS or .argus/compose-secrets
# writes into DIR (mode 0700; inside .argus/, which git ignores):
#   ca.pem                 the CA that signed the broker certificate (clients trust it)
#   broker-keystore.pem    the brokers' key + certificate + CA (Kafka PEM keystore), CN=kafka,
#                          SAN kafka, kafka-2, kafka-3 (the secure cluster's nodes share it),
#                          localhost, 127.0.0.1 and $ARGUS_KAFKA_EXTERNAL_HOST when set; server
#                          and client use (a broker presents it to the mutual-TLS controller
#                          listeners)
#   <user>.password        random SCRAM-SHA-512 passwords of admin, collector, worker, ops, pagerduty
# The CA key is deleted after signing: to rotate, delete DIR and the kafka-secure-data volume.
# Compose bind-mounts these files into containers that run as other uids (kafka 1000, argus
# 10001), so the files are 0644 and the directory 0700 keeps other host users out.
set -eu
DIR=${1:-${ARGUS_COMPOSE_SECRETS:-.argus/compose-secrets}}
if [ -e "$DIR/broker-keystore.pem" ]; then
    echo "$DIR already holds the secrets; delete it to make new ones" >&2
    exit 0
fi
command -v openssl >/dev/null || { echo "openssl is not on PATH" >&2; exit 1; }
umask 077
mkdir -p "$DIR"
chmod 0700 "$DIR"
cd "$DIR"
SAN="DNS:kafka,DNS:kafka-2,DNS:kafka-3,DNS:localhost,IP:127.0.0.1"
if [ -n "${ARGUS_KAFKA_EXTERNAL_HOST:-}" ] && [ "$ARGUS_KAFKA_EXTERNAL_HOST" != localhost ]; then
    case "$ARGUS_KAFKA_EXTERNAL_HOST" in
        *[!0-9.]*) SAN="$SAN,DNS:$ARGUS_KAFKA_EXTERNAL_HOST" ;;
        *) SAN="$SAN,IP:$ARGUS_KAFKA_EXTERNAL_HOST" ;;
    esac
fi
printf '%s\n' "subjectAltName=$SAN" "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth,clientAuth" >broker.ext
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
    -subj "/CN=argus compose CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=kafka" 2>/dev/null
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.crt \
    -days 825 -sha256 -extfile broker.ext 2>/dev/null
cat broker.key broker.crt ca.pem >broker-keystore.pem
rm -f ca.key ca.srl broker.key broker.csr broker.crt broker.ext
for user in admin collector worker ops pagerduty; do
    openssl rand -hex 24 >"$user.password"   # hex: safe inside kafka-storage --add-scram
done
chmod 0644 ./*.pem ./*.password
echo "wrote $(pwd): ca.pem broker-keystore.pem and 5 passwords ($SAN)"
