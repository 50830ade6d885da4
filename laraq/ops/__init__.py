"""Operating on queues from outside a worker: inspecting them (:mod:`.inspect`), moving and copying
jobs (:mod:`.migrate`, :mod:`.stack`, with unfinished moves in :mod:`.transfers`), exporting and
importing them (:mod:`.jsonl`), moving failed jobs between apps (:mod:`.failed_move`), the dead-letter
lists (:mod:`.poison`) and the diagnosis of a mixed PHP/Python fleet (:mod:`.doctor`).
"""
