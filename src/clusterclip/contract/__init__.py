"""Every stage's contract, on one floor below every stage: what one stage (or a trainer) may know of another.

One module per stage (``corpus``, ``embed``, ``cluster``, ``dedup``, ``plan``, ``export``, ``report``,
``online``, ``experiment``): its name, file names, typed record and pure readers, with the pure pieces they read
beside them (``corpus_texts`` and ``record_kinds``: the texts of the corpus parts; ``plan_identity``,
``plan_locate``, ``plan_reader``, ``plan_notes``: a plan's identity, where it is, its verified reader, what its
statistics say). :mod:`clusterclip.contract.stages` is the table of stages. The package imports only the storage
floor, the settings and the error types, so a consumer reads any stage without climbing into a higher folder.
"""
