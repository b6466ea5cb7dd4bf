"""``clusterclip tune``: choose a plan for a corpus by proxy training runs, on evidence that holds across splits.

The candidates are random, uniform, temperature (a tau grid) and ClusterClip (a cap grid x order equal-rate
/ spread), and with ``--search weights`` per-cluster mixtures proposed in rounds. Runs of two candidates
whose plans are identical on a pair are trained once. Each proxy run is one small model trained on one
(held-out split, seed) pair by the experiment's own steps
(:func:`~clusterclip.experiment.splits.prepare_split`, :func:`~clusterclip.experiment.steps.proxy_run`).
Successive halving gives every candidate a few pairs, keeps the best ``1/eta`` and gives the survivors more
pairs, until the pairs or the budget run out. A candidate is judged by its paired difference to random
(bootstrap interval); it may win only if it is better on the objective (macro held-out loss over the
ground-truth field, else over clusters) with an interval below zero, and its micro loss is no worse than
random's by more than ``max_micro_regression``. Otherwise random is the chosen plan, and the results say so.

Layout (``RUN/tune`` is a run directory whose stages are the search and its proxy runs)::

    RUN/                     the whole corpus: corpus, embeddings, clusters and the chosen plan
    RUN/tune/splits/<seed>/  a run directory per held-out split (its training documents)
    RUN/tune/runs/<key>.json   one finished proxy run (a stage record holding its metrics), keyed by a hash
                             of its full configuration
    RUN/tune/results.json    candidates, intervals, trajectory, winner (rewritten after every rung)
    RUN/tune/search.json     the search's stage record

Modules: :mod:`.config` (TuneConfig, the grid), :mod:`.runners` (what trains a proxy run), :mod:`.proxies`
(proxy runs as stages), :mod:`.search` (the search's state, budget and assessments), :mod:`.pool` (parallel
proxy runs), :mod:`.halving` (the rungs and the decision), :mod:`.groups` and :mod:`.weights` (the weight
search, ``--search weights``), :mod:`.chosen_plan`, :mod:`.search_stage` (:func:`run_tune`) and
:mod:`.format` (what the command prints).
"""
