"""``ringcast bench``: interleaved side-by-side comparisons (docs/performance.md).

* :mod:`.transports` - ringcast (``arena``: with the tensor arena), pyzmq PUB/SUB,
  multiprocessing.Pipe, the ``floor`` (the payload costs ringcast pays, none of its protocol),
  torch.distributed (gloo) and vLLM's MessageQueue (torch only when importable; vLLM when
  importable or given by ``--vllm-loader``, :func:`.transports.load_message_queue_class`);
* :mod:`.cases` - payloads x readers x modes (hot, idle, flood, silent), local and remote
  readers (``remote``, ``remote-insecure``, ``vllm-remote``: TCP on 127.0.0.1);
* :mod:`.runner` - the interleaved runner (A B A B) and the in-process baselines (pickle, memcpy);
* :mod:`.goals` - the project's goals, evaluated on each run;
* :mod:`.report` - table, JSON, markdown and plots;
* :mod:`.floor` - the floor: ringcast's serialisation, one copy in, one unpickle out, no protocol;
* :mod:`.heap` - the allocator state every bench process runs in (glibc's mmap threshold);
* :mod:`.harness` - a second harness, independent of the runner (``python -m ringcast_lab.bench.harness``).
"""
