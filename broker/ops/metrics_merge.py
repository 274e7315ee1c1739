"""`/metrics` of `serve --workers N` (broker/workers.py): one scrape shows the whole server, as
`/metrics` of a single broker does, so a Prometheus job that scrapes :6041 keeps its meaning
whatever the number of workers.

The worker that is scraped asks each of its siblings for its own series (`GET
/metrics?scope=worker`, with the caller's credentials, so each applies its own ACL filter) and
merges them with its own: a series (name and labels) present on several workers is their sum —
counters, histograms' buckets, counts and sums, and gauges of what each worker holds
(connections, WAL bytes, data directory size) — except the gauges in `SAME_ON_EVERY_WORKER`,
which describe one thing every worker sees (the volume they share, a group's committed offset
read on any replica of the state topic) and take the largest value. A sibling that does not
answer within `SIBLING_TIMEOUT_S` (restarting) is left out of that scrape, and
`tmqgate_workers_unreached` says how many were.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

SIBLING_TIMEOUT_S = 2.0
#: gauges whose value is the same fact seen by every worker: the merge keeps the largest
SAME_ON_EVERY_WORKER = frozenset({
    "tmqgate_disk_guard_shortfall_bytes", "tmqgate_storage_read_only", "kafka_consumergroup_current_offset",
    "kafka_consumergroup_lag", "kafka_consumergroup_lag_truncated", "kafka_log_logcleaner_max_clean_time_secs",
    "kafka_log_logcleaner_cleaner_recopy_percent"})


def _largest(family: Metric, sample_name: str) -> bool:
    return family.name in SAME_ON_EVERY_WORKER or sample_name.endswith("_created")


def merge(texts: Iterable[bytes], unreached: int = 0) -> bytes:
    """Prometheus text expositions of the workers as one (see the module docstring)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            series = values.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key not in series:
                    series[key] = sample.value
                elif _largest(merged, sample.name):
                    series[key] = max(series[key], sample.value)
                else:
                    series[key] += sample.value
    unreached_family = Metric("tmqgate_workers_unreached", "Workers of this serve that did not answer this scrape "
                              "(their series are left out of it)", "gauge")
    unreached_family.add_sample("tmqgate_workers_unreached", {}, float(unreached))
    out = [unreached_family]
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    return generate_latest(_Families(out))


class _Families(CollectorRegistry):
    """A registry that yields the given families (generate_latest's input)."""

    def __init__(self, families: list[Metric]) -> None:
        super().__init__(auto_describe=False)
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families
