"""Peer benchmarks of the temporal join (issue 6).

Run ``python -m bench.run --help`` (or ``make bench``); see ``bench/README.md`` for what is
measured, how, and the latest figures on the reference machine.
"""
