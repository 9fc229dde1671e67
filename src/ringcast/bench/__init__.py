"""``ringcast bench``: interleaved side-by-side comparisons (docs/performance.md).

* :mod:`.transports` - ringcast, pyzmq PUB/SUB, multiprocessing.Pipe, torch.distributed
  (gloo) and vLLM's MessageQueue (the last two only when importable);
* :mod:`.cases` - payloads x readers x modes (hot, idle, flood, silent);
* :mod:`.runner` - the interleaved runner (A B A B) and the project's goals;
* :mod:`.report` - table, JSON, markdown and plots.
"""
