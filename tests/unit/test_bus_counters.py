"""The buses' counters and the health report's view of them name the same fields.

``BusStats`` (and each bus's subclass) is what a bus counts; ``BusSection`` (and each bus's
subclass) is what the health report shows. The report is built from ``asdict(stats)``, and
``BusSection`` allows extra fields, so a counter added on one side only would be shown untyped or
not at all without any error: this test ties the two lists together.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from pydantic import BaseModel

from forethought.runtime import BusSection, MqttBusSection, ZenohBusSection
from forethought.runtime.transports._bus import BusStats
from forethought.runtime.transports._mqtt import MqttStats
from forethought.runtime.transports._zenoh import ZenohStats

# Fields of the report that no counter feeds: the bus's connection state, set beside the stats.
REPORT_ONLY = {"connected"}


@pytest.mark.parametrize(
    ("stats", "section"),
    [(BusStats, BusSection), (MqttStats, MqttBusSection), (ZenohStats, ZenohBusSection)],
    ids=["common", "mqtt", "zenoh"],
)
def test_every_counter_is_a_report_field_in_the_same_order(
    stats: type[BusStats], section: type[BaseModel]
) -> None:
    counters = [f.name for f in fields(stats)]
    shown = [name for name in section.model_fields if name not in REPORT_ONLY]
    assert counters == shown


@pytest.mark.parametrize(
    ("stats", "section"),
    [(MqttStats, MqttBusSection), (ZenohStats, ZenohBusSection)],
    ids=["mqtt", "zenoh"],
)
def test_a_section_built_from_counters_carries_each_value_typed(
    stats: type[BusStats], section: type[BaseModel]
) -> None:
    counted = stats()
    # A distinct value per field, of the field's own kind (a count, or a list of durations).
    for number, f in enumerate(fields(counted), start=1):
        empty = getattr(counted, f.name)
        setattr(counted, f.name, [number / 10] if isinstance(empty, list) else number)
    values = {f.name: getattr(counted, f.name) for f in fields(counted)}
    report = section(**values)
    assert report.model_extra == {}
    assert report.model_dump(exclude=REPORT_ONLY) == values
