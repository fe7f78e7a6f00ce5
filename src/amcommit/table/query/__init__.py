"""Reading a table's rows (Copy-on-Write and Merge-on-Read): the merge of a file slice's base
file with its log blocks (:mod:`.merge`, pure) and the query types (:mod:`.read`:
``snapshot``, ``read_optimized``, time travel, ``incremental``). Below the writers, which
compaction uses."""
