"""argus.collectors."""
