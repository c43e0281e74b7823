"""A faust agent that only counts the events of one topic (``bench_kafka_clients.py``):
prints the process's CPU (all threads) from its first event to its ``n``-th, µs a record;
with ``ARGUS_BENCH_FAST_DELIVERY=1``, the consumer's delivery as argus' workers have it
(:mod:`argus.streams.fast_delivery`).

    python bench/_faust_null.py BOOTSTRAP TOPIC N
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import faust

bootstrap, topic_name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
app = faust.App(
    f"bench-null-{uuid.uuid4().hex[:8]}",
    broker=f"kafka://{bootstrap}",
    store="memory://",
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
    consumer_max_fetch_size=8 << 20,  # the workers' fetch_bytes
    stream_wait_empty=False,
    autodiscover=False,
    datadir=f"/tmp/bench-null-{os.getpid()}",
)
topic = app.topic(topic_name, value_type=bytes, key_type=bytes, value_serializer="raw")


@app.agent(topic)
async def count(stream: faust.StreamT) -> None:
    got, t0 = 0, 0.0
    async for _event in stream.events():
        if got == 0:
            t0 = time.process_time()
        got += 1
        if got == n:
            spent = 1e6 * (time.process_time() - t0) / (n - 1)
            os.write(1, f"cpu_us {spent:.1f}\n".encode())  # faust redirects print() to its log
            os._exit(0)


if __name__ == "__main__":
    if os.environ.get("ARGUS_BENCH_FAST_DELIVERY") == "1":
        from argus.streams import fast_delivery

        fast_delivery.install(app)
    sys.argv = [sys.argv[0], "worker", "-l", "error"]
    app.main()
