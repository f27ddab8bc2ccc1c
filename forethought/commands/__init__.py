"""The ``forethought`` command's subcommands, one module each: not an API (the command is).

``forethought/_cli.py`` parses the command line and imports a subcommand's module when that
subcommand runs (so ``forethought check`` loads no model and no torch):

* ``check`` (``_check``): every problem of a spec or scenario;
* ``run`` (``_run``, with ``_run_ros2`` for ``--ros2`` and ``_start_display`` for its start);
* ``send`` (``_send``): a test event and its decision;
* ``plan`` (``_plan``): a fleet's planner worker;
* ``tree`` (``_tree``): what a policy tree holds, or would hold;
* ``sim`` (``_sim``, with ``_sim_closed_loop`` for a scenario with a world, ``_sim_fleet`` for
  ``--fleet`` and ``_sim_side_by_side`` for several device profiles).

``schema`` prints a JSON Schema (three lines in ``_cli``); ``bench`` runs
``forethought.bench``.
"""

__all__: list[str] = []
