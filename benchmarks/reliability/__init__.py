"""The reliability suite (issue 12): abuse, and what must hold under it.

Not shipped in the wheel: a user measures their device with ``forethought bench``; this suite
checks our own guarantees (rows R1-R11: load, QoS 1, broker and agent crashes, model faults,
hostile input, torn snapshots, stalls, replays, stale events). Run it from the repository root:

    python -m benchmarks.reliability --quick              # minutes on a 2-core CPU
    python -m benchmarks.reliability --load-minutes 60    # the full rows, R1 + R7 for an hour

The tests reach these modules as ``benchmarks.reliability.*`` (pytest puts the repository root
on ``sys.path``: ``pythonpath`` in pyproject.toml). Modules: :mod:`.suite` (the runner, R1, R2,
R5, R8, R9, R10 and the targets), :mod:`.model_faults` (R4), :mod:`.broker_faults` (R3),
:mod:`.stale_events` (R11), :mod:`.specs` (the agent specs they share).
"""
