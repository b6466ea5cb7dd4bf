"""Mixture search: predict a proxy run's objective from its mixture weights and propose new mixtures.

``swarm`` reads proxy runs (weights + objective) from CSV, ``predictors`` fits a predictor of the
objective (log-linear mixing law, ridge, LightGBM), ``propose`` draws candidate mixtures and picks the
next round, ``fromcsv`` proposes from a swarm file (``clusterclip tune --from-csv``) and ``blend`` writes
chosen weights for Megatron and OLMo-core. See docs/mixture-search.md.
"""
