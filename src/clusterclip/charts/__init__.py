"""Charts shared by the report and the experiment (:mod:`clusterclip.charts.style`, the online weights in
:mod:`clusterclip.charts.online`): one floor below both, importing only the storage floor."""
