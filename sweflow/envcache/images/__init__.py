"""Container images into the layer store, without a docker daemon (``importer``)."""
