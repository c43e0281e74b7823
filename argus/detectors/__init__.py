"""argus.detectors."""
