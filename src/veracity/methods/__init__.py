"""One folder per measurement method; each declares its specs in its ``__init__`` and is
registered by one line in :data:`veracity.method.BUILTIN`. Folders never import each other."""
