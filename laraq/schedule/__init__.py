"""Recurring jobs (Laravel's ``Illuminate\\Console\\Scheduling``): entries and their timing
(:mod:`.entries`), the Redis keys and claim script (:mod:`.store`), the leaderless scheduler (:mod:`.scheduler`).
"""
