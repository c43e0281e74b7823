"""argus.streams."""
