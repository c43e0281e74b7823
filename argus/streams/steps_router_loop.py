"""The steps roles' router on its own confluent-kafka loop, beside the faust worker (issue 21).

``streams.steps_router_runtime = "kafka"`` (the default since session 21) moves the router of
:mod:`argus.streams.agents.steps` off faust: faust 0.15 spends ~75 µs handing over each
``raw.steps`` record to an agent, a 450-byte record that librdkafka hands over in ~1 µs
(BENCHMARKS.md, "faust's fetch loop without four tasks a record"), and the router sees one
record per rank and step. The loop (:class:`~argus.streams.kafka_loop.KafkaLoop`: polls
merged by broker time, durable commits, rebalances, DLQ, lag) does what the agent's poll
does, the same functions in the same order: decode, check (reason-coded
:class:`~argus.streams.validate.InputError` to the DLQ), validate, the collector's gauges,
:func:`~argus.streams.roles.steps.route_step`, then one ``internal.steps-by-block`` message
per block key and poll (:func:`~argus.streams.rekey.rekey_messages`, stamped with the send
time) on the key's stable partition. The faust app keeps the block and job tiers; it no
longer reads ``raw.steps``.

Its group is ``<prefix>-steps-router`` (:func:`argus.streams.groups.steps_router_group`); a
partition it never committed starts where the faust app of the worker's roles committed it
(``legacy_group``), so switching runtimes neither skips nor repeats input. The router holds
no state: nothing is held back from the commits.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message

from argus.config import Settings
from argus.detectors.inputs import validate_step_record
from argus.streams.groups import steps_router_group
from argus.streams.kafka_loop import KafkaLoop
from argus.streams.limits import Limits
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.rekey import item_bytes, rekey_messages
from argus.streams.roles.context import partition_of
from argus.streams.roles.steps import collector_metrics, route_step
from argus.streams.validate import Checker
from argus.topics import topic_name

__all__ = ["StepsRouterLoop"]


class StepsRouterLoop(KafkaLoop):
    """``raw.steps`` -> ``internal.steps-by-block`` on a :class:`KafkaLoop` (module
    docstring)."""

    def __init__(
        self,
        settings: Settings,
        pcfg: PipelineConfig,
        *,
        instance_id: str | None = None,
        legacy_group: str | None = None,
    ) -> None:
        prefix = settings.topic_prefix
        super().__init__(
            settings,
            pcfg,
            role="steps",
            group=steps_router_group(prefix),
            source=topic_name("raw.steps", prefix),
            dlq=topic_name("dlq", prefix),
            instance_id=instance_id,
            legacy_group=legacy_group,
        )
        self.by_block = topic_name("internal.steps-by-block", prefix)
        self.check = Checker(Limits.from_pipeline(pcfg))

    def handle(self, msgs: list[Message]) -> None:
        """One poll: each record routed (a bad one to the DLQ with the reason), then each
        block key's items sent as few messages as fit, in the order consumed."""
        by_key: dict[str, list[tuple[Message, tuple[bytes, bytes | None]]]] = {}
        block_ranks = self.pcfg.steps_block_ranks
        for msg in msgs:
            broker_s = self.taken(msg)
            value = msg.value() or b""
            try:
                rec: Any = self.codec.decode_as("step_record", value)
                self.check.step(rec, value, broker_s=broker_s)  # reason-coded InputError first
                validate_step_record(rec)
                collector_metrics(rec["job"], rec)
                mine = [
                    (k, item_bytes(it))
                    for k, it in route_step(rec, block_ranks, msg.partition() or 0)
                ]
            except Exception as exc:  # undecodable or invalid
                self.dlq(msg, exc)
                continue
            for key, data in mine:
                by_key.setdefault(key, []).append((msg, data))
        sent, parts = time.time(), self.pcfg.internal_partitions
        for key, items in by_key.items():
            for owners, value in rekey_messages(items, sent):
                try:
                    self.produce(
                        self.by_block, value, key.encode(), partition_of(key, parts), owners
                    )
                except Exception as exc:  # too large to re-key: its records to the DLQ
                    for owner in owners:
                        self.dlq(owner, exc)
