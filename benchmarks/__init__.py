"""Benchmarks: push and pull through the real Lambda handlers on moto, cold import times, and the lake jobs.

``python -m benchmarks`` (``make bench``) runs the gateway ones and writes ``benchmarks/results/latest.json`` and
``latest.md``; ``python -m benchmarks --only lake`` (``make bench-lake``, :mod:`benchmarks.lake`) runs the lake ones
and writes ``lake.json`` and ``lake.md``. One module per benchmark: :mod:`benchmarks.push`, :mod:`benchmarks.pull`,
:mod:`benchmarks.imports`; :mod:`benchmarks._moto` runs the moto server process, :mod:`benchmarks._common` holds
the harness, :mod:`benchmarks._profile` reads cProfile output and :mod:`benchmarks.report` writes the results files.
Speed is measured here only; the test suite asserts no timings.
"""
