"""The engine's parts: :class:`~manowar_memory.engine.MemoryEngine` is assembled from these mixins."""
