"""Hand-written parallelism strategies the demos run and a reader studies (Parts IV to VII).

One file per strategy, each short enough to read on the page, named as its formulas are
(the package rule, :mod:`dtbook`): ``data_parallel`` (chapter 14), ``tensor_parallel`` (15),
``pipeline_parallel`` (16), ``sequence_parallel`` (17), ``moe`` (18), ``zero`` (20),
``composition`` (24), ``axes`` (25), ``resilience`` (26), ``compression`` (28),
``local_sgd`` (29), ``overlap`` (31), ``profiling`` (32), ``investigation`` (33);
``counting`` counts what any of them, or PyTorch's own implementations, communicates.
"""
