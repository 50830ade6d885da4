"""Operating on queues from outside a worker: inspecting them (:mod:`.inspect`), moving, copying,
exporting and importing jobs (:mod:`.migrate`), the dead-letter lists (:mod:`.poison`) and the
diagnosis of a mixed PHP/Python fleet (:mod:`.doctor`).
"""
