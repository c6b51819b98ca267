"""atp beside its peers on one machine: ``make bench-peers`` (``python -m bench.peers``).

- ``driver``: runs each system in turn, each in a process of its own and its own venv,
  then prints the table of figures and their ratios to atp's (``report``).
- ``measure``: the workloads, the same for every system (drain, idle latency, bulk
  enqueue, a steady stream), written once against the ``base.Runner`` interface.
- ``body``: the one no-op body every system runs; it records when it started and ended.
- ``run_<system>``: one small runner per system: how it enqueues (one task, many
  tasks), how its workers start, how its store is emptied.

Nothing here is imported by atp or its tests but ``report``'s helpers.
"""
