"""The wire: what travels through Redis between PHP and Python, byte for byte.

Laravel's ``Illuminate\\Queue\\RedisQueue`` and ``LuaScripts`` (:mod:`.queue`, :mod:`.lua`), the job
payload (:mod:`.payload`), PHP's ``serialize()`` and ``json_encode`` (:mod:`.serializer`,
:mod:`.phparray`, :mod:`.phpjson`), ``Illuminate\\Encryption\\Encrypter`` (:mod:`.encryption`), queue
names and keys (:mod:`.routing`, :mod:`.keys`), the 13.4+ listing helpers (:mod:`.listing`) and every
per-version difference (:mod:`.versions`); and the worker's side of a queue that Laravel has no
counterpart for: batch reserves and the unstarted record (:mod:`.reserve`, :mod:`.lua_laraq`), acks
(:mod:`.acks`) and the idle wait until the next delayed job (:mod:`.timers`). Nothing here imports the
worker, handlers or stores.
"""
