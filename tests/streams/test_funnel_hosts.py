"""The funnel's alerts name the culprit's hosts (issue 20): the step records' ``host`` rides
the steps roles' digests and progress to the funnel (table ``funnel-hosts``), live and in
``argus diagnose`` alike (the same roles)."""

from __future__ import annotations

import json

from argus.diagnose import diagnose
from argus.sim.simulate import simulate


def test_diagnose_alert_names_the_stragglers_hosts() -> None:
    recs = [r for topic, _k, r in simulate("compute-straggler", ranks=32, steps=40, seed=3,
                                           kernels=False) if topic == "raw.steps"]  # fmt: skip
    host = {r["rank"]: r["host"] for r in recs}
    res = diagnose(recs)
    triggers = [a for a in res.alerts if a["action"] == "trigger"]
    assert triggers, [v.culprit.dedup_key for v in res.verdicts]
    for a in triggers:
        members = json.loads(a["details"]["members"])
        named = json.loads(a["details"]["hosts"])
        assert named == {str(r): host[r] for r in members}
        hosts = sorted(set(named.values()))
        assert (", hosts " if len(hosts) > 1 else ", host ") + ",".join(hosts) in a["summary"]
