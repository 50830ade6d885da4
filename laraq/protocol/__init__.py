"""The wire: what travels through Redis between PHP and Python, byte for byte.

Laravel's ``Illuminate\\Queue\\RedisQueue`` and ``LuaScripts`` (:mod:`.queue`, :mod:`.lua`), the job
payload (:mod:`.payload`), PHP's ``serialize()`` and ``json_encode`` (:mod:`.serializer`,
:mod:`.phparray`, :mod:`.phpjson`), ``Illuminate\\Encryption\\Encrypter`` (:mod:`.encryption`), queue
names (:mod:`.routing`), the 13.4+ listing helpers (:mod:`.listing`) and every per-version difference
(:mod:`.versions`). Nothing here knows about workers, handlers or stores.
"""
