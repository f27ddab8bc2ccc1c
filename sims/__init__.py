"""Scenario replay in virtual or real time, strategies side by side, reports."""

__all__: list[str] = []
