"""Scenario replay in virtual or real time, strategies side by side, reports."""

from ._vloop import VirtualTimeLoop, run_virtual

__all__ = ["VirtualTimeLoop", "run_virtual"]
