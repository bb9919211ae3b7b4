"""Real datasets of the ``paper`` profile; importing this package registers their builders.

Registered names: ``tiny_imagenet``, ``tiny_imagenet_r``, ``imagenet``, ``cub``, ``cifar10``,
``cifar100``, ``modelnet40``, ``lra_listops``, ``imdb_bytes``, ``nlvr2``. URLs and checksums live in
``nac.data.download.SOURCES``; each builder copies them into its ``defaults`` (``url`` /
``urls``, ``md5`` / ``md5s`` / ``sha256``) so a mirror is a param override.
"""

from nac.data.real import cifar, cub, imagenet, lra, modelnet, nlvr2, tiny_imagenet  # noqa: F401
