"""The table's timeline: listing and loading instants, the reader's :class:`~.reader.Timeline`
handle, snapshot / time travel / incremental planning (:mod:`.instants`), write labels as the
timeline records them (:mod:`.labelmeta`), and the heartbeats of running writes
(:mod:`.heartbeat`, :mod:`.beater`).

Listing ``.hoodie/`` happens only in this folder. Reads only, except the heartbeats (one small
object per running write instant, written and deleted by its writer).
"""
