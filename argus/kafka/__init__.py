"""Kafka plumbing: the local broker (:mod:`argus.kafka.local`), topic admin, and bounded
reads of offset ranges (:mod:`argus.kafka.read`)."""
