"""The PagerDuty sink (``argus worker pagerduty``): ``argus.alerts`` -> Events API v2.

* :mod:`argus.sinks.pagerduty.events` - the pure parts: event bodies, severity, rate limit,
  retry policy (no I/O, no clock);
* :mod:`argus.sinks.pagerduty.config` - the ``[pagerduty]`` settings section;
* :mod:`argus.sinks.pagerduty.worker` - the consumer loop, HTTP and DLQ around them.

Nothing is imported here, so reading the settings does not load Kafka. See
``docs/pagerduty.md``.
"""
