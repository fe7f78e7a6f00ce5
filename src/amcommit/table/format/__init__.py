"""Hudi table version 6, the bytes: pure functions and models, no store, no I/O.

Instant and file names (:mod:`.naming`), instants and commit metadata (:mod:`.model`),
``hoodie.properties`` (:mod:`.properties`), Avro metadata files (:mod:`.avro_meta`), the
table schema and Parquet footers' schema checks (:mod:`.schema`), write statistics
(:mod:`.writestats`), the footer index: key range and bloom filter (:mod:`.bloom`), record
keys (:mod:`.keys`), task and file naming inside staging (:mod:`.tasknames`), and Hudi's own
option names as aliases of amcommit's (:mod:`.hudi_names`).

Nothing here uses a store or does I/O; everything is safe to call from any thread.
"""
