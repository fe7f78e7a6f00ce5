"""Committing a table write, and the table operations that replace or delete: the table kind
plugged into the engine's job commit (:mod:`.kind`, :mod:`.table_commit`), undoing a failed
write (:mod:`.undo`, :mod:`.rollback`), clean (:mod:`.clean`), orphans of dead writers
(:mod:`.orphans`), table jobs (:mod:`.jobs`), and exactly-once write labels (:mod:`.labels`).

Every step that deletes or publishes here runs under the table's commit lock; see each
module for what is atomic.
"""
