"""Config-driven character language-model experiments on minflux.

``python -m train`` runs ``configs/default.toml`` (an HM-LSTM on Python's own documentation topics);
``python -m train --config configs/hmlstm_ptb.toml`` runs the paper's Penn Treebank experiment. See
`train.config` for the keys, `train.data` for the corpora, and the ``evaluate``, ``sample``,
``boundaries`` and ``plot`` submodules for what to do with a finished run.
"""
