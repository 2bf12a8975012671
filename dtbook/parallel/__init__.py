"""Hand-written parallelism strategies the demos run and a reader studies (Parts IV to VI).

One file per strategy, each short enough to read on the page: ``data`` (chapter 14),
``tensor`` (15), ``pipeline`` (16), and so on; ``counting`` counts what any of them, or
PyTorch's own implementations, communicates.
"""
