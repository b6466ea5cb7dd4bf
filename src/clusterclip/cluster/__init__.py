"""Spherical (cosine) k-means with faiss and the cluster stage.

:mod:`.contract` is what other stages read (names, the record, labels and sizes); :mod:`.kmeans` fits
centroids on a sample and assigns documents in batches; :mod:`.config` holds the stage's settings;
:mod:`.stage` builds the stage and :mod:`.grow` extends it to documents appended by ``clusterclip add``.
"""
