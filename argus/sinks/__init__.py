"""argus.sinks: workers that deliver argus records to outside systems (PagerDuty, ...)."""
