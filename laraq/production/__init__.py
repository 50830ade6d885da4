"""Running laraq in production: the prefork supervisor of ``laraq work`` (:mod:`.prefork`), Prometheus
metrics (:mod:`.metrics`, :mod:`.multiproc`), worker heartbeats and health (:mod:`.heartbeat`), who holds
each reserved job (:mod:`.holders`), logging (:mod:`.logs`), error reporting (:mod:`.reporting`),
OpenTelemetry spans (:mod:`.otel`), and the listeners ``laraq work`` attaches for them (:mod:`.listeners`).
"""
