"""docstore's benchmarks: one pytest-benchmark suite (``pytest benches``), its report
(``python -m benches.report``) and studies, each run from the repository root as
``python -m benches.NAME`` (see ``benches/README.md``). A package, so that its modules import each
other as ``from . import corpora``, and the remote benches reach ``tests.support.remote_servers``,
without editing ``sys.path``."""
