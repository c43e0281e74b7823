"""Kafka plumbing: the local broker (:mod:`argus.kafka.local`) and topic admin."""
