"""Apache Hudi Copy-on-Write tables (table version 6, timeline layout 1) written by amcommit.

A *table* destination keeps a timeline in ``$dest/.hoodie/``: every job commit into it is an
instant (``<time>.commit.requested`` -> ``.inflight`` -> completed ``.commit`` or
``.replacecommit``), published last and only after every file is in place, so Hudi's readers
(hudi-rs, Spark with the Hudi bundle, Trino) see a write whole or not at all.

Modules:

- :mod:`amcommit.table.naming` -- instant times, base file names, meta column names, paths
  inside ``.hoodie`` (pure, no I/O).
- :mod:`amcommit.table.model` -- msgspec models of instants and commit metadata (pure).
- :mod:`amcommit.table.timeline` -- snapshot / time travel / incremental planning over loaded
  instants (pure), and loading a timeline from a store.
- :mod:`amcommit.table.mutate` -- upsert and delete by record key (engine API, no Spark).
- :mod:`amcommit.table.bloom` -- Hudi's footer index: key range and bloom filter (pure).
"""
