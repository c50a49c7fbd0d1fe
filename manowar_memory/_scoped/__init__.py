"""The scoped surface's parts: :class:`~manowar_memory.scoped.ScopedMemory` is assembled from these mixins."""
