"""The stages' contracts on one floor below every stage, so that the table of stages (:mod:`clusterclip.contracts`)
and any stage read them without climbing into a higher folder: for now the report's
(:mod:`clusterclip.contract.report`); the other stages' contracts are still in ``<stage>/contract.py``."""
