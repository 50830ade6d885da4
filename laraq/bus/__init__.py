"""The job model around a handler, as ``Illuminate\\Bus`` and ``Illuminate\\Queue\\CallQueuedHandler`` have it.

The job handle (:mod:`.job`), what happens around ``handle()`` (:mod:`.callqueued`, the PHP hand-off in
:mod:`.handoff`), job middleware (:mod:`.middleware`, :mod:`.handler_middleware`, :mod:`.rate_limiter`),
``SerializesModels`` (:mod:`.models`), job class schemas (:mod:`.schema`), the handler registry's
contract (:mod:`.handlers`), dispatching jobs PHP runs (:mod:`.dispatch`) and ``queue:retry``
(:mod:`.retry`).
"""
