"""The packages with a curated public surface: their ``__all__`` is what a user needs.

One list for the tests that hold the surface (test_public_surface, test_public_api) and the
one that checks no file imports a package for a name outside it (test_architecture).
"""

PACKAGES = [
    "forethought",
    "forethought.bench",
    "forethought.models",
    "forethought.models.backends",
    "forethought.models.grammar",
    "forethought.planner",
    "forethought.policies",
    "forethought.runtime",
    "forethought.runtime.fleet",
    "forethought.runtime.transports",
    "forethought.sims",
    "forethought.testing",
]
