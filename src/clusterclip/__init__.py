"""clusterclip: balanced data sampling for language-model training (ClusterClip Sampling)."""

__version__ = "0.1.0"
