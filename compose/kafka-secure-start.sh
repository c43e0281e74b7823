#!/bin/bash
# Entrypoint of the kafka service under docker-compose.secure.yml (apache/kafka image):
# SASL_SSL (SCRAM-SHA-512) on both client listeners, the KRaft controller listener mutual TLS
# (the broker's certificate, CN=kafka, is its only client), the StandardAuthorizer with no
# access unless an ACL allows it, and the SCRAM users created when the storage is first formatted.
# Super users: admin and User:CN=kafka (the broker itself); never User:ANONYMOUS.
#   kafka-secure-start.sh          write the configuration, format once, exec the broker
#   kafka-secure-start.sh config   only write the configuration (tests)
# One node by default (docker-compose.secure.yml); a node of the three-broker secure cluster
# (docker-compose.secure-cluster.yml) with NODE_ID, QUORUM_VOTERS (not the image's KAFKA_*
# variables: the base file sets those for its PLAINTEXT broker), CONTROLLER_BIND (the
# controllers reach each other on the Compose network; still mutual TLS, with the one broker
# certificate, CN=kafka, SAN kafka, kafka-2, kafka-3) and REPLICATION=3 (min.insync.replicas 2).
# Reads the Compose secrets in $SECRETS (/run/secrets): kafka_keystore, kafka_ca and
# kafka_<user>_password for admin, collector, worker, ops, pagerduty. The admin password ends up
# in $CONF/server.properties and admin.properties (mode 0600, container-private), as Kafka's
# JAAS configuration requires; it is never an environment variable or a command-line argument
# of the broker (it is one of kafka-storage's, once, at format time).
set -euo pipefail
SECRETS=${SECRETS:-/run/secrets}
CONF=${CONF:-/tmp/argus-kafka}
KAFKA_HOME=${KAFKA_HOME:-/opt/kafka}
DATA=${KAFKA_DATA:-/var/lib/kafka/data}
EXTERNAL_HOST=${ARGUS_KAFKA_EXTERNAL_HOST:-localhost}
# the Compose layout; tests/deploy/test_compose_secure_broker.py runs it on free ports
BROKER_HOST=${BROKER_HOST:-kafka}
INTERNAL_PORT=${INTERNAL_PORT:-9092}
EXTERNAL_PORT=${EXTERNAL_PORT:-19092}
CONTROLLER_PORT=${CONTROLLER_PORT:-9093}
NODE_ID=${NODE_ID:-1}
VOTERS=${QUORUM_VOTERS:-1@127.0.0.1:$CONTROLLER_PORT}
CONTROLLER_BIND=${CONTROLLER_BIND:-127.0.0.1}
REPLICATION=${REPLICATION:-1}
MIN_ISR=$(( REPLICATION > 1 ? 2 : 1 ))
USERS="admin collector worker ops pagerduty"

password() {
    local f="$SECRETS/kafka_$1_password" pw
    [[ -r $f ]] || { echo "kafka-secure-start: missing secret $f" >&2; exit 1; }
    pw=$(tr -d '\r\n' <"$f")
    [[ $pw =~ ^[A-Za-z0-9_-]{16,}$ ]] || {
        echo "kafka-secure-start: $f must hold 16+ characters of [A-Za-z0-9_-]" >&2; exit 1; }
    printf '%s' "$pw"
}

umask 077
mkdir -p "$CONF"
ADMIN=$(password admin)
JAAS="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$ADMIN\";"
cat >"$CONF/server.properties" <<PROPS
# written by compose/kafka-secure-start.sh
process.roles=broker,controller
node.id=$NODE_ID
# the controller listener: loopback only (one node; the cluster's controllers on the Compose
# network) and mutual TLS (a client certificate signed by the compose CA is required; only the
# brokers hold one), so no other process administers it
controller.quorum.voters=$VOTERS
controller.listener.names=CONTROLLER
listeners=INTERNAL://:$INTERNAL_PORT,EXTERNAL://:$EXTERNAL_PORT,CONTROLLER://$CONTROLLER_BIND:$CONTROLLER_PORT
advertised.listeners=INTERNAL://$BROKER_HOST:$INTERNAL_PORT,EXTERNAL://$EXTERNAL_HOST:$EXTERNAL_PORT
listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:SSL
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=$JAAS
listener.name.external.scram-sha-512.sasl.jaas.config=$JAAS
ssl.keystore.type=PEM
ssl.keystore.location=$SECRETS/kafka_keystore
ssl.truststore.type=PEM
ssl.truststore.location=$SECRETS/kafka_ca
ssl.client.auth=none
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# admin: topics and ACLs; CN=kafka: the broker's own (mutual TLS) connection to its controller
super.users=User:admin;User:CN=kafka
log.dirs=$DATA
default.replication.factor=$REPLICATION
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$REPLICATION
transaction.state.log.replication.factor=$REPLICATION
transaction.state.log.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=8388608
PROPS
# the healthcheck's client configuration (kafka-broker-api-versions.sh --command-config)
cat >"$CONF/admin.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$JAAS
ssl.truststore.type=PEM
ssl.truststore.location=$SECRETS/kafka_ca
PROPS
[[ ${1:-} == config ]] && exit 0

scram=()
for user in $USERS; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(password "$user")]")
done
# --ignore-formatted: users are added on the first start only (a new volume)
"$KAFKA_HOME/bin/kafka-storage.sh" format --ignore-formatted --cluster-id="${CLUSTER_ID:?}" \
    -c "$CONF/server.properties" "${scram[@]}"
exec "$KAFKA_HOME/bin/kafka-server-start.sh" "$CONF/server.properties"
