"""Container images into the layer store, without a docker daemon (``importer`` is the entry).

One job per module: ``sources`` reads an archive's files in place, ``registry`` a registry's
over HTTP, ``manifests`` finds the image and its layer blobs in either, ``layers`` unpacks one
blob into an upper, ``importer`` names images and commits their layers to the store.
"""
