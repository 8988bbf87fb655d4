"""The soak run (``make soak``): the product under continuous input and repeated SIGKILLs.

:mod:`soak.run` starts the embedded Kafka-compatible broker, runs the real CLI as three
long-lived processes (``lakehouse ingest`` and ``lakehouse join`` in row time and in
processing time), feeds them a seeded stream (:mod:`soak.data`) at a steady rate, SIGKILLs a
random one every few minutes and restarts it (:mod:`soak.procs`, which also samples the
processes' memory), drains and stops them, and checks the tables against the plain-Python
reference of the join semantics (:mod:`soak.verify`). The report (:mod:`soak.report`) goes to
``soak/out/report.md`` and ``report.json``; the exit code is 1 on any mismatch.

The soak is not part of ``make test``: it runs for tens of minutes.
"""
