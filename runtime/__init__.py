"""The deadline-aware executor, the agent's event loop side and event buses."""

__all__: list[str] = []
