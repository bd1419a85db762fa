"""Static benchmark snapshots of generated images (paper App. O): ``format`` writes, reads and verifies them,
``scoring`` scores classifiers on them (and the transfer matrix, App. D), ``filtration`` keeps what fools a set of
surrogate models (the ImageNet-A recipe)."""
