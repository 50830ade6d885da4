"""Running laraq in production: Prometheus metrics (:mod:`.metrics`), worker heartbeats and health
(:mod:`.heartbeat`), logging (:mod:`.logs`), and the listeners ``laraq work`` attaches for them (:mod:`.listeners`).
"""
