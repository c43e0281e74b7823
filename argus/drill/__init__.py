"""Drill-down helpers of the operator commands: time windows people use (``--last``,
``--around``), why a read came back empty, and the ``argus status`` overview.

:mod:`argus.drill.window` and :mod:`argus.drill.status` are pure; :mod:`argus.drill.read`
reads the topics and consumer groups.
"""
